"""The results page: `results_template.md` filled with the numbers `reproduce_report.aggregate` computed. Tables and
sentences are generated here from those numbers; the prose around them is the template's."""

import functools
import json
import math
import os
import re
import statistics
from pathlib import Path
from string import Template

from reproduce_claims import CIFAR_MODELS, LM_MODELS, METHODS, PAPER_CORRUPTIONS, PAPER_SMOOTHING, TASKS
from reproduce_report import load_units, measure_format, unit_name

TEMPLATE = Path(__file__).resolve().parent / "results_template.md"
OFFICIAL_LAMBDA = 0.6
VERDICTS = {
    "reproduced": "reproduced",
    "opposite": "not reproduced (opposite effect)",
    "inconclusive": "inconclusive at this scale",
}
HEADINGS = {
    "accuracy": "accuracy (%)",
    "mean_iou": "mIoU, single-scale",
    "mean_iou_ms": "mIoU, multi-scale",
    "pixel_accuracy": "pixel accuracy (%)",
    "corruption_change": "change from clean to severity 5 (pp)",
}


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
    return "\n".join(
        ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        + ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    )


def delta(stats: dict | None, measure: str = "accuracy") -> str:
    """'+1.51 ± 0.64 (3/3 better)': a paired difference in the measure's unit."""
    scale, _, digits, _, word = measure_format(measure)
    return "—" if stats is None else f"{pm(stats, scale, digits, True)} ({stats['wins']}/{stats['n']} {word})"


def heading(measure: str) -> str:
    kind, *args = measure.split(":")
    if kind == "ppl":
        return f"{args[0]}, {args[1]}"
    if kind in ("cosine", "hfc"):  # the last layer, or one layer
        layer = f"layer {args[1]}" if args[1:] else "last layer"
        return (layer if args[1:] else "last-layer cosine") if kind == "cosine" else f"‖HFC‖/‖LFC‖, {layer}"
    if kind == "corruption":
        return f"severity {args[0]}" if len(args) == 1 else args[1]
    return HEADINGS.get(kind, measure)


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
    return table([first] + [heading(m) for m in measures] + ["paper"] * bool(papers), rows + list(extra))


def figure(data: dict, links: str, alt: str, caption: str) -> str:
    return fill("curves", alt=alt, path=f"{links}/{data['figure']}", caption=caption) if data.get("figure") else ""


# ---------------------------------------------------------------------------------------------------- the page


def markdown(out: Path, results: dict, figures: str) -> str:
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {"sessions": []}
    notes = out / "notes.md"  # hand-written reading of this run's numbers, kept with them
    sections = [
        opening(results),
        header(run, load_units(out)),
        claims_table(results),
        fill("notes", notes=notes.read_text().strip()) if notes.exists() else "",
    ]
    sections += [section(results, figures) for key, section in SECTIONS if key is None or key in results]
    sections.append(fill("rerun"))
    title = "Reproductions on a GPU" if run.get("budget_name") == "gpu" else "Small-scale reproductions"
    text = fill("page", title=title, body="\n\n".join(s for s in sections if s))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def redact(command: str) -> str:
    """A recorded command as the page shows it: `--data $HF_NEUTRENO_DATA` instead of this machine's data folder, and
    an output folder under the repository's benchmarks/ relative to the repository."""
    command = re.sub(r"--data(=|\s+)\S+", r"--data\1$HF_NEUTRENO_DATA", command)
    return re.sub(r"(--out(?:=|\s+))\S*?/(benchmarks/results/\S+)", r"\1\2", command)


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
    if results.get("lambda_sweep", {}).get("chosen") == OFFICIAL_LAMBDA:  # the validated models are the official ones
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


