"""The results page: `results_template.md` filled with the numbers `reproduce_report.aggregate` computed. Tables and
sentences are generated here from those numbers; the prose around them is the template's."""

import json
import math
import os
import re
from pathlib import Path

from hf_neutreno.markdown import wrap_markdown

from .reproduce_cifar import VIT_LAMBDA
from .reproduce_claims import CIFAR_MODELS
from .reproduce_methods import METHODS, TASKS
from .reproduce_results import Measure, UnitResult, load_units
from .reproduce_sections import SECTIONS
from .reproduce_tables import delta, fill, measure_format, pm, seeds, table

VERDICTS = {
    "reproduced": "reproduced",
    "opposite": "not reproduced (opposite effect)",
    "inconclusive": "inconclusive at this scale",
}


# ---------------------------------------------------------------------------------------------------- the page


def read_run(out: Path) -> dict:
    return json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {"sessions": []}


def title(run: dict) -> str:
    return "Reproductions on a GPU" if run.get("budget_name") == "gpu" else "Small-scale reproductions"


def markdown(out: Path, results: dict, figures: str, log: str = "results-log.md") -> str:
    """The results page: the which-remedy table and the verdicts first, then the run (its commands in the run log
    `log`, a page beside this one), the hand-written notes, one section per experiment and how to rerun."""
    run = read_run(out)
    notes = out / "notes.md"  # hand-written reading of this run's numbers, kept with them
    sections = [
        opening(results),
        claims_table(results),
        header(run, load_units(out), log),
        fill("notes", notes=notes.read_text().strip()) if notes.exists() else "",
    ]
    sections += [section(results, figures) for key, section in SECTIONS if key is None or key in results]
    sections.append(fill("rerun"))
    return _finish(fill("page", title=title(run), body="\n\n".join(s for s in sections if s)))


def log_markdown(out: Path, page: str = "results.md") -> str:
    """The run log of the results page `page`: every recorded command."""
    run = read_run(out)
    return _finish(fill("log", title=title(run), page=page, commands="\n".join(command_lines(run["sessions"]))))


def _finish(text: str) -> str:
    return wrap_markdown(re.sub(r"\n{3,}", "\n\n", text).strip()) + "\n"


def render(out: Path, results: dict, docs: Path | None = None) -> str:
    """The results page for every experiment present, written to `<out>/results.md` and to `docs` if given (figure
    links relative to each file), each with its run log beside it (`results-log.md`, `<docs stem>-log.md`)."""
    text = markdown(out, results, figures=".")
    (out / "results.md").write_text(text)
    (out / "results-log.md").write_text(log_markdown(out))
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        log = f"{docs.stem}-log.md"
        docs.write_text(markdown(out, results, figures=os.path.relpath(out, docs.parent), log=log))
        (docs.parent / log).write_text(log_markdown(out, page=docs.name))
    return text


def redact(command: str) -> str:
    """A recorded command as the page shows it: `--data $HF_NEUTRENO_DATA` instead of this machine's data folder, and
    an output folder under the repository's experiments/evidence/ (in commands recorded before the experiments were
    one package: evidence/, or earlier benchmarks/) relative to the repository."""
    command = re.sub(r"--data(=|\s+)\S+", r"--data\1$HF_NEUTRENO_DATA", command)
    return re.sub(r"(--out(?:=|\s+))\S*?/((?:experiments/)?(?:evidence|benchmarks)/results/\S+)", r"\1\2", command)


def _short(claim: dict) -> str:
    """An opening-table cell: '-1.08 ± 0.85 pp, 0/5 better, opposite'."""
    scale, unit, digits, _, word = measure_format(claim["measure"])
    stats = claim["stats"]
    text = f"{pm(stats, scale, digits, True)}{' ' + unit if unit else ''}, {stats['wins']}/{stats['n']} {word}"
    if claim["verdict"] is None:
        return f"{text}, {stats['n']} of {claim['planned']} seeds so far"
    return f"{text}, {claim['verdict']}"


def _phrase(claim: dict, baseline: str) -> str:
    """What one opening-table cell says, in words: on which side of zero the interval lies, and the verdict."""
    stats, (low, high) = claim["stats"], claim["interval"]
    count = f"{stats['wins']}/{stats['n']} {measure_format(claim['measure'])[4]}"
    if claim["verdict"] is None:
        return f"against {baseline}: {stats['n']} of {claim['planned']} seeds so far ({count})"
    if math.isnan(low) or low * high <= 0:
        return f"no clear difference from {baseline} ({claim['verdict']}, {count})"
    ahead = (low > 0) == measure_format(claim["measure"])[3]
    return f"{'ahead of' if ahead else 'behind'} {baseline} ({claim['verdict']}, {count})"


