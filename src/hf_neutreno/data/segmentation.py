"""Semantic segmentation around `NeuTRENOViTForSemanticSegmentation`: the image processor, Segmenter's multi-scale
inference and the metrics (mean IoU, pixel accuracy, per-class IoU).

Single-scale evaluation (the paper's SS) is the model's own `sliding_window_logits`; `multi_scale_probabilities` is
its multi-scale evaluation with flips (MS). The metrics follow `evaluate`'s `mean_iou` (the mmsegmentation
definitions): `MeanIoU` accumulates them over batches, `mean_iou` takes whole lists of maps and uses
`evaluate.load("mean_iou")` where it loads, else the same computation done here (`hf_neutreno.data.scores`).
"""

import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from transformers import SegformerImageProcessorPil

from .scores import evaluate_metric

# Segmenter's multi-scale evaluation (mmsegmentation's ADE20K ratios), each also flipped horizontally.
MS_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)


def make_image_processor(config, **kwargs) -> SegformerImageProcessorPil:
    """The image processor to save with a segmentation checkpoint: `transformers`' Segformer processor (PIL
    backend: resize to `config.image_size`, rescale, ImageNet mean/std as DeiT, label maps resized with nearest
    neighbour, `do_reduce_labels`, `post_process_semantic_segmentation`), so that `AutoImageProcessor` and the
    `image-segmentation` pipeline load it without this package. `kwargs` override its settings (e.g.
    `do_reduce_labels=True` for ADE20K's `scene_parse_150`, whose label 0 is "other"; `image_mean`/`image_std`
    of 0.5 for ViT-normalised backbones)."""
    height, width = config.image_size_2d
    return SegformerImageProcessorPil(**{"size": {"height": height, "width": width}, **kwargs})


