"""Rerun every benchmark and reproduction, then render the pages that report them.

    python -m experiments all --quick                 # everything at a toy size: < 10 min on 2 CPU cores
    python -m experiments all --docs docs             # the papers' budgets (reproduce.py's `full`), bf16: days
    python -m experiments all --budget gpu --docs docs   # the GPU tier: ~40 min, one H100
    python -m experiments all --budget gpu --smoke      # its code path on a CPU: minutes
    python -m experiments all --budget gpu --speed-only --time-limit 540 --docs docs   # a GPU for 10 minutes
    python -m experiments all --render --out experiments/benchmarks/results --docs docs   # only re-render the pages

Speed and memory (`bench_vit.py`, `bench_eigen_vit.py`, `bench_gpt.py`, `bench_diagnostics.py`,
`bench_segmenter.py`) write one JSON each into --out; the reproductions (`experiments/evidence/reproduce.py`) write
theirs into --out/reproduce (the GPU tier's default: experiments/evidence/results/reproduce-gpu). With --docs, the pages
`benchmarks.md` (speed and memory, rendered by `speed_page.py` from the JSON, each table with its machine and
command, each ratio checked against its target) and `results.md` (the reproductions, rendered by `reproduce.py`) are
written there.
A hand-written `notes.md` in --out is included in `benchmarks.md` as the reading of those numbers. `--time-limit`
stops a run after so many seconds (a GPU for a few minutes): the benchmarks run most wanted first (`BENCHMARKS`), and
those not measured in time keep the tables --out held.

The GPU tier (`--budget gpu`) writes into experiments/benchmarks/results/gpu (its reproductions into
experiments/evidence/results/reproduce-gpu) and, with --docs, the pages `benchmarks-gpu.md` and `results-gpu.md` (the
CPU pages stay as they are), each naming the GPU, dtype and library versions. It runs every
benchmark at GPU batch sizes in bf16 with sdpa attention (flash kernels on an H100 in bf16), and reproduce.py's
`gpu` budget: the four CIFAR-10 ViT variants for 25 epochs and the WikiText-2 LMs to early stopping, 3 seeds, 4 units
at a time on the one GPU. docs/benchmarks.md ("The GPU tier") gives the time estimate and how it was made. A run cut
off resumes where it stopped when rerun. `--smoke` runs the same code path (the same scripts, bf16, sdpa, every table
and page) on a CPU with toy models, steps and batches: a check of the code, not a measurement.
"""

import argparse
import math
import os
import signal
import subprocess
import time
from pathlib import Path

from . import in_new_process
from .benchmarks.speed_page import DEFAULT_PAGES, PAGES, render

EVIDENCE = Path(__file__).resolve().parent / "evidence"  # the reproductions: their harness, page generator and results

