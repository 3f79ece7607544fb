"""Shared benchmark machinery: interleaved timing, peak memory, the machine's description, the report.

Every comparison runs its candidates side by side in one process, interleaved round by round in rotating order, so
that a change of machine load hits all of them alike; results are medians over rounds and are reported as ratios
to the baseline: a throughput ratio is the median of the rounds' own ratios, with its interval (`paired_ratio`).
"""

import gc
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from hf_neutreno import runtime

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# wall: elapsed time. cpu: the CPU time of this process, which other jobs on a shared machine barely change (use it
# with --threads 1: idle OpenMP threads spin and would be counted); GPU timings are always wall time.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def add_common_arguments(parser, batch_size: int | None = None) -> None:
    """Device, dtype, threads, rounds, --quick, depth and --out: the same flags in every benchmark."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32", help="autocast dtype (weights stay fp32)")
    parser.add_argument("--attn", default="sdpa", help="attention kernel of all models: sdpa, eager, flash_attention_2")
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (interleaved); the median is reported")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall time, or the process's CPU time (with --threads 1 on a shared CPU machine)",
    )
    parser.add_argument("--quick", action="store_true", help="CPU-sized run: small batches, few rounds")
    parser.add_argument(
        "--num-hidden-layers",
        type=int,
        default=None,
        help="depth of every model (default: the shape's); a smaller one only checks the code, as "
        "run_all.py --budget gpu --smoke does",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time the comparisons with both models under torch.compile: a `compiled ratio` column "
        "beside the eager one (each model compiles in its warm-up rounds)",
    )
    parser.add_argument("--out", default=None, help="also write the results as JSON here")


def setup(args) -> tuple[torch.device, torch.dtype]:
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return torch.device(args.device), DTYPES[args.dtype]


def machine(args=None) -> dict:
    """What produced the figures: hardware, threads, library versions and the command line (`runtime.machine`), and
    the benchmark's own settings."""
    info = runtime.machine()
    if args is not None:
        info.update(dtype=args.dtype, attn=args.attn, clock="wall" if torch.cuda.is_available() else args.clock)
    return info


def autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_times(
    candidates: dict[str, Callable[[], None]],
    device: torch.device,
    rounds: int = 5,
    warmup: int = 2,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, one per round; each round runs every candidate once, in rotating order."""
    now = time.perf_counter if device.type == "cuda" else CLOCKS[clock]
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            synchronize(device)
            start = now()
            candidates[name]()
            synchronize(device)
            times[name].append(now() - start)
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    """Median seconds per call of each candidate of `interleaved_times`."""
    return {name: statistics.median(values) for name, values in times.items()}


def paired_ratio(times: dict[str, list[float]], base: str, other: str) -> tuple[float, list[float]]:
    """The throughput ratio of `other` to `base` from `interleaved_times`, and its interval: the median over rounds of
    the round's own ratio (a change of the machine's speed between rounds hits both alike), and the distribution-free
    interval of that median (the sign test's order statistics), as [low, high]. It covers the median with at least
    95 % probability from 6 rounds on; with fewer it is the whole range of the rounds."""
    return median_interval([b / o for b, o in zip(times[base], times[other])])


def median_interval(values: list[float]) -> tuple[float, list[float]]:
    """The median of `values` (one per round) and the distribution-free interval of it (the sign test's order
    statistics) as [low, high]: at least 95 % from 6 values on; with fewer, their whole range."""
    values = sorted(values)
    n = len(values)
    k = 0  # 0-based order statistic: the largest with P(Binomial(n, 1/2) <= k) <= 2.5 %
    while 2 * sum(math.comb(n, i) for i in range(k + 2)) / 2**n <= 0.05:
        k += 1
    return statistics.median(values), [values[k], values[n - 1 - k]]


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def resident_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Weights (and optimizer state): what stays allocated between steps."""
    state = [] if optimizer is None else [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return tensor_bytes(model.parameters()) + tensor_bytes(model.buffers()) + tensor_bytes(state)


def peak_bytes(fn: Callable[[], None], device: torch.device) -> int:
    """Peak memory allocated while `fn` runs, above what was allocated when it started (activations, gradients,
    temporaries). CUDA: the allocator's statistics. CPU: the profiler's record of every allocation and free, exact
    and deterministic (torch keeps no CPU allocator statistics, and the process RSS depends on the C allocator). A
    tensor made before the start and freed by `fn` is not subtracted there (the profiler never saw it made): the
    benchmarks' steps free their own gradients at their end (`train_step`)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before

    # The running sum of the allocations and frees is the memory allocated above the start, as in torch's memory
    # timeline, without its per-tensor analysis (seconds per call).
    allocated = peak = 0
    for nbytes in cpu_allocations(fn):
        allocated += nbytes
        peak = max(peak, allocated)
    return peak


def cpu_allocations(fn: Callable[[], None]) -> list[int]:
    """Every CPU allocation (+bytes) and free (−bytes) while `fn` runs, in the order they happened, from the
    profiler's record: exact and deterministic. Python's garbage collector runs before and not during it: collecting
    earlier garbage (a dropped model's reference cycles) inside the record would count its frees against `fn`."""
    from torch.profiler import ProfilerActivity, profile

    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    finally:
        if collecting:
            gc.enable()
    events = [
        event
        for event in prof.profiler.kineto_results.events()
        if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU
    ]
    return [event.nbytes() for event in sorted(events, key=lambda event: event.start_ns())]


def adamw_step(
    model: torch.nn.Module, inputs: dict, device: torch.device, dtype: torch.dtype
) -> tuple[Callable[[], None], torch.optim.AdamW]:
    """`train_step` with AdamW as `Trainer` makes it by default (`adamw_torch_fused`: fused on a GPU; on a CPU the
    foreach one, as every CPU table was measured), and that optimizer."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    return train_step(model, optimizer, inputs, device, dtype), optimizer


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: dict, device: torch.device, dtype: torch.dtype
) -> Callable[[], None]:
    """A closure running one training step on fixed inputs: forward (under autocast), backward, optimizer step."""
    model.train()

    def step():
        with autocast(device, dtype):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def side_by_side(
    steps: dict[str, tuple[Callable[[], None], torch.optim.Optimizer | None]],
    models: dict[str, torch.nn.Module] | None,
    labels: dict[str, str],
    per_step: int,
    unit: str,
    device: torch.device,
    args,
    ratio: str = "throughput ratio",
    warmup: int = 2,
) -> dict:
    """One table row comparing two candidates' steps (name -> (closure, optimizer or None)), the baseline first in
    `labels` (name -> column label): each one's rate (`per_step` items per median step), the throughput ratio with its
    interval (`paired_ratio`), and with `models` the step peak memory and the total with weights and optimizer state,
    as ratios to the baseline."""
    base, other = labels
    fns = {name: fn for name, (fn, _) in steps.items()}
    times = interleaved_times(fns, device, rounds=args.rounds, warmup=warmup, clock=args.clock)
    row = {f"{labels[name]} {unit}": per_step / statistics.median(times[name]) for name in labels}
    row[ratio], row[f"{ratio} interval"] = paired_ratio(times, base, other)
    if models is not None:
        peak = {name: peak_bytes(fn, device) for name, fn in fns.items()}  # after warm-up: steady state
        total = {name: peak[name] + resident_bytes(models[name], opt) for name, (_, opt) in steps.items()}
        row |= {f"{labels[name]} step peak MiB": peak[name] / 2**20 for name in labels}
        row |= {"step peak ratio": peak[other] / peak[base], "total memory ratio": total[other] / total[base]}
    return row


def compiled_ratio(
    make_step: Callable[[torch.nn.Module], tuple[Callable[[], None], torch.optim.Optimizer | None]],
    models: dict[str, torch.nn.Module],
    labels: dict[str, str],
    device: torch.device,
    args,
    ratio: str = "compiled ratio",
) -> dict:
    """With `--compile`: the ratio of `side_by_side` again, with each model under `torch.compile` (the same weights;
    `make_step(model)` builds its step as for the eager row); nothing without it."""
    if not args.compile:
        return {}
    base, other = labels
    fns = {name: make_step(torch.compile(models[name]))[0] for name in labels}
    times = interleaved_times(fns, device, rounds=args.rounds, warmup=3, clock=args.clock)
    value, interval = paired_ratio(times, base, other)
    return {ratio: value, f"{ratio} interval": interval}


def report(title: str, rows: list[dict], meta: dict, out: str | None = None) -> None:
    """Print a markdown table and the machine; with `out`, write both as JSON."""
    print(f"\n## {title}\n")
    if rows:
        columns = list(dict.fromkeys(c for row in rows for c in row))
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(format_cell(row.get(c, "")) for c in columns) + " |")
    print("\n" + json.dumps(meta))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"title": title, "machine": meta, "rows": rows}, indent=2) + "\n")


def format_cell(value) -> str:
    """A table cell: a float to 3 decimals (1 from 100 on), an interval [low, high] as "low-high"."""
    if isinstance(value, list):
        return "-".join(format_cell(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)
