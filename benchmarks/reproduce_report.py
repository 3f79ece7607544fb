"""Statistics, figures and markdown for `reproduce.py`: per-unit JSON in, one JSON per experiment and docs out.

Every number is shown as mean ± sample standard deviation over seeds (n − 1 in the denominator) with the per-seed
values beside it; comparisons are paired by seed (same data, order and initial weights), as `variant − baseline`.
"""

import json
import math
import os
import statistics
from pathlib import Path

from hf_neutreno.diagnostics import OversmoothingReport
from hf_neutreno.experiment import mean_std, paired, summary

VIT_NAMES = {"vit": "ViT", "neutreno": "NeuTRENO ViT (λ 0.6)", "vit-": "ViT⁻", "vit+": "ViT⁺"}
LM_NAMES = {"softmax": "softmax (λ 0)", "neutreno": "NeuTRENO (λ 0.4)"}
METRICS = ("cosine_similarity", "hfc_lfc_ratio")

# The papers' numbers (NeuTRENO Tables 1, 2, 8; the poster's Tables 1-3). Top-1 accuracy, %.
PAPER_ACCURACY = {
    "vit": "DeiT-tiny 72.17 (ImageNet); ViT-Ti 66.78 (CIFAR-100)",
    "neutreno": "73.01 (ImageNet, +0.84 over DeiT-tiny); CIFAR-10 kernel attention 75.89 → 76.75",
    "vit-": "66.62 (CIFAR-100, −0.16 vs ViT-Ti)",
    "vit+": "64.34 (CIFAR-100, −2.44 vs ViT-Ti)",
}
PAPER_EFFICIENCY = {  # CIFAR-100, % of the training data kept
    "vit": {100: "66.78 ± 0.1", 50: "56.38 ± 0.5", 10: "32.47 ± 0.9"},
    "vit-": {100: "66.62 ± 0.3", 50: "56.58 ± 0.3", 10: "33.99 ± 0.4"},
}
PAPER_CORRUPTIONS = {  # CIFAR-100, mean over corruptions, severities 0-5
    "vit": [66.78, 61.59, 57.75, 53.12, 49.32, 39.17],
    "vit-": [66.62, 61.62, 58.00, 53.56, 49.70, 40.07],
}
PAPER_SMOOTHING = {  # share of cases where 1 + λ^H λ_n^A dominates, %
    ("init", "vit"): "100 (random-init ViT-B/16)",
    ("trained", "vit"): "98.92 (CIFAR-100 ViT-Ti); 70.27 (ImageNet ViT-B/16)",
    ("trained", "vit+"): "100 (CIFAR-100 ViT-Ti⁺)",
    ("trained", "vit-"): "0 (CIFAR-100 ViT-Ti⁻)",
}


# ---------------------------------------------------------------------------------------------------- statistics

# mean_std, summary and paired (per seed, as `variant − baseline`) are the package's paired-experiment statistics.

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
    """"reproduced" when the interval lies on the paper's side of 0 (`sign` +1: the variant should be higher),
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


def _pm(stats: dict, scale: float = 1.0, digits: int = 2, sign: bool = False) -> str:
    mean, std = stats["mean"] * scale, stats["std"] * scale
    text = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    return text + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def _seeds(stats: dict, scale: float = 1.0, digits: int = 2, seeds: list[str] | None = None) -> str:
    """The per-seed values, ' / '-separated; with `seeds`, one slot per seed in that order ('—' where missing)."""
    values = stats["per_seed"]
    return " / ".join("—" if seed not in values else f"{values[seed] * scale:.{digits}f}" for seed in seeds or values)


def _wins(stats: dict) -> str:
    return f"{stats['wins']}/{stats['n']} better"


def _delta(stats: dict | None, scale: float = 100) -> str:
    return "—" if stats is None else f"{_pm(stats, scale, sign=True)} ({_wins(stats)})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


# ---------------------------------------------------------------------------------------------------- aggregation


def unit_name(unit: dict) -> str:
    """A unit's name: its JSON file's stem, and its checkpoint folder's."""
    kind, seed = unit["kind"], unit["seed"]
    if kind == "lm":
        return f"lm-{unit['variant']}-seed{seed}"
    if kind == "sweep":
        return f"sweep-neutreno-lambda{unit['neutreno_lambda']:g}-seed{seed}"
    if kind == "validated":
        return f"cifar-neutreno-lambda{unit['neutreno_lambda']:g}-100pct-seed{seed}"
    if kind in ("kernel", "parent", "adapt"):
        return f"{kind}-{unit['variant']}-seed{seed}"
    if kind == "valuepath":
        return f"valuepath-{unit['task']}-{unit['variant']}-seed{seed}"
    return f"cifar-{unit['variant']}-{round(unit['fraction'] * 100)}pct-seed{seed}"


def load_units(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "units").glob("*.json"))]


def _by_seed(units: list[dict], kind: str, value, **match) -> dict:
    """{variant: {seed: value(unit)}} over the units of `kind` matching `match`, sorted by seed."""
    table = {}
    for u in sorted(units, key=lambda u: u["unit"]["seed"]):
        spec = u["unit"]
        if spec["kind"] == kind and all(spec.get(k) == v for k, v in match.items()):
            table.setdefault(spec["variant"], {})[spec["seed"]] = value(u)
    return table


def _order(table: dict, names: dict) -> dict:
    return {v: table[v] for v in names if v in table}


def aggregate(out: Path) -> dict:
    """One JSON per experiment in `out` (and the over-smoothing PNGs) from the unit JSON; returns them all."""
    units = load_units(out)
    results = {}
    if any(u["unit"]["kind"] == "cifar" for u in units):
        results.update(_cifar(units, out))
    if any(u["unit"]["kind"] == "lm" for u in units):
        results["wikitext2"] = _wikitext(units)
        unigram = out / "wikitext2_unigram.json"
        if unigram.exists():
            results["wikitext2"]["unigram_perplexity"] = json.loads(unigram.read_text())
    if "cifar10_accuracy" in results:
        results["cifar10_accuracy"]["figure"] = _plot_curves(
            results["cifar10_accuracy"]["curves"], VIT_NAMES, out / "cifar10_curves.png", "epoch", "epoch",
            "test accuracy", "CIFAR-10 test accuracy during training")
    if "wikitext2" in results:
        results["wikitext2"]["figure"] = _plot_curves(
            results["wikitext2"]["curves"], LM_NAMES, out / "wikitext2_curves.png", "step", "optimizer step",
            "validation perplexity (blocks)", "WikiText-2 validation perplexity during training", log=True)
    for name, data in results.items():
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    return results


