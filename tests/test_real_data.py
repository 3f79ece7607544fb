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
        check_hub=lambda: "",  # the Hub answers
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


def test_an_unreachable_hub_skips_at_once_saying_so_and_fetches_nothing(tmp_path):
    folder, reason = real_data.resolve(
        mirror=tmp_path / "absent",
        cache=tmp_path / "cache",
        run_fetch=pytest.fail,
        check_hub=lambda: "https://huggingface.co did not answer within 5 s: timed out",
        mirror_named=False,
    )
    assert folder is None and "\n" not in reason
    assert reason == (
        "the real datasets are not on this machine (HF_NEUTRENO_DATA is not set) and the Hugging Face Hub cannot be "
        "reached (https://huggingface.co did not answer within 5 s: timed out): connect to a network to fetch them "
        f"from the Hub once (about 120 MB, into {tmp_path / 'cache'}), or set HF_NEUTRENO_DATA to a copy"
    )
    assert not (tmp_path / "cache").exists()


def test_a_failing_fetch_gives_a_one_line_reason_naming_the_users_folder(tmp_path):
    def failing(cache):
        raise RuntimeError(
            "Traceback (most recent call last):\n  ...\nConnectionError: Couldn't reach 'uoft-cs/cifar10'"
        )

    folder, reason = real_data.resolve(
        mirror=tmp_path / "absent", cache=tmp_path / "cache", run_fetch=failing, check_hub=lambda: "", mirror_named=True
    )
    assert folder is None and "\n" not in reason
    assert reason == (
        f"the real datasets are not in HF_NEUTRENO_DATA ({tmp_path / 'absent'}) and fetching them from the Hub failed "
        "(ConnectionError: Couldn't reach 'uoft-cs/cifar10')"
    )


def test_the_users_offline_setting_is_respected(tmp_path):
    folder, reason = real_data.resolve(
        mirror=tmp_path / "absent",
        cache=tmp_path / "cache",
        user_offline="1",
        run_fetch=pytest.fail,
        check_hub=pytest.fail,
        mirror_named=False,
    )
    assert folder is None and "\n" not in reason
    assert reason.startswith(
        "the real datasets are not on this machine (HF_NEUTRENO_DATA is not set) and HF_HUB_OFFLINE=1 is set in your "
        "environment: unset it to fetch them from the Hub once"
    )


def test_the_hub_check_answers_within_its_timeout():
    """A Hub that answers (any HTTP status) counts as reachable; one that does not is named within the timeout."""
    import http.server
    import threading
    import time

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert real_data.hub_unreachable(f"http://127.0.0.1:{server.server_port}", timeout=5) == ""
    finally:
        server.shutdown()
        server.server_close()
    closed = f"http://127.0.0.1:{server.server_port}"  # nothing listens there now
    start = time.monotonic()
    reason = real_data.hub_unreachable(closed, timeout=1)
    assert reason.startswith(f"{closed} did not answer within 1 s: ") and time.monotonic() - start < 5


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
    assert len(skip_lines) == 1 and "the real datasets are not in HF_NEUTRENO_DATA" in skip_lines[0]
    assert "HF_HUB_OFFLINE=1 is set in your environment" in skip_lines[0]


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one process", "xdist"])
def test_without_data_and_network_the_skip_says_so_and_names_no_setting_the_user_never_made(tmp_path, workers):
    """The README's test command on a machine without the data or a network, HF_HUB_OFFLINE unset: the data tests
    skip at once saying the Hub cannot be reached, in one process and in pytest-xdist's workers alike (which inherit
    the tests' own HF_HUB_OFFLINE=1 default and used to blame the user for it)."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    env.update(
        HF_NEUTRENO_DATA=str(tmp_path / "absent"),
        HF_NEUTRENO_TEST_DATA=str(tmp_path / "c"),
        HF_ENDPOINT="http://127.0.0.1:9",  # the discard port: nothing answers, at once
        HF_NEUTRENO_NO_SKIPS="0",
    )
    test = f"{real_data.REPO_ROOT / 'tests' / 'test_real_data.py'}::test_a_missing_dataset_file_is_fetched_again"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-rs", "-p", "no:cacheprovider", *workers],
        cwd=real_data.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skip_lines = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skip_lines) == 1, proc.stdout
    assert "the Hugging Face Hub cannot be reached (http://127.0.0.1:9 did not answer" in skip_lines[0]
    assert "HF_HUB_OFFLINE" not in skip_lines[0] and not (tmp_path / "c").exists()


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
