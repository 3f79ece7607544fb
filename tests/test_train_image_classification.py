"""`examples/run_image_classification.py` trains on the real Fashion-MNIST with Trainer."""

import pytest

from examples_loader import fashion_mnist_flags, load_example, trainer_flags

CHANCE = 0.1  # 10 balanced classes


@pytest.mark.slow
def test_trainer_on_fashion_mnist_learns(data_dir, tmp_path):
    example = load_example("run_image_classification")
    out = tmp_path / "run"
    metrics, trainer = example.main(
        [
            *fashion_mnist_flags(
                data_dir, "num_hidden_layers=2,hidden_size=64,num_attention_heads=4,intermediate_size=128"
            ),
            *trainer_flags(out),
            *"--neutreno_lambda 0.6 --max_train_samples 3000 --max_eval_samples 500 --num_train_epochs 3".split(),
            *"--per_device_train_batch_size 32 --per_device_eval_batch_size 128 --learning_rate 2e-3".split(),
            *"--warmup_steps 0.1 --lr_scheduler_type cosine --logging_steps 20 --seed 0".split(),
        ]
    )
    assert metrics["eval_accuracy"] > 4 * CHANCE, metrics
    # The example saves the model with its code and the image processor: a checkpoint users can load.
    saved = set(p.name for p in out.iterdir())
    assert {"config.json", "model.safetensors", "modeling_neutreno_vit.py", "preprocessor_config.json"} <= saved
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) >= 3 and losses[-1] < losses[0] - 0.3, losses