def _cifar(units: list[dict], out: Path) -> dict:
    full = [u for u in units if u["unit"]["kind"] == "cifar" and u["unit"]["fraction"] == 1.0]
    acc = _order(_by_seed(full, "cifar", lambda u: u["accuracy"]), VIT_NAMES)
    any_unit = full[0] if full else units[0]
    accuracy = {
        "accuracy": {v: summary(s) for v, s in acc.items()},
        "curves": _curves(full, "epoch", "accuracy"),
        "shape": any_unit.get("shape"),
        "vs_vit": {v: paired(s, acc["vit"]) for v, s in acc.items() if v != "vit" and "vit" in acc},
        "train_images": any_unit["train_images"],
        "steps": any_unit["steps"],
        "test_images": any_unit["budget"]["test_samples"],
        "paper": PAPER_ACCURACY,
    }

    smoothing = {}
    for stage in ("init", "trained"):
        smoothing[stage] = {}
        for metric in METRICS:
            curves = _order(_by_seed(full, "cifar", lambda u: u[stage]["oversmoothing"]["values"][metric]), VIT_NAMES)
            layers = full[0][stage]["oversmoothing"]["layers"][metric]
            smoothing[stage][metric] = {
                v: {"layers": layers, "per_seed": {str(s): c for s, c in per_seed.items()},
                    "mean": [mean_std(col)[0] for col in zip(*per_seed.values())],
                    "std": [mean_std(col)[1] for col in zip(*per_seed.values())]}
                for v, per_seed in curves.items()
            }
        cosine = smoothing[stage]["cosine_similarity"]
        if "vit" in cosine and "neutreno" in cosine:  # NeuTRENO − ViT in the last layer, where the paper's gap is
            last = {v: {int(s): c[-1] for s, c in cosine[v]["per_seed"].items()} for v in ("vit", "neutreno")}
            smoothing[stage]["last_layer_neutreno_vs_vit"] = paired(last["neutreno"], last["vit"],
                                                                    higher_is_better=False)
        smoothing[stage]["samples"] = full[0][stage]["oversmoothing"]["num_samples"]
        smoothing[stage]["figure"] = _plot(smoothing[stage], out / f"oversmoothing_{stage}.png", stage)

    spectral = {stage: {v: {c: summary(s) for c, s in _categories(full, stage, v).items()}
                        for v in VIT_NAMES if _categories(full, stage, v)}
                for stage in ("init", "trained")}
    spectral["samples"] = full[0]["budget"]["spectral_samples"] if full else None
    spectral["paper_smoothing"] = {f"{stage} {v}": text for (stage, v), text in PAPER_SMOOTHING.items()}

    fractions = sorted({u["unit"]["fraction"] for u in units if u["unit"]["kind"] == "cifar"}, reverse=True)
    efficiency = {"accuracy": {}, "vit- vs vit": {}, "train_images": {}, "steps": {}, "paper": PAPER_EFFICIENCY}
    for fraction in fractions:
        pct = str(round(fraction * 100))
        table = _by_seed(units, "cifar", lambda u: u["accuracy"], fraction=fraction)
        for variant in ("vit", "vit-"):
            if variant in table:
                efficiency["accuracy"].setdefault(variant, {})[pct] = summary(table[variant])
        if "vit" in table and "vit-" in table:
            efficiency["vit- vs vit"][pct] = paired(table["vit-"], table["vit"])
        sample = next(u for u in units if u["unit"]["kind"] == "cifar" and u["unit"]["fraction"] == fraction)
        efficiency["train_images"][pct], efficiency["steps"][pct] = sample["train_images"], sample["steps"]

    robust = [u for u in full if "corruptions" in u]
    corruptions = {"accuracy": {}, "per_corruption": {}, "vit- vs vit": {}, "paper": PAPER_CORRUPTIONS,
                   "images": robust[0]["budget"]["corruption_samples"] if robust else None}
    mean_accuracy = {}
    for severity in map(str, range(6)):
        table = _by_seed(robust, "cifar", lambda u: statistics.fmean(u["corruptions"][severity].values()))
        for variant, per_seed in _order(table, VIT_NAMES).items():
            corruptions["accuracy"].setdefault(variant, {})[severity] = summary(per_seed)
            mean_accuracy.setdefault(variant, {})[severity] = per_seed
            names = next(u for u in robust if u["unit"]["variant"] == variant)["corruptions"][severity]
            corruptions["per_corruption"].setdefault(variant, {})[severity] = {
                name: mean_std([u["corruptions"][severity][name] for u in robust if u["unit"]["variant"] == variant])[0]
                for name in names
            }
        if "vit" in table and "vit-" in table:
            corruptions["vit- vs vit"][severity] = paired(table["vit-"], table["vit"])
    # Robustness proper: the change from clean to severity 5, which a difference in clean accuracy does not move.
    change = {v: {s: by["5"][s] - by["0"][s] for s in by["0"]} for v, by in mean_accuracy.items() if "5" in by}
    corruptions["change_clean_to_5"] = {v: summary(per_seed) for v, per_seed in change.items()}
    if "vit" in change and "vit-" in change:
        corruptions["change_clean_to_5 vit- vs vit"] = paired(change["vit-"], change["vit"])
    return {"cifar10_accuracy": accuracy, "oversmoothing": smoothing, "spectral": spectral,
            "data_efficiency": efficiency, "corruptions": corruptions}


