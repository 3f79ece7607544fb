#!/usr/bin/env python
"""Train a NeuTRENO Segmenter (semantic segmentation, the NeuTRENO paper's Table 2) with `Trainer`.

The defaults are Segmenter's ADE20K recipe (Strudel et al. 2021; the NeuTRENO paper's set-up): the
`segmenter-deit-tiny` shape (a 2-block mask transformer, drop path 0.1), 512 × 512 crops, random resize 0.5-2.0,
random crops (at most 75 % of one class), horizontal flips and photometric distortion; SGD with momentum 0.9, lr 1e-3,
polynomial decay (power 0.9, to 1e-5), batch 8, 160k iterations; λ = 0.6 in encoder and decoder. It trains, then
evaluates with sliding windows at the images' size (short side 512; the paper's SS) and, in addition, at the
multi-scale set 0.5-1.75 with flips (MS): mean IoU, pixel accuracy and per-class IoU, from `evaluate`'s `mean_iou`
where it loads (it is fetched from the Hub) and the evaluation runs in one process, else computed directly with the
same definitions (`--metric-backend`).

    # the paper's NeuTRENO run: DeiT-tiny from its ImageNet weights, on ADE20K (one GPU); add --push-to-hub
    python examples/run_semantic_segmentation.py --model-name-or-path facebook/deit-tiny-patch16-224 \
        --dataset-name scene_parse_150 --output-dir runs/segmenter-neutreno-ade20k --bf16 \
        --save-strategy steps --save-steps 16000 --logging-steps 100

`--model-name-or-path` starts the encoder from a checkpoint (a native ViT/DeiT, converted with
`hf_neutreno.convert.vit_to_neutreno(..., task="semantic-segmentation")`, or a NeuTRENO classifier or Segmenter);
without it the model is trained from scratch in the shape of `--preset`. `--neutreno-lambda 0` trains the softmax
Segmenter. `--dataset-name` is a Hub dataset with `image` and `annotation` columns or a local folder of Parquet files
with them; the label names come from `--id2label-file`, an `id2label.json` in the folder, or, for `scene_parse_150`,
the Hub's `huggingface/label-files`. ADE20K's label 0 ("other") is ignored (`--do-reduce-labels`, on by default for
`scene_parse_150`). An `--output-dir` that already holds a run is refused unless `--overwrite-output-dir` is given;
`--resume-from-checkpoint` continues an interrupted run from its last checkpoint there (or from the checkpoint folder
it names). The image processor is saved with the model, so `AutoImageProcessor` and
`pipeline("image-segmentation", model=output_dir, trust_remote_code=True)` load the output folder without this
package. Flags are written with dashes here; the underscore spellings of `TrainingArguments` work too.
"""

import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from transformers import AutoConfig, AutoImageProcessor, set_seed

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForSemanticSegmentation
from hf_neutreno.convert import vit_to_neutreno
from hf_neutreno.data.loading import LABELS_FILE, get_split, load_image_dataset, read_id2label, subset
from hf_neutreno.data.scores import BACKENDS as METRIC_BACKENDS
from hf_neutreno.data.scores import evaluate_metric
from hf_neutreno.data.segmentation import MS_SCALES, MeanIoU, make_image_processor, multi_scale_probabilities
from hf_neutreno.engine.model_factories import segmenter
from hf_neutreno.examples import scripts
from hf_neutreno.hub import HubTrainer

logger = logging.getLogger(__name__)

