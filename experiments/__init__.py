"""The package's experiments, run from the repository's root with one command line:

    python -m experiments COMMAND [ARGS]      # `python -m experiments` lists the commands

- `evidence/`: the reproductions of the papers' claims and of which value path helps, paired by seed, at a chosen
  budget (`reproduce`), with their results, kept checkpoints and pages;
- `benchmarks/`: speed and memory against each model's native counterpart (`bench-*`), the exact operation counts
  (`count-ops`), host time per layer (`host-time`) and the GPU profile (`profile-gpu`), with their results;
- `run_all.py`: every benchmark and reproduction of a tier, then the pages (`all`).

It ships with the repository, not with the `hf_neutreno` wheel: it needs the repository's results and docs.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository, from where `python -m experiments` finds the package

# Each command and the module (under `experiments`) whose `main(argv)` runs it.
COMMANDS = {
    "all": "run_all",
    "reproduce": "evidence.reproduce",
    "bench-vit": "benchmarks.bench_vit",
    "bench-eigen-vit": "benchmarks.bench_eigen_vit",
    "bench-gpt": "benchmarks.bench_gpt",
    "bench-generation": "benchmarks.bench_generation",
    "bench-segmenter": "benchmarks.bench_segmenter",
    "bench-diagnostics": "benchmarks.bench_diagnostics",
    "bench-value-path": "benchmarks.bench_value_path",
    "count-ops": "benchmarks.count_ops",
    "host-time": "benchmarks.bench_host_time",
    "profile-gpu": "benchmarks.profile_gpu",
}


def in_new_process(command: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The argument list and environment that run `python -m experiments COMMAND ARGS` in a new process, which finds
    the package from any working folder."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return [sys.executable, "-m", __name__, command, *args], {**os.environ, "PYTHONPATH": path}
