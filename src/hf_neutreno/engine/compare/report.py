"""What `hf-neutreno compare` shows of a results.json: the side-by-side table (`format_table`) and the figure
(`plot`: the training loss of every seed, and the token cosine similarity per layer)."""

import math
import textwrap
from pathlib import Path

from .verdict import (
    HIGHER_IS_BETTER,
    TIE_TOLERANCE,
    coefficient_lines,
    format_number,
    paired_reading,
    verdict,
)


def plot(path: Path, results: dict, title: str) -> None:
    """Two panels: the training loss of every seed (thin lines), and the token cosine similarity per layer (mean
    over seeds, band from the lowest to the highest seed)."""
    from matplotlib.figure import Figure  # no pyplot: nothing global changes

    figure = Figure(figsize=(10, 3.8), layout="constrained")
    loss_axes, cosine_axes = figure.subplots(1, 2)
    layers = results["cosine_layers"]
    for index, (variant, entry) in enumerate(results["variants"].items()):
        color = f"C{index}"
        for number, run in enumerate(entry["per_seed"]):
            curve = run["learning_curve"]
            loss_axes.plot(
                [p["step"] for p in curve],
                [math.nan if p["loss"] is None else p["loss"] for p in curve],  # a diverged run's: a gap
                color=color,
                linewidth=0.8,
                alpha=0.8,
                label=variant if number == 0 else None,
            )
        cosine = {
            key: [math.nan if v is None else v for v in values] for key, values in entry["cosine_similarity"].items()
        }
        cosine_axes.plot(layers, cosine["mean"], color=color, marker="o", markersize=3, label=variant)
        cosine_axes.fill_between(layers, cosine["min"], cosine["max"], color=color, alpha=0.2, linewidth=0)
        if "cosine_similarity_before" in entry:  # before training, dashed
            cosine_axes.plot(
                layers, entry["cosine_similarity_before"]["mean"], color=color, linestyle="--", linewidth=0.8
            )
    if results["decoder_layers"]:
        first = results["decoder_layers"][0]
        cosine_axes.axvline(first - 0.5, color="grey", linestyle=":", linewidth=1)
        cosine_axes.text(
            first - 0.4, 0.02, "decoder", transform=cosine_axes.get_xaxis_transform(), color="grey", fontsize="small"
        )
    loss_axes.set(title="training loss, one line per seed", xlabel="step")
    cosine_axes.set(
        title="token cosine similarity (mean; band: seed range; dashed: before training)",
        xlabel="layer (0 = embeddings)",
    )
    for axes in (loss_axes, cosine_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(title)
    figure.savefig(path, dpi=110)


def _spread(stats: dict, metric: str, signed: bool = False) -> str:
    if stats["mean"] is None:  # every seed diverged
        return "diverged"
    text = format_number(stats["mean"], metric, signed)
    return text if stats["std"] is None else f"{text} ± {format_number(stats['std'], metric)}"


def format_table(results: dict) -> str:
    """The side-by-side table of a results.json, one row per variant, and the lines that explain it."""
    metric = results["metric"]
    title = metric.replace("_", " ").replace("mean iou", "mean IoU")
    header = ["variant", title, "Δ (w/t/l)", "last-layer cosine", "Δ (w/t/l)"]
    rows = []
    for name, entry in results["variants"].items():
        cells = [name]
        for key in (metric, "last_layer_cosine"):
            cells.append(_spread(entry[key], key if key == metric else "cosine"))
            difference = _difference(results, name, key)
            cells.append("" if difference is None else f"{_spread(difference, key, signed=True)} ({_wins(difference)})")
        rows.append(cells)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) if i < 1 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    seeds = results["seeds"]
    better = "lower" if not HIGHER_IS_BETTER[metric] else "higher"
    where = "the encoder's last block" if results["decoder_layers"] else "the last block"
    notes = [
        "Variants: "
        + "; ".join(f"{name}: {entry['description']}" for name, entry in results["variants"].items())
        + ".",
        f"Mean ± sample std over {len(seeds)} {'seed' if len(seeds) == 1 else 'seeds'} "
        f"({', '.join(map(str, seeds))}); Δ: the paired difference from "
        f"{results['baseline']} (same seed), mean ± std; w/t/l: seeds where the variant is better ({better} "
        f"{title}, lower cosine) by at least {_tolerance(metric)} ({_tolerance('last_layer_cosine')} for the cosine), "
        "tied within it, or worse.",
        f"{title.capitalize() if metric != 'mean_iou' else title} on {_scored(results)}; last-layer cosine: mean "
        f"cosine similarity of all token pairs after {where}, on the first {results['probe_samples']} "
        f"{_eval_unit(results)}.",
        "Train time per seed: "
        + ", ".join(f"{name} {entry['train_seconds']:.1f} s" for name, entry in results["variants"].items())
        + ".",
    ]
    if results.get("model", {}).get("pretrained"):
        notes.append(
            "Every variant fine-tunes the same pretrained weights: a fixed coefficient's Δ includes switching the "
            "remedy on (which changes what those weights compute); a learnable one starts at its coefficient "
            "(0: the pretrained function)."
        )
    notes += coefficient_lines(results)
    reading = verdict(results)  # from the per-seed numbers: the same reading for a results.json of any version
    lines += [line for note in notes for line in textwrap.wrap(note, width=118, break_on_hyphens=False)]
    if reading:
        lines += ["", *textwrap.wrap("Verdict: " + reading["text"], width=118, break_on_hyphens=False)]
    return "\n".join(lines)


def _difference(results: dict, name: str, key: str) -> dict | None:
    """The paired difference of variant `name` from the baseline in `key`, recomputed from the per-seed numbers."""
    base = results["variants"].get(results["baseline"])
    entry = results["variants"][name]
    if name == results["baseline"] or base is None or not set(entry[key]["per_seed"]) & set(base[key]["per_seed"]):
        return None
    return paired_reading(entry[key]["per_seed"], base[key]["per_seed"], key)


def _wins(difference: dict) -> str:
    """Seeds better / within the tolerance / worse (results written before ties were counted: better / all)."""
    if "ties" not in difference:
        return f"{difference['wins']}/{difference['n']}"
    return f"{difference['wins']}/{difference['ties']}/{difference['losses']}"


def _tolerance(metric: str) -> str:
    tolerance = TIE_TOLERANCE[metric]
    return f"{tolerance:.1%} of its value" if metric == "perplexity" else f"{tolerance:g}"


def _eval_unit(results: dict) -> str:
    if results["task"] in ("causal-lm", "masked-lm"):
        return f"blocks of {results['data']['block_size']} {results['eval_split']} tokens"
    if results["task"] == "text-classification":
        return f"{results['eval_split']} examples"
    return f"{results['eval_split']} images"


def _scored(results: dict) -> str:
    data, split = results["data"], results["eval_split"]
    if results["task"] == "causal-lm":
        return f"{data['eval_tokens']} {split} tokens"
    if results["task"] == "masked-lm":
        return f"the masked tokens of {data['eval_blocks']} {split} blocks"
    if results["task"] == "text-classification":
        return f"the {data['eval_examples']} {split} examples"
    return f"the {data['eval_images']} {split} images"


__all__ = ["HIGHER_IS_BETTER", "format_table", "plot"]
