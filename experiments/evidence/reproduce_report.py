"""Statistics and the results page for `reproduce.py`: per-unit JSON in; one JSON per experiment, figures and the
markdown page out.

What each table and claim compares, the papers' directions and numbers, and the opening "which remedy" table are data
(`reproduce_claims.py`); the page's text is a template (`results_template.md`) that `reproduce_page.py` fills;
`reproduce_figures.py` draws. Every number is a mean ± sample standard deviation over seeds (n − 1 in the
denominator) with the per-seed values beside it; comparisons are paired by seed (same data, order and initial
weights), as `variant − baseline`, and a claim's verdict is the 95 % t-interval rule of `verdict`.
"""

import json
import math
import re
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path

from hf_neutreno.engine.experiment import paired, summary

from . import reproduce_figures as figures
from .reproduce_claims import CLAIMS, EXPERIMENTS, LM_MODELS, PARENT_MODELS
from .reproduce_methods import METHODS
from .reproduce_plans import CIFAR, LM, SWEEP, VALIDATED
from .reproduce_results import ACCURACY, Measure, UnitResult, load_units

# The speed benchmarks' JSON (the opening table's costs).
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
CURVES = {
    "cifar10_accuracy": "cifar10_curves.png",
    "wikitext2": "wikitext2_curves.png",  # learning-curve figures
    **{name: f"{name}_curves.png" for name in ("lambda_sweep", "adaptation", "kernel", "segmentation")},
}
# Two-sided 95 % quantiles of Student's t by degrees of freedom (n − 1 seeds), for the paired-difference intervals.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def interval(stats: dict) -> tuple[float, float]:
    """The 95 % t-interval of a paired difference's mean (NaN bounds for fewer than two seeds)."""
    n = stats["n"]
    if n < 2:
        return math.nan, math.nan
    half = T95.get(n - 1, 1.96) * stats["std"] / math.sqrt(n)
    return stats["mean"] - half, stats["mean"] + half


def verdict(stats: dict, sign: int) -> str:
    """ "reproduced" when the interval lies on the paper's side of 0 (`sign` +1: the variant should be higher),
    "opposite" when it lies on the other side, else "inconclusive". Decided by this rule alone, fixed before the
    cpu-long results were seen."""
    low, high = interval(stats)
    if math.isnan(low):
        return "inconclusive"
    if low * sign > 0 and high * sign > 0:
        return "reproduced"
    if low * sign < 0 and high * sign < 0:
        return "opposite"
    return "inconclusive"


# ---------------------------------------------------------------------------------------------------- units


def group(units: list[UnitResult]) -> dict[str, dict[int, UnitResult]]:
    """{series: {seed: unit}}, seeds in order."""
    groups = {}
    for u in sorted(units, key=lambda u: u.seed):
        groups.setdefault(u.unit.series, {})[u.seed] = u
    return groups


def find(groups: dict, pattern: str) -> dict[int, UnitResult]:
    """The units of the series `pattern` names (`*` matches the chosen λ: only one is ever trained)."""
    return next((g for name, g in groups.items() if fnmatchcase(name, pattern)), {})


def values(groups: dict, series: str, measure: Measure) -> dict[int, float]:
    """{seed: measure} over the series' units that record it."""
    return {s: v for s, u in find(groups, series).items() if (v := u.measure(measure)) is not None}


# ---------------------------------------------------------------------------------------------------- aggregation