ADE20K = "scene_parse_150"
# Segmenter's ADE20K recipe (its train.py and config.yml): SGD, momentum 0.9, no weight decay, lr 1e-3 decaying
# polynomially (power 0.9) to 1e-5 over 160k iterations (64 epochs) at batch 8.
SEGMENTER_TRAINING = dict(
    optim="sgd",
    optim_args="momentum=0.9",
    learning_rate=1e-3,
    weight_decay=0.0,
    lr_scheduler_type="polynomial",
    lr_scheduler_kwargs={"power": 0.9, "lr_end": 1e-5},
    warmup_steps=0,
    max_steps=160_000,
    per_device_train_batch_size=8,
    per_device_eval_batch_size=8,
    do_train=True,
)
# Segmenter's training-time fields that a converted encoder takes from the preset (its own shape stays).
PRESET_SEGMENTATION_FIELDS = (
    "drop_path_rate",
    "decoder_type",
    "decoder_num_layers",
    "decoder_hidden_size",
    "decoder_num_attention_heads",
    "decoder_dropout",
)


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A checkpoint (folder or Hub id) to start the encoder from: a ViT or DeiT (converted), a "
            "NeuTRENO classifier or Segmenter. Default: train from scratch in the shape of --preset."
        },
    )
    preset: str = field(
        default="segmenter-deit-tiny",
        metadata={
            "help": f"A NeuTRENOViTConfig preset {sorted(NeuTRENOViTConfig.presets)}: the model trained from "
            "scratch; with --model-name-or-path only its decoder fields and drop path apply."
        },
    )
    neutreno_lambda: float | None = scripts.neutreno_lambda_field(
        NeuTRENOViTConfig,
        "λ of the encoder; 0 = the softmax Segmenter.",
        "a preset or a converted ViT/DeiT (a NeuTRENO classifier or Segmenter keeps its own)",
    )
    decoder_neutreno_lambda: float | None = field(
        default=None,
        metadata={
            "help": "λ of the mask transformer (its own V_0). Default: --neutreno-lambda's value; a Segmenter "
            "checkpoint continued keeps its own."
        },
    )
    config_overrides: str | None = scripts.config_overrides_field(
        "Other NeuTRENOViTConfig fields: 'num_hidden_layers=4,hidden_size=64,decoder_num_layers=1'."
    )
    trust_remote_code: bool = scripts.trust_remote_code_field()


@dataclass
class DataArguments:
    dataset_name: str = field(
        default=ADE20K,
        metadata={"help": "Hub dataset with `image` and `annotation` columns, or a local folder of Parquet files."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_split: str = field(default="train")
    eval_split: str = field(default="validation")
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a seeded subset."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a seeded subset."})
    id2label_file: str | None = field(
        default=None, metadata={"help": "JSON {id: name}. Default: id2label.json in the dataset folder, or ADE20K's."}
    )
    do_reduce_labels: bool | None = field(
        default=None,
        metadata={"help": "Ignore label 0 and shift the others down by one (ADE20K). Default: on for scene_parse_150."},
    )
    crop_size: int = field(default=512, metadata={"help": "Training crop and sliding window (the model's image size)."})
    min_scale: float = field(default=0.5, metadata={"help": "Random resize: smallest ratio to the crop size."})
    max_scale: float = field(default=2.0, metadata={"help": "Random resize: largest ratio to the crop size."})
    cat_max_ratio: float = field(default=0.75, metadata={"help": "Largest share of one class in a random crop."})
    flip: bool = field(default=True, metadata={"help": "Random horizontal flips (--no-flip turns them off)."})
    photometric_distortion: bool = field(
        default=True, metadata={"help": "Random brightness, contrast, saturation and hue (mmseg's distortion)."}
    )
    eval_size: int | None = field(
        default=None, metadata={"help": "Short side of the evaluation images (ADE20K: 512). Default: the crop size."}
    )
    eval_multi_scale: bool = field(
        default=True, metadata={"help": "At the end, also evaluate at scales 0.5-1.75 with flips (the paper's MS)."}
    )
    metric_backend: str = field(
        default="auto",
        metadata={
            "help": f"Who computes mean IoU, of {METRIC_BACKENDS}: `evaluate`'s mean_iou (fetched from the Hub), "
            "the package's direct computation (the same definitions; offline), or auto: evaluate's where it "
            "loads and the evaluation runs in one process, else the direct one."
        },
    )


# --- data -----------------------------------------------------------------------------------------------------------


def load_id2label(data_args: DataArguments) -> dict[int, str]:
    if data_args.id2label_file:
        return read_id2label(data_args.id2label_file, flag="--id2label-file")
    if Path(data_args.dataset_name, LABELS_FILE).is_file():
        return read_id2label(Path(data_args.dataset_name, LABELS_FILE), flag="--dataset-name")
    if data_args.dataset_name == ADE20K:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download("huggingface/label-files", "ade20k-id2label.json", repo_type="dataset"))
        return {int(k): v for k, v in json.loads(path.read_text()).items()}
    raise ValueError(
        f"--id2label-file is needed: --dataset-name {data_args.dataset_name!r} has no {LABELS_FILE} and "
        f"is not {ADE20K!r}."
    )


