"""Reproductions of the NeuTRENO and eigen-parameterised ViT claims at a chosen budget, paired seeds, rendered to
markdown.

Experiments (every one trains from scratch, one recipe for every variant, paired by seed: the same initial weights,
training images, order and augmentation draws):

- CIFAR-10, the poster's ViT-Ti set-up with this package's recipe (patch 4, 32 px): ViT (λ = 0), NeuTRENO (λ = 0.6),
  ViT⁻ and ViT⁺ at an equal budget; test accuracy after every epoch, per-layer token cosine similarity and ‖HFC‖/‖LFC‖
  (NeuTRENO Fig. 1 / Fig. 6), and the share of smoothing-dominated (layer, input, head) cases at initialisation and
  after training (poster Table 1);
- data efficiency, ViT vs ViT⁻ trained on 100 / 50 / 10 % of the training images for the same epochs (Table 2);
- robustness, ViT vs ViT⁻ (the 100 % models) on 8 corruptions at severities 1-5 (Table 3);
- WikiText-2, the paper's `wikitext103-small` LM (adaptive-softmax cutoffs scaled to the 33k vocabulary), softmax vs
  NeuTRENO λ = 0.4: validation perplexity during training, then validation and test perplexity with the paper's
  sliding window and with blocks.

Budgets: `quick` (every table at a toy size, minutes), `cpu` (the small tier: barely trained models, ~2 h on 2
cores), `cpu-long` (models that learn, about an hour of one CPU thread each; docs/results.md), `full` (the papers'
scale, for a GPU), `gpu` (bf16, sdpa: 25 CIFAR epochs and the LMs to early stopping, 3 seeds; with the benchmarks
about 40 minutes of one H100 through `experiments/run_all.py --budget gpu`, pages docs/*-gpu.md).

    python -m experiments reproduce --quick
    python -m experiments reproduce --budget cpu-long --workers 1 --threads 1 \
        --out experiments/evidence/results/reproduce-cpu-long --docs docs/results.md

`--data DIR` (default: `$HF_NEUTRENO_DATA`) reads a local copy of the datasets; without either they come from the
Hub (uoft-cs/cifar10, Salesforce/wikitext). Every budget field is also a
flag (`--epochs 5 --train-samples 10000 ...`). Each trained model is one "unit" whose result is cached as JSON under
`<out>/units/`, so an interrupted run resumes where it stopped (units recorded under a different budget are
recomputed; changing only the seed lists keeps them). A unit in progress checkpoints after every epoch (LM: every
curve point) under `<out>/checkpoints/`, and a rerun continues it from there with the same result as an uninterrupted
run. `--render` only re-renders the markdown from the JSON there.

`--only PATTERN ...` runs the planned units whose names match (shell patterns), e.g. a share of a long run on a lent
GPU with the same budget; copy its `units/*.json` (and its session from `run.json`) into the main run's folder, where
the page counts them like any other. Each unit records the `device` that trained it.

    python -m experiments reproduce --budget cpu-long --experiments value-path --only 'valuepath-lm-*' --out share

The harness, beside this driver (which schedules the units, runs each through `hf_neutreno.engine.experiment.run_paired`
in a worker pool, and records the sessions): `reproduce_budget` (the tiers), `reproduce_plans` (each kind of unit as
a typed plan: its units' names, variant, inputs, build and training; `PLANS`, `schedule`), the training of
`reproduce_cifar`, `reproduce_lm` and `reproduce_segment` (with `reproduce_training`, what they share); then
`reproduce_results` (typed unit results and measures), `reproduce_report` (statistics and claims),
`reproduce_claims` and `reproduce_methods` (what the page compares, as data), and the page: `reproduce_page`,
`reproduce_sections` and `reproduce_tables` filling `results_template.md`, with `reproduce_figures`.
"""

import argparse
import dataclasses
import fnmatch
import json
import multiprocessing
import os
import shutil
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from hf_neutreno.engine.experiment import run_paired
from hf_neutreno.engine.variants import BASELINE
from hf_neutreno.runtime import machine