def aggregate(out: Path, chosen_lambda: float | None = None) -> dict:
    """One JSON per experiment in `out` (and the figures) from the unit JSON; returns them all. `chosen_lambda`: the
    λ the sweep chose (`reproduce.validated_lambda`); if not given, the λ its units recorded."""
    units = load_units(out)
    groups, results = group(units), {}
    for name, (models, measures, pairs) in experiments(groups).items():
        present = {k: m for k, m in models.items() if find(groups, m[0])}
        data = compare(groups, present, measures, pairs, out / CURVES[name] if name in CURVES else None)
        if any(data["summary"].values()):
            results[name] = data
    if "cifar10_accuracy" in results:  # the settings of the first run's models (the ViT's, where it ran)
        models = EXPERIMENTS["cifar10_accuracy"][0].values()
        first = next(next(iter(g.values())) for series, *_ in models if (g := find(groups, series)))
        results["cifar10_accuracy"].update(
            shape=first.get("shape"),
            test_images=first["budget"]["test_samples"],
            samples={
                "oversmoothing": first["trained"]["oversmoothing"]["num_samples"],
                **{k: first["budget"][f"{k}_samples"] for k in ("spectral", "corruption")},
            },
        )
    if "oversmoothing" in results:
        models = {k: find(groups, series) for k, (series, _) in EXPERIMENTS["oversmoothing"][0].items()}
        results["oversmoothing"]["figures"] = {
            stage: figures.plot_oversmoothing(
                models, results["oversmoothing"]["names"], out / f"oversmoothing_{stage}.png", stage
            )
            for stage in ("init", "trained")
        }
    if "lambda_sweep" in results:
        trained_with = (  # the units that used the sweep's choice
            u["neutreno_lambda"]
            for u in units
            if u.unit.kind == VALIDATED.kind or (u.unit.kind == "adapt" and u.unit.variant == "neutreno")
        )
        results["lambda_sweep"]["chosen"] = chosen_lambda if chosen_lambda is not None else next(trained_with, None)
    if "wikitext2" in results:
        results["wikitext2"].update(_wikitext(units, out))
    if parents := _parents(groups):
        results["parents"] = parents
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    results["claims"] = claims(groups, run.get("planned") or [])
    results["costs"] = {
        key: {
            cost: [
                (label, v)
                for file, where, field, label in method[cost]
                if (v := _benchmark(BENCHMARKS / file, where, field)) is not None
            ]
            for cost in ("throughput", "memory")
        }
        for key, method in METHODS.items()
    }
    for name, data in results.items():
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    return results


