"""The reading of a comparison's results.json, in numbers and in words: what `hf-neutreno compare` prints under its
table and writes as ``results["verdict"]``.

The rules, each stated where the output uses it:

- **Ties.** A seed's paired difference smaller than `TIE_TOLERANCE` (absolute for accuracy, mean IoU and the cosine;
  relative to the baseline's value for perplexity) is a tie, neither a win nor a loss.
- **Beyond the seeds' spread.** A variant helps (or hurts) only where the 95 % t-interval of its paired differences
  over seeds excludes 0; "best" is named only among those, and never from one seed.
- **Switched itself off.** A learnable coefficient is used clamped to its range (λ ≥ 0, α in [0, 1]); a variant whose
  coefficients all ended at the off end (0) in every layer and seed ran as the model as loaded: it is reported as the
  remedy switching itself off, not as a win.
- **A baseline that did not learn** (accuracy near chance, perplexity near the vocabulary size, or a training loss
  that barely fell) makes every difference meaningless: the verdict says so and names the flags that change it.

This module imports neither torch nor transformers.
"""

import math
import statistics

from ..variants import BASELINE

HIGHER_IS_BETTER = {"accuracy": True, "mean_iou": True, "perplexity": False, "last_layer_cosine": False}
# A seed's paired difference below this is a tie: one test item of a few hundred moves accuracy by more.
TIE_TOLERANCE = {"accuracy": 0.002, "mean_iou": 0.002, "last_layer_cosine": 0.002, "perplexity": 0.002}
RELATIVE_TOLERANCE = {"perplexity"}  # the tolerance is a fraction of the baseline's value
OFF = 1e-4  # a learnable coefficient at most this far above 0 sits at the off end
# Two-sided 95 % quantiles of Student's t by degrees of freedom (the seeds less one); larger: the normal's, roughly.
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
SYMBOLS = {"neutreno": "λ", "value_residual": "α"}


def is_tie(difference: float, metric: str, baseline: float) -> bool:
    """Whether one seed's paired difference is within the tolerance of `metric`."""
    tolerance = TIE_TOLERANCE[metric] * (abs(baseline) if metric in RELATIVE_TOLERANCE else 1.0)
    return abs(difference) < tolerance


def paired_reading(variant: dict, baseline: dict, metric: str) -> dict:
    """Per seed `variant − baseline` ({seed: value} each, the seeds both have): mean, sample std, the 95 % t-interval
    of the mean, and how many seeds the variant wins, ties and loses (`is_tie`)."""
    seeds = [seed for seed in variant if seed in baseline]
    differences = [variant[seed] - baseline[seed] for seed in seeds]
    sign = 1 if HIGHER_IS_BETTER[metric] else -1
    ties = sum(is_tie(d, metric, baseline[s]) for s, d in zip(seeds, differences))
    wins = sum(sign * d > 0 and not is_tie(d, metric, baseline[s]) for s, d in zip(seeds, differences))
    n = len(differences)
    mean = statistics.fmean(differences) if differences else math.nan
    std = statistics.stdev(differences) if n > 1 else None
    interval = None
    if n > 1:
        half = T_95.get(n - 1, 1.96 + 2.4 / (n - 1)) * std / math.sqrt(n)
        interval = [mean - half, mean + half]
    return {
        "mean": mean,
        "std": std,
        "n": n,
        "wins": wins,
        "ties": ties,
        "losses": n - wins - ties,
        "interval": interval,
    }


def direction(reading: dict, metric: str) -> str:
    """ "better", "worse" or "within the spread": whether the interval excludes 0, and on which side."""
    low_high = reading.get("interval")
    if not low_high or low_high[0] <= 0 <= low_high[1]:
        return "within the spread"
    higher = low_high[0] > 0
    return "better" if higher == HIGHER_IS_BETTER[metric] else "worse"


def coefficient_reading(entry: dict) -> dict | None:
    """A learnable variant's learned coefficients over its seeds: per layer the mean; its first, mean and last layer;
    how many layers sit at the off end (0) or, for α, at 1 in every seed; whether all of them ended off."""
    runs = [run["learned_coefficients"] for run in entry["per_seed"] if run.get("learned_coefficients")]
    if not runs:
        return None
    method = (entry.get("value_path") or {}).get("method")
    if method == "value_residual":  # as the forward uses α (results written before 2026-11-28 hold it unclamped)
        runs = [[min(max(value, 0.0), 1.0) for value in values] for values in runs]
    layers = [statistics.fmean(values) for values in zip(*runs)]
    off = sum(all(values[i] <= OFF for values in runs) for i in range(len(layers)))
    full = sum(all(values[i] >= 1 - OFF for values in runs) for i in range(len(layers)))
    raw = [
        run["learned_coefficient_parameters"] for run in entry["per_seed"] if run.get("learned_coefficient_parameters")
    ]
    return {
        "symbol": SYMBOLS.get(method, "coefficient"),
        "parameter_mean": statistics.fmean(v for values in raw for v in values) if raw else None,
        "per_layer": layers,
        "first": layers[0],
        "mean": statistics.fmean(layers),
        "last": layers[-1],
        "layers": len(layers),
        "at_off": off,
        "at_one": full if method == "value_residual" else 0,
        "switched_off": off == len(layers),
    }