from . import reproduce_report as report
from .reproduce_budget import ATTN_IMPLEMENTATIONS, BUDGETS, PLAN_FIELDS, Budget, same_computation
from .reproduce_lm import unigram_reference
from .reproduce_page import render
from .reproduce_plans import ROUND2_EXPERIMENTS, Unit, schedule, validated_lambda
from .reproduce_training import ROOT, Context


def _optional_int(text: str) -> int | None:
    return None if text.lower() in ("none", "all") else int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--budget", choices=sorted(BUDGETS), default="full")
    p.add_argument("--quick", action="store_const", const="quick", dest="budget", help="Same as --budget quick.")
    p.add_argument(
        "--experiments",
        nargs="+",
        choices=("cifar", "lm", *ROUND2_EXPERIMENTS),
        default=["cifar", "lm"],
        help="cifar and lm: the first run (the default); round 2: lambda (λ on a validation split), "
        "adaptation (NeuTRENO adaptation of trained ViTs), kernel (linear attention), value-path (the "
        "value residual, its learnable and gated mixes, NeuTRENO's learnable λ, twicing attention, XSA and value "
        "embeddings), segmentation (Segmenter from the trained ViTs).",
    )
    p.add_argument(
        "--data",
        default=os.environ.get("HF_NEUTRENO_DATA"),
        metavar="DIR",
        help="A local copy of the datasets (DIR/cifar10, DIR/wikitext-2-v1, Parquet as on the Hub); "
        "default: uoft-cs/cifar10 and Salesforce/wikitext from the Hub.",
    )
    p.add_argument("--out", default=None, help="Results folder (default: runs/reproduce-<budget>).")
    p.add_argument("--docs", default=None, help="Also write the rendered markdown here (e.g. docs/results.md).")
    p.add_argument("--workers", type=int, default=1, help="Units trained in parallel processes.")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per worker (default: 1 with several workers, else torch's choice).",
    )
    p.add_argument(
        "--bf16",
        action="store_const",
        const=True,
        default=None,
        help="bf16 autocast in training (GPU; the gpu budget's default).",
    )
    p.add_argument("--render", action="store_true", help="Only re-render the markdown from the JSON in --out.")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="PATTERN",
        default=None,
        help="Run only the planned units whose names match one of these shell patterns (e.g. "
        "'valuepath-lm-*'): a share of the plan on another machine. The page still counts every unit.",
    )
    for field in dataclasses.fields(Budget):
        if field.name == "bf16":  # the switch above
            continue
        kind = dict(type=int, nargs="+") if field.name in PLAN_FIELDS else None
        if kind is None:
            kind = dict(type=float) if "float" in str(field.type) else dict(type=_optional_int)
        if "str" in str(field.type):
            kind = dict(type=str)
        p.add_argument(
            f"--{field.name.replace('_', '-')}", dest=field.name, default=None, **kind, help=argparse.SUPPRESS
        )
    return p


def parse_args(argv=None) -> tuple[argparse.Namespace, Budget]:
    p = parser()
    args = p.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Budget) if getattr(args, f.name) is not None}
    budget = dataclasses.replace(BUDGETS[args.budget], **overrides)
    if budget.attn_implementation not in (None, *ATTN_IMPLEMENTATIONS):
        p.error(f"--attn-implementation {budget.attn_implementation!r}: choose from {', '.join(ATTN_IMPLEMENTATIONS)}")
    if budget.lm_patience and not budget.lm_eval_steps:
        p.error("--lm-patience needs --lm-eval-steps: early stopping reads the validation curve")
    args.out = Path(args.out or ROOT / "runs" / f"reproduce-{args.budget}")
    if args.threads is None and args.workers > 1:
        args.threads = 1  # idle threads spin: several single-threaded workers beat one multi-threaded on a busy CPU
    return args, budget


# ---------------------------------------------------------------------------------------------------- one unit


def cached(out: Path, unit: Unit, budget: Budget) -> bool:
    """The unit's JSON exists and was computed with this budget (`same_computation`)."""
    path = out / "units" / f"{unit.name}.json"
    return path.exists() and same_computation(json.loads(path.read_text())["budget"], budget)


