"""The results page's building blocks: the template's blocks filled by name, numbers as mean ± std and per seed,
and the models × measures comparison tables every section shows."""

import functools
import math
import re
from pathlib import Path
from string import Template

from .reproduce_results import Measure

TEMPLATE = Path(__file__).resolve().parent / "results_template.md"


@functools.cache
def blocks() -> dict[str, Template]:
    """The template's blocks by name: each starts at a line `<!-- name -->`."""
    parts = re.split(r"^<!-- ([\w-]+) -->\n", TEMPLATE.read_text(), flags=re.M)
    return {name: Template(text.strip("\n")) for name, text in zip(parts[1::2], parts[2::2])}


def fill(block: str, **values) -> str:
    """One block of the page template, filled (a missing value is an error, not a silent `$name`)."""
    return blocks()[block].substitute(values)


def pm(stats: dict, scale: float = 1.0, digits: int = 2, sign: bool = False) -> str:
    mean, std = stats["mean"] * scale, stats["std"] * scale
    text = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    return text + ("" if math.isnan(std) else f" ± {std:.{digits}f}")


def seeds(stats: dict, scale: float = 1.0, digits: int = 2, order: list | None = None, sign: bool = False) -> str:
    """The per-seed values, ' / '-separated; with `order`, one slot per seed in that order ('—' where missing)."""
    per_seed, form = stats["per_seed"], f"{'+' if sign else ''}.{digits}f"
    return " / ".join("—" if s not in per_seed else format(per_seed[s] * scale, form) for s in order or per_seed)


def table(header: list[str], rows: list[list[str]]) -> str:
    # Kept whole, however wide: a claim's row is read across, from the paper's number to the verdict.
    return "\n".join(
        ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        + ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    )


def delta(stats: dict | None, measure: str = "accuracy") -> str:
    """'+1.51 ± 0.64 (3/3 better)': a paired difference in the measure's unit."""
    scale, _, digits, _, word = measure_format(measure)
    return "—" if stats is None else f"{pm(stats, scale, digits, True)} ({stats['wins']}/{stats['n']} {word})"


def measure_format(key: str) -> tuple:
    """How the measure an experiment's JSON names by `key` is shown (`Measure.format`)."""
    return Measure.parse(key).format


def measures_of(data: dict) -> list[str]:
    """The measures a table's models have, in order."""
    return list(dict.fromkeys(m for by in data["summary"].values() for m in by))


def comparison(data: dict, measures: list | None = None, per_seed: bool = True, extra: list = ()) -> str:
    """A table of models × measures (mean ± std and, with `per_seed`, each seed's value in seed order), then one
    Δ row per paired comparison, then `extra` rows."""
    measures = measures or measures_of(data)
    order = sorted({s for by in data["summary"].values() for st in by.values() for s in st["per_seed"]}, key=int)
    papers = [data["papers"].get(k, "—") for k in data["summary"]] if data.get("papers") else []

    def cell(stats, m):
        scale, _, digits, _, _ = measure_format(m)
        return (
            "—"
            if stats is None
            else pm(stats, scale, digits) + (f" ({seeds(stats, scale, digits, order)})" if per_seed else "")
        )

    rows = [[data["names"][k]] + [cell(by.get(m), m) for m in measures] for k, by in data["summary"].items()]
    rows = [row + [paper] for row, paper in zip(rows, papers)] if papers else rows
    for pair, by in data["paired"].items():
        variant, baseline = pair.split(" vs ")
        rows.append(
            [f"Δ {data['names'][variant]} − {data['names'][baseline]}"]
            + [delta(by.get(m), m) for m in measures]
            + [""] * bool(papers)
        )
    first = f"model (per seed: {' / '.join(order)})" if per_seed else "model"
    return table([first] + [Measure.parse(m).heading for m in measures] + ["paper"] * bool(papers), rows + list(extra))


def figure(data: dict, links: str, alt: str, caption: str) -> str:
    return fill("curves", alt=alt, path=f"{links}/{data['figure']}", caption=caption) if data.get("figure") else ""
