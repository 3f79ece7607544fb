"""The code's layout and style are a tool's: `ruff format` lays out every Python file and `ruff check` (pyflakes,
pycodestyle, import order; ruff.toml) passes, so that neither drifts between sessions or reviewers."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_python_file_is_laid_out_by_ruff_format():
    proc = _ruff("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_check_passes():
    proc = _ruff("check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
