"""`hf-neutreno` as a user runs it: a fresh process (`CONSOLE_SCRIPT`, what the console script calls) running
the code under test, offline, with its exit status, stdout and stderr; or the same command in the test's own process,
for what a command says and writes."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import hf_neutreno

SRC = str(Path(hf_neutreno.__file__).resolve().parents[1])  # the code under test, wherever it is installed


# What the `hf-neutreno` console script runs (setup.cfg's entry point): `hf_neutreno_cli.main`, which leaves the Auto
# classes unregistered until a command imports the models (`python -m hf_neutreno` imports the package, registering
# them first, and would hide a command that reads a checkpoint before they are).
CONSOLE_SCRIPT = "import sys, hf_neutreno_cli; sys.exit(hf_neutreno_cli.main())"


def run_cli(*argv, cwd: Path | None = None, timeout: int = 300, env: dict | None = None):
    environment = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT, *map(str, argv)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli_here(*argv, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`hf-neutreno ARGV` in this process (`hf_neutreno.cli.main`), offline: the exit status, stdout and stderr as
    `run_cli` gives them, without the seconds a fresh process spends importing transformers (7-9 s on some CPUs).
    Library loggers keep their own stream, so stderr holds what the command prints; `run_cli` where only a fresh
    process shows it."""
    from huggingface_hub import constants

    from hf_neutreno.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext(),
        mock.patch.object(constants, "HF_HUB_OFFLINE", True),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main([str(arg) for arg in argv])
    return subprocess.CompletedProcess(["hf-neutreno", *map(str, argv)], code, out.getvalue(), err.getvalue())


def run_python(code: str, timeout: int = 300) -> str:
    """`python -c code` in a fresh process running the code under test, offline (nothing imported by the tests is
    there); returns stdout, raises with stderr on failure."""
    environment = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return proc.stdout


def run_torchrun(*argv, timeout: int = 300) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node 2 ARGV` (a script and its arguments, or `-m module ...`) on the code
    under test, offline, one thread per rank; the tests' folder is on the path too, for the workers' helpers.

    --standalone binds the rendezvous to port 0, so the OS picks a free port: parallel runs cannot collide. torchrun
    waits for and reaps both ranks (and kills the other one if one fails), so nothing outlives the call.
    """
    tests = str(Path(__file__).resolve().parent)
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([SRC, tests]),
        "HF_HUB_OFFLINE": "1",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *map(str, argv)]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout)


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
