"""The tests' datasets on a machine without the local mirror: fetched from the Hub by name, else a one-line skip."""

import datasets
import pyarrow.parquet as pq
import pytest

import real_data


def _fake_hub(mirror, calls):
    """Stands in for `datasets.load_dataset`: serves each Hub name from the local mirror (so the columns and
    splits are the real ones), a few rows per split."""
    folders = {repo: name for name, (repo, _) in real_data.HUB_DATASETS.items()}

    def load(repo, config):
        calls.append((repo, config))
        full = datasets.load_dataset("parquet", data_dir=str(mirror / folders[repo]))
        return datasets.DatasetDict({split: data.select(range(5)) for split, data in full.items()})

    return load


@pytest.fixture
def few_scenes(monkeypatch):
    monkeypatch.setattr(real_data, "FASHION_SCENES", {"train": 6, "validation": 3})


def test_without_the_mirror_the_datasets_come_from_the_hub_in_the_mirrors_layout(data_dir, tmp_path, few_scenes):
    calls = []
    folder, reason = real_data.resolve(
        mirror=tmp_path / "absent",
        cache=tmp_path / "cache",
        user_offline=None,
        run_fetch=lambda cache: real_data.fetch(cache, load=_fake_hub(data_dir, calls)),
    )
    assert reason == "" and folder == tmp_path / "cache"
    assert calls == [
        ("uoft-cs/cifar10", None),
        ("zalando-datasets/fashion_mnist", None),
        ("Salesforce/wikitext", "wikitext-2-v1"),
    ]
    for name in real_data.HUB_DATASETS:  # the same files and columns as the mirror
        assert sorted(p.name for p in (folder / name).iterdir()) == sorted(
            p.name for p in (data_dir / name).iterdir() if p.suffix == ".parquet"
        )
        for path in (folder / name).iterdir():
            assert pq.read_schema(path).names == pq.read_schema(data_dir / name / path.name).names
    reloaded = datasets.load_dataset("parquet", data_dir=str(folder / "cifar10"))
    assert (
        reloaded["train"].features["label"].names
        == datasets.load_dataset("parquet", data_dir=str(data_dir / "cifar10"), split="test").features["label"].names
    )
    assert sorted(p.name for p in (folder / "fashion-scenes").iterdir()) == sorted(
        p.name for p in (data_dir / "fashion-scenes").iterdir() if p.suffix in (".parquet", ".json")
    )
    # A second resolve finds the complete cache and fetches nothing.
    assert real_data.resolve(mirror=tmp_path / "absent", cache=folder, run_fetch=pytest.fail) == (folder, "")


def test_an_unreachable_hub_gives_a_one_line_reason(tmp_path):
    def unreachable(cache):
        raise RuntimeError(
            "Traceback (most recent call last):\n  ...\nConnectionError: Couldn't reach 'uoft-cs/cifar10'"
        )

    folder, reason = real_data.resolve(mirror=tmp_path / "absent", cache=tmp_path / "cache", run_fetch=unreachable)
    assert folder is None and "\n" not in reason
    assert str(tmp_path / "absent") in reason and "Couldn't reach 'uoft-cs/cifar10'" in reason


def test_the_users_offline_setting_is_respected(tmp_path):
    folder, reason = real_data.resolve(
        mirror=tmp_path / "absent", cache=tmp_path / "cache", user_offline="1", run_fetch=pytest.fail
    )
    assert folder is None and "HF_HUB_OFFLINE=1" in reason and "\n" not in reason


def test_a_missing_dataset_file_is_fetched_again(data_dir, tmp_path, few_scenes):
    """An interrupted fetch leaves no folder (it is renamed into place when complete), so it is redone."""
    calls = []
    (tmp_path / "cache" / ".cifar10.partial").mkdir(parents=True)  # what a killed fetch leaves
    real_data.fetch(tmp_path / "cache", load=_fake_hub(data_dir, calls))
    assert len(calls) == 3 and (tmp_path / "cache" / "cifar10" / "train-00000-of-00001.parquet").is_file()


@pytest.mark.parametrize("no_skips, status", [("0", 0), ("1", 1)])
def test_without_data_or_hub_the_tests_skip_and_ci_fails_on_a_skip(tmp_path, no_skips, status):
    """The whole path, as a clone without the mirror meets it: offline, the data tests skip with the reason on one
    line; CI's HF_NEUTRENO_NO_SKIPS=1 turns any skip into a failed run."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "HF_NEUTRENO_DATA": str(tmp_path / "absent"),
        "HF_NEUTRENO_TEST_DATA": str(tmp_path / "c"),
        "HF_HUB_OFFLINE": "1",
        "HF_NEUTRENO_NO_SKIPS": no_skips,
    }
    test = f"{real_data.REPO_ROOT / 'tests' / 'test_real_data.py'}::test_a_missing_dataset_file_is_fetched_again"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=real_data.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == status, proc.stdout + proc.stderr
    skip_lines = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skip_lines) == 1 and "no local datasets in" in skip_lines[0] and "HF_HUB_OFFLINE=1" in skip_lines[0]


def test_fashion_scenes_built_from_fashion_mnist_equal_the_mirrors(data_dir, tmp_path, monkeypatch):
    """The set that is not on the Hub is rebuilt from the real Fashion-MNIST exactly: its first training scenes,
    pixel for pixel and label for label (the seeded generator draws them first), with the mirror's columns."""
    import json

    import numpy as np

    monkeypatch.setattr(real_data, "FASHION_SCENES", {"train": 200, "validation": 2})
    real_data.make_fashion_scenes(data_dir / "fashion_mnist", tmp_path / "scenes")
    built = datasets.load_dataset("parquet", data_dir=str(tmp_path / "scenes"))
    mirror = datasets.load_dataset("parquet", data_dir=str(data_dir / "fashion-scenes"))
    assert built["train"].features == mirror["train"].features == built["validation"].features
    assert len(built["train"]) == 200 and len(built["validation"]) == 2
    for column in ("image", "annotation"):
        for i, (ours, theirs) in enumerate(zip(built["train"][column], mirror["train"].select(range(200))[column])):
            assert np.array_equal(np.array(ours), np.array(theirs)), (i, column)
    assert json.loads((tmp_path / "scenes" / "id2label.json").read_text()) == json.loads(
        (data_dir / "fashion-scenes" / "id2label.json").read_text()
    )