def _curves(units: list[dict], x: str, y: str) -> dict:
    """{variant: {x: [...], "per_seed": {seed: [...]}, "mean": [...]}} over the units that recorded a curve with the
    same x values (a learning curve: accuracy per epoch, perplexity per step)."""
    table = {}
    for u in sorted((u for u in units if u.get("curve")), key=lambda u: u["unit"]["seed"]):
        points = u["curve"]
        entry = table.setdefault(u["unit"]["variant"], {x: [p[x] for p in points], "per_seed": {}})
        if entry[x] == [p[x] for p in points]:
            entry["per_seed"][str(u["unit"]["seed"])] = [p[y] for p in points]
    for entry in table.values():
        entry["mean"] = [statistics.fmean(column) for column in zip(*entry["per_seed"].values())]
    return table


def _plot_curves(curves: dict, names: dict, path: Path, x: str, xlabel: str, ylabel: str, title: str,
                 log: bool = False) -> str | None:
    """One curve per variant (the mean over seeds, bold) with each seed's curve thin beside it."""
    if not curves:
        return None
    try:
        from matplotlib.figure import Figure
    except ImportError:  # matplotlib is optional: the tables carry the final values
        return None
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    axes = figure.add_subplot()
    for index, (variant, name) in enumerate((v, n) for v, n in names.items() if v in curves):
        entry, colour = curves[variant], f"C{index}"
        for values in entry["per_seed"].values():
            axes.plot(entry[x], values, color=colour, alpha=0.3, linewidth=0.8)
        axes.plot(entry[x], entry["mean"], color=colour, linewidth=2, marker="o", markersize=3,
                  label=f"{name} (mean of {len(entry['per_seed'])})")
    if log:
        axes.set_yscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=110)
    return path.name


def _categories(units: list[dict], stage: str, variant: str) -> dict:
    """{category: {seed: share}} of the dominating-eigenvalue analysis."""
    table = {}
    for u in sorted(units, key=lambda u: u["unit"]["seed"]):
        if u["unit"]["variant"] == variant and stage in u:
            for category, share in u[stage]["spectral"].items():
                table.setdefault(category, {})[u["unit"]["seed"]] = share
    return table


def _plot(curves: dict, path: Path, stage: str) -> str | None:
    """NeuTRENO Fig. 1 (trained) / Fig. 6 (random init): the seed-mean curves of every variant, one panel a metric."""
    reports, labels = [], []
    for variant, name in VIT_NAMES.items():
        if variant not in curves[METRICS[0]]:
            continue
        reports.append(OversmoothingReport(
            values={m: curves[m][variant]["mean"] for m in METRICS},
            layers={m: curves[m][variant]["layers"] for m in METRICS},
            counts={m: [curves["samples"]] * len(curves[m][variant]["layers"]) for m in METRICS},
            num_samples=curves["samples"], model_name=name,
        ))
        # Each variant's own seed count: the main claim's variants have more seeds than ViT⁻ and ViT⁺.
        labels.append(f"{name} (mean of {len(curves[METRICS[0]][variant]['per_seed'])})")
    if not reports:
        return None
    title = "trained on CIFAR-10" if stage == "trained" else "random initialisation"
    try:
        reports[0].plot(path, others=reports[1:], labels=labels,
                        title=f"ViT-tiny/4, {title} (seed means; layer 0 = embeddings)")
    except ImportError:  # matplotlib is optional: the tables carry the same numbers
        return None
    return path.name


def _wikitext(units: list[dict]) -> dict:
    lm = [u for u in units if u["unit"]["kind"] == "lm"]
    result = {"perplexity": {}, "neutreno vs softmax": {}, "scored_tokens": {}, "split_tokens": {}}
    for split in ("validation", "test"):
        for protocol in ("sliding", "blocks"):
            table = _order(_by_seed(lm, "lm", lambda u: u[split][protocol]["perplexity"]), LM_NAMES)
            for variant, per_seed in table.items():
                result["perplexity"].setdefault(variant, {}).setdefault(split, {})[protocol] = summary(per_seed)
            if len(table) == 2:
                result["neutreno vs softmax"].setdefault(split, {})[protocol] = paired(
                    table["neutreno"], table["softmax"], higher_is_better=False)
            result["scored_tokens"].setdefault(split, {})[protocol] = lm[0][split][protocol]["num_tokens"]
        result["split_tokens"][split] = lm[0][split]["split_tokens"]
    result["train_loss"] = {v: summary(s) for v, s in _order(_by_seed(lm, "lm", lambda u: u["train_loss"]),
                                                                 LM_NAMES).items()}
    result["curves"] = _curves(lm, "step", "perplexity")
    result["curve_tokens"] = next((u["curve"][0]["tokens"] for u in lm if u.get("curve")), None)
    result["shape"] = lm[0].get("shape")
    if any("best_step" in u for u in lm):  # early stopping: each unit's own length and evaluated step
        result["early_stopping"] = {v: {"best_step": {str(s): u["best_step"] for s, u in per_seed.items()},
                                        "steps": {str(s): u["steps"] for s, u in per_seed.items()}}
                                    for v, per_seed in _order(_by_seed(lm, "lm", lambda u: u), LM_NAMES).items()}
    keep = ("steps", "train_tokens", "parameters", "vocab_size", "context")
    result.update({k: lm[0][k] for k in keep})
    result.update({k: lm[0]["budget"][f"lm_{k}"] for k in ("batch_size", "learning_rate", "warmup_steps")})
    return result


# ---------------------------------------------------------------------------------------------------- run record


def record_session(out: Path, session: dict, budget_name: str, budget: dict, replace_last: bool = False) -> None:
    """Append this invocation (command, wall time, load, machine) to `<out>/run.json`, or update the entry it
    appended before (`replace_last`)."""
    import torch

    from common import machine

    path = out / "run.json"
    run = json.loads(path.read_text()) if path.exists() else {"sessions": []}
    info = machine()
    info.update(cpu_cores=os.cpu_count(), torch_threads_per_worker=session.get("threads") or info["cpu_threads"],
                workers=session.get("workers"))
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    entry = {k: v for k, v in session.items() if k != "planned"}
    entry["machine"] = info
    run.update(budget_name=budget_name, budget=budget)
    if "planned" in session:
        run["planned"] = session["planned"]  # every unit of the budget: the page says how many are finished
    if replace_last and run["sessions"]:
        run["sessions"][-1] = entry
    else:
        run["sessions"].append(entry)
    path.write_text(json.dumps(run, indent=1))


