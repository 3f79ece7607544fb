"""Metrics through one path: `evaluate`'s module where it loads (its scripts live on the Hub), else the same
definition computed directly, offline.

    metric = evaluate_metric("accuracy")       # evaluate's module, or None: compute it directly
    Trainer(..., compute_metrics=accuracy_metrics)

`accuracy_metrics` (classification, for `Trainer`) and `hf_neutreno.data.segmentation.mean_iou` both go through
`evaluate_metric`; `accuracy` scores a model on preprocessed images directly.
"""

import functools
import logging
import os

import numpy as np
import torch

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "evaluate", "direct")
_TRUTHY = ("1", "on", "yes", "true")
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE")


def hub_offline() -> bool:
    """Whether the user switched the Hub off for `evaluate` (`HF_HUB_OFFLINE` or `HF_EVALUATE_OFFLINE`)."""
    return any(os.environ.get(name, "").strip().lower() in _TRUTHY for name in _OFFLINE_VARIABLES)


def evaluate_metric(name: str, backend: str = "auto"):
    """`evaluate.load(name)`, or None where the direct computation is to be used.

    `backend`: `"evaluate"` loads it or raises why it cannot (no Hub, no cache, no package); `"direct"` returns None;
    `"auto"` (default) returns None without trying when the Hub is switched off (`hub_offline`), and when loading
    fails (logged at INFO, tried once per process: an unreachable Hub costs a timeout).
    """
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {list(BACKENDS)}, got {backend!r}.")
    if backend == "direct" or (backend == "auto" and hub_offline()):
        return None
    if backend == "evaluate":
        import evaluate

        return evaluate.load(name)
    return _load_once(name)


@functools.cache
def _load_once(name: str):
    try:
        import evaluate

        return evaluate.load(name)
    except Exception as error:  # datasets/evaluate raise many kinds: unreachable Hub, no cache, no package
        logger.info("evaluate.load(%r) failed (%s); computing it directly with the same definition.", name, error)
        return None


def accuracy_metrics(eval_pred) -> dict[str, float]:
    """`compute_metrics` for classification: top-1 `accuracy` (evaluate's where it loads, else the fraction of
    predictions equal to their label, its definition), and `top5_accuracy` with more than 5 classes."""
    logits, labels = eval_pred.predictions, eval_pred.label_ids
    logits = logits[0] if isinstance(logits, tuple) else logits
    predictions = logits.argmax(-1)
    metric = evaluate_metric("accuracy")
    if metric is not None:
        top1 = float(metric.compute(predictions=predictions, references=labels)["accuracy"])
    else:
        top1 = float((predictions == labels).mean())
    metrics = {"accuracy": top1}
    if logits.shape[-1] > 5:
        top5 = np.argsort(-logits, axis=-1)[:, :5]
        metrics["top5_accuracy"] = float((top5 == labels[:, None]).any(-1).mean())
    return metrics


@torch.no_grad()
def accuracy(model, pixel_values: torch.Tensor, labels: torch.Tensor, batch_size: int = 250) -> float:
    """Top-1 accuracy of `model` on preprocessed images, in eval mode (the caller restores training mode)."""
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for chunk, target in zip(pixel_values.split(batch_size), labels.split(batch_size)):
        correct += (model(pixel_values=chunk.to(device)).logits.argmax(-1).cpu() == target).sum().item()
    return correct / len(labels)


__all__ = ["BACKENDS", "accuracy", "accuracy_metrics", "evaluate_metric", "hub_offline"]