# Each benchmark's flags per tier, split at spaces. quick: every table at a size 2 CPU cores run in a few minutes.
# full: bf16 at the scripts' GPU batch sizes. gpu: bf16 at batch sizes that keep an H100 busy (the ViTs' 197 and 577
# tokens fill it at 256 images; the NeuTRENO term is per token, so the ratios need no larger batch). gpu-smoke: the
# gpu tier's tables on a CPU with toy sizes (`--smoke`). They run in this order, so that a run cut short by
# `--time-limit` (a GPU for a few minutes) has the GPU tier's most wanted first: the profile, the ViT table (eager and
# compiled), the value paths (the gate's memory), the GPT tables (eager and compiled), then the rest.
BENCHMARKS = {
    # The GPU tier's profile of a training step, eager, compiled and replayed as CUDA graphs (`profile_gpu.py`).
    "profile": ("profile-gpu", {"gpu": "--rounds 15 --cuda-graphs", "gpu-smoke": "--smoke"}),
    "vit": (
        "bench-vit",
        {
            "quick": "--quick --image-sizes 224 --rounds 3",
            "full": "--dtype bf16",
            # DeiT-tiny's 224 px, eager and compiled side by side (each compile takes about a minute)
            "gpu": "--dtype bf16 --batch-size 256 --rounds 20 --image-sizes 224 --compile",
            "gpu-smoke": "--dtype bf16 --image-sizes 32 --batch-size 2 --rounds 1",
        },
    ),
    # The setting is a CPU one (GPT-2-small and ViT-tiny shapes): one thread and the process's CPU time.
    "value_path": (
        "bench-value-path",
        {
            "quick": "--quick --threads 1 --clock cpu --context 64 --rounds 3",
            "full": "--threads 1 --clock cpu",
            "gpu": "--dtype bf16 --batch-size 32 --rounds 20",
            "gpu-smoke": "--dtype bf16 --batch-size 1 --context 16 --vocab-size 512 --image-size 32 --rounds 1",
        },
    ),
    "gpt": (
        "bench-gpt",
        {
            "quick": "--quick --shapes paper --scaling-contexts 256 1024 --rounds 3",
            "full": "--dtype bf16 --as-trained",
            "gpu": "--dtype bf16 --batch-size 32 --gen-batch-size 16 --rounds 10 --as-trained --compile",
            "gpu-smoke": (
                "--dtype bf16 --shapes paper --context 32 --scaling-contexts 32 64 --batch-size 1 "
                "--gen-batch-size 1 --prompt-len 4 --new-tokens 2 --rounds 1"
            ),
        },
    ),
    "generation": (
        "bench-generation",
        {
            "quick": "--quick --threads 1 --clock cpu --num-hidden-layers 4 --rounds 5",
            "full": "--threads 1 --clock cpu",
            "gpu": "--dtype bf16 --rounds 30",
            "gpu-smoke": "--dtype bf16 --contexts 8 16 --vocab-size 512 --rounds 1",
        },
    ),
    "eigen_vit": (
        "bench-eigen-vit",
        {
            "quick": "--quick --rounds 3",
            "full": "--dtype bf16",
            "gpu": "--dtype bf16 --batch-size 256 --rounds 20",
            "gpu-smoke": "--dtype bf16 --preset vit-tiny --batch-size 2 --rounds 1",
        },
    ),
    # The setting is a CPU one (512 px, batch 2): one thread and the process's CPU time at both sizes.
    "segmenter": (
        "bench-segmenter",
        {
            "quick": "--quick --threads 1 --clock cpu",
            "full": "--threads 1 --clock cpu",
            "gpu": "--dtype bf16 --batch-size 8 --rounds 20",
            "gpu-smoke": "--dtype bf16 --quick --batch-size 1 --rounds 1",
        },
    ),
    "diagnostics": (
        "bench-diagnostics",
        {
            "quick": "--quick",
            "full": "",
            "gpu": "--dtype bf16 --batch-size 125",
            "gpu-smoke": "--dtype bf16 --sizes 4 8 --batch-size 4 --image-size 32 --repeats 1 --modes inference hidden",
        },
    ),
    # Exact on every CPU, so one count serves every tier that runs on a CPU.
    "op_counts": ("count-ops", {"quick": "", "full": ""}),
    # Host time at the counts' toy shape, one thread: a CPU measurement in every tier that runs on a CPU.
    "host_time": ("host-time", {"quick": "--rounds 8", "full": "--rounds 200"}),
}
# reproduce.py per tier: its budget and flags (`--workers`: below).
REPRODUCE = {
    "quick": "--quick",
    "full": "--budget full --bf16",
    "gpu": "--budget gpu",
    # The gpu budget with toy sizes: 1 seed, 2-layer models, a few images and tokens, 2 steps each (bf16 on the CPU).
    "gpu-smoke": (
        "--budget gpu --seeds 0 --main-claim-seeds 0 --vit-layers 2 --lm-layers 2 --train-samples 16 --epochs 1 "
        "--batch-size 8 --test-samples 12 --corruption-samples 4 --oversmoothing-samples 6 --spectral-samples 3 "
        "--lm-steps 4 --lm-batch-size 1 --lm-warmup-steps 0 --lm-eval-steps 2 --lm-patience 1 "
        "--lm-curve-tokens 520 --sliding-tokens 259 --block-tokens 520 --dataloader-workers 1"
    ),
}


MIN_SECONDS_LEFT = 30  # with --time-limit, a step that would find less time left is skipped


def run(command: list[str], timeout: float | None = None) -> bool:
    """Runs `python -m experiments COMMAND ARGS` (`command`: [COMMAND, *ARGS]) in a new process; after `timeout`
    seconds it is stopped, with every process it started (torch.compile's workers), and False returned."""
    arguments, environment = in_new_process(*command)
    print("+ " + " ".join(arguments), flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(arguments, env=environment, start_new_session=True)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        print(f"  stopped at the time limit, after {time.perf_counter() - start:.0f} s", flush=True)
        return False
    except BaseException:  # Ctrl-C: the benchmark stops too
        os.killpg(process.pid, signal.SIGKILL)
        raise
    if code:
        raise subprocess.CalledProcessError(code, arguments)
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)
    return True


SMOKE_NOTE = (
    "Scaled-down smoke run (`run_all.py --budget gpu --smoke`): the GPU tier's code path with toy models, "
    "steps and batches on whatever device ran it. It checks the code; none of its numbers is a measurement."
)


