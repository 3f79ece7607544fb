"""`examples/run_image_classification.py` trains on the real Fashion-MNIST with Trainer."""

import pytest

from examples_loader import load_example

CHANCE = 0.1  # 10 balanced classes


@pytest.mark.slow
def test_trainer_on_fashion_mnist_learns(data_dir, tmp_path):
    example = load_example("run_image_classification")
    out = tmp_path / "run"
    metrics, trainer = example.main(
        [
            "--model_name_or_path",
            "deit-tiny",
            "--config_overrides",
            "num_hidden_layers=2,hidden_size=64,num_attention_heads=4,intermediate_size=128",
            "--image_size",
            "28",
            "--patch_size",
            "7",
            "--neutreno_lambda",
            "0.6",
            "--dataset_name",
            str(data_dir / "fashion_mnist"),
            "--max_train_samples",
            "3000",
            "--max_eval_samples",
            "500",
            "--output_dir",
            str(out),
            "--num_train_epochs",
            "3",
            "--per_device_train_batch_size",
            "32",
            "--per_device_eval_batch_size",
            "128",
            "--learning_rate",
            "2e-3",
            "--warmup_steps",
            "0.1",
            "--lr_scheduler_type",
            "cosine",
            "--logging_steps",
            "20",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
            "--seed",
            "0",
        ]
    )
    assert metrics["eval_accuracy"] > 4 * CHANCE, metrics
    # The example saves the model with its code and the image processor: a checkpoint users can load.
    saved = set(p.name for p in out.iterdir())
    assert {"config.json", "model.safetensors", "modeling_neutreno_vit.py", "preprocessor_config.json"} <= saved
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) >= 3 and losses[-1] < losses[0] - 0.3, losses