def run_unit(unit: Unit, budget: Budget, out: Path, data: str | None = None) -> str:
    """Train and evaluate one model through the engine's `run_paired` (its plan's paired build, then its plan's
    training); write `<out>/units/<name>.json`. Runs in a worker process or inline; a unit already recorded with
    this budget is not trained again."""
    name = unit.name
    print(f"[{time.strftime('%H:%M:%S')}] {name}: start (load {os.getloadavg()[0]:.1f})", flush=True)
    start, load = time.perf_counter(), os.getloadavg()[0]
    # Trainer's output_dir: a checkpoint after every epoch (CIFAR) or curve point (LM), so that a unit cut off with
    # its session resumes where it stopped, with the same result as an uninterrupted run; removed when it is done.
    work_dir = out / "checkpoints" / name
    context, result = Context(budget, out, data, str(work_dir)), {}

    def train(run, model, fingerprint) -> None:
        result.update(unit.plan.train(unit, model, context))

    build = unit.plan.builder(unit, context)
    if not run_paired([unit.run], build, train, finished=lambda run: cached(out, unit, budget), reference=BASELINE):
        return name
    if missing := [field for field in unit.plan.records if field not in result]:
        raise RuntimeError(f"{name}: its plan measures {list(unit.plan.records)}, but the result has no {missing}")
    shutil.rmtree(work_dir, ignore_errors=True)
    seconds = time.perf_counter() - start + result.pop("seconds_before_resume", 0.0)
    result.update(
        unit=unit.to_json(),
        budget=dataclasses.asdict(budget),
        seconds=seconds,
        load_average=[load, os.getloadavg()[0]],
        threads=torch.get_num_threads(),
        device=machine()["device"],  # what trained the unit: a run's units can come from several machines
    )
    path = out / "units" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(result, indent=1))
    path.with_suffix(".tmp").replace(path)  # atomic: a killed run never leaves half a result
    print(f"[{time.strftime('%H:%M:%S')}] {name}: done in {seconds / 60:.1f} min", flush=True)
    return name


# ---------------------------------------------------------------------------------------------------- scheduling


def _init_worker(threads: int | None) -> None:
    if threads:
        torch.set_num_threads(threads)


def selected(unit: Unit, only: list[str] | None) -> bool:
    """Whether the unit's name matches one of the `--only` patterns (every unit without them)."""
    return only is None or any(fnmatch.fnmatchcase(unit.name, pattern) for pattern in only)


@dataclasses.dataclass
class Progress:
    """The units of one invocation: `pending` are those of the (re-made) schedule that are selected, not cached and
    not yet run here; `ready` those of them whose inputs exist."""

    experiments: list[str]
    budget: Budget
    out: Path
    only: list[str] | None
    done: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    running: dict = dataclasses.field(default_factory=dict)

    def pending(self) -> list[Unit]:
        names = {*self.done, *self.failed, *self.running.values()}
        units = schedule(self.budget, self.experiments, self.out)
        return [
            u for u in units if selected(u, self.only) and u.name not in names and not cached(self.out, u, self.budget)
        ]

    def ready(self) -> list[Unit]:
        return [u for u in self.pending() if u.plan.ready(u, self.out)]

    def finished(self, name: str, error: BaseException | None) -> None:
        (self.failed if error is not None else self.done).append(name)
        if error is not None:
            print(f"{name} FAILED: {error!r}", flush=True)


def _run_inline(progress: Progress, data: str | None) -> None:
    while units := progress.ready():
        try:
            run_unit(units[0], progress.budget, progress.out, data)
            progress.finished(units[0].name, None)
        except Exception as error:  # the other units still run, as with several workers
            traceback.print_exc()
            progress.finished(units[0].name, error)


def _run_pool(progress: Progress, data: str | None, workers: int, threads: int | None) -> None:
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no forked thread pools
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
        running = progress.running
        while True:
            for unit in progress.ready()[: workers - len(running)]:
                running[pool.submit(run_unit, unit, progress.budget, progress.out, data)] = unit.name
            if not running:
                break
            future = next(as_completed(running))
            progress.finished(running.pop(future), future.exception())


