"""The example scripts continue an interrupted run from its last checkpoint, as transformers' run_*.py do:
`--resume-from-checkpoint` with no path (or `true`) picks the last `checkpoint-*` of `--output-dir`, and the resumed
run ends with the weights of the uninterrupted one. `--overwrite-output-dir` trains afresh into a finished run's
folder. (Refusals of bad input: tests/test_validation.py.)"""

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from examples_loader import load_example
from hf_neutreno.examples.scripts import whole_run_training_loss

TINY = [
    "--config-overrides",
    "num_hidden_layers=2,hidden_size=16,num_attention_heads=2,intermediate_size=32",
    "--image-size",
    "28",
    "--patch-size",
    "7",
    "--max-train-samples",
    "32",
    "--max-eval-samples",
    "8",
    "--per-device-train-batch-size",
    "8",
    "--max-steps",
    "4",
    "--save-strategy",
    "steps",
    "--save-steps",
    "2",
    "--logging-steps",
    "1",
    "--report-to",
    "none",
    "--learning-rate",
    "3e-3",
]


def _run(data_dir, output_dir, *extra):
    return load_example("run_image_classification").main(
        ["--dataset-name", str(data_dir / "fashion_mnist"), "--output-dir", str(output_dir), *TINY, *extra]
    )


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    torch.set_num_threads(1)  # as the tests' own runs (conftest): the thread count changes the rounding
    output_dir = tmp_path_factory.mktemp("examples") / "full"
    _run(data_dir, output_dir)
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    return output_dir


@pytest.mark.parametrize("spelling", [[], ["true"]], ids=["no path", "true"])
def test_resume_from_the_last_checkpoint_ends_as_the_uninterrupted_run(spelling, uninterrupted, data_dir, tmp_path):
    interrupted = tmp_path / "run"  # what a run killed after its step-2 checkpoint leaves
    shutil.copytree(uninterrupted / "checkpoint-2", interrupted / "checkpoint-2")
    metrics, trainer = _run(data_dir, interrupted, "--resume-from-checkpoint", *spelling)
    assert trainer.state.global_step == 4
    # The reported loss is the whole run's, steps 1-2 included (Trainer's own covers the resumed steps only).
    whole = json.loads((uninterrupted / "all_results.json").read_text())
    assert metrics["resumed_from_step"] == 2
    assert metrics["train_loss"] == pytest.approx(whole["train_loss"], rel=1e-6)
    steps = [entry["step"] for entry in trainer.state.log_history if "loss" in entry]
    assert steps == [1, 2, 3, 4]  # steps 1-2 come from the checkpoint's log, 3-4 were trained now
    expected, got = _weights(uninterrupted), _weights(interrupted)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def test_overwrite_output_dir_trains_afresh_into_a_finished_run(uninterrupted, data_dir, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(uninterrupted, folder)
    (folder / "checkpoint-6").mkdir()  # a later checkpoint of the replaced run: it must not survive
    shutil.copytree(uninterrupted / "checkpoint-4", folder / "checkpoint-6", dirs_exist_ok=True)
    _run(data_dir, folder, "--overwrite-output-dir")
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    expected, got = _weights(uninterrupted), _weights(folder)
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.slow
def test_eigen_example_resumes_an_interrupted_run_with_the_uninterrupted_results(data_dir, tmp_path, monkeypatch):
    """run_eigen_vit.py trains one model per variant and fraction. Stopped while scoring its second run (after that
    run's checkpoint), it resumes with the first run kept, the second continued from its checkpoint, the rest
    trained: results.json as an uninterrupted run's."""
    import transformers

    argv = [
        "--dataset",
        str(data_dir / "cifar10"),
        "--quick",
        "--variants",
        "softmax",
        "vit-minus",
        "--fractions",
        "1.0",
        "0.5",
        "--corruptions",
        "gaussian_noise",
        "--severities",
        "0",
        "5",
        "--max-train-samples",
        "16",
        "--max-eval-samples",
        "8",
        "--batch-size",
        "8",
        "--max-steps",
        "2",
        "--spectral-samples",
        "2",
        "--no-augment",
    ]
    example = load_example("run_eigen_vit")
    full = example.main([*argv, "--output-dir", str(tmp_path / "full")])

    scored, accuracy = [], example.accuracy

    def stop_at_the_second_score(*args, **kwargs):
        scored.append(1)
        if len(scored) == 1:  # vit at 50 %, after its training (the 100 % runs are scored by corruption_accuracy)
            raise KeyboardInterrupt
        return accuracy(*args, **kwargs)

    monkeypatch.setattr(example, "accuracy", stop_at_the_second_score)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        example.main([*argv, "--output-dir", str(out)])
    assert [p.name for p in (out / "softmax_50pct").glob("checkpoint-*")] == ["checkpoint-2"]
    trained, train = [], transformers.Trainer.train

    def recording_train(self, *args, **kwargs):
        trained.append((self.args.output_dir, kwargs.get("resume_from_checkpoint")))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "train", recording_train)
    resumed = example.main([*argv, "--output-dir", str(out), "--resume-from-checkpoint"])
    assert trained == [
        (str(out / "softmax_50pct"), str(out / "softmax_50pct" / "checkpoint-2")),
        (str(out / "vit-minus_100pct"), None),
        (str(out / "vit-minus_50pct"), None),
    ]
    for key in ("data_efficiency", "robustness", "spectral", "complete"):
        assert resumed[key] == full[key], key
    assert not any(out.glob("*/checkpoint-*"))  # a finished run's checkpoints are removed


def test_whole_run_training_loss_weights_each_logged_mean_by_its_steps():
    # Logged every 2 steps (each entry the mean of its 2 steps), resumed at step 4, 2 more steps at mean 0.5.
    state = SimpleNamespace(
        global_step=6,
        log_history=[
            {"loss": 3.0, "step": 2},
            {"loss": 2.0, "step": 4},
            {"loss": 0.5, "step": 6},
            {"train_loss": 0.5, "step": 6},
        ],
    )
    assert whole_run_training_loss(state, 0.5, resumed_at=4) == pytest.approx((3.0 * 2 + 2.0 * 2 + 0.5 * 2) / 6)
    assert whole_run_training_loss(state, 0.0, resumed_at=6) == pytest.approx((3.0 * 2 + 2.0 * 2 + 0.5 * 2) / 6)
    assert whole_run_training_loss(state, 1.25, resumed_at=0) == 1.25  # not resumed: Trainer's own
    # Resumed at step 5: the logs stop at step 4, so step 5's loss is unknown and no mean is made up.
    assert whole_run_training_loss(state, 0.5, resumed_at=5) is None
