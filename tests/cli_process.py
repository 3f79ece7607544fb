"""`hf-neutreno` as a user runs it: a fresh process (`python -m hf_neutreno`, what the console script calls) running
the code under test, offline, with its exit status, stdout and stderr."""

import os
import subprocess
import sys
from pathlib import Path

import hf_neutreno

SRC = str(Path(hf_neutreno.__file__).resolve().parents[1])  # the code under test, wherever it is installed


def run_cli(*argv, cwd: Path | None = None, timeout: int = 300, env: dict | None = None):
    environment = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hf_neutreno", *map(str, argv)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_python(code: str, timeout: int = 300) -> str:
    """`python -c code` in a fresh process running the code under test, offline (nothing imported by the tests is
    there); returns stdout, raises with stderr on failure."""
    environment = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return proc.stdout


def one_line_error(proc, command: str) -> str:
    """The error a user error ends with: exit status 2, no traceback, one line `hf-neutreno COMMAND: error: ...`,
    the last of stderr (progress bars may come before it). Returns its message."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    prefix = f"hf-neutreno {command}: error: "
    assert len(errors) == 1 and errors[0].startswith(prefix), proc.stderr[-3000:]
    assert errors[0] == proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
    return errors[0][len(prefix) :]