def multi_scale_probabilities(
    model: nn.Module,
    pixel_values: torch.Tensor,
    scales: Sequence[float] = MS_SCALES,
    flip: bool = True,
    window_size: int | tuple[int, int] | None = None,
    window_stride: int | tuple[int, int] | None = None,
    batch_size: int = 8,
    output_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Class probabilities at `output_size` (default: the images' size), (batch, num_labels, height, width), averaged
    over scales and flips (Segmenter's multi-scale evaluation, the paper's MS).

    For each scale the images are resized by it (bilinear; `pixel_values` at the evaluation size, e.g. a short side of
    512 on ADE20K), and, with `flip`, also mirrored left-right; each copy goes through the model's
    `sliding_window_logits`, its logits are resized (bilinear) to `output_size` and mirrored back, then its softmax is
    averaged with the others': the order of Segmenter's `inference` and `merge_windows` (segm/model/utils.py), which
    resize the merged logits to the original image size before the softmax. Pass the label map's size as
    `output_size` to score at the original size: resizing the probabilities afterwards instead is not the same (the
    softmax does not commute with interpolation). With `scales=(1.0,)` and `flip=False` this is the softmax of the
    single-scale logits (resized). The argmax over classes is the prediction. Runs under `torch.inference_mode()`, in
    eval mode (the model's mode is restored).
    """
    if not scales or any(not scale > 0 for scale in scales):
        raise ValueError(f"`scales` must be a non-empty list of positive numbers, got {list(scales)}.")
    height, width = pixel_values.shape[-2:]
    output_size = (height, width) if output_size is None else tuple(int(side) for side in output_size)
    if len(output_size) != 2 or min(output_size) < 1:
        raise ValueError(f"`output_size` must be (height, width) of positive sizes, got {output_size}.")
    was_training = model.training
    model.eval()
    total = None
    try:
        with torch.inference_mode():
            for scale in scales:
                size = (int(height * scale + 0.5), int(width * scale + 0.5))  # mmsegmentation's rounding
                scaled = (
                    pixel_values
                    if size == (height, width)
                    else nn.functional.interpolate(pixel_values, size=size, mode="bilinear", align_corners=False)
                )
                for mirrored in (False, True) if flip else (False,):
                    images = scaled.flip(-1) if mirrored else scaled
                    logits = model.sliding_window_logits(images, window_size, window_stride, batch_size)
                    if mirrored:
                        logits = logits.flip(-1)
                    if size != output_size:
                        logits = nn.functional.interpolate(
                            logits, size=output_size, mode="bilinear", align_corners=False
                        )
                    probabilities = logits.softmax(dim=1)
                    total = probabilities if total is None else total + probabilities
    finally:
        model.train(was_training)
    return total / (len(scales) * (2 if flip else 1))


class MeanIoU:
    """Mean IoU, pixel accuracy and per-class IoU, accumulated over batches: `evaluate`'s `mean_iou` definitions.

    Per class c over every pixel seen (pixels whose label is `ignore_index` left out): intersection = pixels predicted c
    and labelled c, union = predicted c or labelled c. Returns `mean_iou` (the mean of the per-class IoU over the
    classes present in the predictions or the labels: a class absent from both has IoU NaN, left out),
    `mean_accuracy` (per-class recall averaged over the classes present in the labels), `overall_accuracy` (pixel
    accuracy), `per_category_iou` and `per_category_accuracy` (arrays of `num_labels`, NaN where undefined).
    `label_map` and `reduce_labels` transform the labels first, as in `evaluate` (map, then 0 → 255 and every other
    label − 1). Unlike `evaluate`, which drops them silently, a label outside [0, num_labels − 1] that is not
    `ignore_index`, or such a prediction, raises a `ValueError`.
    """

    def __init__(
        self,
        num_labels: int,
        ignore_index: int = 255,
        label_map: Mapping[int, int] | None = None,
        reduce_labels: bool = False,
    ):
        if num_labels < 1:
            raise ValueError(f"`num_labels` must be >= 1, got {num_labels}.")
        self.num_labels = num_labels
        self.ignore_index = ignore_index
        self.label_map = dict(label_map) if label_map else None
        self.reduce_labels = reduce_labels
        self.reset()

    def reset(self) -> None:
        # confusion[label, prediction]: pixel counts
        self.confusion = torch.zeros(self.num_labels, self.num_labels, dtype=torch.int64)

    def update(self, predictions, references) -> None:
        """Add maps: tensors or arrays of shape (batch, height, width) or (height, width), or lists of them (each
        prediction the size of its reference)."""
        if _is_single(predictions) != _is_single(references):
            raise ValueError("`predictions` and `references` must both be arrays of maps or both be lists of maps.")
        if _is_single(predictions):
            predictions, references = [predictions], [references]
        predictions, references = list(predictions), list(references)
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} references.")
        for prediction, reference in zip(predictions, references):
            self._add(_as_tensor(prediction), _as_tensor(reference))

    def _add(self, prediction: torch.Tensor, reference: torch.Tensor) -> None:
        if prediction.shape != reference.shape:
            raise ValueError(
                f"A prediction of shape {tuple(prediction.shape)} for a reference of shape {tuple(reference.shape)}: "
                "each prediction must have its reference's size."
            )
        prediction, reference = prediction.long().flatten(), reference.long().flatten()
        if self.label_map is not None:
            mapped = reference.clone()
            for old, new in self.label_map.items():
                mapped[reference == old] = new
            reference = mapped
        if self.reduce_labels:
            reference = torch.where(reference == 0, 255, reference - 1)
            reference = torch.where(reference == 254, 255, reference)
        keep = reference != self.ignore_index
        prediction, reference = prediction[keep], reference[keep]
        for name, values in (("references", reference), ("predictions", prediction)):
            outside = (values < 0) | (values >= self.num_labels)
            if outside.any():
                raise ValueError(
                    f"The {name} hold {torch.unique(values[outside]).tolist()[:10]}, outside the classes "
                    f"[0, {self.num_labels - 1}] (`num_labels`={self.num_labels}); only `ignore_index` "
                    f"({self.ignore_index}) may lie outside them."
                )
        flat = reference * self.num_labels + prediction
        self.confusion += torch.bincount(flat, minlength=self.num_labels**2).reshape(self.num_labels, self.num_labels)

    def compute(self, nan_to_num: float | None = None) -> dict:
        confusion = self.confusion.double().numpy()
        intersect = np.diag(confusion)
        area_label, area_prediction = confusion.sum(axis=1), confusion.sum(axis=0)
        union = area_label + area_prediction - intersect
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of no defined class: NaN, by definition
            iou = intersect / union
            accuracy = intersect / area_label
            metrics = {
                "mean_iou": np.nanmean(iou),
                "mean_accuracy": np.nanmean(accuracy),
                "overall_accuracy": intersect.sum() / area_label.sum(),
                "per_category_iou": iou,
                "per_category_accuracy": accuracy,
            }
        if nan_to_num is not None:
            metrics = {name: np.nan_to_num(value, nan=nan_to_num) for name, value in metrics.items()}
        return metrics


def _is_single(maps) -> bool:
    """One array of maps (2-D or 3-D), rather than a list of maps."""
    return isinstance(maps, (torch.Tensor, np.ndarray))


def _as_tensor(labels) -> torch.Tensor:
    """A CPU tensor of a map given as a tensor, an array, a nested list or a PIL image (`evaluate` takes images)."""
    if isinstance(labels, torch.Tensor):
        return labels.detach().cpu()
    return torch.as_tensor(np.asarray(labels))


def mean_iou(
    predictions: Iterable,
    references: Iterable,
    num_labels: int,
    ignore_index: int = 255,
    nan_to_num: float | None = None,
    label_map: Mapping[int, int] | None = None,
    reduce_labels: bool = False,
    backend: str = "auto",
) -> dict:
    """`evaluate.load("mean_iou").compute(...)`, with the same arguments and result keys (see `MeanIoU`).

    `backend`: `"evaluate"` loads the metric from the Hub (or its cache); `"direct"` computes it here (`MeanIoU`,
    the same definitions); `"auto"` (default) uses evaluate's where it loads and the direct computation otherwise
    (`hf_neutreno.data.scores.evaluate_metric`).
    """
    arguments = dict(
        num_labels=num_labels,
        ignore_index=ignore_index,
        nan_to_num=nan_to_num,
        label_map=label_map,
        reduce_labels=reduce_labels,
    )
    metric = evaluate_metric("mean_iou", backend)
    if metric is not None:
        return metric.compute(predictions=list(predictions), references=list(references), **arguments)
    accumulator = MeanIoU(num_labels, ignore_index, label_map, reduce_labels)
    accumulator.update(predictions, references)
    return accumulator.compute(nan_to_num)


def segmentation_transform(processor, image_column: str, annotation_column: str):
    """A `Dataset.set_transform` function: images and their label maps -> `pixel_values` and `labels`."""

    def transform(batch: dict) -> dict:
        encoded = processor(
            images=[image.convert("RGB") for image in batch[image_column]],
            segmentation_maps=list(batch[annotation_column]),
            return_tensors="pt",
        )
        return {"pixel_values": encoded["pixel_values"], "labels": encoded["labels"]}

    return transform


def single_scale_mean_iou(model, evaluation, batch_size: int) -> float:
    """Mean IoU of `model` over a transformed evaluation split at its input size (single scale): logits upsampled
    bilinearly to the label maps, as the image processor's `post_process_semantic_segmentation` does."""
    ignore = getattr(model.config, "semantic_loss_ignore_index", 255)
    metric = MeanIoU(model.config.num_labels, ignore_index=ignore)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(evaluation), batch_size):
            batch = evaluation[start : start + batch_size]
            logits = model(pixel_values=batch["pixel_values"].to(device)).logits
            logits = nn.functional.interpolate(
                logits, size=batch["labels"].shape[-2:], mode="bilinear", align_corners=False
            )
            metric.update(logits.argmax(dim=1).cpu(), batch["labels"])
    model.train(was_training)
    return float(metric.compute()["mean_iou"])


__all__ = [
    "MS_SCALES",
    "MeanIoU",
    "make_image_processor",
    "mean_iou",
    "multi_scale_probabilities",
    "segmentation_transform",
    "single_scale_mean_iou",
]
