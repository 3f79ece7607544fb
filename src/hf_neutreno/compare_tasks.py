"""The tasks `hf-neutreno compare` trains on: image classification, causal language modelling and semantic
segmentation. Each one checks and prepares its data, builds a model of a given attention (`ARCHITECTURES`) from the
preset, and scores a trained model; `probe_batches` are the inputs the token cosine similarity is measured on.
"""

from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling, Trainer, ViTImageProcessorPil
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from .data import LABELS_FILE, image_and_label_columns, is_local_path, label_names, read_id2label, subset
from .image_transforms import collate_images, image_transform
from .lm_eval import block_eval
from .metrics import accuracy_metrics
from .model_factories import IMAGE_VARIANTS, image_classifier, language_model, segmenter
from .models.configuration_neutreno_gpt import NeuTRENOGPTConfig
from .models.configuration_neutreno_vit import NeuTRENOViTConfig
from .names import IMAGE_MODELS, SEGMENTATION_MODELS, TEXT_MODELS
from .segmentation import make_image_processor, segmentation_transform, single_scale_mean_iou
from .text_data import TEXT_COLUMN, group_into_blocks, token_stream, train_word_tokenizer

# What a task builds: softmax attention (λ = 0), NeuTRENO (λ > 0), ViT⁻ (image classifiers only), and which can take
# a value path (`hf_neutreno.apply_value_path` on the softmax model: one stack of layers, so not a Segmenter).
ARCHITECTURES = (*IMAGE_VARIANTS, "value-path")
EVAL_SPLITS = ("test", "validation")  # the first one the dataset has
IMAGE_DATASETS = "digits or uoft-cs/cifar10 (or a local folder of Parquet files or images)"
TEXT_DATASETS = "Salesforce/wikitext with --dataset-config wikitext-2-v1 (or a local folder of its Parquet files)"
SEGMENTATION_DATASETS = (
    "scene_parse_150 with --dataset-config scene_parsing, or a local folder of Parquet files with its `image` and "
    "`annotation` columns and an id2label.json (e.g. fashion-scenes)"
)
ANNOTATION_COLUMN = "annotation"  # scene_parse_150's label maps
ADE20K, ADE20K_CLASSES = "scene_parse_150", 150  # label 0 is "other" (ignored), 1-150 the classes


def task_class(model: str):
    """The task a preset trains on: `TextTask`, `SegmentationTask` or `ImageTask`."""
    if model in TEXT_MODELS:
        return TextTask
    return SegmentationTask if model in SEGMENTATION_MODELS else ImageTask


def task_for(settings, dataset):
    """The task of `settings.model` on `dataset`; `ValueError` naming the flags if the data does not fit it."""
    return task_class(settings.model)(settings, dataset)


def _columns(dataset) -> dict[str, str]:
    return {name: type(feature).__name__ for name, feature in dataset["train"].features.items()}


def _eval_split(dataset, order=EVAL_SPLITS) -> str:
    return next(split for split in order if split in dataset)


def _capped(dataset, count: int | None, seed: int):
    return subset(dataset, None if count is None else min(count, len(dataset)), seed)


def _segmentation_columns(dataset) -> tuple[str, str] | None:
    """(image column, label-map column) of a scene_parse_150-like dataset: an Image column and the Image column
    `annotation`; None if it has no such pair."""
    images = [name for name, feature in dataset["train"].features.items() if type(feature).__name__ == "Image"]
    if ANNOTATION_COLUMN not in images or len(images) < 2:
        return None
    return next(name for name in images if name != ANNOTATION_COLUMN), ANNOTATION_COLUMN


def _has_class_labels(dataset) -> bool:
    try:
        image_and_label_columns(dataset)
    except ValueError:
        return False
    return True


