"""Batch-level Mixup and CutMix (DeiT's recipe, as timm's `Mixup`), the `Trainer` that applies them to training
batches, and the soft-target loss they need."""

import os

import numpy as np
import torch
from transformers import Trainer


class MixupCutmix:
    """Batch-level Mixup / CutMix with label smoothing folded into soft targets (DeiT's recipe, as timm's Mixup).

    Called on a collated batch; each batch is mixed with its reverse. When both alphas are > 0, a batch uses CutMix
    with probability `switch_prob`. Labels become soft targets of shape (batch, num_labels), for
    `soft_target_cross_entropy`. The random draws come from torch's global generator, which Trainer seeds
    (`--seed`) and saves in its checkpoints, so a resumed run mixes exactly as an uninterrupted one; after `seed(n)`
    they come from a CPU generator of their own, seeded with n (`MixupTrainer` does this under several processes).
    """

    def __init__(
        self,
        num_labels: int,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        label_smoothing: float = 0.1,
        switch_prob: float = 0.5,
    ):
        if mixup_alpha < 0 or cutmix_alpha < 0 or (mixup_alpha == 0 and cutmix_alpha == 0):
            raise ValueError(
                f"`mixup_alpha` ({mixup_alpha}) and `cutmix_alpha` ({cutmix_alpha}) must be >= 0, one of them > 0."
            )
        self.num_labels = num_labels
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha
        self.label_smoothing, self.switch_prob = label_smoothing, switch_prob
        self.rng_state: torch.Tensor | None = None  # None: torch's global generator

    def seed(self, seed: int) -> None:
        """Draw from a CPU generator of this object's own, seeded with `seed`, from now on (its state: `rng_state`)."""
        self.rng_state = torch.Generator().manual_seed(seed).get_state()

    @staticmethod
    def _uniform() -> float:
        return float(torch.rand(()))

    @staticmethod
    def _beta(alpha: float) -> float:
        return float(torch.distributions.Beta(alpha, alpha).sample())

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.rng_state is None:
            return self._mix(batch)
        with torch.random.fork_rng(devices=[]):  # the draws are CPU draws: the global CPU generator, swapped
            torch.set_rng_state(self.rng_state)
            mixed = self._mix(batch)
            self.rng_state = torch.get_rng_state()
        return mixed

    def _mix(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        pixels, labels = batch["pixel_values"], batch["labels"]
        off = self.label_smoothing / self.num_labels
        targets = torch.full((labels.shape[0], self.num_labels), off, device=labels.device)
        targets.scatter_(1, labels.view(-1, 1), 1.0 - self.label_smoothing + off)
        use_cutmix = self.cutmix_alpha > 0 and (self.mixup_alpha == 0 or self._uniform() < self.switch_prob)
        alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
        lam = self._beta(alpha)
        flipped = pixels.flip(0)
        if use_cutmix:
            height, width = pixels.shape[-2:]
            cut_h, cut_w = int(height * np.sqrt(1 - lam)), int(width * np.sqrt(1 - lam))
            cy, cx = int(self._uniform() * height), int(self._uniform() * width)
            y0, y1 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
            x0, x1 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
            pixels = pixels.clone()
            pixels[..., y0:y1, x0:x1] = flipped[..., y0:y1, x0:x1]
            lam = 1 - (y1 - y0) * (x1 - x0) / (height * width)  # the area actually kept
        else:
            pixels = lam * pixels + (1 - lam) * flipped
        return {**batch, "pixel_values": pixels, "labels": lam * targets + (1 - lam) * targets.flip(0)}


class MixupTrainer(Trainer):
    """`Trainer` that mixes training batches (Mixup/CutMix) in the training step, as timm does; evaluation batches
    are left alone. Pair it with `compute_loss_func=soft_target_cross_entropy`.

    Under several processes (DDP, FSDP) each rank draws its own Mixup/CutMix values, as DeiT's, which seeds rank r
    with `seed + r` (facebookresearch/deit, main.py): Trainer seeds every rank's global generator alike, so they
    would all mix with the same λ and CutMix box. The mixup's own generator is seeded `--seed` + rank and saved in
    each checkpoint (`mixup_rng_state_<rank>.pth`), so a resumed run mixes as an uninterrupted one. Such a run is
    therefore not the one-process run with the same global batch (which draws one λ for the whole batch), whereas
    without Mixup it is (tests/test_distributed.py). One process draws from the global generator as before.
    """

    def __init__(self, *args, mixup: MixupCutmix, **kwargs):
        super().__init__(*args, **kwargs)
        self.mixup = mixup
        if self.args.world_size > 1:
            self.mixup.seed(self.args.seed + self.args.process_index)

    def _mixup_rng_file(self, folder: str) -> str:
        return os.path.join(folder, f"mixup_rng_state_{self.args.process_index}.pth")

    def _save_rng_state(self, output_dir: str) -> None:
        super()._save_rng_state(output_dir)
        if self.mixup.rng_state is not None:
            torch.save(self.mixup.rng_state, self._mixup_rng_file(output_dir))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        if (
            checkpoint is not None
            and self.mixup.rng_state is not None
            and os.path.isfile(self._mixup_rng_file(checkpoint))
        ):
            self.mixup.rng_state = torch.load(self._mixup_rng_file(checkpoint), weights_only=True)

    def training_step(self, model, inputs, num_items_in_batch=None):
        return super().training_step(model, self.mixup(inputs), num_items_in_batch)


def soft_target_cross_entropy(outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """`Trainer(compute_loss_func=...)`: cross-entropy against soft targets (Mixup/CutMix), or class indices.

    Trainer passes `num_items_in_batch`, the number of samples in the whole accumulated (and, under DDP, global)
    batch, and then neither divides a `compute_loss_func` loss by the accumulation steps nor leaves DDP's averaging
    alone; so the loss is the sum over this micro-batch divided by that number, not the micro-batch mean.
    """
    logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
    if labels.dtype.is_floating_point and labels.shape == logits.shape:
        per_sample = torch.sum(-labels * torch.log_softmax(logits.float(), dim=-1), dim=-1)
    else:
        per_sample = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    if num_items_in_batch is None:
        return per_sample.mean()
    return per_sample.sum() / num_items_in_batch


__all__ = ["MixupCutmix", "MixupTrainer", "soft_target_cross_entropy"]