def run_all(
    experiments: list[str],
    budget: Budget,
    out: Path,
    workers: int,
    threads: int | None,
    data: str | None = None,
    only: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Run the scheduled units (those `only` selects) that are not cached (inline, or in `workers` spawned
    processes), each once its inputs exist, re-scheduling as units finish (the sweep's choice adds units); returns
    (names run, names that failed)."""
    progress = Progress(experiments, budget, out, only)
    if workers <= 1:
        _init_worker(threads)
        _run_inline(progress, data)
    else:
        _run_pool(progress, data, workers, threads)
    for unit in progress.pending():  # an input failed to appear (its unit failed)
        progress.finished(unit.name, RuntimeError("what it starts from was not made"))
    return progress.done, progress.failed


# ---------------------------------------------------------------------------------------------------- the run record


def record_session(out: Path, session: dict, budget_name: str, budget: dict, update: bool = False) -> None:
    """Append this invocation (command, wall time, load, machine) to `<out>/run.json`, or (`update`) replace the entry
    it appended at its start: the one with its command and start time, as several invocations can share a run folder
    (`--only` shares of the plan on other machines)."""
    path = out / "run.json"
    run = json.loads(path.read_text()) if path.exists() else {"sessions": []}
    info = machine()
    info.update(
        cpu_cores=os.cpu_count(),
        torch_threads_per_worker=session.get("threads") or info["cpu_threads"],
        workers=session.get("workers"),
    )
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    entry = {k: v for k, v in session.items() if k != "planned"} | {"machine": info}
    run.update(budget_name=budget_name, budget=budget)
    if "planned" in session:  # every unit any command here planned: the page says how many are finished
        run["planned"] = list(dict.fromkeys([*run.get("planned", []), *session["planned"]]))
    key = (entry.get("command"), entry.get("started"))
    mine = [i for i, earlier in enumerate(run["sessions"]) if (earlier.get("command"), earlier.get("started")) == key]
    if update and mine:
        run["sessions"][mine[-1]] = entry
    else:
        run["sessions"].append(entry)
    path.write_text(json.dumps(run, indent=1))


def train(args: argparse.Namespace, budget: Budget, command: str) -> list[str]:
    """Run the schedule's units, recording the session in run.json at its start and end; returns the failed ones."""
    out = args.out
    session = {"command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average_start": os.getloadavg()}
    planned = schedule(budget, args.experiments, out)
    units = [u for u in planned if selected(u, args.only) and not cached(out, u, budget)]
    if args.only and not any(selected(u, args.only) for u in planned):
        raise SystemExit(
            f"--only {' '.join(args.only)}: no planned unit matches; the plan's units are "
            + ", ".join(u.name for u in planned)
        )
    print(f"{len(units)} units to run, budget {args.budget}: {budget}", flush=True)
    # Recorded now and again at the end: a session that is killed (runs can span days) still leaves its plan.
    session.update(planned=[u.name for u in planned], workers=args.workers, threads=args.threads)
    record = dict(budget_name=args.budget, budget=dataclasses.asdict(budget))
    record_session(out, session, **record)
    start = time.perf_counter()
    done, failed = run_all(args.experiments, budget, out, args.workers, args.threads, args.data, args.only)
    session.update(
        wall_seconds=time.perf_counter() - start,
        units_run=len(done) + len(failed),
        failed=failed,
        planned=[u.name for u in schedule(budget, args.experiments, out)],
        load_average_end=os.getloadavg(),
    )
    record_session(out, session, update=True, **record)
    return failed


def main(argv=None) -> dict:
    args, budget = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m experiments reproduce " + " ".join(sys.argv[1:] if argv is None else argv)
    failed = [] if args.render else train(args, budget, command)
    unigram_reference(args.out, args.data)
    results = report.aggregate(args.out, validated_lambda(args.out))
    text = render(args.out, results, docs=Path(args.docs) if args.docs else None)
    print(f"Wrote {args.out / 'results.md'}" + (f" and {args.docs}" if args.docs else ""))
    if failed:
        raise SystemExit(f"{len(failed)} units failed: {failed}")
    return {"results": results, "markdown": text}