def opening(results: dict) -> str:
    """The "which remedy" table (rows: METHODS; columns: TASKS and the costs) and one sentence per row, generated
    from the same claims."""
    found = {c["id"]: c for c in results["claims"] if c["stats"] is not None}
    methods = {k: dict(m) for k, m in METHODS.items()}
    if results.get("lambda_sweep", {}).get("chosen") == VIT_LAMBDA:  # the validated models are the official ones
        official, validated = methods["neutreno"], methods["neutreno-validated"]
        for field in ("scratch", "adaptation", "segmentation", "cosine", "hfc"):
            official[field] = validated[field] = next(
                (c for c in (official.get(field), validated.get(field)) if c in found), None
            )
        validated["name"] += " (0.6: the same models as the row above)"
    rows, sentences = [], []
    for key, method in methods.items():
        cells, said = [], []
        for task, (_, baseline) in TASKS.items():
            claim = found.get(method.get(task))
            cells.append(_short(claim) if claim else "not applicable" if method.get(task) == "n/a" else "not run")
            said += [_phrase(claim, baseline)] if claim else []
        cells += [
            delta(found[method[c]]["stats"], found[method[c]]["measure"]) if method[c] in found else "—"
            for c in ("cosine", "hfc")
        ]
        cells += [
            ", ".join(f"{value:.2f} × ({label})" for label, value in results["costs"][key][cost]) or "—"
            for cost in ("throughput", "memory")
        ]
        rows.append([method["name"]] + cells)
        sentences.append(f"- **{method['name']}**: " + ("; ".join(said) or "no task has a result yet") + ".")
    head = [
        "method",
        *(h for h, _ in TASKS.values()),
        "last-layer cosine Δ",
        "‖HFC‖/‖LFC‖ Δ",
        "training throughput",
        "memory",
    ]
    return fill("opening", table=table(head, rows), sentences="\n".join(sentences))


def header(run: dict, units: list[UnitResult], log: str = "results-log.md") -> str:
    """Machine, load, progress, compute and budget of the run, from run.json and the units (its commands are in the
    run log `log`)."""
    sessions = run["sessions"]
    budget = run.get("budget") or (units[0].budget if units else {})
    lines = [fill("run", log=log), "", *machine_lines(sessions)]
    if budget.get("bf16") or budget.get("attn_implementation"):
        lines.append(
            fill(
                "precision",
                training="in bf16 autocast" if budget.get("bf16") else "in fp32",
                attention=budget.get("attn_implementation") or "sdpa",
            )
        )
    lines += totals(run, units, budget)
    return "\n".join(lines)


def machine_lines(sessions: list[dict]) -> list[str]:
    """One line per machine and software versions, naming its commands when there are several machines."""
    lines, machines = [], {}
    for number, s in enumerate(sessions, 1):
        m = s["machine"]
        software = dict(
            hardware=m.get("gpu") or f"{m.get('cpu') or m['device']}, {m['cpu_cores']} cores",
            python=m["python"],
            torch=m["torch"],
            transformers=m["transformers"],
        )
        entry = machines.setdefault(json.dumps(software), {**software, "numbers": [], "parallel": set()})
        entry["numbers"].append(number)
        entry["parallel"].add((m.get("workers") or 1, m["torch_threads_per_worker"]))
    for m in machines.values():
        numbers, parallel = m.pop("numbers"), m.pop("parallel")
        commands = f" (command{'s' * (len(numbers) > 1)} {_spans(numbers)})" if len(machines) > 1 else ""
        ((workers, threads),) = parallel if len(parallel) == 1 else [(None, None)]
        m["parallel"] = (
            f"{workers} worker process(es) × {threads} torch thread(s)"
            if workers
            else "worker processes and torch threads as each command sets them"
        )
        lines.append(fill("machine", commands=commands, **m))
    return lines


def command_lines(sessions: list[dict]) -> list[str]:
    """One line per recorded command: what ran, when, for how long, at what load."""
    lines = []
    for i, s in enumerate(sessions, 1):
        common = dict(number=f" ({i})" if len(sessions) > 1 else "", command=redact(s["command"]), started=s["started"])
        if "wall_seconds" not in s:  # killed with its working session: no end record (its units say what ran)
            lines.append(fill("command-open", **common, load=f"{s['load_average_start'][0]:.1f}"))
        else:
            lines.append(
                fill(
                    "command",
                    **common,
                    units=s.get("units_run", 0),
                    minutes=f"{s['wall_seconds'] / 60:.1f}",
                    load=f"{s['load_average_start'][0]:.1f}/{s['load_average_end'][0]:.1f}",
                )
            )
    return lines


