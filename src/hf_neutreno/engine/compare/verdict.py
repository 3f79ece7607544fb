"""The reading of a comparison's results.json, in numbers and in words: what `hf-neutreno compare` prints under its
table and writes as ``results["verdict"]``.

The rules, each stated where the output uses it:

- **Ties.** A seed's paired difference smaller than `TIE_TOLERANCE` (absolute for accuracy, mean IoU and the cosine;
  relative to the baseline's value for perplexity) is a tie, neither a win nor a loss.
- **Beyond the seeds' spread.** A variant helps (or hurts) only where the 95 % t-interval of the mean of its paired
  differences over seeds lies beyond the tie tolerance, on one side: an interval that excludes 0 but not the
  tolerance (every seed a tie, say, where the metric moves in whole test items) is no win. "Best" is named only among
  those, by the paired mean, and never from one seed.
- **Switched itself off.** A learnable coefficient is used clamped to its range (λ ≥ 0, α in [0, 1]); a variant whose
  coefficients all ended at the off end (0) in every layer and seed computes, once trained, as the model as loaded.
  The verdict says so beside its paired reading, which still decides whether training with it helped.
- **Diverged runs.** A run whose score is not finite (NaN, or a perplexity that overflows) is recorded as diverged;
  its seed is left out of its variant's reading, and the verdict names it.
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
# A difference of exactly the tolerance (one item of 500 is 0.002) is not a tie, whatever the rounding of its two
# scores' subtraction (141/500 − 140/500 = 0.0019999999999999463): tolerances are compared with this much slack.
ROUNDING = 1e-9
OFF = 1e-4  # a learnable coefficient at most this far above 0 sits at the off end
# Two-sided 95 % quantiles of Student's t by degrees of freedom (the seeds less one); beyond: `t_quantile`'s series.
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_Z = 1.959963984540054  # the normal's 0.975 quantile
SYMBOLS = {"neutreno": "λ", "value_residual": "α"}
DIVERGED = "every seed of the baseline diverged"  # `baseline_problem`'s reading of a baseline without a finite score


def t_quantile(degrees: int) -> float:
    """The 0.975 quantile of Student's t: the table to 10 degrees of freedom, then the Cornish-Fisher series in
    1/degrees (Abramowitz & Stegun 26.7.5), within 5e-6 of the exact value from 11 on."""
    if degrees in T_95:
        return T_95[degrees]
    z, v = _Z, float(degrees)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def tolerance(metric: str, baseline: float) -> float:
    """The tie tolerance of `metric` at a baseline value (relative metrics scale with it)."""
    return TIE_TOLERANCE[metric] * (abs(baseline) if metric in RELATIVE_TOLERANCE else 1.0)


def is_tie(difference: float, metric: str, baseline: float) -> bool:
    """Whether one seed's paired difference is within the tolerance of `metric`."""
    return abs(difference) < tolerance(metric, baseline) * (1 - ROUNDING)


def paired_reading(variant: dict, baseline: dict, metric: str) -> dict:
    """Per seed `variant − baseline` ({seed: value} each, the seeds both have a finite value for): mean, sample std,
    the 95 % t-interval of the mean, how many seeds the variant wins, ties and loses (`is_tie`), and the tie tolerance
    at the baseline's mean over those seeds (what the interval must clear, `direction`)."""
    seeds = [seed for seed in variant if seed in baseline and _finite(variant[seed]) and _finite(baseline[seed])]
    differences = [variant[seed] - baseline[seed] for seed in seeds]
    sign = 1 if HIGHER_IS_BETTER[metric] else -1
    ties = sum(is_tie(d, metric, baseline[s]) for s, d in zip(seeds, differences))
    wins = sum(sign * d > 0 and not is_tie(d, metric, baseline[s]) for s, d in zip(seeds, differences))
    n = len(differences)
    mean = statistics.fmean(differences) if differences else None
    std = statistics.stdev(differences) if n > 1 else None
    interval = None
    if n > 1:
        half = t_quantile(n - 1) * std / math.sqrt(n)
        interval = [mean - half, mean + half]
    base = statistics.fmean(baseline[seed] for seed in seeds) if seeds else math.nan
    return {
        "mean": mean,
        "std": std,
        "n": n,
        "wins": wins,
        "ties": ties,
        "losses": n - wins - ties,
        "interval": interval,
        "tolerance": tolerance(metric, base) if seeds else None,
    }


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def direction(reading: dict, metric: str) -> str:
    """ "better", "worse" or "within the spread": whether the interval lies beyond the tie tolerance (results written
    before it was recorded: beyond 0), and on which side."""
    low_high = reading.get("interval")
    if not low_high:
        return "within the spread"
    band = (reading.get("tolerance") or 0.0) * (1 - ROUNDING)
    if low_high[0] >= band and low_high[0] > 0:
        higher = True
    elif low_high[1] <= -band and low_high[1] < 0:
        higher = False
    else:
        return "within the spread"
    return "better" if higher == HIGHER_IS_BETTER[metric] else "worse"


