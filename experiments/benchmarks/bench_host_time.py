"""Host time per layer of a training step, for every model and value path against its native counterpart.

At the kernel counts' shape (`count_ops.py`: batch 1, 8 tokens or a 16 px image, width 32, one thread) each kernel
costs almost nothing, so a step's time is what the host spends dispatching them: Python, autograd and ATen's
dispatcher. On a GPU this is what sets the step time of small models (docs/benchmarks-gpu.md), and here it can be
measured on any CPU. Per layer is the slope over depth, (time at 4 layers − time at 2 layers) / 2, as the kernel
counts' `per layer`. The four models of a row (native and the model, 2 and 4 layers) run interleaved, round by round
in rotating order, timed by the process's CPU time; each round gives its own ratio (the model's slope over native's,
above 1: more host time per layer), and the row reports their median with the sign-test interval the other benchmarks
use.

    python -m experiments host-time --out experiments/benchmarks/results/host_time.json   # about 2 minutes on 2 cores
"""

import argparse

import torch

from . import count_ops
from .common import interleaved_times, machine, median_interval, report

TARGETS = {"fixed": 1.15, "learnable": 1.30}  # host time per layer against native; twicing is reported, not held


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
    if result["kind"] in TARGETS:
        result["target"] = TARGETS[result["kind"]]
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--models", nargs="+", choices=list(count_ops.TRAINING), default=list(count_ops.TRAINING))
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # host time, not the kernels' parallel speed
    rows = [row(name, args.rounds) for name in args.models]
    meta = {**machine(), "clock": "cpu", "rounds": args.rounds, "batch": 1}
    report("Host time per layer of a training step", rows, meta, args.out)