class _ImageTask:
    """What the image tasks share: capped train and eval splits, the run's summary and the probe images."""

    pretrained = False  # a preset trains from scratch

    def _set_splits(self, dataset, transform) -> None:
        settings = self.settings
        self.train = _capped(dataset["train"], settings.max_train_samples, settings.seed)
        self.eval = _capped(dataset[self.eval_split], settings.max_eval_samples, settings.seed)
        self.train.set_transform(transform)
        self.eval.set_transform(transform)
        self.sizes = {"train_images": len(self.train), "eval_images": len(self.eval)}
        height, width = self.preset.image_size_2d
        self.summary = (
            f"{settings.model} on {settings.dataset} ({len(self.train)} train / {len(self.eval)} {self.eval_split} "
            f"images, {len(self.labels)} classes, resized to {height}×{width})"
        )

    def probe_batches(self) -> list[dict]:
        probe = self.eval.select(range(min(self.settings.probe_samples, len(self.eval))))
        size = self.settings.batch_size
        return [{"pixel_values": probe[i : i + size]["pixel_values"]} for i in range(0, len(probe), size)]

    def _lambda(self, architecture: str) -> float:
        return self.neutreno_lambda if architecture == "neutreno" else 0.0


class ImageTask(_ImageTask):
    name, metric, kind = "image-classification", "accuracy", "an image classifier"
    architectures = ARCHITECTURES

    def __init__(self, settings, dataset):
        try:
            image_column, label_column = image_and_label_columns(dataset)
        except ValueError:
            kind = (
                f" it is a segmentation dataset; segmentation presets: {SEGMENTATION_MODELS}."
                if _segmentation_columns(dataset)
                else ""
            )
            raise ValueError(
                f"--model {settings.model} is an image classifier, but --dataset {settings.dataset!r} has no Image "
                f"column and ClassLabel column (it has {_columns(dataset)}).{kind} Image datasets: {IMAGE_DATASETS}."
            ) from None
        self.settings, self.eval_split = settings, _eval_split(dataset)
        self.labels = label_names(dataset)
        self.preset = NeuTRENOViTConfig.from_preset(settings.model)
        self.neutreno_lambda = settings.neutreno_lambda or self.preset.neutreno_lambda
        height, width = self.preset.image_size_2d
        self.processing = ViTImageProcessorPil(
            size={"height": height, "width": width}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
        )
        self._set_splits(dataset, image_transform(self.processing, image_column, label_column))

    def build(self, architecture: str) -> torch.nn.Module:
        # ViT⁻/ViT⁺: the poster's eigen-parameterised ViT with W_V W_O = V diag(∓ψ²) Vᵀ, no NeuTRENO term
        return image_classifier(architecture, self.settings.model, self.labels, neutreno_lambda=self.neutreno_lambda)

    def trainer_arguments(self) -> dict:
        return dict(data_collator=collate_images, compute_metrics=accuracy_metrics)

    def score(self, trainer: Trainer) -> float:
        return float(trainer.evaluate(self.eval)["eval_accuracy"])


