"""The task objects of this package's presets in `hf-neutreno compare`, trained from scratch: an image classifier
(`ImageTask`), a language model (`TextTask`) and a Segmenter (`SegmentationTask`). Each is a `PresetTask` (the preset:
its data checks, its image processor or word-level tokenizer, the models it builds) mixed into its task of
`hf_neutreno.engine.tasks` (the inputs, the head and the metric, shared with any transformers model's task objects).
"""

from pathlib import Path

import torch
from transformers import ViTImageProcessorPil
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from ..auto_classes import register_auto_classes
from ..checkpoints import is_local
from ..data.image_transforms import image_transform
from ..data.loading import LABELS_FILE, capped, image_and_label_columns, label_names, read_id2label
from ..data.segmentation import make_image_processor, segmentation_transform
from ..data.text import TEXT_COLUMN, group_into_blocks, token_stream, train_word_tokenizer
from ..models.configuration_neutreno_gpt import NeuTRENOGPTConfig
from ..models.configuration_neutreno_vit import NeuTRENOViTConfig
from ..names import ANNOTATION_COLUMN, IMAGE_MODELS, SEGMENTATION_MODELS, TEXT_MODELS
from .model_factories import IMAGE_VARIANTS, image_classifier, language_model, segmenter
from .tasks import EVAL_SPLITS, CausalLM, ImageClassification, SemanticSegmentation
from .variants import VARIANTS, build_variant

register_auto_classes()  # the models it saves carry their code and auto_map

# What a preset builds: softmax attention (λ = 0), NeuTRENO (λ > 0), ViT⁻ (image classifiers only), and which can
# take a value path (`hf_neutreno.apply_value_path` on the softmax model: one stack of layers, so not a Segmenter).
ARCHITECTURES = (*IMAGE_VARIANTS, "value-path")
IMAGE_DATASETS = "digits or uoft-cs/cifar10 (or a local folder of Parquet files or images)"
TEXT_DATASETS = "Salesforce/wikitext with --dataset-config wikitext-2-v1 (or a local folder of its Parquet files)"
SEGMENTATION_DATASETS = (
    "scene_parse_150 with --dataset-config scene_parsing, or a local folder of Parquet files with its `image` and "
    "`annotation` columns and an id2label.json (e.g. fashion-scenes)"
)
ADE20K, ADE20K_CLASSES = "scene_parse_150", 150  # label 0 is "other" (ignored), 1-150 the classes
PRESETS = IMAGE_MODELS + SEGMENTATION_MODELS + TEXT_MODELS


def preset_architecture(variant: str) -> str:
    """What a preset builds for `variant`: its own attention (softmax, NeuTRENO, ViT⁻, ViT⁺), or the softmax model
    with a value path put on it ("value-path")."""
    return "value-path" if VARIANTS[variant].method is not None and variant != "neutreno" else variant


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


class PresetTask:
    """A preset of this package trained from scratch: the source half of a preset's task object (the task half is
    `hf_neutreno.engine.tasks`). `build(variant, coefficient)` builds the preset's own attention (`ARCHITECTURES`) or
    puts a value path on its softmax model."""

    pretrained = False  # a preset trains from scratch
    kind = ""  # what --model is, for the messages
    architectures = ARCHITECTURES

    def _set_splits(self, dataset, eval_order=EVAL_SPLITS) -> None:
        settings = self.settings
        self.eval_split = _eval_split(dataset, eval_order)
        self.train = capped(dataset["train"], settings.max_train_samples, settings.seed)
        self.eval = capped(dataset[self.eval_split], settings.max_eval_samples, settings.seed)

    def _set_preset(self, config_class) -> None:
        self.preset = config_class.from_preset(self.settings.model)

    @property
    def summary(self) -> str:
        return f"{self.settings.model} on {self.settings.dataset} ({self.summary_data}{self.summary_extra})"

    def build(self, variant: str, coefficient: float | None) -> torch.nn.Module:
        """The model of `variant`, its weights drawn from the global generator (seeded by the caller). `coefficient`
        (resolved by the caller, the one place that does) is λ of the `neutreno` architecture, or the value path's."""
        architecture = preset_architecture(variant)
        if architecture == "value-path":
            return build_variant(self._build("softmax", 0.0), variant, coefficient)
        return self._build(architecture, coefficient if architecture == "neutreno" else 0.0)


