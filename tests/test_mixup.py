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