# ---------------------------------------------------------------------------------------------------- markdown


def render(out: Path, results: dict, docs: Path | None = None) -> str:
    """Markdown for every experiment present; written to `<out>/results.md` and to `docs` if given (figure links
    relative to each file)."""
    text = markdown(out, results, figures=".")
    (out / "results.md").write_text(text)
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        text = markdown(out, results, figures=os.path.relpath(out, docs.parent))
        docs.write_text(text)
    return text


def markdown(out: Path, results: dict, figures: str) -> str:
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {"sessions": []}
    units = load_units(out)
    lines = _header(run, units, results) + _summary_section(results)
    notes = out / "notes.md"  # hand-written reading of this run's numbers, kept with them
    if notes.exists():
        lines += ["## Reading these numbers", "", notes.read_text().strip(), ""]
    if "cifar10_accuracy" in results:
        lines += _accuracy_section(results["cifar10_accuracy"], figures)
        lines += _oversmoothing_section(results["oversmoothing"], figures)
        lines += _efficiency_section(results["data_efficiency"])
        lines += _corruption_section(results["corruptions"])
        lines += _spectral_section(results["spectral"])
    if "wikitext2" in results:
        lines += _wikitext_section(results["wikitext2"], figures)
    lines += _verdict_section(results, _planned_seeds(run.get("planned") or []))
    lines += RERUN
    return "\n".join(lines) + "\n"


def _planned_seeds(planned: list[str]) -> dict[str, int]:
    """How many paired seeds the plan (unit names in run.json) has for each claim of `_claims`."""
    def count(prefix: str) -> int:
        return sum(name.startswith(prefix) for name in planned)

    neutreno, lm = count("cifar-neutreno-100pct-"), count("lm-neutreno-")
    expected = {"CIFAR-10 accuracy, NeuTRENO − ViT": neutreno,
                "CIFAR-10 accuracy, ViT⁻ − ViT": count("cifar-vit--100pct-"),
                "CIFAR-10 accuracy, ViT⁺ − ViT": count("cifar-vit+-100pct-"),
                "last-layer token cosine similarity, NeuTRENO − ViT, trained": neutreno,
                "last-layer token cosine similarity, NeuTRENO − ViT, random init": neutreno,
                "accuracy with 50 % of the data, ViT⁻ − ViT": count("cifar-vit--50pct-"),
                "accuracy with 10 % of the data, ViT⁻ − ViT": count("cifar-vit--10pct-"),
                "accuracy change from clean to corruption severity 5, ViT⁻ − ViT": count("cifar-vit--100pct-")}
    for split in ("validation", "test"):
        for title in ("sliding window", "blocks"):
            expected[f"WikiText {split} perplexity ({title}), NeuTRENO − softmax"] = lm
    return {claim: n for claim, n in expected.items() if n}


RERUN = [
    "## Rerun", "",
    "```bash",
    "# every experiment and table at a toy budget (minutes; its numbers mean nothing)",
    "python benchmarks/reproduce.py --quick --workers 2",
    "# the models that learn (docs/results.md): about an hour of one CPU thread per model; a killed run resumes from",
    "# the units already in --out, and changing only --seeds / --main-claim-seeds keeps them",
    "python benchmarks/reproduce.py --budget cpu-long --workers 1 --threads 1 \\",
    "    --out benchmarks/results/reproduce-cpu-long --docs docs/results.md",
    "# the small tier (barely trained models, about 2 h on 2 CPU cores): benchmarks/results/reproduce/results.md",
    "python benchmarks/reproduce.py --budget cpu --workers 2 --out benchmarks/results/reproduce",
    "# the papers' scale (100 CIFAR epochs on 50,000 images, 10k LM steps of batch 96, whole-split evaluation): GPU",
    "python benchmarks/reproduce.py --budget full --bf16 --out runs/reproduce-full",
    "# the GPU tier (bf16, sdpa; 25 CIFAR epochs, the LMs to early stopping): with the benchmarks ~40 min on one H100",
    "python benchmarks/run_all.py --budget gpu --docs docs",
    "```", "",
    "Without `--data` the datasets come from the Hub. Any budget field is a flag (`--epochs 5 --train-samples 10000`). "
    "Sources: `benchmarks/reproduce.py` (training and evaluation through `hf_neutreno.recipes`, the same recipes the "
    "examples use), `benchmarks/reproduce_report.py` (statistics and this page). Per-model results: `units/*.json` in "
    "the output folder; one JSON per experiment beside them.", "",
]