def run_everything(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evidence = Path(args.evidence)
    if args.smoke:  # every page of a smoke run says so, as its notes
        for folder in (out, evidence):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "notes.md").write_text(SMOKE_NOTE + "\n")
    start = time.perf_counter()
    deadline = None if args.time_limit is None else start + args.time_limit
    missing = []  # the benchmarks that found too little time left, or were stopped at the limit
    for name, (command, flags) in BENCHMARKS.items():
        if args.tier not in flags:
            continue
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left < MIN_SECONDS_LEFT:
            print(
                f"- {command}: skipped, {int(max(left, 0))} s of the time limit left (a step needs {MIN_SECONDS_LEFT})",
                flush=True,
            )
            missing.append(command)
            continue
        extra = ["--data-dir", args.data] if name == "diagnostics" and args.data else []
        if args.smoke:  # two layers: the NeuTRENO term (layers 1 on) runs, at a fraction of the models' cost
            extra += ["--num-hidden-layers", "2"]
        if not run([command, *flags[args.tier].split(), *extra, "--out", str(out / f"{name}.json")], left):
            missing.append(command)
    if missing:
        print(f"\nNot measured in the time limit: {', '.join(missing)}. Their tables keep what --out held.")
    if args.speed_only:
        return
    reproduce = [
        "reproduce",
        *REPRODUCE[args.tier].split(),
        "--out",
        str(evidence),
        "--workers",
        str(args.workers),
    ] + (["--data", args.data] if args.data else [])
    page = PAGES.get(args.budget, DEFAULT_PAGES)[1]
    left = None if deadline is None else deadline - time.perf_counter()
    if left is not None and left < MIN_SECONDS_LEFT:
        print(f"- reproduce: skipped, {int(max(left, 0))} s of the time limit left (rerun to resume it)", flush=True)
    elif not run(reproduce + (["--docs", str(Path(args.docs) / page)] if args.docs else []), left):
        print("  reproduce resumes from its finished units when rerun", flush=True)
    print(f"\nEverything ran in {(time.perf_counter() - start) / 60:.1f} min.")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--budget",
        choices=("quick", "full", "gpu"),
        default="full",
        help="quick: toy sizes on a CPU (< 10 min on 2 cores); full: the papers' budgets (GPU, bf16); "
        "gpu: the GPU tier, about 40 minutes on one H100 (bf16, sdpa), its own pages",
    )
    parser.add_argument("--quick", action="store_const", const="quick", dest="budget", help="same as --budget quick")
    parser.add_argument(
        "--smoke", action="store_true", help="with --budget gpu: the same code path at toy sizes on a CPU (minutes)"
    )
    parser.add_argument(
        "--data",
        default=os.environ.get("HF_NEUTRENO_DATA"),
        metavar="DIR",
        help="local datasets (DIR/cifar10, DIR/wikitext-2-v1), for reproduce.py and the diagnostics "
        "benchmark (default: $HF_NEUTRENO_DATA if set, else the Hub)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="results folder (default: runs/all-<budget>; gpu: experiments/benchmarks/results/gpu)",
    )
    parser.add_argument(
        "--docs",
        default=None,
        help="write the pages into this folder: benchmarks.md and results.md "
        "(gpu: benchmarks-gpu.md and results-gpu.md)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="reproduce.py's parallel training processes (default 2; gpu: 4 on the one GPU; smoke: 1)",
    )
    parser.add_argument("--render", action="store_true", help="only render the speed-and-memory page from --out")
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="only the speed-and-memory benchmarks and their page: no reproductions",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds: each step is stopped at the time left (a benchmark's JSON is written when "
        f"it ends; the profile writes each shape as it ends) and a step that finds under {MIN_SECONDS_LEFT} s left "
        "is skipped; the log names both",
    )
    args = parser.parse_args(argv)
    if args.time_limit is not None and not 0 < args.time_limit < math.inf:
        parser.error(f"--time-limit must be a finite number of seconds > 0, got {args.time_limit}")
    if args.render and (args.speed_only or args.time_limit is not None):
        parser.error(
            "--render only renders the page from --out: it runs nothing, so --speed-only and --time-limit do not apply"
        )
    if args.smoke and args.budget != "gpu":
        parser.error(f"--smoke scales down the GPU tier: use it with --budget gpu, not --budget {args.budget}")
    args.tier = f"{args.budget}-smoke" if args.smoke else args.budget
    default_out = "experiments/benchmarks/results/gpu" if args.tier == "gpu" else f"runs/all-{args.tier}"
    # The GPU tier's evidence goes beside the other runs' (experiments/evidence/results), its speed results into
    # benchmarks/.
    default_evidence = EVIDENCE / "results" / "reproduce-gpu" if args.tier == "gpu" else None
    args.evidence = (args.out is None and default_evidence) or Path(args.out or default_out) / "reproduce"
    args.out = args.out or default_out
    # The GPU tier trains 4 units at a time on the one GPU: a small model leaves it idle while Python launches kernels,
    # and the other processes fill those gaps (16 cores: 4 units, each with 3 data-loading workers).
    args.workers = args.workers or {"gpu": 4, "gpu-smoke": 1}.get(args.tier, 2)
    if not args.render:
        run_everything(args)
    if args.docs:
        render(Path(args.out), Path(args.docs), args.budget)
        print(f"Wrote {Path(args.docs) / PAGES.get(args.budget, DEFAULT_PAGES)[0]}")