def reduce_labels(label: np.ndarray) -> np.ndarray:
    """ADE20K's labels: 0 ("other") becomes the ignore index 255, every other class moves down by one (as
    `do_reduce_labels` of the image processor)."""
    label = label.astype(np.int64)
    return np.where((label == 0) | (label == 255), 255, label - 1)


def random_resize(image: Image.Image, label: Image.Image, crop: int, scale_range: tuple[float, float]):
    """mmseg's `Resize(img_scale=(4·crop, crop), ratio_range)`: a random ratio r, then the largest size with the
    aspect ratio kept whose long side is at most 4·crop·r and short side at most crop·r."""
    ratio = random.uniform(*scale_range)
    width, height = image.size
    factor = min(4 * crop * ratio / max(width, height), crop * ratio / min(width, height))
    size = (max(1, int(width * factor + 0.5)), max(1, int(height * factor + 0.5)))
    return image.resize(size, Image.BILINEAR), label.resize(size, Image.NEAREST)


def random_crop(image: np.ndarray, label: np.ndarray, crop: int, cat_max_ratio: float, ignore_index: int):
    """mmseg's `RandomCrop(cat_max_ratio)`: up to 10 draws until no class covers more than `cat_max_ratio` of the
    crop's labelled pixels (the last draw otherwise)."""
    height, width = label.shape

    def draw():
        top, left = random.randint(0, max(height - crop, 0)), random.randint(0, max(width - crop, 0))
        return slice(top, top + crop), slice(left, left + crop)

    window = draw()
    if cat_max_ratio < 1:
        for _ in range(10):
            _, counts = np.unique(label[window][label[window] != ignore_index], return_counts=True)
            if len(counts) > 1 and counts.max() / counts.sum() < cat_max_ratio:
                break
            window = draw()
    return image[window], label[window]