def experiments(groups: dict) -> dict:
    """reproduce_claims.EXPERIMENTS completed from the units: the λ sweep's grid, the layers the over-smoothing
    tables show (the embeddings, a quarter and half deep, the last three) and the corruptions' names."""
    result = dict(EXPERIMENTS)
    grid = sorted({u.unit.neutreno_lambda for by in groups.values() for u in by.values() if u.unit.kind == SWEEP.kind})
    models = {f"{lam:g}": (SWEEP.of(neutreno_lambda=lam), f"λ {lam:g}") for lam in grid}
    result["lambda_sweep"] = (models, (ACCURACY,), ())
    vit = next(iter(find(groups, CIFAR.of(variant="vit", fraction=1.0)).values()), {})
    if "trained" in vit:
        layers = vit["trained"]["oversmoothing"]["layers"]["cosine_similarity"]
        shown = sorted({layers[0], layers[len(layers) // 4], layers[len(layers) // 2], *layers[-3:]})
        measures = []
        for stage in ("trained", "init"):
            measures += [Measure("cosine", stage, layer) for layer in shown] + [Measure("hfc", stage, layers[-1])]
        result["oversmoothing"] = (result["oversmoothing"][0], tuple(measures), ())
    if "corruptions" in vit:
        models, measures, pairs = result["corruptions"]
        each = tuple(Measure("corruption", severity=5, corruption=name) for name in vit["corruptions"]["5"])
        result["corruptions"] = (models, measures + each, pairs)
    return result


def _parents(groups: dict) -> dict:
    """The retrained first-run models that were kept: their accuracy, the first run's of the same seeds, and the
    difference (how reproducible one model's accuracy is), with their folders."""
    parents = {}
    for key, (series, first_run) in PARENT_MODELS.items():
        retrain, first = values(groups, series, ACCURACY), values(groups, first_run, ACCURACY)
        if retrain:
            parents[key] = {
                "retrain": summary(retrain),
                "first_run": summary(first) if first else None,
                "difference": paired(retrain, first) if set(retrain) & set(first) else None,
                "model_dir": {str(s): u.get("model_dir") for s, u in find(groups, series).items()},
            }
    return parents


def compare(groups: dict, models: dict, measures: tuple, pairs: tuple, figure: Path | None = None) -> dict:
    """One table's numbers: {"names", "papers", "summary": {model: {measure: summary}}, "paired": {"variant vs
    baseline": {measure: paired}}, "units": {model: the first unit's train_images and steps}, "curves", "figure"}."""
    by_model = {k: {m: v for m in measures if (v := values(groups, series, m))} for k, (series, *_) in models.items()}
    first = {k: next(iter(find(groups, m[0]).values())) for k, m in models.items()}
    result = {
        "names": {k: m[1] for k, m in models.items()},
        "papers": {k: m[2] for k, m in models.items() if m[2:]},
        "summary": {k: {m.key: summary(v) for m, v in by.items()} for k, by in by_model.items()},
        "paired": {
            f"{v} vs {b}": {
                m.key: paired(by_model[v][m], by_model[b][m], m.format[3])
                for m in by_model[v]
                if set(by_model[v][m]) & set(by_model[b].get(m, {}))
            }
            for v, b in pairs
            if v in by_model and b in by_model
        },
        "units": {k: {f: u[f] for f in ("train_images", "steps") if f in u} for k, u in first.items()},
    }
    if figure is not None:
        result["curves"] = figures.curves({k: find(groups, m[0]) for k, m in models.items()})
        result["figure"] = figures.plot_curves(result["curves"], result["names"], figure)
    return result


def _benchmark(path: Path, where: dict, field: str) -> float | None:
    """The `field` of the first row of a speed benchmark's JSON that matches `where`; None if there is none."""
    rows = json.loads(path.read_text()).get("rows", []) if path.is_file() else []
    return next((r[field] for r in rows if field in r and all(r.get(k) == v for k, v in where.items())), None)


def _wikitext(units: list[UnitResult], out: Path) -> dict:
    """What the language-model section says of its setting: tokens scored, the budget, the unigram level."""
    lm = [u for u in units if u.unit.kind == LM.kind] + [u for u in units if u.unit.task == "lm"]
    first = lm[0]
    by_variant = {k: {str(u.seed): u for u in lm if u.unit.variant == k} for k in LM_MODELS}
    by_variant = {k: by for k, by in by_variant.items() if by}
    result = {
        "scored_tokens": {
            s: {p: first[s][p]["num_tokens"] for p in ("sliding", "blocks")} for s in ("validation", "test")
        },
        "split_tokens": {s: first[s]["split_tokens"] for s in ("validation", "test")},
        "train_loss": {
            k: summary({s: u["train_loss"] for s, u in by.items() if "train_loss" in u})
            for k, by in by_variant.items()
            if any("train_loss" in u for u in by.values())
        },
        "curve_tokens": next((u["curve"][0]["tokens"] for u in lm if u.get("curve")), None),
        "shape": first.get("shape"),
        **{k: first[k] for k in ("steps", "train_tokens", "parameters", "vocab_size", "context")},
        **{k: first["budget"][f"lm_{k}"] for k in ("batch_size", "learning_rate", "warmup_steps")},
    }
    if any("best_step" in u for u in lm):  # early stopping: each unit's own length and evaluated step
        result["early_stopping"] = {
            k: {f: {s: u[f] for s, u in by.items() if f in u} for f in ("best_step", "steps")}
            for k, by in by_variant.items()
        }
    if (out / "wikitext2_unigram.json").exists():
        result["unigram_perplexity"] = json.loads((out / "wikitext2_unigram.json").read_text())
    return result


def claims(groups: dict, planned: list[str]) -> list[dict]:
    """Every claim of reproduce_claims that has units or planned units, with its paired statistics, 95 % interval,
    the seeds with the paper's sign, and its verdict (None while fewer seeds than planned are finished, and for a
    measurement with no direction)."""
    expected = Counter(series_name(name) for name in planned)
    lm_curves = any(u.get("curve") for u in find(groups, LM.of(variant="softmax")).values())
    result = []
    for claim in CLAIMS:
        planned_seeds = sum(n for series, n in expected.items() if fnmatchcase(series, claim["variant"]))
        variant, baseline = (values(groups, claim[k], claim["measure"]) for k in ("variant", "baseline"))
        stats = paired(variant, baseline, claim["measure"].format[3]) if set(variant) & set(baseline) else None
        if (claim["only_with_curve"] and not lm_curves) or (stats is None and not planned_seeds):
            continue
        entry = {**claim, "measure": claim["measure"].key, "stats": stats, "planned": planned_seeds, "verdict": None}
        if stats is not None:
            entry.update(interval=interval(stats), agree=sum(d * claim["sign"] > 0 for d in stats["per_seed"].values()))
            if claim["sign"] and stats["n"] >= planned_seeds:
                entry["verdict"] = verdict(stats, claim["sign"])
        result.append(entry)
    return result


def series_name(name: str) -> str:
    """The series of a unit name recorded in run.json (the name without its `-seed<k>`)."""
    return re.sub(r"-seed\d+$", "", name)


__all__ = ["aggregate", "claims", "group", "interval", "verdict"]