def coefficient_reading(entry: dict) -> dict | None:
    """A learnable variant's learned coefficients over its seeds: per layer the mean; its first, mean and last layer;
    how many layers sit at the off end (0) or, for α, at 1 in every seed; whether all of them ended off."""
    kept = [run for run in entry["per_seed"] if not run.get("diverged")]
    runs = [run["learned_coefficients"] for run in kept if run.get("learned_coefficients")]
    runs = [values for values in runs if None not in values]
    if not runs:
        return None
    method = (entry.get("value_path") or {}).get("method")
    if method == "value_residual":  # as the forward uses α (results written before 2026-11-28 hold it unclamped)
        runs = [[min(max(value, 0.0), 1.0) for value in values] for values in runs]
    layers = [statistics.fmean(values) for values in zip(*runs)]
    off = sum(all(values[i] <= OFF for values in runs) for i in range(len(layers)))
    full = sum(all(values[i] >= 1 - OFF for values in runs) for i in range(len(layers)))
    raw = [run["learned_coefficient_parameters"] for run in kept if run.get("learned_coefficient_parameters")]
    raw = [values for values in raw if None not in values]
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
    if score is None:
        return DIVERGED
    if metric == "accuracy" and data.get("classes"):
        # chance: always the most common class where the evaluation data are imbalanced (results before 2026-11-29
        # record no `majority`: 1 / classes)
        chance = max(1 / data["classes"], data.get("majority") or 0.0)
        if score < chance + 0.1 * (1 - chance):  # under a tenth of the way from chance to perfect
            if chance > 1 / data["classes"]:
                return (
                    f"the baseline's accuracy ({score:.3f}) is near what always predicting the most common class "
                    f"scores ({chance:.3f})"
                )
            return f"the baseline's accuracy ({score:.3f}) is near chance ({chance:.3f} for {data['classes']} classes)"
    if metric == "perplexity" and data.get("vocabulary") and score > 0.25 * data["vocabulary"]:
        return f"the baseline's perplexity ({score:.0f}) is near its vocabulary size ({data['vocabulary']})"
    falls = []
    for run in base["per_seed"]:
        curve = [point["loss"] for point in run.get("learning_curve", []) if point["loss"] is not None]
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
    readings, sentences, candidates = {}, [], {}
    title = metric.replace("_", " ").replace("mean iou", "mean IoU")
    what = {"better": "helped", "worse": "hurt", "within the spread": "did not differ beyond the seeds' spread"}
    for name, entry in variants.items():
        diverged = diverged_seeds(entry)
        if diverged:
            sentences.append(
                f"{name} diverged on seed{'s' if len(diverged) > 1 else ''} {', '.join(map(str, diverged))} (its "
                f"weights or {title} not finite): {'those seeds are' if len(diverged) > 1 else 'that seed is'} left "
                "out."
            )
        if name == BASELINE or base is None:
            continue
        reading = {
            key: paired_reading(entry[key]["per_seed"], base[key]["per_seed"], key)
            for key in (metric, "last_layer_cosine")
            if key in entry and key in base
        }
        coefficients = coefficient_reading(entry)
        switched_off = bool(coefficients and coefficients["switched_off"])
        score = reading.get(metric)
        if score is None or score["n"] == 0:
            continue
        conclusion = direction(score, metric)
        sentence = (
            f"{name} ({entry['description']}) {what[conclusion]}: {title} {_difference_text(score, metric)}"
            f"{_smoothing_text(reading.get('last_layer_cosine'))}"
        )
        if switched_off:
            pushed = coefficients["parameter_mean"]
            where = (
                f" (training pushed it to {pushed:.3f} on average, used as 0)"
                if pushed is not None and pushed < 0
                else ""
            )
            start = _start(entry)
            sentence += (
                f"; its {coefficients['symbol']}, learned from {start}, ended at 0 in every layer and seed{where}: "
                "the remedy switched itself off, and the trained model computes as the model as loaded"
                + ("" if float(start) == 0 else " (its weights trained with the remedy on)")
            )
        elif coefficients:
            sentence += f"; learned {_coefficient_text(coefficients)}"
        sentences.append(sentence + ".")
        if conclusion == "better":
            candidates[name] = score["mean"]
        readings[name] = {
            "paired": reading,
            "coefficients": coefficients,
            "conclusion": conclusion,
            "switched_off": switched_off,
        }
    sign = 1 if HIGHER_IS_BETTER[metric] else -1
    best = max(candidates, key=lambda n: sign * candidates[n]) if candidates else None  # by the paired mean
    problem = baseline_problem(results)
    text = []
    if problem == DIVERGED:
        text.append("The baseline diverged in every seed: train at a lower learning rate (--learning-rate).")
    elif problem:
        text.append(
            f"The baseline barely learned: {problem}. Until it does, no difference below says much: train longer "
            "(--epochs), at another learning rate (--learning-rate), or from scratch (--from-scratch) for a model "
            "whose weights are random."
        )
    text.append(f"On this model and data, {' '.join(sentences)}" if sentences else "No variant to compare.")
    if best:
        text.append(
            f"Best {title}: {best}, whose paired 95 % interval over seeds lies beyond the tie tolerance "
            f"({_tolerance_text(metric)})."
        )
    elif readings:
        text.append(
            f"No variant is better than {BASELINE} beyond the seeds' spread (paired 95 % t-interval of the mean, "
            f"beyond the tie tolerance of {_tolerance_text(metric)})."
        )
    return {"best": best, "baseline_problem": problem, "variants": readings, "text": " ".join(text)}