def header(run: dict, units: list[dict]) -> str:
    """Machine, commands, load, progress, compute and budget of the run, from run.json and the units."""
    sessions, lines = run["sessions"], [fill("run"), ""]
    budget = run.get("budget") or (units[0]["budget"] if units else {})
    machines = {}  # one line per machine and software versions
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
    if budget.get("bf16") or budget.get("attn_implementation"):
        lines.append(
            fill(
                "precision",
                training="in bf16 autocast" if budget.get("bf16") else "in fp32",
                attention=budget.get("attn_implementation") or "sdpa",
            )
        )
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
    if loads := [x for u in units for x in u.get("load_average", [])]:
        lines.append(
            fill(
                "load",
                low=f"{min(loads):.1f}",
                high=f"{max(loads):.1f}",
                cores=sessions[-1]["machine"]["cpu_cores"] if sessions else os.cpu_count(),
            )
        )
    if planned := run.get("planned"):
        missing = [name for name in planned if name not in {unit_name(u["unit"]) for u in units}]
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
            hours=f"{sum(u['seconds'] for u in units) / 3600:.1f}",
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
    return "\n".join(lines)


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
        shares += [
            f"{title} {CIFAR_MODELS[k][1]} {pm(spectral[k][f'spectral:{stage}:smoothing'], 100, 1)} %"
            for k in ("vit", "vit+", "vit-")
            if f"spectral:{stage}:smoothing" in spectral.get(k, {})
        ]
    head = ["claim", "paper", "here", "per seed", "95 % interval", "seeds with the paper's sign", "verdict"]
    return fill(
        "claims", table=table(head, rows), smoothing=fill("smoothing", shares="; ".join(shares)) if shares else ""
    )


# ---------------------------------------------------------------------------------------------------- sections