def baseline_problem(results: dict) -> str | None:
    """Why the baseline's numbers say little (it barely learned), or None."""
    metric, base = results["metric"], results["variants"].get(BASELINE)
    if not base or not base["per_seed"]:
        return None
    score, data = base[metric]["mean"], results.get("data", {})
    if metric == "accuracy" and data.get("classes"):
        chance = 1 / data["classes"]
        if score < chance + 0.1 * (1 - chance):  # under a tenth of the way from chance to perfect
            return f"the baseline's accuracy ({score:.3f}) is near chance ({chance:.3f} for {data['classes']} classes)"
    if metric == "perplexity" and data.get("vocabulary") and score > 0.25 * data["vocabulary"]:
        return f"the baseline's perplexity ({score:.0f}) is near its vocabulary size ({data['vocabulary']})"
    falls = []
    for run in base["per_seed"]:
        curve = [point["loss"] for point in run.get("learning_curve", [])]
        if len(curve) >= 2 and curve[0] > 0:
            falls.append(1 - curve[-1] / curve[0])
    if falls and max(falls) < 0.05:
        return f"the baseline's training loss fell by under 5 % in every seed (at most {max(falls):.1%})"
    return None


def verdict(results: dict) -> dict:
    """The reading of `results`: per variant its paired readings, coefficient reading and conclusion; the best
    variant (or None); and the paragraph in words."""
    metric, variants = results["metric"], results["variants"]
    base = variants.get(BASELINE)
    readings, sentences, candidates = {}, [], []
    title = metric.replace("_", " ").replace("mean iou", "mean IoU")
    for name, entry in variants.items():
        if name == BASELINE or base is None:
            continue
        reading = {
            key: paired_reading(entry[key]["per_seed"], base[key]["per_seed"], key)
            for key in (metric, "last_layer_cosine")
            if key in entry and key in base
        }
        coefficients = coefficient_reading(entry)
        score = reading.get(metric)
        if coefficients and coefficients["switched_off"]:
            conclusion = "switched itself off"
            pushed = coefficients["parameter_mean"]
            where = (
                f" (training pushed it to {pushed:.3f} on average, used as 0)"
                if pushed is not None and pushed < 0
                else ""
            )
            sentences.append(
                f"{name}: learned from {_start(entry)}, its {coefficients['symbol']} ended at 0 in every layer and "
                f"seed{where}, so it ran as the model as loaded: the remedy switched itself off."
            )
        elif score is None or score["n"] == 0:
            continue
        else:
            conclusion = direction(score, metric)
            spread = "" if score["std"] is None else f" ± {format_number(score['std'], metric)}"
            seeds = f"{score['wins']}/{score['n']} seeds better" + (f", {score['ties']} tied" if score["ties"] else "")
            what = {"better": "helped", "worse": "hurt", "within the spread": "did not differ beyond the seeds' spread"}
            cosine = reading.get("last_layer_cosine")
            smoothing = ""
            if cosine and direction(cosine, "last_layer_cosine") != "within the spread":
                lower = cosine["mean"] < 0
                smoothing = (
                    f"; its last-layer tokens were {'less' if lower else 'more'} alike (cosine "
                    f"{format_number(cosine['mean'], 'cosine', True)} ± {format_number(cosine['std'], 'cosine')})"
                )
            sentences.append(
                f"{name} ({entry['description']}) {what[conclusion]}: {title} "
                f"{format_number(score['mean'], metric, True)}"
                f"{spread} ({seeds})"
                + smoothing
                + (f"; learned {_coefficient_text(coefficients)}" if coefficients else "")
                + "."
            )
            if conclusion == "better":
                candidates.append(name)
        readings[name] = {"paired": reading, "coefficients": coefficients, "conclusion": conclusion}
    sign = 1 if HIGHER_IS_BETTER[metric] else -1
    best = max(candidates, key=lambda n: sign * variants[n][metric]["mean"]) if candidates else None
    problem = baseline_problem(results)
    text = []
    if problem:
        text.append(
            f"The baseline barely learned: {problem}. Until it does, no difference below says much: train longer "
            "(--epochs), at another learning rate (--learning-rate), or from scratch (--from-scratch) for a model "
            "whose weights are random."
        )
    text.append(f"On this model and data, {' '.join(sentences)}" if sentences else "No variant to compare.")
    if best:
        text.append(f"Best {title}: {best}, whose paired 95 % interval over seeds excludes 0.")
    elif sentences:
        text.append(
            f"No variant is better than {BASELINE} beyond the seeds' spread (paired 95 % t-interval of the mean)."
        )
    return {"best": best, "baseline_problem": problem, "variants": readings, "text": " ".join(text)}


def _start(entry: dict) -> str:
    path = entry.get("value_path") or {}
    return f"{path.get('coefficient', 0):g}"


def _coefficient_text(reading: dict) -> str:
    symbol = reading["symbol"]
    bounds = f"{reading['at_off']} of {reading['layers']} layers at 0"
    if reading["at_one"]:
        bounds += f", {reading['at_one']} at 1"
    return (
        f"{symbol} first layer {reading['first']:.3f}, mean {reading['mean']:.3f}, last layer {reading['last']:.3f} "
        f"({bounds})"
    )


def format_number(value: float, metric: str, signed: bool = False) -> str:
    """A score as the table and the verdict print it: perplexity to 2 decimals, the others to 4."""
    return f"{value:{'+' if signed else ''}.{2 if metric == 'perplexity' else 4}f}"


def coefficient_lines(results: dict) -> list[str]:
    """One line per learnable variant: its learned coefficients in brief (`coefficient_reading`)."""
    lines = []
    for name, entry in results["variants"].items():
        reading = coefficient_reading(entry)
        if reading:
            note = " (switched itself off)" if reading["switched_off"] else ""
            lines.append(f"{name}: learned {_coefficient_text(reading)}, mean over seeds{note}.")
    return lines


__all__ = [
    "HIGHER_IS_BETTER",
    "TIE_TOLERANCE",
    "baseline_problem",
    "coefficient_lines",
    "coefficient_reading",
    "direction",
    "format_number",
    "is_tie",
    "paired_reading",
    "verdict",
]
