"""The results page's figures (PNG, with matplotlib when it is installed): learning curves, and over-smoothing per
layer (NeuTRENO Fig. 1 / Fig. 6)."""

import statistics
from pathlib import Path

from hf_neutreno.diagnostics import OversmoothingReport

METRICS = ("cosine_similarity", "hfc_lfc_ratio")
# Each learning-curve figure's title and y axis, by its file's name.
TITLES = {
    "cifar10_curves": ("CIFAR-10 test accuracy during training", "test accuracy"),
    "lambda_sweep_curves": ("NeuTRENO's λ sweep: accuracy on held-out training images", "validation accuracy"),
    "adaptation_curves": ("Adapting trained ViTs: CIFAR-10 test accuracy", "test accuracy"),
    "kernel_curves": ("Linear attention: CIFAR-10 test accuracy during training", "test accuracy"),
    "segmentation_curves": ("Segmentation during training", "mIoU"),
    "wikitext2_curves": ("WikiText-2 validation perplexity during training", "validation perplexity (blocks)"),
}


def curves(models: dict[str, dict[int, dict]]) -> dict:
    """{model: {"x": [...], "per_seed": {seed: [...]}, "mean": [...], "axes": (x, y)}} over the units (by model and
    seed) that recorded a learning curve with the first one's x values (accuracy per epoch, perplexity per step)."""
    table = {}
    for key, by_seed in models.items():
        for seed, unit in by_seed.items():
            points = unit.get("curve")
            if not points:
                continue
            x = "epoch" if "epoch" in points[0] else "step"
            y = next(k for k in ("accuracy", "perplexity", "mean_iou") if k in points[0])
            entry = table.setdefault(key, {"x": [p[x] for p in points], "per_seed": {}, "axes": (x, y)})
            if entry["x"] == [p[x] for p in points]:
                entry["per_seed"][str(seed)] = [p[y] for p in points]
    for entry in table.values():
        entry["mean"] = [statistics.fmean(column) for column in zip(*entry["per_seed"].values())]
    return table


def plot_curves(table: dict, names: dict, path: Path) -> str | None:
    """One curve per model (the mean over seeds, bold) with each seed's curve thin beside it; the file's name."""
    try:
        from matplotlib.figure import Figure
    except ImportError:  # matplotlib is optional: the tables carry the final values
        return None
    if not table:
        return None
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    axes = figure.add_subplot()
    for index, (key, entry) in enumerate(table.items()):
        for values in entry["per_seed"].values():
            axes.plot(entry["x"], values, color=f"C{index}", alpha=0.3, linewidth=0.8)
        axes.plot(
            entry["x"],
            entry["mean"],
            color=f"C{index}",
            linewidth=2,
            marker="o",
            markersize=3,
            label=f"{names[key]} (mean of {len(entry['per_seed'])})",
        )
    x, y = next(iter(table.values()))["axes"]
    if y == "perplexity":
        axes.set_yscale("log")
    title, ylabel = TITLES.get(path.stem, ("", y))
    axes.set(xlabel="optimizer step" if x == "step" else x, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=110)
    return path.name


def plot_oversmoothing(models: dict[str, dict[int, dict]], names: dict, path: Path, stage: str) -> str | None:
    """NeuTRENO Fig. 1 (trained) / Fig. 6 (random init): each model's seed-mean curves, one panel a metric; `models`:
    the units by model and seed. Each label names the model's own number of seeds."""
    reports, labels = [], []
    for key, by_seed in models.items():
        recorded = [u[stage]["oversmoothing"] for u in by_seed.values() if stage in u]
        if not recorded:
            continue
        first = recorded[0]
        reports.append(
            OversmoothingReport(
                values={m: [statistics.fmean(c) for c in zip(*(r["values"][m] for r in recorded))] for m in METRICS},
                layers={m: first["layers"][m] for m in METRICS},
                num_samples=first["num_samples"],
                model_name=names[key],
                counts={m: [first["num_samples"]] * len(first["layers"][m]) for m in METRICS},
            )
        )
        labels.append(f"{names[key]} (mean of {len(recorded)})")
    if not reports:
        return None
    title = "trained on CIFAR-10" if stage == "trained" else "random initialisation"
    try:
        reports[0].plot(
            path, others=reports[1:], labels=labels, title=f"ViT-tiny/4, {title} (seed means; layer 0 = embeddings)"
        )
    except ImportError:  # matplotlib is optional: the tables carry the same numbers
        return None
    return path.name