def diverged_seeds(entry: dict) -> list:
    """The seeds of a variant whose run diverged (its score recorded as not finite)."""
    return [run["seed"] for run in entry.get("per_seed", []) if run.get("diverged")]


def _difference_text(score: dict, metric: str) -> str:
    """`+0.0050 ± 0.0063 (interval +0.0005 to +0.0095; 3/5 seeds better, 1 tied)`: the paired mean, its std, the
    interval the rule reads, and the seeds."""
    text = format_number(score["mean"], metric, True)
    if score["std"] is not None:
        text += f" ± {format_number(score['std'], metric)}"
    parts = []
    if score["interval"]:
        low, high = (format_number(bound, metric, True) for bound in score["interval"])
        parts.append(f"95 % interval {low} to {high}")
    parts.append(f"{score['wins']}/{score['n']} seeds better" + (f", {score['ties']} tied" if score["ties"] else ""))
    return f"{text} ({'; '.join(parts)})"


def _smoothing_text(cosine: dict | None) -> str:
    if not cosine or direction(cosine, "last_layer_cosine") == "within the spread":
        return ""
    lower = cosine["mean"] < 0
    return (
        f"; its last-layer tokens were {'less' if lower else 'more'} alike (cosine "
        f"{format_number(cosine['mean'], 'cosine', True)} ± {format_number(cosine['std'], 'cosine')})"
    )


def _tolerance_text(metric: str) -> str:
    tie = TIE_TOLERANCE[metric]
    return f"{tie:.1%} of the baseline's {metric}" if metric in RELATIVE_TOLERANCE else f"±{tie:g}"


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
    "diverged_seeds",
    "format_number",
    "is_tie",
    "paired_reading",
    "t_quantile",
    "tolerance",
    "verdict",
]
