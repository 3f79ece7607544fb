"""Distributed training through Trainer: a real 2-process DDP run on CPU (gloo) of the image-classification example,
against a single-process run with the same global batch; the launcher configs in examples/accelerate_configs/."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate.commands.config.config_args import load_config_from_file
from transformers import Trainer

from cli_process import run_torchrun
from examples_loader import EXAMPLES, fashion_mnist_flags, load_example, trainer_flags
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.examples.mixup import soft_target_cross_entropy
from hf_neutreno.examples.scripts import check_distributed_launch
from tiny_models import FASHION_VIT, fashion_mnist, training_args

TESTS = Path(__file__).resolve().parent
PER_DEVICE_BATCH = 16


def example_args(data_dir: Path, output_dir: Path, per_device_batch: int) -> list[str]:
    # Deterministic apart from the data order: no dropout, no drop path, no augmentation; Trainer shuffles with
    # the same seed in both runs (accelerate's seedable sampler), over 2 epochs so the reshuffle is covered too.
    return [
        *fashion_mnist_flags(data_dir),
        *trainer_flags(output_dir, use_cpu=True),  # --use_cpu: without it Trainer does not join CPU processes (below)
        *"--neutreno_lambda 0.6 --max_train_samples 256 --max_eval_samples 64 --num_train_epochs 2".split(),
        *("--learning_rate", "2e-3", "--per_device_train_batch_size", str(per_device_batch)),
        *"--logging_steps 1 --eval_strategy no --seed 0".split(),
    ]


@pytest.mark.slow
def test_ddp_two_processes_match_one_process_with_the_same_global_batch(data_dir, tmp_path):
    """2 ranks × batch 16 under torchrun (gloo) == 1 process × batch 32.

    DDP averages the gradients of the two ranks' batch means, which is the gradient of the mean over the union, and
    accelerate's seedable sampler gives rank r the sampler batches r, r + 2, ..., so each global step sees the same 32
    images as the single-process step. What differs is only the fp32 summation order (per-rank means, then an
    all-reduce, against one mean over 32): about 1e-7 relative. Tolerances: logged loss 1e-5 (measured: ~3e-7);
    weights 1e-4 after 16 AdamW steps at lr 2e-3 (measured: ~1e-5), looser because Adam divides by sqrt(v), which
    magnifies the rounding difference in coordinates whose gradient is near zero.
    """
    out = tmp_path / "ddp"
    out.mkdir()
    worker_args = [str(out), *example_args(data_dir, out / "run", PER_DEVICE_BATCH)]
    proc = run_torchrun(TESTS / "ddp_example_worker.py", *worker_args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    logs = [json.loads((out / f"log_rank{r}.json").read_text()) for r in (0, 1)]
    weights = [torch.load(out / f"weights_rank{r}.pt") for r in (0, 1)]
    assert [log["world_size"] for log in logs] == [2, 2]
    assert {log["wrapped"] for log in logs} == {"DistributedDataParallel"}
    # (a) DDP keeps the replicas in lockstep: bitwise identical weights on both ranks.
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name

    # (b) The same training in one process with the global batch.
    _, trainer = load_example("run_image_classification").main(
        example_args(data_dir, tmp_path / "single", 2 * PER_DEVICE_BATCH)
    )
    single_losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert logs[0]["steps"] == trainer.state.global_step == 16  # 256 images / 32 per step × 2 epochs
    assert torch.allclose(torch.tensor(logs[0]["losses"]), torch.tensor(single_losses), rtol=0, atol=1e-5), (
        logs[0]["losses"],
        single_losses,
    )
    single_weights = trainer.model.state_dict()
    worst = max((weights[0][k] - single_weights[k]).abs().max().item() for k in single_weights)
    assert worst < 1e-4, worst
    assert single_losses[-1] < single_losses[0]  # it trained


@pytest.mark.slow
def test_soft_target_loss_with_gradient_accumulation_equals_the_large_batch(data_dir, tmp_path):
    """`compute_loss_func=soft_target_cross_entropy` (the Mixup/CutMix path) follows Trainer's batch normalisation:
    2 accumulated micro-batches of 8 give the update of one batch of 16. The same `num_items_in_batch` contract makes
    the loss right under DDP, where Trainer multiplies a compute_loss_func loss by the number of processes.
    SGD makes the update linear in the gradient, so the tolerance is fp32 rounding (1e-6)."""
    from hf_neutreno.data.image_transforms import collate_images

    data = fashion_mnist(data_dir, "test", 64)
    config = NeuTRENOViTConfig(**dict(FASHION_VIT, num_hidden_layers=2))
    torch.manual_seed(0)
    initial = NeuTRENOViTForImageClassification(config).state_dict()

    def train(batch: int, accumulation: int, output_dir: str) -> dict[str, torch.Tensor]:
        model = NeuTRENOViTForImageClassification(config)
        model.load_state_dict(initial)
        args = training_args(
            output_dir,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=4,
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="constant",
            max_grad_norm=0,
            train_sampling_strategy="sequential",
            remove_unused_columns=False,
        )
        Trainer(
            model=model,
            args=args,
            train_dataset=data,
            data_collator=collate_images,
            compute_loss_func=soft_target_cross_entropy,
        ).train()
        return model.state_dict()

    large = train(16, 1, str(tmp_path / "large"))
    accumulated = train(8, 2, str(tmp_path / "accumulated"))
    moved = max((large[k] - initial[k]).abs().max().item() for k in large)
    worst = max((large[k] - accumulated[k]).abs().max().item() for k in large)
    assert moved > 1e-2 and worst < 1e-6, (moved, worst)


def test_processes_that_trainer_does_not_join_are_an_error(monkeypatch):
    """torchrun on a machine without GPUs and without --use_cpu: Trainer's `world_size` stays 1 in every process
    (seen in a real 2-process launch: two different sets of weights), so each would silently train its own copy.
    `check_distributed_launch`, called by the examples before loading data, compares the launcher's WORLD_SIZE with
    Trainer's. (A launch costs ~10 s of imports, so Trainer's side is stubbed here; the DDP test covers the join.)"""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="launched as 2 processes.*--use_cpu"):
        check_distributed_launch(SimpleNamespace(world_size=1))
    check_distributed_launch(SimpleNamespace(world_size=2))  # joined: fine
    monkeypatch.delenv("WORLD_SIZE")
    check_distributed_launch(SimpleNamespace(world_size=1))  # a plain single-process run


@pytest.mark.parametrize("name", ["single_gpu_bf16", "multi_gpu_ddp", "multi_node_ddp", "fsdp"])
def test_accelerate_configs_are_valid(name):
    """Each config loads with accelerate's own loader (unknown or misspelled fields raise there)."""
    config = load_config_from_file(str(EXAMPLES / "accelerate_configs" / f"{name}.yaml"))
    expected = {"single_gpu_bf16": "NO", "multi_gpu_ddp": "MULTI_GPU", "multi_node_ddp": "MULTI_GPU", "fsdp": "FSDP"}
    assert config.distributed_type.value == expected[name]
    assert config.mixed_precision == "bf16"
    if name == "multi_node_ddp":
        assert config.num_machines == 2 and config.main_process_ip and config.main_process_port
    if name == "fsdp":
        assert config.fsdp_config["fsdp_version"] == 2
        # TRANSFORMER_BASED_WRAP with no class list wraps the model's `_no_split_modules`: our blocks.
        assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert "fsdp_transformer_layer_cls_to_wrap" not in config.fsdp_config
        assert "NeuTRENOViTLayer" in NeuTRENOViTForImageClassification._no_split_modules
