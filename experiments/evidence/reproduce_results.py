"""Typed results of the reproductions: a finished unit (`UnitResult`, parsed from its JSON as written since the first
run) and a `Measure`, one number read from a unit, with how the page shows it.

A measure is written into the experiments' JSON under its `key` (`accuracy`, `cosine:trained:3`,
`ppl:test:blocks`, ...), the committed files' keys; code builds and reads `Measure` objects, and parses a key only
where it comes back from that JSON.
"""

import dataclasses
import json
import statistics
from pathlib import Path

from .reproduce_plans import Unit

# How each kind of measure is shown: scale, unit, digits, whether higher is better, a win's word.
FORMATS = {
    "accuracy": (100, "pp", 2, True, "better"),
    "corruption": (100, "pp", 2, True, "better"),
    "corruption_change": (100, "pp", 2, True, "better"),
    "pixel_accuracy": (100, "pp", 2, True, "better"),
    "mean_iou": (100, "points", 2, True, "better"),
    "mean_iou_ms": (100, "points", 2, True, "better"),
    "cosine": (1, "", 3, False, "lower"),
    "hfc": (1, "", 3, True, "higher"),
    "ppl": (1, "", 1, False, "lower"),
    "spectral": (100, "%", 2, True, "higher"),
}
HEADINGS = {
    "accuracy": "accuracy (%)",
    "mean_iou": "mIoU, single-scale",
    "mean_iou_ms": "mIoU, multi-scale",
    "pixel_accuracy": "pixel accuracy (%)",
    "corruption_change": "change from clean to severity 5 (pp)",
}
SMOOTHING_METRICS = {"cosine": "cosine_similarity", "hfc": "hfc_lfc_ratio"}


@dataclasses.dataclass(frozen=True)
class Measure:
    """One number of a unit. `kind` is a key of `FORMATS`; `stage` (`init` / `trained`) and `layer` (None: the last)
    for over-smoothing (`cosine`, `hfc`) and `stage` with `category` for the dominating eigenvalue (`spectral`);
    `split` and `protocol` for perplexity (`ppl`); `severity` (0: clean) and `corruption` (None: the mean over
    the corruptions) for `corruption`; `corruption_change` is the mean at severity 5 minus clean."""

    kind: str
    stage: str | None = None
    layer: int | None = None
    category: str | None = None
    split: str | None = None
    protocol: str | None = None
    severity: int | None = None
    corruption: str | None = None

    def __post_init__(self):
        if self.kind not in FORMATS:
            raise ValueError(f"Measure kind {self.kind!r}: choose from {list(FORMATS)}")

    @property
    def key(self) -> str:
        """The measure's name in the experiments' JSON."""
        parts = (self.stage, self.layer, self.category, self.split, self.protocol, self.severity, self.corruption)
        return ":".join([self.kind, *(str(p) for p in parts if p is not None)])

    @classmethod
    def parse(cls, key: str) -> "Measure":
        """The measure a JSON key names (the inverse of `key`)."""
        kind, *args = key.split(":")
        if kind in SMOOTHING_METRICS:
            return cls(kind, stage=args[0], layer=int(args[1]) if args[1:] else None)
        if kind == "spectral":
            return cls(kind, stage=args[0], category=args[1])
        if kind == "ppl":
            return cls(kind, split=args[0], protocol=args[1])
        if kind == "corruption":
            return cls(kind, severity=int(args[0]), corruption=args[1] if args[1:] else None)
        return cls(kind)

    @property
    def format(self) -> tuple:
        return FORMATS[self.kind]

    @property
    def heading(self) -> str:
        """The measure's column heading on the page."""
        if self.kind == "ppl":
            return f"{self.split}, {self.protocol}"
        if self.kind in SMOOTHING_METRICS:
            layer = "last layer" if self.layer is None else f"layer {self.layer}"
            if self.kind == "hfc":
                return f"‖HFC‖/‖LFC‖, {layer}"
            return "last-layer cosine" if self.layer is None else layer
        if self.kind == "corruption":
            return f"severity {self.severity}" if self.corruption is None else self.corruption
        return HEADINGS.get(self.kind, self.key)

    def read(self, record: dict) -> float | None:
        """The measure of one unit's JSON; None where the unit does not record it."""
        try:
            if self.kind in SMOOTHING_METRICS:
                report, metric = record[self.stage]["oversmoothing"], SMOOTHING_METRICS[self.kind]
                layer = -1 if self.layer is None else report["layers"][metric].index(self.layer)
                return report["values"][metric][layer]
            if self.kind == "ppl":
                return record[self.split][self.protocol]["perplexity"]
            if self.kind == "spectral":
                return record[self.stage]["spectral"][self.category]
            if self.kind == "corruption":
                by_name = record["corruptions"][str(self.severity)]
                return by_name[self.corruption] if self.corruption else statistics.fmean(by_name.values())
            if self.kind == "corruption_change":  # robustness proper: a difference in clean accuracy does not move it
                corrupted, clean = (statistics.fmean(record["corruptions"][s].values()) for s in ("5", "0"))
                return corrupted - clean
            return record[self.kind]
        except (KeyError, ValueError):  # not recorded, or a model of another depth has no such layer
            return None


ACCURACY = Measure("accuracy")


@dataclasses.dataclass(frozen=True)
class UnitResult:
    """A finished unit: its typed `unit`, the budget and compute it recorded, and its whole JSON `record` (the
    fields its plan's training wrote), from which measures are read."""

    unit: Unit
    budget: dict
    seconds: float
    load_average: tuple
    record: dict

    @classmethod
    def from_json(cls, record: dict) -> "UnitResult":
        unit = Unit.from_json(record["unit"])
        load = tuple(record.get("load_average", ()))
        return cls(unit, record["budget"], record["seconds"], load, record)

    @property
    def seed(self) -> int:
        return self.unit.seed

    def get(self, field: str, default=None):
        return self.record.get(field, default)

    def __getitem__(self, field: str):
        return self.record[field]

    def __contains__(self, field: str) -> bool:
        return field in self.record

    def measure(self, measure: Measure) -> float | None:
        return measure.read(self.record)


def load_units(out: Path) -> list[UnitResult]:
    """Every finished unit of a run folder, by name."""
    return [UnitResult.from_json(json.loads(p.read_text())) for p in sorted((out / "units").glob("*.json"))]