def _convert(image: np.ndarray, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """mmseg's `PhotoMetricDistortion.convert`: `image · alpha + beta`, clipped to [0, 255] and cast to uint8 (which
    truncates), after every step."""
    return np.clip(image.astype(np.float32) * alpha + beta, 0, 255).astype(np.uint8)


def photometric_distortion(image: np.ndarray) -> np.ndarray:
    """mmseg's `PhotoMetricDistortion` on an RGB uint8 array, each step with probability 1/2: brightness (± 32),
    contrast (× 0.5-1.5) before or after saturation (× 0.5-1.5) and hue (± 18° of 180, i.e. ± 25.6 on PIL's 0-255
    hue circle); HSV through PIL. As in mmseg, every step clips to [0, 255] and casts to uint8 (`_convert`), so a
    brightness shift that saturates a pixel is not undone by a contrast below 1."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if random.random() < 0.5:
        image = _convert(image, beta=random.uniform(-32, 32))
    contrast_first = random.random() < 0.5

    def contrast(x):
        return _convert(x, alpha=random.uniform(0.5, 1.5)) if random.random() < 0.5 else x

    if contrast_first:
        image = contrast(image)
    saturate, shift_hue = random.random() < 0.5, random.random() < 0.5
    if saturate or shift_hue:
        hsv = np.asarray(Image.fromarray(image).convert("HSV")).copy()
        if saturate:
            hsv[..., 1] = _convert(hsv[..., 1], alpha=random.uniform(0.5, 1.5))
        if shift_hue:
            hsv[..., 0] = ((hsv[..., 0] + random.uniform(-18, 18) * 256 / 180) % 256).astype(np.uint8)
        image = np.asarray(Image.fromarray(hsv, mode="HSV").convert("RGB"))
    if not contrast_first:
        image = contrast(image)
    return image


def train_transform(processor, data_args: DataArguments, reduce: bool, ignore_index: int):
    """`Dataset.set_transform`: Segmenter's training pipeline, then the processor's rescale and normalisation, then
    padding to the crop (0 for pixels after normalisation, the ignore index for labels, as mmseg)."""
    crop = data_args.crop_size

    def transform(batch: dict) -> dict:
        pixel_values, labels = [], []
        for image, annotation in zip(batch["image"], batch["annotation"]):
            image, annotation = random_resize(
                image.convert("RGB"), annotation, crop, (data_args.min_scale, data_args.max_scale)
            )
            label = np.asarray(annotation, dtype=np.int64)
            label = reduce_labels(label) if reduce else label
            image, label = random_crop(np.asarray(image), label, crop, data_args.cat_max_ratio, ignore_index)
            if data_args.flip and random.random() < 0.5:
                image, label = image[:, ::-1], label[:, ::-1]
            if data_args.photometric_distortion:
                image = photometric_distortion(image)
            pixels = processor(images=np.ascontiguousarray(image), do_resize=False, return_tensors="pt")
            pixels = pixels["pixel_values"][0]
            pad = (0, crop - pixels.shape[-1], 0, crop - pixels.shape[-2])
            pixel_values.append(nn.functional.pad(pixels, pad, value=0.0))
            labels.append(nn.functional.pad(torch.as_tensor(label.copy()), pad, value=ignore_index))
        return {"pixel_values": pixel_values, "labels": labels}

    return transform


def eval_pixels(processor, image: Image.Image, short_side: int) -> torch.Tensor:
    """(1, 3, h, w): the image resized (bilinear, aspect ratio kept) to `short_side`, rescaled and normalised."""
    width, height = image.size
    factor = short_side / min(width, height)
    size = (max(1, int(width * factor + 0.5)), max(1, int(height * factor + 0.5)))
    image = image.convert("RGB").resize(size, Image.BILINEAR) if size != image.size else image.convert("RGB")
    return processor(images=image, do_resize=False, return_tensors="pt")["pixel_values"]


# --- evaluation -----------------------------------------------------------------------------------------------------


def mean_iou_factory(backend: str, world_size: int):
    """A function making a fresh `evaluate` mean_iou module, or None for the direct computation (`MeanIoU`), as
    `hf_neutreno.data.scores.evaluate_metric` decides: here it is tried once, before training."""
    if backend not in METRIC_BACKENDS:
        raise ValueError(f"--metric_backend {backend!r} is not one of {METRIC_BACKENDS}.")
    if world_size > 1:  # each process scores its own shard; the confusion matrices are summed across processes
        if backend == "evaluate":
            raise ValueError(f"--metric_backend evaluate runs in one process, not {world_size}: use direct or auto.")
        return None
    try:
        metric = evaluate_metric("mean_iou", backend)
    except Exception as error:  # not installed, or no Hub
        raise RuntimeError(
            f"--metric_backend evaluate: evaluate.load('mean_iou') failed ({error}). Use "
            "--metric_backend direct (the same definitions, computed here) offline."
        ) from error
    if metric is None:
        return None
    import evaluate

    return lambda name: evaluate.load("mean_iou", experiment_id=f"segmenter-{name}-{os.getpid()}")


class SegmenterTrainer(HubTrainer):
    """`HubTrainer` whose evaluation is Segmenter's: every image at its own size (short side `eval_size`), sliding
    windows of the crop size (SS), optionally also multi-scale with flips (MS); labels compared at the original
    size. Under several processes each takes a shard and the confusion matrices are summed."""

    def __init__(self, *args, data_args: DataArguments, reduce: bool, mean_iou_factory=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.data_args, self.reduce, self.mean_iou_factory = data_args, reduce, mean_iou_factory

    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval", multi_scale: bool = False
    ) -> dict[str, float]:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        model = self.accelerator.unwrap_model(self.model)
        config = model.config
        scales = {"ss": ((1.0,), False), **({"ms": (MS_SCALES, True)} if multi_scale else {})}
        # evaluate's mean_iou modules (one process), else the direct computation's confusion matrices
        modules = {name: self.mean_iou_factory(name) for name in scales} if self.mean_iou_factory else {}
        meters = {
            name: MeanIoU(config.num_labels, config.semantic_loss_ignore_index)
            for name in scales
            if name not in modules
        }
        short_side = self.data_args.eval_size or self.data_args.crop_size
        batch_size = self.args.per_device_eval_batch_size
        shard = range(self.args.process_index, len(dataset), self.args.world_size)
        for index in shard:
            row = dataset[index]
            label = torch.as_tensor(np.asarray(row["annotation"], dtype=np.int64))
            label = torch.as_tensor(reduce_labels(label.numpy())) if self.reduce else label
            pixels = eval_pixels(self.processing_class, row["image"], short_side).to(self.args.device)
            for name, (ms_scales, flip) in scales.items():
                with self.autocast_smart_context_manager():  # logits resized to the label map, then softmax
                    probabilities = multi_scale_probabilities(
                        model, pixels, ms_scales, flip, batch_size=batch_size, output_size=tuple(label.shape)
                    )
                prediction = probabilities.float().argmax(1)[0].cpu()
                if name in modules:
                    modules[name].add(predictions=prediction.numpy(), references=label.numpy())
                else:
                    meters[name].update(prediction, label)
        metrics = {}
        for name in scales:
            if name in modules:
                result = modules[name].compute(
                    num_labels=config.num_labels, ignore_index=config.semantic_loss_ignore_index, reduce_labels=False
                )
            else:
                meter = meters[name]
                confusion = meter.confusion.to(self.args.device)
                meter.confusion = self.accelerator.reduce(confusion, reduction="sum").cpu()
                result = meter.compute()
            metrics.update(segmentation_metrics(result, config.id2label, suffix="" if name == "ss" else "_ms"))
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in metrics.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


def segmentation_metrics(result: dict, id2label: dict[int, str], suffix: str = "") -> dict[str, float]:
    """`MeanIoU.compute()` as flat numbers (Trainer logs scalars): mean IoU, pixel accuracy, mean class accuracy and
    `iou_<class>` per class (NaN where the class is neither labelled nor predicted)."""
    metrics = {
        f"mean_iou{suffix}": float(result["mean_iou"]),
        f"pixel_accuracy{suffix}": float(result["overall_accuracy"]),
        f"mean_accuracy{suffix}": float(result["mean_accuracy"]),
    }
    metrics.update({f"iou{suffix}_{id2label[i]}": float(v) for i, v in enumerate(result["per_category_iou"])})
    return metrics


# --- model ----------------------------------------------------------------------------------------------------------


def build_model(args: ModelArguments, id2label: dict[int, str], crop_size: int):
    """The Segmenter to train and the image-processor settings of its source (mean and std)."""
    labels = dict(num_labels=len(id2label), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    overrides = scripts.parse_config_overrides(args.config_overrides, NeuTRENOViTConfig)
    # Only the λs given: a preset or a converted ViT/DeiT gets the registry's, a NeuTRENO checkpoint keeps its own.
    lambdas = scripts.given(neutreno_lambda=args.neutreno_lambda, decoder_neutreno_lambda=args.decoder_neutreno_lambda)
    if args.preset not in NeuTRENOViTConfig.presets:
        raise ValueError(f"--preset {args.preset!r} is not one of {sorted(NeuTRENOViTConfig.presets)}.")
    preset = NeuTRENOViTConfig.from_preset(args.preset)
    if args.model_name_or_path is None:
        names = [id2label[i] for i in sorted(id2label)]
        return segmenter(args.preset, names, image_size=crop_size, **lambdas, **overrides), {}

    path = args.model_name_or_path
    source = AutoConfig.from_pretrained(path, trust_remote_code=args.trust_remote_code)
    if source.model_type not in ("vit", "deit", NeuTRENOViTConfig.model_type):
        raise ValueError(
            f"--model_name_or_path {path!r} has model_type {source.model_type!r}; expected a vit, deit or "
            f"{NeuTRENOViTConfig.model_type} checkpoint."
        )
    try:
        source_processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=args.trust_remote_code)
        normalisation = {k: list(getattr(source_processor, k)) for k in ("image_mean", "image_std")}
    except (OSError, ValueError, AttributeError, TypeError):  # a checkpoint without a processor: the defaults
        normalisation = {}
    is_segmenter = "NeuTRENOViTForSemanticSegmentation" in (source.architectures or [])
    if is_segmenter and {int(k): v for k, v in source.id2label.items()} == id2label:
        # Continue a Segmenter of these classes: every weight, decoder included.
        model = NeuTRENOViTForSemanticSegmentation.from_pretrained(path, **lambdas, **overrides)
        return model, normalisation
    fields = {k: getattr(preset, k) for k in PRESET_SEGMENTATION_FIELDS}
    model = vit_to_neutreno(
        path, task="semantic-segmentation", image_size=crop_size, **lambdas, **{**fields, **labels, **overrides}
    )
    return model, normalisation


def collate(examples: list[dict]) -> dict[str, torch.Tensor]:
    return {
        "pixel_values": torch.stack([e["pixel_values"] for e in examples]),
        "labels": torch.stack([e["labels"] for e in examples]),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = scripts.script_parser(ModelArguments, DataArguments)
    parser.set_defaults(**SEGMENTER_TRAINING)
    model_args, data_args, script_args, training_args = scripts.parse_script_arguments(parser, argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    training_args.remove_unused_columns = False  # the transform needs the raw image and annotation columns
    scripts.check_distributed_launch(training_args)
    if not 0 < data_args.min_scale <= data_args.max_scale:
        raise ValueError(
            f"--min_scale ({data_args.min_scale}) and --max_scale ({data_args.max_scale}) must satisfy "
            "0 < min_scale <= max_scale."
        )
    # Never overwrite an earlier run by accident; --resume-from-checkpoint (no path: the last one) continues one.
    checkpoint, push = scripts.prepare_output(training_args, script_args.overwrite_output_dir)
    metric_factory = mean_iou_factory(data_args.metric_backend, training_args.world_size)

    train, evaluation, id2label, reduce = load_data(data_args, training_args.seed)
    set_seed(training_args.seed)  # the model's initial weights are part of the run
    model, normalisation = build_model(model_args, id2label, data_args.crop_size)
    processor = make_image_processor(model.config, do_reduce_labels=reduce, **normalisation)
    logger.info(
        "Model: %s, %.2fM parameters, λ=%s (decoder %s)",
        type(model).__name__,
        model.num_parameters() / 1e6,
        model.config.neutreno_lambda,
        model.decoder.config.neutreno_lambda if hasattr(model.decoder, "layers") else "-",
    )
    train.set_transform(train_transform(processor, data_args, reduce, model.config.semantic_loss_ignore_index))
    trainer = SegmenterTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=collate,
        processing_class=processor,
        data_args=data_args,
        reduce=reduce,
        mean_iou_factory=metric_factory,
    )

    metrics, eval_metrics = scripts.train_and_evaluate(trainer, checkpoint, multi_scale=data_args.eval_multi_scale)
    if push:
        trainer.push_to_hub(
            dataset=data_args.dataset_name,
            dataset_config=data_args.dataset_config_name,
            dataset_split=data_args.eval_split,
            results=eval_metrics,
            base_model=scripts.hub_base_model(model_args.model_name_or_path),
        )
    return metrics


def load_data(data_args: DataArguments, seed: int) -> tuple:
    """The (seeded subsets of the) training and evaluation splits, the label names by id, and whether the labels are
    reduced (`--do-reduce-labels`, default: on for ADE20K)."""
    dataset = load_image_dataset(data_args.dataset_name, data_args.dataset_config_name)
    for split in dataset.values():
        missing = {"image", "annotation"} - set(split.column_names)
        if missing:
            raise ValueError(
                f"The dataset needs `image` and `annotation` columns (as {ADE20K}); it has {split.column_names}."
            )
    train = subset(get_split(dataset, data_args.train_split), data_args.max_train_samples, seed)
    evaluation = subset(get_split(dataset, data_args.eval_split), data_args.max_eval_samples, seed)
    id2label = load_id2label(data_args)
    reduce = (
        data_args.do_reduce_labels if data_args.do_reduce_labels is not None else (data_args.dataset_name == ADE20K)
    )
    return train, evaluation, id2label, reduce


if __name__ == "__main__":
    scripts.run_script(main)
