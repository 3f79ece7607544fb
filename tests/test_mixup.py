"""Mixup/CutMix (`hf_neutreno.examples.mixup`) against the definitions: Mixup blends each image and its soft target with
the batch reversed by one λ; CutMix pastes a box of the reversed batch and weights the targets by the area kept."""

import pytest
import torch

from hf_neutreno.examples.mixup import MixupCutmix, soft_target_cross_entropy

CLASSES, SMOOTHING = 5, 0.1


def _batch():
    torch.manual_seed(0)
    return {"pixel_values": torch.rand(4, 3, 8, 8), "labels": torch.tensor([0, 3, 1, 4])}


def _smoothed(labels):
    targets = torch.full((len(labels), CLASSES), SMOOTHING / CLASSES)
    targets[torch.arange(len(labels)), labels] += 1 - SMOOTHING
    return targets


def test_mixup_blends_images_and_targets_with_one_lambda():
    batch = _batch()
    mixed = MixupCutmix(CLASSES, mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=SMOOTHING)(batch)
    targets, flipped = _smoothed(batch["labels"]), _smoothed(batch["labels"]).flip(0)
    lam = ((mixed["labels"] - flipped) / (targets - flipped))[0, 0].item()  # the λ the targets were mixed with
    assert 0 <= lam <= 1
    assert torch.allclose(mixed["labels"], lam * targets + (1 - lam) * flipped, atol=1e-6)
    x = batch["pixel_values"]
    assert torch.allclose(mixed["pixel_values"], lam * x + (1 - lam) * x.flip(0), atol=1e-6)
    assert torch.allclose(mixed["labels"].sum(-1), torch.ones(4))


def test_cutmix_pastes_a_box_and_weights_targets_by_the_area_kept():
    batch, boxes = _batch(), 0
    for seed in range(5):
        torch.manual_seed(seed)
        mixed = MixupCutmix(CLASSES, mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=SMOOTHING)(batch)
        x, out = batch["pixel_values"], mixed["pixel_values"]
        pasted = (out != x).any(dim=(0, 1))  # the box (the reversed batch differs from the batch everywhere here)
        assert torch.equal(out[..., pasted], x.flip(0)[..., pasted]) and torch.equal(out[..., ~pasted], x[..., ~pasted])
        rows, cols = pasted.any(1).nonzero(), pasted.any(0).nonzero()
        if len(rows):  # a rectangle
            boxes += 1
            assert pasted[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1].all()
        lam = 1 - pasted.float().mean().item()
        targets = _smoothed(batch["labels"])
        assert torch.allclose(mixed["labels"], lam * targets + (1 - lam) * targets.flip(0), atol=1e-6)
    assert boxes >= 3


def test_soft_target_cross_entropy_is_cross_entropy_summed_over_the_accumulated_batch():
    logits, labels = torch.randn(6, CLASSES), torch.tensor([0, 1, 2, 3, 4, 0])
    one_hot = torch.nn.functional.one_hot(labels, CLASSES).float()
    expected = torch.nn.functional.cross_entropy(logits, labels)
    assert soft_target_cross_entropy({"logits": logits}, one_hot) == pytest.approx(expected.item(), rel=1e-6)
    assert soft_target_cross_entropy({"logits": logits}, labels) == pytest.approx(expected.item(), rel=1e-6)
    summed = soft_target_cross_entropy({"logits": logits}, one_hot, num_items_in_batch=12)
    assert summed == pytest.approx(expected.item() * 6 / 12, rel=1e-6)


def _rank_trainer(monkeypatch, tmp_path, rank: int, world_size: int = 2):
    """A MixupTrainer as rank `rank` of `world_size` processes sees itself (TrainingArguments' rank properties)."""
    from transformers import TrainingArguments

    from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
    from hf_neutreno.examples.mixup import MixupTrainer

    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: world_size))
    monkeypatch.setattr(TrainingArguments, "process_index", property(lambda self: rank))
    args = TrainingArguments(str(tmp_path), seed=7, use_cpu=True, report_to="none")
    config = NeuTRENOViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    model = NeuTRENOViTForImageClassification(config)
    mixup = MixupCutmix(CLASSES, 0.8, 1.0, SMOOTHING)
    return MixupTrainer(model=model, args=args, mixup=mixup, compute_loss_func=soft_target_cross_entropy)


def _deit_rank_draws(seed: int, rank: int, steps: int) -> list[torch.Tensor]:
    """DeiT's draws on rank `rank`: the global generator seeded `seed + rank` (deit/main.py), then Mixup/CutMix."""
    batches = [_batch() for _ in range(steps)]  # (`_batch` seeds the global generator itself)
    torch.manual_seed(seed + rank)
    mixup = MixupCutmix(CLASSES, 0.8, 1.0, SMOOTHING)
    return [mixup(batch)["labels"] for batch in batches]


def test_each_ddp_rank_draws_its_own_values_as_deit_seeds_them(monkeypatch, tmp_path):
    targets = {}
    for rank in (0, 1):
        trainer = _rank_trainer(monkeypatch, tmp_path, rank)
        torch.manual_seed(123)  # the global generator, alike on every rank under Trainer, does not decide the draws
        targets[rank] = [trainer.mixup(_batch())["labels"] for _ in range(4)]
        for got, expected in zip(targets[rank], _deit_rank_draws(7, rank, 4)):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(targets[0], targets[1]))


def test_a_resumed_ddp_rank_mixes_as_an_uninterrupted_one(monkeypatch, tmp_path):
    trainer = _rank_trainer(monkeypatch, tmp_path, rank=1)
    trainer.mixup(_batch())
    trainer._save_rng_state(str(tmp_path))  # a checkpoint after one step
    uninterrupted = [trainer.mixup(_batch())["labels"] for _ in range(3)]
    resumed = _rank_trainer(monkeypatch, tmp_path, rank=1)
    resumed._load_rng_state(str(tmp_path))
    for got, expected in zip([resumed.mixup(_batch())["labels"] for _ in range(3)], uninterrupted):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_one_process_draws_from_the_global_generator(monkeypatch, tmp_path):
    trainer = _rank_trainer(monkeypatch, tmp_path, rank=0, world_size=1)
    batch = _batch()
    torch.manual_seed(5)
    got = trainer.mixup(batch)["labels"]
    torch.manual_seed(5)
    torch.testing.assert_close(got, MixupCutmix(CLASSES, 0.8, 1.0, SMOOTHING)(batch)["labels"], rtol=0, atol=0)