def _header(run: dict, units: list[dict], results: dict) -> list[str]:
    sessions = run["sessions"]
    budget = run.get("budget") or (units[0]["budget"] if units else {})
    title = "# Reproductions on a GPU" if run.get("budget_name") == "gpu" else "# Small-scale reproductions"
    lines = [title, "",
             "Generated by `benchmarks/reproduce.py` from the JSON in its output folder; do not edit by hand "
             "(rerun with `--render` to regenerate). Speed and memory against the native `transformers` models are in "
             "`docs/benchmarks.md`.", ""]
    if sessions:
        m = sessions[-1]["machine"]
        hardware = m.get("gpu") or f"{m.get('cpu') or m['device']}, {m['cpu_cores']} cores"
        lines += [f"- **Machine**: {hardware}; {m.get('workers') or 1} worker process(es) × "
                  f"{m['torch_threads_per_worker']} torch thread(s); python {m['python']}, torch {m['torch']}, "
                  f"transformers {m['transformers']}."]
        if budget.get("bf16") or budget.get("attn_implementation"):
            attention = budget.get("attn_implementation") or "sdpa"
            lines.append(f"- **Precision**: training {'in bf16 autocast' if budget.get('bf16') else 'in fp32'}, "
                         f"evaluation in fp32; attention `{attention}` (flash kernels where the GPU and dtype allow).")
        for i, s in enumerate(sessions, 1):
            head = f"- **Command{f' ({i})' if len(sessions) > 1 else ''}**: `{s['command']}` — started {s['started']}"
            if "wall_seconds" not in s:  # killed with its working session: no end record (its units say what ran)
                lines.append(f"{head}, no end record (still running, or stopped with its working session), "
                             f"1-min load average at start {s['load_average_start'][0]:.1f}.")
                continue
            load = "/".join(f"{x:.1f}" for x in (s["load_average_start"][0], s["load_average_end"][0]))
            lines.append(f"{head}, {s.get('units_run', 0)} units, wall {s['wall_seconds'] / 60:.1f} min, 1-min load "
                         f"average at start/end {load}.")
    loads = [x for u in units for x in u.get("load_average", [])]
    if loads:
        cores = sessions[-1]["machine"]["cpu_cores"] if sessions else os.cpu_count()
        lines.append(f"- **Machine load**: 1-min load average {min(loads):.1f}-{max(loads):.1f} on "
                     f"{cores} cores at the starts and ends of the models' runs (a shared machine; every "
                     "time here is wall time under that load).")
    worker_minutes = sum(u["seconds"] for u in units) / 60
    total_wall = sum(s.get("wall_seconds", 0) for s in sessions) / 60
    planned = run.get("planned") or []
    if planned:
        done = {unit_name(u["unit"]) for u in units}
        missing = [name for name in planned if name not in done]
        lines.append(f"- **Progress**: {len(planned) - len(missing)} of {len(planned)} planned models finished"
                     + (f"; still to run: {', '.join(f'`{m}`' for m in missing)}." if missing else "."))
    ended = [s for s in sessions if "wall_seconds" in s]
    if ended:
        wall = (f"{total_wall / 60:.1f} h of wall time in {len(ended)} command(s) with an end record"
                + (f"; {len(sessions) - len(ended)} without one" if len(ended) < len(sessions) else ""))
    else:  # every command stopped with its session: the units' own times are the only record
        wall = f"no command has an end record, so no total wall time; {len(sessions)} command(s) so far"
    lines += [f"- **Compute**: {worker_minutes / 60:.1f} worker-hours over {len(units)} trained models ({wall}).",
              f"- **Budget** ({run.get('budget_name', '?')}): " + ", ".join(f"`{k}={v}`" for k, v in budget.items())
              + ".", ""]
    lines += ["Each model is trained from scratch for every seed in a fixed list; no seed is selected or dropped. "
              "For one seed every variant sees the same training images in the same order with the same augmentation "
              "draws, and starts from the same initial weights wherever its parameters have the same shapes. Values "
              "are mean ± sample std over seeds (per-seed values beside them); Δ is the paired difference "
              "variant − baseline per seed, and \"k/n better\" counts the seeds where the variant wins.", ""]
    if budget.get("train_samples") is not None or budget.get("epochs", 100) < 100:
        images = budget["train_samples"] or 50000
        tokens = budget["lm_steps"] * budget["lm_batch_size"] * 256
        lines += ["**What this budget can show.** These runs are smaller than the papers' "
                  f"({images:,} CIFAR-10 images × {budget['epochs']:g} epochs instead of 50,000 × 100-300 epochs; "
                  f"{tokens:,} LM training tokens instead of 500k steps × 24,576 tokens). Each claim is tested at this "
                  "scale only: an effect that needs converged or larger models can be absent here, and differences "
                  "smaller than the seed-to-seed spread (and than the test-set noise) are not evidence either way.",
                  ""]
    return lines


def _claims(results: dict) -> list[tuple]:
    """(claim, paper's effect, our paired stats or None, scale, unit, the paper's sign) for every claim tested."""
    claims = []
    if "cifar10_accuracy" in results:
        delta = results["cifar10_accuracy"]["vs_vit"]
        claims += [
            ("CIFAR-10 accuracy, NeuTRENO − ViT",
             "+0.84 pp (ImageNet DeiT-tiny); +0.86 pp (CIFAR-10, kernel attention)", delta.get("neutreno"), 100, "pp",
             +1),
            ("CIFAR-10 accuracy, ViT⁻ − ViT", "−0.16 pp (CIFAR-100; \"comparable\")", delta.get("vit-"), 100, "pp", -1),
            ("CIFAR-10 accuracy, ViT⁺ − ViT", "−2.44 pp (CIFAR-100)", delta.get("vit+"), 100, "pp", -1),
        ]
        for stage, title, figure in (("trained", "trained", "Fig. 1"), ("init", "random init", "Fig. 6")):
            delta = results["oversmoothing"][stage].get("last_layer_neutreno_vs_vit")
            claims.append((f"last-layer token cosine similarity, NeuTRENO − ViT, {title}",
                           f"lower ({figure}, ImageNet)", delta, 1, "", -1))
        efficiency = results["data_efficiency"]["vit- vs vit"]
        claims += [(f"accuracy with {pct} % of the data, ViT⁻ − ViT", paper, efficiency.get(pct), 100, "pp", +1)
                   for pct, paper in (("50", "+0.20 pp (CIFAR-100)"), ("10", "+1.52 pp (CIFAR-100)"))]
        claims.append(("accuracy change from clean to corruption severity 5, ViT⁻ − ViT",
                       "+1.06 pp (CIFAR-100: ViT⁻ loses 26.55 pp, ViT 27.61)",
                       results["corruptions"].get("change_clean_to_5 vit- vs vit"), 100, "pp", +1))
    if "wikitext2" in results:
        delta = results["wikitext2"]["neutreno vs softmax"]
        for split in ("validation", "test"):
            for protocol, title in (("sliding", "sliding window"), ("blocks", "blocks")):
                if protocol == "blocks" and not results["wikitext2"].get("curves"):
                    continue  # the small tier reported the sliding window only
                claims.append((f"WikiText {split} perplexity ({title}), NeuTRENO − softmax", "lower (WikiText-103)",
                               delta.get(split, {}).get(protocol), 1, "", -1))
    return claims


def _digits(claim: str, scale: float, unit: str) -> int:
    return 3 if scale == 1 and unit == "" and "cosine" in claim else (1 if scale == 1 else 2)


