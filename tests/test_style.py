"""The code's layout and style are a tool's: `ruff format` lays out every Python file and `ruff check` (pyflakes,
pycodestyle, import order; ruff.toml) passes, so that neither drifts between sessions or reviewers."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_python_file_is_laid_out_by_ruff_format():
    proc = _ruff("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_check_passes():
    proc = _ruff("check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Text the repository writes for readers; the kept checkpoints' copies of model code under
# experiments/benchmarks/results are snapshots of the files they were saved with.
TEXT_SUFFIXES = (".py", ".md", ".toml", ".yaml", ".yml", ".cfg", ".txt")


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [
        ROOT / name
        for name in names
        if (name.endswith(TEXT_SUFFIXES) or name == ".ci/run")
        and not name.startswith("experiments/benchmarks/results/")
    ]


# The results pages of the evidence runs keep their tables whole, however wide: a claim's row is read across, from
# the paper's number to the verdict (the speed pages split theirs into column groups).
WHOLE_TABLES = ("docs/results.md", "docs/results-gpu.md", "experiments/evidence/results/")
# transformers' own test files, vendored as they are (tests/contract/refresh.py): upstream's layout, not ours
VENDORED = "tests/contract/upstream/"


def test_lines_are_at_most_120_characters_in_code_and_docs():
    """Python, Markdown (docs, READMEs, model-card templates), configs and the CI script. Only a single word that
    cannot be broken (a long command-line value) may be longer, and a table row of a results page."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    long = []
    for path in _tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            unbreakable = " " not in line.strip().removesuffix("\\").strip()
            whole_table = line.startswith("|") and str(path.relative_to(ROOT)).startswith(WHOLE_TABLES)
            vendored = str(path.relative_to(ROOT)).startswith(VENDORED)
            if len(line) > 120 and not unbreakable and not whole_table and not vendored:
                long.append(f"{path.relative_to(ROOT)}:{number}: {len(line)} characters")
    assert not long, "\n".join(long)
