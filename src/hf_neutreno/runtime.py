"""Small runtime helpers that the library and the example scripts share; this module imports nothing of the package."""

import os
import platform
import shlex
import sys

import torch


def has_accelerator() -> bool:
    """Whether torch sees an accelerator (CUDA, MPS, XPU, ...): where pinned DataLoader memory can help."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def machine() -> dict:
    """What ran a job, as the speed pages and the evidence name it: the device, threads, library versions and the
    command line."""
    import transformers

    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU: {_cpu_name()}",
        "cpu_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "command": _command(),
    }


def _command() -> str:
    """The command line as typed: `python -m package ...` for a module, a script's path relative to here."""
    args = sys.orig_argv[1:]
    if args and args[0].endswith(".py"):
        args = [os.path.relpath(args[0]), *args[1:]]
    return shlex.join(["python", *args])


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown"