def _summary_section(results: dict) -> list[str]:
    """One row per claim: the paper's effect, ours (paired, mean ± std), and how many seeds share the paper's sign."""
    rows = []
    for claim, paper, stats, scale, unit, sign in _claims(results):
        if stats is None:
            continue
        agree = sum(d * sign > 0 for d in stats["per_seed"].values())
        digits = _digits(claim, scale, unit)
        rows.append([claim, paper, f"{_pm(stats, scale, digits, sign=True)} {unit}".strip(), f"{agree}/{stats['n']}"])
    if not rows:
        return []
    lines = ["## Summary: each claim against its paper", "",
             "Paired differences per seed, mean ± sample std; the last column counts the seeds whose difference has "
             "the paper's sign. The verdict of each claim, from the 95 % interval of the paired difference, is at "
             "the end of the page.", ""]
    lines += _table(["claim", "paper", "here", "seeds with the paper's sign"], rows) + [""]
    if "spectral" in results:
        spectral = results["spectral"]
        shares = [f"{title} {VIT_NAMES[v]} {_pm(spectral[stage][v]['smoothing'], 100, 1)} %"
                  for stage, title in (("init", "random-init"), ("trained", "trained")) for v in ("vit", "vit+", "vit-")
                  if v in spectral[stage]]
        lines += ["Smoothing-dominated share of cases (poster Table 1: random-init ViT 100 %, CIFAR-100 ViT-Ti "
                  "98.92 %, ViT-Ti⁺ 100 %, ViT-Ti⁻ 0 %): " + "; ".join(shares) + ". ViT⁺'s 100 % and ViT⁻'s 0 % hold "
                  "by construction (Λ > 0 pairs with A's eigenvalue 1, Λ < 0 never can); the informative rows are "
                  "the unconstrained ViT's.", ""]
    return lines


def _verdict_section(results: dict, expected_seeds: dict) -> list[str]:
    """One line per claim, as a reviewer would write it, decided by `verdict` (the 95 % t-interval of the paired
    difference); `expected_seeds` maps a claim to the number of seeds the plan has for it."""
    lines = ["## Verdicts", "",
             "Each claim's paired difference (variant − baseline, per seed), its 95 % t-interval over seeds, and the "
             "verdict that interval gives: **reproduced** when it lies on the paper's side of zero, **not reproduced "
             "(opposite effect)** when it lies on the other side, **inconclusive at this scale** when it contains "
             "zero. Every variant has the same settings; none was tuned per variant. The notes above say when this "
             "rule was fixed.", ""]
    words = {"reproduced": "reproduced", "opposite": "not reproduced (opposite effect)",
             "inconclusive": "inconclusive at this scale"}
    for claim, paper, stats, scale, unit, sign in _claims(results):
        planned = expected_seeds.get(claim)
        if stats is None or (planned and stats["n"] < planned):
            done = 0 if stats is None else stats["n"]
            lines.append(f"- **{claim}** (paper: {paper}): not yet decided, {done} of {planned or '?'} paired seeds "
                         "finished.")
            continue
        digits = _digits(claim, scale, unit)
        low, high = interval(stats)
        span = "" if math.isnan(low) else (f"; 95 % interval {low * scale:+.{digits}f} to {high * scale:+.{digits}f}"
                                           f"{' ' + unit if unit else ''}")
        agree = sum(d * sign > 0 for d in stats["per_seed"].values())
        lines.append(f"- **{claim}** (paper: {paper}): {words[verdict(stats, sign)]}. "
                     f"{_pm(stats, scale, digits, sign=True)}{' ' + unit if unit else ''} over {stats['n']} paired "
                     f"seeds{span}; the paper's sign in {agree}/{stats['n']}.")
    return lines + [""]


