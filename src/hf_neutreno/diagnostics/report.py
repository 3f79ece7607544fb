"""`OversmoothingReport`: per-layer over-smoothing values, JSON round trip, comparison, and the papers' figures.

Plots need matplotlib (`pip install 'hf-neutreno[plots]'`); it is imported only when a plot is drawn.
"""

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1

METRIC_TITLES = {
    "cosine_similarity": "token cosine similarity",
    "hfc_lfc_ratio": "‖HFC‖ / ‖LFC‖",
    "rank_one_distance": "‖X − 1x̄ᵀ‖ / ‖X‖",
    "effective_rank": "effective rank",
    "attention_map_similarity": "attention-map cosine (ℓ−1, ℓ)",
    "functional_j": "J(u)",
    "gradient_alignment": "cos(∇J sym, ∇J asym)",
}


def _figure(**kwargs):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "Plotting needs matplotlib, which is not installed: `pip install 'hf-neutreno[plots]'` (or matplotlib)."
        ) from None
    return Figure(**kwargs)


@dataclass
class OversmoothingReport:
    """Over-smoothing per layer, as returned by `measure_oversmoothing`.

    Attributes:
        values: metric name -> one value per measured layer (the mean over samples).
        layers: metric name -> the layer index of each value. Hidden-state metrics: 0 is the embedding output, ℓ the
            output of block ℓ. Attention metrics: block ℓ at ℓ (the map similarity of blocks ℓ−1 and ℓ at ℓ).
        counts: metric name -> how many samples each value averages (samples where a metric is undefined, e.g.
            sequences of one token for the cosine, are left out).
        num_samples: samples seen.
        model_name: a label for tables and plots.
        metadata: anything else worth keeping (dataset, split, model class, ...).
    """

    values: dict[str, list[float]]
    layers: dict[str, list[int]]
    counts: dict[str, list[int]]
    num_samples: int
    model_name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        return list(self.values)

    def _check(self, metric: str) -> None:
        if metric not in self.values:
            raise ValueError(f"Metric {metric!r} is not in this report; it has {self.metrics}.")

    def _chosen(self, metrics: Sequence[str] | None) -> list[str]:
        """`metrics` (checked), or all of the report's."""
        for metric in metrics if metrics is not None else ():
            self._check(metric)
        return list(metrics) if metrics is not None else self.metrics

    def per_layer(self, metric: str) -> list[float]:
        """One value per measured layer (see `layer_indices` for the indices)."""
        self._check(metric)
        return list(self.values[metric])

    def layer_indices(self, metric: str) -> list[int]:
        self._check(metric)
        return list(self.layers[metric])

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, **asdict(self)}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The report as JSON text (NaN for undefined values); also written to `path` if given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OversmoothingReport":
        version = data.get("format_version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(f"Unsupported report `format_version` {version}; this version reads {FORMAT_VERSION}.")
        try:
            return cls(
                values={k: [float(v) for v in vs] for k, vs in data["values"].items()},
                layers={k: [int(v) for v in vs] for k, vs in data["layers"].items()},
                counts={k: [int(v) for v in vs] for k, vs in data["counts"].items()},
                num_samples=int(data["num_samples"]),
                model_name=data.get("model_name"),
                metadata=dict(data.get("metadata") or {}),
            )
        except KeyError as error:
            raise ValueError(f"Not an over-smoothing report: the field {error} is missing.") from None

    @classmethod
    def from_values(cls, values: Mapping[str, Sequence[float]], model_name: str | None = None) -> "OversmoothingReport":
        """A report from bare per-layer values, ``{metric: [value per hidden state]}`` (layer i at index i, 0 = the
        embeddings). How many samples the values average is not known: `counts` stays empty, `num_samples` 0."""
        checked = {}
        for metric, per_layer in values.items():
            try:
                checked[str(metric)] = [float(value) for value in per_layer]
            except (TypeError, ValueError):  # not a list of numbers
                checked[str(metric)] = []
            if not checked[str(metric)] or isinstance(per_layer, str):
                raise ValueError(
                    f"`values[{metric!r}]` has no per-layer values: not a non-empty list of numbers "
                    f"({per_layer!r:.60})."
                )
        values = checked
        layers = {metric: list(range(len(per_layer))) for metric, per_layer in values.items()}
        return cls(values=values, layers=layers, counts={}, num_samples=0, model_name=model_name)

    @classmethod
    def from_json(cls, path_or_text: str | os.PathLike) -> "OversmoothingReport":
        """Read a report from a JSON file, or from JSON text (a string starting with `{`)."""
        if isinstance(path_or_text, str) and path_or_text.lstrip().startswith("{"):
            text = path_or_text
        else:
            text = Path(path_or_text).read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text))

    def to_logs(self, prefix: str = "oversmoothing") -> dict[str, float]:
        """Flat `{prefix}/{metric}/layer_{ℓ}: value` entries, as `OversmoothingCallback` logs them."""
        return {
            f"{prefix}/{metric}/layer_{layer}": value
            for metric in self.values
            for layer, value in zip(self.layers[metric], self.values[metric])
        }

    def compare(self, other: "OversmoothingReport") -> dict[str, dict[str, list]]:
        """Per-layer differences `self − other`, for the metrics and layers both reports have.

        Returns `{metric: {"layers": [...], "self": [...], "other": [...], "difference": [...]}}`.
        """
        result = {}
        for metric in self.values:
            if metric not in other.values:
                continue
            theirs = dict(zip(other.layers[metric], other.values[metric]))
            pairs = zip(self.layers[metric], self.values[metric])
            shared = [(layer, value) for layer, value in pairs if layer in theirs]
            result[metric] = {
                "layers": [layer for layer, _ in shared],
                "self": [value for _, value in shared],
                "other": [theirs[layer] for layer, _ in shared],
                "difference": [value - theirs[layer] for layer, value in shared],
            }
        return result

    def table(self, others: Sequence["OversmoothingReport"] = (), labels: Sequence[str] | None = None) -> str:
        """A plain-text table: one block per metric, one row per layer, one column per report."""
        reports = [self, *others]
        labels = _labels(reports, labels)
        first = max(len(metric) for metric in self.values) if self.values else 10
        widths = [max(10, len(label)) for label in labels]
        lines = []
        for metric in self.values:
            columns = [dict(zip(r.layers.get(metric, []), r.values.get(metric, []))) for r in reports]
            lines.append(f"{metric:<{first}}" + "".join(f"  {label:>{w}}" for label, w in zip(labels, widths)))
            for layer in sorted(set().union(*columns)):
                cells = [_fmt(column.get(layer)) for column in columns]
                row = "".join(f"  {cell:>{w}}" for cell, w in zip(cells, widths))
                lines.append(f"{'layer ' + str(layer):<{first}}" + row)
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"

    def markdown_table(self, metrics: Sequence[str] | None = None) -> str:
        """A Markdown table, as a model card shows it: one row per layer, one column per metric (default: all);
        `n/a` where a value is undefined (NaN), empty where a metric has no value for a layer."""
        metrics = self._chosen(metrics)
        columns = [dict(zip(self.layers[metric], self.values[metric])) for metric in metrics]

        def cell(column: dict[int, float], layer: int) -> str:
            value = column.get(layer)
            return "" if value is None else "n/a" if math.isnan(value) else f"{value:.4f}"

        lines = ["| hidden state | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        for layer in sorted(set().union(*columns)):
            name = "0 (embeddings)" if layer == 0 else str(layer)
            lines.append(f"| {name} | " + " | ".join(cell(column, layer) for column in columns) + " |")
        return "\n".join(lines)

    def plot(
        self,
        path: str | os.PathLike,
        others: "OversmoothingReport | Sequence[OversmoothingReport]" = (),
        labels: Sequence[str] | None = None,
        metrics: Sequence[str] | None = None,
        title: str | None = None,
    ) -> Path:
        """Write a PNG with one panel per metric and one per-layer curve per report (NeuTRENO Fig. 1 / Fig. 6).

        `others` are further reports (e.g. the baseline) drawn on the same axes; `labels` name the curves (default:
        each report's `model_name`).
        """
        reports = [self, *([others] if isinstance(others, OversmoothingReport) else others)]
        labels = _labels(reports, labels)
        metrics = self._chosen(metrics)
        columns = min(len(metrics), 3)
        rows = math.ceil(len(metrics) / columns)
        figure = _figure(figsize=(4.2 * columns, 3.3 * rows), layout="constrained")
        # One colour per report in every panel, and a legend of every report: a panel's colour cycle would otherwise
        # shift past a report that lacks its metric, and the first panel's legend would name the wrong curves.
        styles = [dict(color=f"C{index % 10}", marker="o", markersize=3) for index in range(len(reports))]
        for position, metric in enumerate(metrics, start=1):
            axes = figure.add_subplot(rows, columns, position)
            for report, label, style in zip(reports, labels, styles):
                if metric in report.values:
                    axes.plot(report.layers[metric], report.values[metric], label=label, **style)
            axes.set_title(METRIC_TITLES.get(metric, metric))
            axes.set_xlabel("layer")
            axes.grid(alpha=0.3)
            if position == 1:
                from matplotlib.lines import Line2D

                axes.legend([Line2D([], [], **style) for style in styles], labels, fontsize="small")
        if title:
            figure.suptitle(title)
        figure.savefig(path, dpi=110)
        return Path(path)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _labels(reports: Sequence[OversmoothingReport], labels: Sequence[str] | None) -> list[str]:
    if labels is None:
        return [r.model_name or f"model {i}" for i, r in enumerate(reports)]
    if len(labels) != len(reports):
        raise ValueError(f"`labels` has {len(labels)} names for {len(reports)} reports.")
    return list(labels)


def plot_attention_maps(maps, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write a PNG grid of attention maps (NeuTRENO Fig. 4): one row per layer, one column per head and model.

    `maps` is what `attention_maps` returns (`{layer: (heads, tokens, tokens)}`), or `{label: that}` to put several
    models side by side (e.g. `{"DeiT": base_maps, "NeuTRENO DeiT": neutreno_maps}`).
    """
    first = next(iter(maps.values()), None)
    if first is None:
        raise ValueError("`maps` is empty.")
    models = {"": maps} if hasattr(first, "shape") else dict(maps)
    layers = sorted(next(iter(models.values())))
    heads = {label: next(iter(m.values())).shape[0] for label, m in models.items()}
    columns = sum(heads.values())
    figure = _figure(figsize=(1.9 * columns, 1.9 * len(layers) + 0.4), layout="constrained")
    grid = figure.subplots(len(layers), columns, squeeze=False)
    for row, layer in enumerate(layers):
        column = 0
        for label, model_maps in models.items():
            if layer not in model_maps:
                raise ValueError(f"Model {label!r} has no map for layer {layer}; all models need the same layers.")
            for head in range(heads[label]):
                axes = grid[row][column]
                axes.imshow(model_maps[layer][head].float().numpy(), cmap="viridis", interpolation="nearest")
                axes.set_xticks([])
                axes.set_yticks([])
                name = f"{label} " if label else ""
                axes.set_title(f"{name}L{layer} h{head}", fontsize="small")
                column += 1
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=110)
    return Path(path)
