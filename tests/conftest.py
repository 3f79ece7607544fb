"""Shared fixtures: where the real datasets are, and small deterministic settings for every test."""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("HF_NEUTRENO_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.fail(f"The real datasets are expected in {DATA_DIR} (set HF_NEUTRENO_DATA to move them).")
    return DATA_DIR


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models gain nothing from threads, and threads spin badly on a busy 2-core box
    yield
