"""Where the tests find the real datasets: the local mirror, else the same datasets from the Hub, else a skip.

The mirror (`../shared/data`, or `HF_NEUTRENO_DATA`) holds Parquet files laid out as `<folder>/<split>-00000-of-00001
.parquet`, with the Hub datasets' columns. A clone without it fetches those datasets from the Hub once, by name, into
the same layout under `HF_NEUTRENO_TEST_DATA` (default `~/.cache/hf-neutreno/test-data`), in a child process: the
tests themselves always run offline. Where the Hub cannot be reached, or the user set HF_HUB_OFFLINE=1, the tests
that need data skip with the reason.

    python tests/real_data.py FOLDER     # the fetch itself (what the tests run in the child process)
"""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("HF_NEUTRENO_DATA", REPO_ROOT.parent / "shared" / "data"))
CACHE = Path(os.environ.get("HF_NEUTRENO_TEST_DATA", Path.home() / ".cache" / "hf-neutreno" / "test-data"))
# Mirror folder: (Hub dataset, configuration).
HUB_DATASETS = {
    "cifar10": ("uoft-cs/cifar10", None),
    "fashion_mnist": ("zalando-datasets/fashion_mnist", None),
    "wikitext-2-v1": ("Salesforce/wikitext", "wikitext-2-v1"),
}
FETCH_TIMEOUT = 1800  # seconds: three datasets, about 120 MB


def _offline(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "on", "yes", "true")


def fetch(folder: Path, load: Callable | None = None) -> None:
    """Write every Hub dataset of `HUB_DATASETS` into `folder` in the mirror's layout (skipping those already
    there); `load` is `datasets.load_dataset` (a parameter so that a test can stand in for the Hub)."""
    if load is None:
        from datasets import load_dataset as load
    for name, (repo, config) in HUB_DATASETS.items():
        target = folder / name
        if target.is_dir() and any(target.glob("*.parquet")):
            continue
        dataset = load(repo, config)
        partial = folder / f".{name}.partial"
        partial.mkdir(parents=True, exist_ok=True)
        for split, data in dataset.items():
            data.to_parquet(str(partial / f"{split}-00000-of-00001.parquet"))
        partial.rename(target)  # complete or absent: an interrupted fetch is redone


def resolve(mirror: Path = MIRROR, cache: Path = CACHE, user_offline: str | None = None,
            run_fetch: Callable[[Path], None] | None = None) -> tuple[Path | None, str]:
    """(the data folder, "") or (None, the one-line reason the tests skip)."""
    if mirror.is_dir():
        return mirror, ""
    complete = all((cache / name).is_dir() for name in HUB_DATASETS)
    if complete:
        return cache, ""
    if _offline(user_offline):
        return None, (f"no local datasets in {mirror} and HF_HUB_OFFLINE=1: run the tests without it to fetch them "
                      "from the Hub once, or set HF_NEUTRENO_DATA")
    try:
        (run_fetch or _fetch_in_child)(cache)
    except Exception as error:  # the Hub unreachable, a timeout, a failing download
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        return None, f"no local datasets in {mirror} and the Hub could not be reached ({reason[:200]})"
    return cache, ""


def _fetch_in_child(cache: Path) -> None:
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    proc = subprocess.run([sys.executable, __file__, str(cache)], env=env, capture_output=True, text=True,
                          timeout=FETCH_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"exit status {proc.returncode}")


if __name__ == "__main__":
    fetch(Path(sys.argv[1]))