def totals(run: dict, units: list[UnitResult], budget: dict) -> list[str]:
    """The load the units saw, how many of the planned units are finished, the compute spent and the budget."""
    lines, sessions = [], run["sessions"]
    # The load of the shared CPU machine: a GPU machine's share of the units ran alone on its own cores.
    on_cpu = [u for u in units if not str(u.get("device", "CPU")).startswith("NVIDIA")]
    cpu_sessions = [s for s in sessions if "gpu" not in s.get("machine", {})]
    if loads := [x for u in on_cpu for x in u.load_average]:
        lines.append(
            fill(
                "load",
                low=f"{min(loads):.1f}",
                high=f"{max(loads):.1f}",
                cores=cpu_sessions[-1]["machine"]["cpu_cores"] if cpu_sessions else os.cpu_count(),
            )
        )
    if planned := run.get("planned"):
        missing = [name for name in planned if name not in {u.unit.name for u in units}]
        lines.append(
            fill(
                "progress",
                done=len(planned) - len(missing),
                planned=len(planned),
                missing=(f"; still to run: {', '.join(f'`{m}`' for m in missing)}" if missing else ""),
            )
        )
    ended = [s for s in sessions if "wall_seconds" in s]
    wall = (
        (
            f"{sum(s['wall_seconds'] for s in ended) / 3600:.1f} h of wall time in {len(ended)} command(s) with an end "
            "record" + (f"; {len(sessions) - len(ended)} without one" if len(ended) < len(sessions) else "")
        )
        if ended
        else f"no command has an end record, so no total wall time; {len(sessions)} command(s) so far"
    )
    lines.append(
        fill(
            "compute",
            hours=f"{sum(u.seconds for u in units) / 3600:.1f}",
            units=len(units),
            wall=wall,
            budget_name=run.get("budget_name", "?"),
            budget=", ".join(f"`{k}={v}`" for k, v in budget.items()),
        )
    )
    if budget.get("train_samples") is not None or budget.get("epochs", 100) < 100:
        lines.append(
            "\n"
            + fill(
                "small-budget",
                images=f"{budget['train_samples'] or 50000:,}",
                epochs=f"{budget['epochs']:g}",
                tokens=f"{budget['lm_steps'] * budget['lm_batch_size'] * 256:,}",
            )
        )
    return lines


def _spans(numbers: list[int]) -> str:
    """'1-10, 12' from [1, 2, ..., 10, 12]."""
    spans = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def claims_table(results: dict) -> str:
    """Every claim with a paper direction: paired difference, per seed, 95 % interval, paper's sign, verdict."""
    rows = []
    for c in (c for c in results["claims"] if c["sign"]):
        scale, unit, digits, _, _ = measure_format(c["measure"])
        unit, stats = f" {unit}" if unit else "", c["stats"]
        pending = f"not yet decided, {0 if stats is None else stats['n']} of {c['planned']} paired seeds finished"
        if stats is None:
            rows.append([c["title"], c["paper"], "—", "—", "—", "—", pending])
            continue
        low, high = c["interval"]
        span = "—" if math.isnan(low) else f"{low * scale:+.{digits}f} to {high * scale:+.{digits}f}{unit}"
        rows.append(
            [
                c["title"],
                c["paper"],
                f"{pm(stats, scale, digits, True)}{unit}",
                seeds(stats, scale, digits, sign=True),
                span,
                f"{c['agree']}/{stats['n']}",
                f"**{VERDICTS[c['verdict']]}**" if c["verdict"] else pending,
            ]
        )
    if not rows:
        return ""
    shares, spectral = [], results.get("spectral", {}).get("summary", {})
    for stage, title in (("init", "random-init"), ("trained", "trained")):
        smoothing = Measure("spectral", stage, category="smoothing").key
        shares += [
            f"{title} {CIFAR_MODELS[k][1]} {pm(spectral[k][smoothing], 100, 1)} %"
            for k in ("vit", "vit+", "vit-")
            if smoothing in spectral.get(k, {})
        ]
    head = ["claim", "paper", "here", "per seed", "95 % interval", "seeds with the paper's sign", "verdict"]
    return fill(
        "claims", table=table(head, rows), smoothing=fill("smoothing", shares="; ".join(shares)) if shares else ""
    )
