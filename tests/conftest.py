"""Shared fixtures: where the real datasets are, small deterministic settings for every test, and the `slow` tier.

Tests marked `@pytest.mark.slow` (whole documented commands, training runs, the GPU tier's smoke run) run only when
`RUN_SLOW=1` is set, as in `transformers`; `.ci/run` sets it, so CI runs both tiers.
"""

import os
from pathlib import Path

import pytest
import torch

import real_data

USER_OFFLINE = os.environ.get("HF_HUB_OFFLINE")  # the user's own setting, before the tests' default below
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub (a dataset fetch runs in a child process)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


RUN_SLOW = _truthy(os.environ.get("RUN_SLOW"))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a whole documented command or a training run; runs with RUN_SLOW=1")


# The files with the longest slow tests (minutes each), longest first. With RUN_SLOW=1 they are collected before the
# others: pytest-xdist's `--dist worksteal` (the README's command) gives each worker a contiguous half of the collection
# and lets an idle worker take tests from the end of the other's, so the long tests start at once and the short ones
# fill in at the end, instead of one worker starting a five-minute test when the other is nearly done.
LONGEST_FIRST = (
    "test_run_all.py",
    "test_compare.py",
    "test_example_commands.py",
    "test_reproduce.py",
    "test_segmenter.py",
    "test_readme.py",
    "test_neutreno_gpt.py",
    "test_value_path.py",
    "test_value_path_stack.py",  # the sweeps of every transformers class: about a minute each
    "test_value_path_architectures.py",
)


def pytest_collection_modifyitems(config, items):
    if RUN_SLOW:
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
        return
    skip = pytest.mark.skip(reason="slow test: set RUN_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    # pytest-xdist, in the main process: each worker starts from this process's environment, where the tests' default
    # HF_HUB_OFFLINE=1 is already set, and would take it for the user's own. Hand the user's setting over instead.
    node.workerinput["user_hub_offline"] = USER_OFFLINE


@pytest.fixture(scope="session")
def data_dir(request):
    """The real datasets: the local mirror (`HF_NEUTRENO_DATA`), else the same datasets fetched from the Hub once
    (tests/real_data.py), else the test is skipped with the reason."""
    worker = getattr(request.config, "workerinput", None)  # set in a pytest-xdist worker
    folder, reason = real_data.resolve(user_offline=worker["user_hub_offline"] if worker else USER_OFFLINE)
    if folder is None:
        pytest.skip(reason)
    return folder


@pytest.fixture
def interrupt_neutreno_training(monkeypatch):
    """Ctrl-C in the first training step of every model with the NeuTRENO term (λ > 0): a `compare` run stops in its
    NeuTRENO training, after its softmax run. The test lifts it with `monkeypatch.undo()`."""
    import transformers

    step = transformers.Trainer.training_step

    def interrupt_neutreno(self, model, *args, **kwargs):
        if model.config.neutreno_lambda > 0:
            raise KeyboardInterrupt
        return step(self, model, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "training_step", interrupt_neutreno)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny models gain nothing from threads, and threads spin badly on a busy 2-core box
    yield


@pytest.fixture
def fresh_compiler():
    """A test's fullgraph compiles counted from zero: dynamo counts the compiles of each code object over the
    process, and transformers' forward decorators share one across models, so the compiles of earlier tests in the
    same worker could exhaust a fullgraph compile's recompile limit (8), depending on which tests the worker ran."""
    torch.compiler.reset()
    yield


CONTRACT = Path(__file__).resolve().parent / "contract"


def pytest_sessionfinish(session, exitstatus):
    # CI sets HF_NEUTRENO_NO_SKIPS=1: there every dataset and extra is installed, so a skip means a broken set-up.
    # The slow tier skipping itself (RUN_SLOW unset) is not one, nor are the skips of the contract suite
    # (tests/contract/): upstream tests that do not apply, each named with its reason (docs/contract.md).
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [
        report
        for report in (reporter.stats.get("skipped", []) if reporter else [])
        if "RUN_SLOW" not in str(report.longrepr)
        and not (session.config.rootpath / report.nodeid.split("::")[0]).resolve().is_relative_to(CONTRACT)
    ]
    if os.environ.get("HF_NEUTRENO_NO_SKIPS") == "1" and skipped and session.exitstatus == 0:
        reporter.write_line(f"HF_NEUTRENO_NO_SKIPS=1: {len(skipped)} test(s) skipped; failing the run.", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