class ImageTask(PresetTask, ImageClassification):
    kind = "an image classifier"

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
        self.settings = settings
        self.labels = label_names(dataset)
        self._set_preset(NeuTRENOViTConfig)
        height, width = self.preset.image_size_2d
        self.processing = ViTImageProcessorPil(
            size={"height": height, "width": width}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
        )
        self._set_splits(dataset)
        self._image_inputs(image_transform(self.processing, image_column, label_column), label_column)
        self.summary_extra = f", resized to {height}×{width}"

    def _build(self, architecture: str, neutreno_lambda: float) -> torch.nn.Module:
        # ViT⁻/ViT⁺: the poster's eigen-parameterised ViT with W_V W_O = V diag(∓ψ²) Vᵀ, no NeuTRENO term
        return image_classifier(architecture, self.settings.model, self.labels, neutreno_lambda=neutreno_lambda)


class TextTask(PresetTask, CausalLM):
    kind = "a language model"
    architectures = ("softmax", "neutreno", "value-path")

    def __init__(self, settings, dataset):
        if TEXT_COLUMN not in dataset["train"].features:
            raise ValueError(
                f"--model {settings.model} is a language model, but --dataset {settings.dataset!r} has no "
                f"`{TEXT_COLUMN}` column (it has {_columns(dataset)}). Text datasets: {TEXT_DATASETS}."
            )
        self.settings, self.eval_split = settings, _eval_split(dataset)
        self._set_preset(NeuTRENOGPTConfig)
        block_size = self.preset.max_position_embeddings
        self.processing = train_word_tokenizer(dataset["train"])  # word level, as WikiText is written
        blocks = group_into_blocks(dataset["train"], self.processing, block_size)
        max_tokens = None if settings.max_eval_samples is None else settings.max_eval_samples * block_size
        stream = token_stream(dataset[self.eval_split], self.processing, max_tokens=max_tokens)
        if stream.numel() < block_size:
            raise ValueError(
                f"Split {self.eval_split!r} of --dataset {settings.dataset!r} is shorter than one block "
                f"({block_size} tokens)."
            )
        self._lm_inputs(capped(blocks, settings.max_train_samples, settings.seed), stream, block_size)
        self.summary_extra = f", vocabulary {len(self.processing)}"

    def _build(self, architecture: str, neutreno_lambda: float) -> torch.nn.Module:
        return language_model(self.settings.model, self.processing, neutreno_lambda=neutreno_lambda)


class SegmentationTask(PresetTask, SemanticSegmentation):
    kind = f"a segmentation preset {SEGMENTATION_MODELS}"
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
        self.settings = settings
        self.labels, reduce_labels = segmentation_labels(settings.dataset)
        self._set_preset(NeuTRENOViTConfig)
        self.processing = make_image_processor(self.preset, do_reduce_labels=reduce_labels)
        self._set_splits(dataset, ("validation", "test"))
        self._image_inputs(segmentation_transform(self.processing, image_column, annotation_column))
        height, width = self.preset.image_size_2d
        self.summary_extra = f", resized to {height}×{width}"

    def _build(self, architecture: str, neutreno_lambda: float) -> torch.nn.Module:
        # the decoder follows the encoder's λ
        return segmenter(self.settings.model, self.labels, neutreno_lambda=neutreno_lambda)


def segmentation_labels(dataset_name: str) -> tuple[list[str], bool]:
    """(class names, whether label 0 is ignored and the others shifted down). A local folder names its classes in
    `id2label.json`, as its label maps number them; scene_parse_150 (ADE20K) has 150 classes after its ignored
    label 0. Anything else raises: the classes are not guessed."""
    if is_local(dataset_name):
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
