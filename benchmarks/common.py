"""Shared benchmark machinery: interleaved timing, peak memory, the machine's description.

Every comparison runs its candidates side by side in one process, interleaved round by round, so that a change of
machine load hits all of them alike; results are medians over rounds and are reported as ratios to the baseline.
"""

import gc
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch


def machine() -> dict:
    """What produced the figures: hardware, threads and library versions."""
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": _cpu_name(),
        "cpu_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(
    candidates: dict[str, Callable[[], None]], device: torch.device, rounds: int = 5, warmup: int = 2
) -> dict[str, float]:
    """Median seconds per call of each candidate; each round runs every candidate once, in rotating order."""
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            synchronize(device)
            start = time.perf_counter()
            candidates[name]()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def cuda_peak_bytes(fn: Callable[[], None], device: torch.device) -> int:
    """Peak CUDA memory allocated while `fn` runs, above what was allocated before."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


_MMAP_SET = False


def _release_freed_memory_to_the_os() -> None:
    """Make glibc serve allocations of 64 KiB and more with mmap, so a freed tensor leaves the RSS at once and the
    RSS follows the live tensors (torch has no CPU allocator statistics). Every allocation then page-faults, which
    slows code down: time everything before the first memory measurement."""
    global _MMAP_SET
    if not _MMAP_SET:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        except OSError:
            pass
        _MMAP_SET = True


def cpu_peak_bytes(fn: Callable[[], None]) -> int:
    """Peak resident memory while `fn` runs, above the resident memory before it (Linux).

    Writing 5 to /proc/self/clear_refs resets the high-water mark (VmHWM), so candidates can be measured one after
    the other in the same process. Call it only after all timing (see `_release_freed_memory_to_the_os`).
    """
    _release_freed_memory_to_the_os()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_bytes("VmRSS")
    fn()
    return _status_bytes("VmHWM") - before


def peak_bytes(fn: Callable[[], None], device: torch.device) -> int:
    return cuda_peak_bytes(fn, device) if device.type == "cuda" else cpu_peak_bytes(fn)


def report(title: str, rows: list[dict], meta: dict, out: str | None = None) -> None:
    """Print a table and, with `out`, write the rows and the machine description as JSON."""
    print(f"\n## {title}\n")
    if rows:
        columns = list(rows[0])
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(_fmt(row[c]) for c in columns) + " |")
    print("\n" + json.dumps(meta))
    if out:
        with open(out, "w") as f:
            json.dump({"title": title, "machine": meta, "rows": rows}, f, indent=2)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)