def vit_shape_text(shape: dict | None) -> str:
    """'12 layers, dim 64, 4 heads, MLP 256, 32 px with patch 4 (65 tokens)' from a unit's recorded shape."""
    shape = shape or {"hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3, "intermediate_size": 768,
                      "image_size": 32, "patch_size": 4}  # units written before shapes were recorded: ViT-tiny
    tokens = (shape["image_size"] // shape["patch_size"]) ** 2 + 1
    return (f"{shape['num_hidden_layers']} layers, dim {shape['hidden_size']}, {shape['num_attention_heads']} heads, "
            f"MLP {shape['intermediate_size']}, {shape['image_size']} px with patch {shape['patch_size']} "
            f"({tokens} tokens)")


def _accuracy_section(acc: dict, figures: str) -> list[str]:
    n_test = acc["test_images"] or 10000
    p = statistics.fmean(s["mean"] for s in acc["accuracy"].values())
    noise = 100 * math.sqrt(p * (1 - p) / n_test)
    lines = ["## CIFAR-10: ViT vs NeuTRENO vs ViT⁻ vs ViT⁺ at an equal budget", "",
             f"{vit_shape_text(acc.get('shape'))}. Every variant: {acc['train_images']:,} training images, "
             f"{acc['steps']:,} optimizer steps, the same recipe (the poster's CIFAR recipe: AdamW lr 1e-3, wd 0.05, "
             "5 % warm-up then cosine, label smoothing 0.1, drop path 0.1, random crop + flip). Test accuracy (%) on "
             f"{'all ' if n_test == 10000 else 'a fixed subset of '}{n_test:,} test images (binomial standard error of "
             f"one model's accuracy ≈ {noise:.1f} pp; chance is 10 %).", ""]
    if acc.get("figure"):
        lines += [f"![CIFAR-10 learning curves]({figures}/{acc['figure']})", "",
                  "Test accuracy after every epoch (thin: each seed; bold: their mean). The last point of each curve "
                  "is the accuracy in the table.", ""]
    # every variant's seeds: while a run is in progress some variants have more finished seeds than others
    seeds = sorted({seed for stats in acc["accuracy"].values() for seed in stats["per_seed"]}, key=int)
    rows = []
    for variant, stats in acc["accuracy"].items():
        delta = acc["vs_vit"].get(variant)
        rows.append([VIT_NAMES[variant], _pm(stats, 100), _seeds(stats, 100, seeds=seeds),
                     "—" if delta is None else f"{_pm(delta, 100, sign=True)} ({_wins(delta)})",
                     acc["paper"][variant]])
    lines += _table(["model", "accuracy", f"per seed ({' / '.join(seeds)})", "Δ vs ViT (pp)", "paper"], rows)
    return lines + [""]


def _oversmoothing_section(smoothing: dict, figures: str) -> list[str]:
    lines = ["## Over-smoothing per layer (NeuTRENO Fig. 1 / Fig. 6 analogue)", "",
             f"Average pairwise cosine similarity of the token representations (all 65 tokens) after each block, "
             f"and ‖HFC‖/‖LFC‖ (Dovonon et al.: → 0 means over-smoothed), averaged over the first "
             f"{smoothing['trained']['samples']} test images; layer 0 is the embedding output. Paper claim: NeuTRENO's "
             "cosine similarity is lower than the baseline's, most in the last layers (DeiT's last layers ≈ 0.9 on "
             "ImageNet), both trained (Fig. 1) and at random initialisation (Fig. 6).", ""]
    for stage, title in (("trained", "Trained"), ("init", "Random initialisation")):
        data = smoothing[stage]
        if data.get("figure"):
            lines += [f"![{title}]({figures}/{data['figure']})", ""]
        curves = data["cosine_similarity"]
        layers = next(iter(curves.values()))["layers"]
        shown = sorted({layers[0], layers[len(layers) // 4], layers[len(layers) // 2], *layers[-3:]})
        columns = [layers.index(layer) for layer in shown]
        rows = [[VIT_NAMES[v]] + [_pm({"mean": c['mean'][i], "std": c['std'][i]}, digits=3) for i in columns]
                for v, c in curves.items()]
        ratio = data["hfc_lfc_ratio"]
        for row, variant in zip(rows, curves):
            row.append(_pm({"mean": ratio[variant]['mean'][-1], "std": ratio[variant]['std'][-1]}, digits=3))
        lines += [f"{title}: token cosine similarity by layer, and ‖HFC‖/‖LFC‖ of the last layer (mean ± std over "
                  "seeds)", ""]
        lines += _table(["model"] + [f"layer {layer}" for layer in shown] + [f"‖HFC‖/‖LFC‖, layer {layers[-1]}"], rows)
        delta = data.get("last_layer_neutreno_vs_vit")
        if delta is not None:
            lines += ["", f"{title}, last layer: NeuTRENO − ViT cosine similarity = {_pm(delta, 1, 3, True)} (lower in "
                      f"{delta['wins']}/{delta['n']} seeds; per seed {_seeds(delta, 1, 3)})."]
        lines.append("")
    return lines


def _efficiency_section(eff: dict) -> list[str]:
    pcts = list(next(iter(eff["accuracy"].values())))
    lines = ["## Data efficiency: ViT vs ViT⁻ (poster Table 2 analogue)", "",
             "Test accuracy (%) when training on a seeded, nested fraction of the training subset for the same number "
             "of epochs (so fewer steps): " + ", ".join(f"{p} % = {eff['train_images'][p]} images / "
                                                         f"{eff['steps'][p]} steps" for p in pcts)
             + ". Paper (CIFAR-100, ViT-Ti): ViT⁻ − ViT = −0.16 pp with all the data, +0.20 pp at 50 %, +1.52 pp at "
             "10 %.", ""]
    rows = []
    for variant, by_pct in eff["accuracy"].items():
        rows.append([VIT_NAMES[variant]] + [f"{_pm(by_pct[p], 100)} ({_seeds(by_pct[p], 100, 1)})" for p in pcts])
        rows.append([f"paper {VIT_NAMES[variant]}"] + [eff["paper"][variant].get(int(p), "—") for p in pcts])
    deltas = eff["vit- vs vit"]
    rows.append(["Δ ViT⁻ − ViT (pp)"] + [_delta(deltas.get(p)) for p in pcts])
    return lines + _table(["model"] + [f"{p} %" for p in pcts], rows) + [""]


def _corruption_section(cor: dict) -> list[str]:
    if not cor["accuracy"]:
        return []
    severities = list(next(iter(cor["accuracy"].values())))
    lines = ["## Corruption robustness: ViT vs ViT⁻ (poster Table 3 analogue)", "",
             f"Mean test accuracy (%) over 8 corruptions (`hf_neutreno.corruptions`: CIFAR-10-C parameters) of the "
             f"first {cor['images']} test images, by severity (0 = clean, the same images), models trained on 100 %. "
             "Paper (CIFAR-100): ViT⁻ − ViT = −0.16 pp clean, then +0.03, +0.25, +0.44, +0.38, +0.90 pp at severities "
             "1-5.", ""]
    rows = []
    for variant, by_severity in cor["accuracy"].items():
        rows.append([VIT_NAMES[variant]] + [_pm(by_severity[s], 100) for s in severities])
        rows.append([f"paper {VIT_NAMES[variant]}"] + [f"{x:.2f}" for x in cor["paper"][variant]])
    deltas = cor["vit- vs vit"]
    rows.append(["Δ ViT⁻ − ViT (pp)"] + [_delta(deltas.get(s)) for s in severities])
    lines += _table(["model"] + [f"severity {s}" for s in severities], rows) + [""]
    change = cor.get("change_clean_to_5", {})
    if change:
        lines += ["Change from clean to severity 5 (pp; paper: ViT −27.61, ViT⁻ −26.55): "
                  + ", ".join(f"{VIT_NAMES[v]} {_pm(s, 100, sign=True)}" for v, s in change.items())
                  + (f"; ViT⁻ − ViT {_delta(cor['change_clean_to_5 vit- vs vit'])}"
                     if "change_clean_to_5 vit- vs vit" in cor else "") + ".", ""]
    names = list(next(iter(cor["per_corruption"].values()))["5"])
    rows = [[VIT_NAMES[v]] + [f"{100 * by[ '5'][n]:.1f}" for n in names] for v, by in cor["per_corruption"].items()]
    lines += ["Severity 5, per corruption (mean over seeds, %):", ""] + _table(["model"] + names, rows)
    return lines + [""]


def _spectral_section(spectral: dict) -> list[str]:
    lines = ["## Dominating eigenvalue (poster Table 1 analogue)", "",
             f"Share (%) of (layer, input, head) cases whose dominating eigenvalue of I + H_hᵀ ⊗ A_h pairs with A's "
             f"eigenvalue 1 (smoothing) or with A's smallest (sharpening), on the first {spectral['samples']} test "
             "images (`hf_neutreno.diagnostics.spectral_dominance`; the poster counts (layer, input) cases with one H "
             "per layer, here each head is a case). NeuTRENO's λ (V_0 − V) term lies outside the analysed map.", ""]
    rows = []
    for stage, title in (("init", "random init"), ("trained", "trained")):
        for variant, categories in spectral[stage].items():
            paper = spectral["paper_smoothing"].get(f"{stage} {variant}", "—")
            rows.append([f"{title} {VIT_NAMES[variant]}", _pm(categories["smoothing"], 100),
                         _seeds(categories["smoothing"], 100, 1), _pm(categories["sharpening"], 100),
                         _pm(categories["other"], 100), _pm(categories["tie"], 100), paper])
    lines += _table(["model", "smoothing", "smoothing per seed", "sharpening", "other", "tie", "paper (smoothing)"],
                    rows)
    return lines + [""]


def _wikitext_section(wt: dict, figures: str) -> list[str]:
    slide, block = wt["scored_tokens"]["validation"]["sliding"], wt["scored_tokens"]["validation"]["blocks"]
    shape = wt.get("shape") or {"num_hidden_layers": 16, "hidden_size": 128, "num_attention_heads": 8,
                                "intermediate_size": 2048}
    ffn = shape["intermediate_size"]
    lines = ["## WikiText-2 language model: softmax vs NeuTRENO λ 0.4", "",
             f"The paper's `wikitext103-small` design ({shape['num_hidden_layers']} layers, dim "
             f"{shape['hidden_size']}, {shape['num_attention_heads']} heads, FFN {ffn}"
             f"{'' if ffn == 2048 else ' instead of 2048'}, context {wt['context']}, "
             f"{'pre-LN instead of post-LN' if shape.get('norm_position') == 'pre' else 'post-LN'}, sinusoidal "
             "positions, dropout 0.1) with a tied adaptive softmax whose cutoffs "
             "[20000, 40000, "
             "200000] are scaled to WikiText-2's vocabulary: [2500, 5000, 25000] over "
             f"{wt['vocab_size']} tokens ({wt['parameters'] / 1e6:.1f}M parameters). Trained {wt['steps']} steps "
             f"of {wt['batch_size']} × {wt['context']} tokens ({wt['train_tokens']:,} tokens, "
             f"{wt['train_tokens'] / 2088628:.2f} epochs of WikiText-2) with the paper's schedule shape (Adam, "
             f"{wt['warmup_steps']} warm-up steps then cosine to 0, clip 0.25) at peak learning rate "
             f"{wt['learning_rate']:g} (paper: 2.5e-4 over 500k steps; the budget's comment in reproduce.py says "
             "how a shorter run's value was chosen). Perplexity with the paper's "
             f"sliding window (first window scores all its positions, then one token per window) over the first "
             f"{slide + 1} tokens of each split ({slide} scored, of {wt['split_tokens']['validation']:,} validation "
             f"tokens), and with non-overlapping {wt['context']}-token blocks over the first {block + 1} tokens. Paper "
             "(WikiText-103, full training): NeuTRENO has lower validation and test perplexity.", ""]
    rows = []
    for variant, splits in wt["perplexity"].items():
        row = [LM_NAMES[variant]]
        for split in ("validation", "test"):
            for protocol in ("sliding", "blocks"):
                stats = splits[split][protocol]
                row.append(f"{_pm(stats, 1, 1)} ({_seeds(stats, 1, 1)})")
        rows.append(row)
    delta = ["Δ NeuTRENO − softmax"]
    for split in ("validation", "test"):
        for protocol in ("sliding", "blocks"):
            d = wt["neutreno vs softmax"].get(split, {}).get(protocol)
            delta.append("—" if d is None else f"{_pm(d, 1, 1, True)} ({d['wins']}/{d['n']} lower)")
    rows.append(delta)
    unigram = wt.get("unigram_perplexity")
    if unigram:
        rows.append(["unigram of the training split (no context)"] + [
            f"{unigram[split][protocol]:.1f}" for split in ("validation", "test") for protocol in ("sliding", "blocks")
        ])
    header = ["model", "validation, sliding", "validation, blocks", "test, sliding", "test, blocks"]
    lines += _table(header, rows) + [""]
    if unigram:
        lines += ["The last row is what the training split's word frequencies alone (add-one-smoothed unigram) score "
                  "on the same tokens: a model near it has learned the frequencies and little use of context.", ""]
        softmax = wt["perplexity"].get("softmax", {}).get("validation", {}).get("blocks")
        if softmax:
            level = unigram["validation"]["blocks"]
            lines += [f"Validation perplexity (blocks) of the softmax model: {_pm(softmax, 1, 1)}, "
                      f"{softmax['mean'] / level:.2f} × the unigram level {level:.1f} (the learning target of this "
                      "tier: at most 0.5 ×).", ""]
    if wt.get("figure"):
        lines += [f"![WikiText-2 learning curves]({figures}/{wt['figure']})", "",
                  f"Validation perplexity during training, on non-overlapping blocks of the first "
                  f"{wt['curve_tokens'] + 1:,} validation tokens (thin: each seed; bold: their mean).", ""]
    if wt.get("early_stopping"):
        runs = "; ".join(f"{LM_NAMES[v]}: best at steps {' / '.join(map(str, e['best_step'].values()))} of "
                         f"{' / '.join(map(str, e['steps'].values()))} trained"
                         for v, e in wt["early_stopping"].items())
        lines += ["Early stopping on the validation curve: each model stopped once the curve had gone the budget's "
                  f"`lm_patience` points without a new best, and the tables score its best point's weights ({runs}; "
                  f"per seed). The step count above is the first unit's.", ""]
    losses = ", ".join(f"{LM_NAMES[v]} {_pm(s, 1, 3)}" for v, s in wt["train_loss"].items())
    lines += [f"Mean training loss over the run (nats/token): {losses}.", ""]
    return lines


__all__ = ["aggregate", "mean_std", "paired", "record_session", "render", "summary"]