def vit_shape_text(shape: dict | None) -> str:
    """'12 layers, dim 64, 4 heads, MLP 256, 32 px with patch 4 (65 tokens)' from a unit's recorded shape."""
    shape = shape or {
        "hidden_size": 192,
        "num_hidden_layers": 12,
        "num_attention_heads": 3,
        "intermediate_size": 768,
        "image_size": 32,
        "patch_size": 4,
    }  # units written before shapes were recorded: ViT-tiny
    tokens = (shape["image_size"] // shape["patch_size"]) ** 2 + 1
    return (
        f"{shape['num_hidden_layers']} layers, dim {shape['hidden_size']}, {shape['num_attention_heads']} heads, "
        f"MLP {shape['intermediate_size']}, {shape['image_size']} px with patch {shape['patch_size']} "
        f"({tokens} tokens)"
    )


def accuracy(results: dict, links: str) -> str:
    acc = results["cifar10_accuracy"]
    n_test, vit = acc["test_images"] or 10000, next(iter(acc["units"].values()))
    p = statistics.fmean(by["accuracy"]["mean"] for by in acc["summary"].values())
    chosen = results.get("lambda_sweep", {}).get("chosen")
    return fill(
        "accuracy",
        shape=vit_shape_text(acc.get("shape")),
        train_images=f"{vit['train_images']:,}",
        steps=f"{vit['steps']:,}",
        test_images=f"{'all ' if n_test == 10000 else 'a fixed subset of '}{n_test:,}",
        noise=f"{100 * math.sqrt(p * (1 - p) / n_test):.1f}",
        validated=fill("validated", chosen=f"{chosen:g}") if "neutreno-validated" in acc["names"] else "",
        figure=figure(
            acc,
            links,
            "CIFAR-10 learning curves",
            "Test accuracy after every epoch; the last point of each curve is the accuracy in the table",
        ),
        table=comparison(acc),
    )


def oversmoothing(results: dict, links: str) -> str:
    data, found = results["oversmoothing"], {c["id"]: c for c in results["claims"] if c["stats"] is not None}
    stages = []
    for stage, title in (("trained", "Trained"), ("init", "Random initialisation")):
        measures = [m for m in measures_of(data) if f":{stage}:" in m]
        last = found.get(f"cosine-{stage}", {}).get("stats")
        last_layer = (
            fill(
                "last-layer",
                title=title,
                delta=pm(last, 1, 3, True),
                wins=f"{last['wins']}/{last['n']}",
                per_seed=seeds(last, 1, 3),
            )
            if last
            else ""
        )
        stages.append(
            fill(
                "oversmoothing-stage",
                title=title,
                table=comparison(data, measures, per_seed=False),
                figure=f"![{title}]({links}/{data['figures'][stage]})" if data["figures"][stage] else "",
                last_layer=last_layer,
            )
        )
    return fill(
        "oversmoothing", samples=results["cifar10_accuracy"]["samples"]["oversmoothing"], stages="\n\n".join(stages)
    )


def efficiency(results: dict, links: str) -> str:
    data = results["data_efficiency"]
    return fill(
        "efficiency",
        table=comparison(data),
        fractions=", ".join(
            f"{key.rsplit('-', 1)[1]} % = {u['train_images']} images / {u['steps']} steps"
            for key, u in data["units"].items()
            if key.startswith("vit-") and not key.startswith("vit--")
        ),
    )


def corruptions(results: dict, links: str) -> str:
    data = results["corruptions"]
    overall = [m for m in measures_of(data) if m.count(":") < 2]  # the mean over corruptions, by severity
    each = [m for m in measures_of(data) if m.count(":") == 2]  # each corruption at severity 5
    paper = [[f"paper {data['names'][k]}"] + [f"{x:.2f}" for x in PAPER_CORRUPTIONS[k]] + ["—"] for k in data["names"]]
    return fill(
        "corruptions",
        images=results["cifar10_accuracy"]["samples"]["corruption"],
        table=comparison(data, overall, extra=paper),
        per_corruption=comparison({**data, "paired": {}}, each, per_seed=False),
    )


def spectral(results: dict, links: str) -> str:
    data = results["spectral"]
    rows = []
    for stage, title in (("init", "random init"), ("trained", "trained")):
        for k, by in data["summary"].items():
            if f"spectral:{stage}:smoothing" in by:
                stats = [by[f"spectral:{stage}:{c}"] for c in ("smoothing", "sharpening", "other", "tie")]
                rows.append(
                    [f"{title} {data['names'][k]}", pm(stats[0], 100), seeds(stats[0], 100, 1)]
                    + [pm(s, 100) for s in stats[1:]]
                    + [PAPER_SMOOTHING.get(f"{stage} {k}", "—")]
                )
    head = ["model", "smoothing", "smoothing per seed", "sharpening", "other", "tie", "paper (smoothing)"]
    return fill("spectral", samples=results["cifar10_accuracy"]["samples"]["spectral"], table=table(head, rows))


def round_two(results: dict, links: str) -> str:
    """The λ sweep, the kept trained ViTs, adaptation, kernel attention and segmentation: each where it has units."""
    parts, chosen = [], results.get("lambda_sweep", {}).get("chosen")
    if sweep := results.get("lambda_sweep"):
        names = {**sweep["names"], **({f"{chosen:g}": f"λ {chosen:g} (chosen)"} if chosen is not None else {})}
        parts.append(
            fill(
                "lambda-sweep",
                train_images=f"{next(iter(sweep['units'].values()))['train_images']:,}",
                choice=fill("choice-none")
                if chosen is None
                else fill("choice-official" if chosen == OFFICIAL_LAMBDA else "choice-other", chosen=f"{chosen:g}"),
                table=comparison({**sweep, "names": names}),
                figure=figure(sweep, links, "λ sweep", "Validation accuracy after every epoch"),
            )
        )
    if parents := results.get("parents"):
        rows = []
        for key, p in parents.items():
            first, diff = (p[k]["per_seed"] if p[k] else {} for k in ("first_run", "difference"))
            for seed, value in p["retrain"]["per_seed"].items():
                folder = p["model_dir"].get(seed)
                rows.append(
                    [
                        f"{CIFAR_MODELS[key][1]}, seed {seed}",
                        f"{100 * value:.2f}",
                        f"{100 * first[seed]:.2f}" if seed in first else "—",
                        f"{100 * diff[seed]:+.2f}" if seed in diff else "—",
                        f"[{folder}]({links}/{folder})" if folder else "—",
                    ]
                )
            spread = f"mean \\|Δ\\| {100 * statistics.fmean(map(abs, diff.values())):.2f}" if diff else ""
            rows.append(
                [
                    f"{CIFAR_MODELS[key][1]}, over seeds",
                    pm(p["retrain"], 100),
                    pm(p["first_run"], 100) if first else "—",
                    f"{delta(p['difference'])}; {spread}" if diff else "—",
                    "",
                ]
            )
        head = [
            "model",
            "test accuracy (%), retrained",
            "first run, same seed",
            "retrained − first run (pp)",
            "model folder",
        ]
        parts.append(
            fill(
                "parents",
                seeds=", ".join(dict.fromkeys(s for p in parents.values() for s in p["retrain"]["per_seed"])),
                table=table(head, rows),
            )
        )
    for name, alt, caption in (
        ("adaptation", "Adaptation learning curves", "Test accuracy after every epoch of the continued training"),
        ("kernel", "Kernel attention learning curves", "Test accuracy after every epoch"),
        ("segmentation", "Segmentation learning curves", "The segmentation models during training"),
    ):
        if data := results.get(name):
            steps = next(iter(data["units"].values())).get("steps", "?")
            parts.append(
                fill(
                    name,
                    table=comparison(data),
                    steps=steps,
                    lam="?" if chosen is None else f"{chosen:g}",
                    figure=figure(data, links, alt, caption),
                )
            )
    return "\n\n".join(parts)


def wikitext(results: dict, links: str) -> str:
    wt = results["wikitext2"]
    shape = wt.get("shape") or {
        "num_hidden_layers": 16,
        "hidden_size": 128,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
    }
    protocols = [(split, protocol) for split in ("validation", "test") for protocol in ("sliding", "blocks")]
    unigram, softmax = wt.get("unigram_perplexity"), wt["summary"].get("softmax", {}).get("ppl:validation:blocks")
    extra = (
        [["unigram of the training split (no context)"] + [f"{unigram[s][p]:.1f}" for s, p in protocols]]
        if unigram
        else []
    )
    level = unigram["validation"]["blocks"] if unigram else None
    early = "; ".join(
        f"{LM_MODELS[k][1]}: best at steps {' / '.join(map(str, e['best_step'].values()))} of "
        f"{' / '.join(map(str, e['steps'].values()))} trained"
        for k, e in wt.get("early_stopping", {}).items()
    )
    slide, block, ffn = (
        wt["scored_tokens"]["validation"]["sliding"],
        wt["scored_tokens"]["validation"]["blocks"],
        shape["intermediate_size"],
    )
    curve = (
        ""
        if not wt.get("curve_tokens")
        else figure(
            wt,
            links,
            "WikiText-2 learning curves",
            "Validation perplexity during training, on non-overlapping blocks "
            f"of the first {wt['curve_tokens'] + 1:,} validation tokens",
        )
    )
    return fill(
        "wikitext",
        others="" if set(wt["names"]) <= {"softmax", "neutreno"} else ", and the value paths",
        layers=shape["num_hidden_layers"],
        hidden=shape["hidden_size"],
        heads=shape["num_attention_heads"],
        ffn=f"{ffn}{'' if ffn == 2048 else ' instead of 2048'}",
        context=wt["context"],
        norm="pre-LN instead of post-LN" if shape.get("norm_position") == "pre" else "post-LN",
        vocab=wt["vocab_size"],
        parameters=f"{wt['parameters'] / 1e6:.1f}M",
        steps=wt["steps"],
        batch=wt["batch_size"],
        train_tokens=f"{wt['train_tokens']:,}",
        epochs=f"{wt['train_tokens'] / 2088628:.2f}",
        warmup=wt["warmup_steps"],
        lr=f"{wt['learning_rate']:g}",
        slide_prefix=slide + 1,
        slide=slide,
        validation_tokens=f"{wt['split_tokens']['validation']:,}",
        block_prefix=block + 1,
        table=comparison(wt, extra=extra),
        figure=curve,
        early=fill("early", runs=early) if early else "",
        unigram=fill("unigram", softmax=pm(softmax, 1, 1), ratio=f"{softmax['mean'] / level:.2f}", level=f"{level:.1f}")
        if unigram and softmax
        else "",
        losses=", ".join(f"{wt['names'].get(k, k)} {pm(s, 1, 3)}" for k, s in wt["train_loss"].items()),
    )


SECTIONS = (
    ("cifar10_accuracy", accuracy),
    ("oversmoothing", oversmoothing),
    ("data_efficiency", efficiency),
    ("corruptions", corruptions),
    ("spectral", spectral),
    (None, round_two),
    ("wikitext2", wikitext),
)
