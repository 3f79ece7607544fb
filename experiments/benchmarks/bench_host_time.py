"""Host time per layer of a training step, for every model and value path against its native counterpart.

At the kernel counts' shape (`count_ops.py`: batch 1, 8 tokens or a 16 px image, width 32, one thread) each kernel
costs almost nothing, so a step's time is what the host spends dispatching them: Python, autograd and ATen's
dispatcher. On a GPU this is what sets the step time of small models (docs/benchmarks-gpu.md), and here it can be
measured on any CPU. Per layer is the slope over depth, (time at 4 layers − time at 2 layers) / 2, as the kernel
counts' `per layer`. The four models of a row (native and the model, 2 and 4 layers) run interleaved, round by round
in rotating order, timed by the process's CPU time; each round gives its own ratio (the model's slope over native's,
above 1: more host time per layer), and the row reports their median with the sign-test interval the other benchmarks
use.

A timing on a shared machine moves by ±0.05 between runs. `--instructions` adds what does not: the instructions the
process executes per layer, counted by valgrind's callgrind (the count `torch.utils.benchmark` uses for PyTorch's own
overhead benchmarks), for the same four models of each row in one process under valgrind, and their ratio. Two runs of
one command give the same ratios to about 0.002, so a cut of a few Python calls shows in it (the other rows counted in
the same process move a ratio by about 0.01: compare counts from one command). It is not time (a cache miss costs no
instruction), and an instruction ratio under a row's time ratio says that the row's extra work runs at more time per
instruction than native's.

    python -m experiments host-time --out experiments/benchmarks/results/host_time.json   # about 2 minutes on 2 cores
    python -m experiments host-time --instructions --out ...   # needs valgrind; about 15 more minutes
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from . import count_ops
from .common import interleaved_times, machine, median_interval, report

TARGETS = {"fixed": 1.15, "learnable": 1.30}  # host time per layer against native; twicing is reported, not held
INSTRUCTION_STEPS = 3  # training steps counted per model: the count is exact, so few are needed


def kind(name: str) -> str:
    """Which target a row is held to: twicing (reported), a learnable coefficient or gate, or a fixed one."""
    if "twicing" in name:
        return "twicing"
    return "learnable" if "learnable" in name or "gate" in name else "fixed"


def step(model: torch.nn.Module, inputs: dict):
    setup, run = count_ops.training_step(model, inputs)

    def once():
        setup()
        run()

    return once


def row(name: str, rounds: int) -> dict:
    native, build, inputs = count_ops.TRAINING[name]
    data = inputs()
    candidates = {
        f"{which} {layers}": step(builder(layers), data)
        for which, builder in (("native", native), ("model", build))
        for layers in (2, 4)
    }
    times = interleaved_times(candidates, torch.device("cpu"), rounds=rounds, warmup=3, clock="cpu")
    slopes = {
        which: [(four - two) / 2 for two, four in zip(times[f"{which} 2"], times[f"{which} 4"])]
        for which in ("native", "model")
    }
    ratio, interval = median_interval([m / n for m, n in zip(slopes["model"], slopes["native"])])
    native_us, _ = median_interval(slopes["native"])
    model_us, _ = median_interval(slopes["model"])
    result = {
        "model": name,
        "kind": kind(name),
        "native µs per layer": native_us * 1e6,
        "µs per layer": model_us * 1e6,
        "host time ratio": ratio,
        "host time ratio interval": interval,
    }
    return result


def instructions_per_layer(names: list[str]) -> dict[str, tuple[float, float]]:
    """Row name -> (native's, the model's) instructions per layer of a training step: this module run again under
    callgrind (`_count_under_callgrind`), which counts each model's steps alone and writes one count per model."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions counts with valgrind's callgrind tool; install valgrind, or leave it out.")
    with tempfile.TemporaryDirectory() as folder:
        command = [valgrind, "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={folder}/out.%p"]
        command += [sys.executable, "-m", __name__, "--count-under-callgrind", folder, "--models", *names]
        environment = {**os.environ, "PYTHONHASHSEED": "0"}  # the same set and dict orders in every run
        subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        order = json.loads((Path(folder) / "order.json").read_text())
        counts = [_callgrind_total(path) for path in sorted(Path(folder).glob("out.*.*"), key=_dump_number)]
    if len(counts) != len(order):
        raise RuntimeError(f"callgrind wrote {len(counts)} counts for {len(order)} models.")
    per_model = {tuple(key): count / INSTRUCTION_STEPS for key, count in zip(order, counts)}
    return {
        name: tuple((per_model[name, which, 4] - per_model[name, which, 2]) / 2 for which in ("native", "model"))
        for name in names
    }


def _count_under_callgrind(names: list[str], folder: str) -> None:
    """Run under callgrind with collection off: each model's warm-up steps uncounted, then its counted steps, dumped
    as one file, in the order written to `order.json`."""
    order = []
    for name in names:
        native, build, inputs = count_ops.TRAINING[name]
        data = inputs()
        for which, builder in (("native", native), ("model", build)):
            for layers in (2, 4):
                once = step(builder(layers), data)
                for _ in range(3):
                    once()
                torch._C._valgrind_toggle()
                for _ in range(INSTRUCTION_STEPS):
                    once()
                torch._C._valgrind_toggle_and_dump_stats()
                order.append((name, which, layers))
    (Path(folder) / "order.json").write_text(json.dumps(order))


def _dump_number(path: Path) -> int:
    return int(path.name.rsplit(".", 1)[1])


def _callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"No totals in {path}.")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", nargs="+", choices=list(count_ops.TRAINING), default=list(count_ops.TRAINING))
    parser.add_argument("--instructions", action="store_true", help="also count instructions per layer (valgrind)")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument("--count-under-callgrind", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # host time, not the kernels' parallel speed
    if args.count_under_callgrind:
        return _count_under_callgrind(args.models, args.count_under_callgrind)
    rows = [row(name, args.rounds) for name in args.models]
    counted = instructions_per_layer(args.models) if args.instructions else {}
    for result in rows:
        if result["model"] in counted:
            native, model = counted[result["model"]]
            result["instruction ratio"] = model / native
        if result["kind"] in TARGETS:
            result["target"] = TARGETS[result["kind"]]
    meta = {**machine(), "clock": "cpu", "rounds": args.rounds, "batch": 1}
    report("Host time per layer of a training step", rows, meta, args.out)


if __name__ == "__main__":  # run again under callgrind by `instructions_per_layer`
    main()