class TextTask:
    name, metric, kind = "causal-lm", "perplexity", "a language model"
    pretrained = False
    architectures = ("softmax", "neutreno", "value-path")

    def __init__(self, settings, dataset):
        if TEXT_COLUMN not in dataset["train"].features:
            raise ValueError(
                f"--model {settings.model} is a language model, but --dataset {settings.dataset!r} has no "
                f"`{TEXT_COLUMN}` column (it has {_columns(dataset)}). Text datasets: {TEXT_DATASETS}."
            )
        self.settings, self.eval_split = settings, _eval_split(dataset)
        self.preset = NeuTRENOGPTConfig.from_preset(settings.model)
        self.neutreno_lambda = settings.neutreno_lambda or self.preset.neutreno_lambda
        self.block_size = self.preset.max_position_embeddings
        self.processing = train_word_tokenizer(dataset["train"])  # word level, as WikiText is written
        blocks = group_into_blocks(dataset["train"], self.processing, self.block_size)
        self.train = _capped(blocks, settings.max_train_samples, settings.seed)
        max_tokens = None if settings.max_eval_samples is None else settings.max_eval_samples * self.block_size
        self.stream = token_stream(dataset[self.eval_split], self.processing, max_tokens=max_tokens)
        if self.stream.numel() < self.block_size:
            raise ValueError(
                f"Split {self.eval_split!r} of --dataset {settings.dataset!r} is shorter than one block "
                f"({self.block_size} tokens)."
            )
        self.sizes = {"train_blocks": len(self.train), "block_size": self.block_size, "eval_tokens": len(self.stream)}
        self.summary = (
            f"{settings.model} on {settings.dataset} ({len(self.train)} train blocks of {self.block_size} tokens, "
            f"{self.stream.numel()} {self.eval_split} tokens, vocabulary {len(self.processing)})"
        )

    def build(self, architecture: str) -> torch.nn.Module:
        lam = self.neutreno_lambda if architecture == "neutreno" else 0.0
        return language_model(self.settings.model, self.processing, neutreno_lambda=lam)

    def trainer_arguments(self) -> dict:
        return dict(data_collator=DataCollatorForLanguageModeling(self.processing, mlm=False))

    def score(self, trainer: Trainer) -> float:
        progress = self.settings.verbose and not self.settings.no_progress  # the training bar is the run's one bar
        return block_eval(trainer.model, self.stream, self.block_size, self.settings.batch_size, progress).perplexity

    def probe_batches(self) -> list[dict]:
        count = min(self.settings.probe_samples, self.stream.numel() // self.block_size)
        blocks = self.stream[: count * self.block_size].view(count, self.block_size)
        return [{"input_ids": batch} for batch in blocks.split(self.settings.batch_size)]


class SegmentationTask(_ImageTask):
    name, metric, kind = "semantic-segmentation", "mean_iou", f"a segmentation preset {SEGMENTATION_MODELS}"
    architectures = ("softmax", "neutreno")

    def __init__(self, settings, dataset):
        columns = _segmentation_columns(dataset)
        if columns is None:
            kind = (
                f" it is an image-classification dataset; classifier presets: {IMAGE_MODELS}."
                if _has_class_labels(dataset)
                else ""
            )
            raise ValueError(
                f"--model {settings.model} is a segmentation preset, but --dataset {settings.dataset!r} has no Image "
                f"column and `{ANNOTATION_COLUMN}` label-map column (it has {_columns(dataset)}).{kind} Segmentation "
                f"datasets: {SEGMENTATION_DATASETS}."
            )
        image_column, annotation_column = columns
        self.settings, self.eval_split = settings, _eval_split(dataset, ("validation", "test"))
        self.labels, reduce_labels = segmentation_labels(settings.dataset)
        self.preset = NeuTRENOViTConfig.from_preset(settings.model)
        self.neutreno_lambda = settings.neutreno_lambda or self.preset.neutreno_lambda
        self.processing = make_image_processor(self.preset, do_reduce_labels=reduce_labels)
        self._set_splits(dataset, segmentation_transform(self.processing, image_column, annotation_column))

    def build(self, architecture: str) -> torch.nn.Module:
        # the decoder follows the encoder's λ
        return segmenter(self.settings.model, self.labels, neutreno_lambda=self._lambda(architecture))

    def trainer_arguments(self) -> dict:
        return dict(data_collator=collate_images)

    def score(self, trainer: Trainer) -> float:
        """Mean IoU over the evaluation images at the preset's size (single scale)."""
        return single_scale_mean_iou(trainer.model, self.eval, self.settings.batch_size)


def segmentation_labels(dataset_name: str) -> tuple[list[str], bool]:
    """(class names, whether label 0 is ignored and the others shifted down). A local folder names its classes in
    `id2label.json`, as its label maps number them; scene_parse_150 (ADE20K) has 150 classes after its ignored
    label 0. Anything else raises: the classes are not guessed."""
    if is_local_path(dataset_name):
        path = Path(dataset_name) / LABELS_FILE
        if not path.is_file():
            raise ValueError(
                f"--dataset {dataset_name!r} has no {LABELS_FILE}: a segmentation folder names its classes in "
                f'{path} ({{"0": "background", "1": ...}}, as its label maps number them); the classes are not '
                "guessed."
            )
        id2label = read_id2label(path, flag="--dataset")
        return [id2label[i] for i in range(len(id2label))], False
    if dataset_name.rsplit("/", 1)[-1] == ADE20K:
        return [str(i) for i in range(ADE20K_CLASSES)], True
    raise ValueError(
        f"--dataset {dataset_name!r}: its classes are unknown here; compare knows {ADE20K}'s (ADE20K) "
        f"and reads a local folder's {LABELS_FILE}. Segmentation datasets: {SEGMENTATION_DATASETS}."
    )
