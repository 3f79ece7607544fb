"""Train a baseline and a NeuTRENO model (optionally ViT⁻) on the same data and budget, paired over several seeds;
compare them.

    from hf_neutreno.compare import CompareSettings, run_comparison
    results = run_comparison(CompareSettings(model="vit-micro", max_steps=200, output_dir="runs/compare"))

`run_comparison` trains the variants once per seed, writes `results.json`, `comparison.png` and one model folder per
variant (from the first seed) to `output_dir`, and returns the results; `format_table` prints them. `hf-neutreno
compare` (`hf_neutreno.commands.compare`) is its command line, whose help describes the variants, the scores and the
output folder.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

import torch
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments, ViTImageProcessorPil, set_seed
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from . import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOGPTConfig,
    NeuTRENOGPTForCausalLM,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
)
from .data import BUILTIN_DIGITS, image_and_label_columns, label_names, load_image_dataset, subset
from .lm_eval import block_eval
from .text_data import TEXT_COLUMN, group_into_blocks, token_stream, train_word_tokenizer
from .recipes import accuracy_metrics, collate_images, image_transform
from .segmentation import MeanIoU, make_image_processor

COMMAND = "hf-neutreno compare"
FORMAT_VERSION = 2  # 2: several paired seeds (per-seed values, learning curves, paired differences)
VARIANTS = ("baseline", "neutreno", "vit-minus")
# A NeuTRENO ViT preset with a decoder is a Segmenter; the others are image classifiers.
SEGMENTATION_MODELS = sorted(name for name, fields in NeuTRENOViTConfig.presets.items() if "decoder_type" in fields)
IMAGE_MODELS = sorted(set(NeuTRENOViTConfig.presets) - set(SEGMENTATION_MODELS))
TEXT_MODELS = sorted(NeuTRENOGPTConfig.presets)
RESULTS_FILE, PLOT_FILE = "results.json", "comparison.png"
PARTIAL = ".partial."  # prefix of an entry being written; it is renamed to its real name once complete
EVAL_SPLITS = ("test", "validation")  # the first one the dataset has
IMAGE_DATASETS = "digits or uoft-cs/cifar10 (or a local folder of Parquet files or images)"
TEXT_DATASETS = "Salesforce/wikitext with --dataset-config wikitext-2-v1 (or a local folder of its Parquet files)"
SEGMENTATION_DATASETS = (
    "scene_parse_150 with --dataset-config scene_parsing, or a local folder of Parquet files with its `image` and "
    "`annotation` columns (e.g. fashion-scenes)"
)
ANNOTATION_COLUMN = "annotation"  # scene_parse_150's label maps
LABELS_FILE = "id2label.json"  # a segmentation folder's class names, label map value -> name
ADE20K_CLASSES = 150  # scene_parse_150: label 0 is "other" (ignored), 1-150 the classes
# results["task"] -> the Auto classes that load a variant's model and its image processor or tokenizer
LOADERS = {
    "image-classification": ("AutoModelForImageClassification", "AutoImageProcessor"),
    "semantic-segmentation": ("AutoModelForSemanticSegmentation", "AutoImageProcessor"),
    "causal-lm": ("AutoModelForCausalLM", "AutoTokenizer"),
}
# Whether a larger value is better, for the paired wins: lower cosine is less over-smoothing (the papers' claim).
HIGHER_IS_BETTER = {"accuracy": True, "mean_iou": True, "perplexity": False, "last_layer_cosine": False}


@dataclasses.dataclass
class CompareSettings:
    """What `run_comparison` trains and how; `hf-neutreno compare --help` explains each field (flag `--model` for
    `model`, `--max-steps` for `max_steps`, ...). `learning_rate=None` picks 3e-3 for image classifiers, 1e-3 for
    language models and Segmenters, and `neutreno_lambda=None` the preset's λ. The variants train once per seed
    `seed, seed + 1, ..., seed + seeds - 1`."""

    model: str = "vit-micro"
    dataset: str = BUILTIN_DIGITS
    dataset_config: str | None = None
    vit_minus: bool = False
    neutreno_lambda: float | None = None
    output_dir: str = "runs/compare"
    epochs: float = 8
    max_steps: int | None = None
    batch_size: int = 32
    learning_rate: float | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    probe_samples: int = 256
    seed: int = 0
    seeds: int = 3
    threads: int = 1
    no_progress: bool = False


def run_comparison(settings: CompareSettings) -> dict:
    """Train and compare the variants as `settings` say; returns what `results.json` holds.

    Every check, and loading the data, comes before the first model trains: bad input costs seconds and raises
    `ValueError` naming the flag. torch's thread count is restored afterwards.
    """
    settings = dataclasses.replace(settings)  # `_prepare` fills in the defaults that depend on the preset
    task, replace = _prepare(settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        return _compare(settings, task, replace)
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------------------------------
# Checks and data


def _prepare(settings: CompareSettings):
    """The task (data, processing, model builder) and whether an earlier run is replaced; ValueError on bad input."""
    for name in ("batch_size", "max_steps", "max_train_samples", "max_eval_samples", "probe_samples", "seeds",
                 "threads"):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    for name in ("epochs", "learning_rate"):
        if getattr(settings, name) is not None and not getattr(settings, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(settings, name)}.")
    if settings.neutreno_lambda is not None and not settings.neutreno_lambda > 0:
        raise ValueError(f"--neutreno-lambda must be > 0 (λ = 0 is the baseline), got {settings.neutreno_lambda}.")
    task_class = _task_class(settings.model)
    if settings.learning_rate is None:
        settings.learning_rate = 3e-3 if task_class is _ImageTask else 1e-3
    if settings.vit_minus and task_class is not _ImageTask:
        kind = "a language model" if task_class is _TextTask else "a segmentation preset (ViT⁻ has no Segmenter)"
        raise ValueError(f"--vit-minus needs an image preset, a classifier {IMAGE_MODELS}; --model {settings.model} "
                         f"is {kind}.")
    replace = _check_output_dir(Path(settings.output_dir))
    try:
        import matplotlib  # noqa: F401  (the plot is drawn after training: fail now, not then)
    except ImportError:
        raise ValueError("The comparison plot needs matplotlib: pip install 'hf-neutreno[compare]'.") from None
    dataset = _load_dataset(settings.dataset, settings.dataset_config)
    if "train" not in dataset or not any(split in dataset for split in EVAL_SPLITS):
        raise ValueError(
            f"--dataset {settings.dataset!r} needs a `train` split and a `test` or `validation` split; it has "
            f"{sorted(dataset)}."
        )
    return task_class(settings, dataset), replace


def _task_class(model: str):
    if model in TEXT_MODELS:
        return _TextTask
    return _SegmentationTask if model in SEGMENTATION_MODELS else _ImageTask


def _load_dataset(name: str, config_name: str | None):
    try:
        return load_image_dataset(name, config_name)  # any Hub name or folder; nothing in it is image-specific
    except ImportError as error:  # `digits` without scikit-learn
        raise ValueError(f"--dataset {name!r}: {error} (or pip install 'hf-neutreno[compare]').") from None
    except ValueError as error:  # a missing folder; a Hub dataset without --dataset-config (the message lists them)
        raise ValueError(f"--dataset {name!r}: {error}") from None
    except Exception as error:  # datasets raises many kinds: not found, offline, unreadable files
        from huggingface_hub import constants

        offline = " HF_HUB_OFFLINE is set: a Hub dataset loads only from the cache." if constants.HF_HUB_OFFLINE else ""
        raise ValueError(
            f"--dataset {name!r} could not be loaded ({type(error).__name__}: {str(error).strip()[:300]}). It must be "
            f"'{BUILTIN_DIGITS}' (bundled with scikit-learn), a local folder of Parquet files or images, or a Hub "
            f"dataset name.{offline}"
        ) from None


def _columns(dataset) -> dict[str, str]:
    return {name: type(feature).__name__ for name, feature in dataset["train"].features.items()}


def _eval_split(dataset, order=EVAL_SPLITS) -> str:
    return next(split for split in order if split in dataset)


def _segmentation_columns(dataset) -> tuple[str, str] | None:
    """(image column, label-map column) of a scene_parse_150-like dataset: an Image column and the Image column
    `annotation`; None if it has no such pair."""
    features = dataset["train"].features
    images = [name for name, feature in features.items() if type(feature).__name__ == "Image"]
    if ANNOTATION_COLUMN not in images or len(images) < 2:
        return None
    return next(name for name in images if name != ANNOTATION_COLUMN), ANNOTATION_COLUMN


def _capped(dataset, count: int | None, seed: int):
    return subset(dataset, None if count is None else min(count, len(dataset)), seed)


# ---------------------------------------------------------------------------------------------------------------------
# The output folder: one compare run, written so that an interruption never leaves a half-written entry


def _known_entries() -> set[str]:
    names = {RESULTS_FILE, PLOT_FILE, *VARIANTS}
    return names | {PARTIAL + name for name in names}


def _is_compare_run(path: Path) -> bool:
    try:
        results = json.loads((path / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    entries = {p.name for p in path.iterdir()}
    return isinstance(results, dict) and results.get("command") == COMMAND and entries <= _known_entries()


def _check_output_dir(path: Path) -> bool:
    """True if `path` holds an earlier compare run (to be replaced); raise if it holds anything else."""
    if not path.exists():
        return False
    if not path.is_dir():
        raise ValueError(f"--output-dir {str(path)!r} is a file, not a folder.")
    entries = sorted(p.name for p in path.iterdir())
    if not entries:
        return False
    if _is_compare_run(path):
        return True
    what = "a model (config.json)" if "config.json" in entries else "files"
    shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
    raise ValueError(
        f"--output-dir {str(path)!r} already holds {what}, not an earlier `{COMMAND}` run ({shown}). Choose "
        "another --output-dir or empty this one; nothing was written."
    )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write_complete(path: Path, write) -> None:
    """`write(partial_path)`, then rename it to `path`: readers see no entry or the complete one."""
    partial = path.with_name(PARTIAL + path.name)
    _remove(partial)
    try:
        write(partial)
        _remove(path)
        os.replace(partial, path)
    finally:
        _remove(partial)


def _write_json(path: Path, data: dict) -> None:
    _write_complete(path, lambda p: p.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------------------
# Tasks: what differs between image classification and language modelling


class _ImageSplits:
    """What the image tasks share: capped train and eval splits, their sizes and the run's one-line summary."""

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


class _ImageTask(_ImageSplits):
    name, metric = "image-classification", "accuracy"

    def __init__(self, settings, dataset):
        try:
            image_column, label_column = image_and_label_columns(dataset)
        except ValueError:
            kind = (f" it is a segmentation dataset; segmentation presets: {SEGMENTATION_MODELS}."
                    if _segmentation_columns(dataset) else "")
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

    def build(self, variant: str) -> torch.nn.Module:
        id2label = dict(enumerate(self.labels))
        fields = dict(NeuTRENOViTConfig.presets[self.settings.model], id2label=id2label,
                      label2id={v: k for k, v in id2label.items()})
        if variant == "vit-minus":  # the poster's ViT⁻: the same blocks, W_V W_O = V diag(−ψ²) Vᵀ, no NeuTRENO term
            config = EigenViTConfig(**fields, spectrum_sign="negative", neutreno_lambda=0.0)
            return EigenViTForImageClassification(config)
        lam = self.neutreno_lambda if variant == "neutreno" else 0.0
        return NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**fields, neutreno_lambda=lam))

    def trainer_arguments(self) -> dict:
        return dict(data_collator=collate_images, compute_metrics=accuracy_metrics)

    def score(self, trainer: Trainer) -> float:
        return float(trainer.evaluate(self.eval)["eval_accuracy"])

    def probe_batches(self) -> list[dict]:
        probe = self.eval.select(range(min(self.settings.probe_samples, len(self.eval))))
        size = self.settings.batch_size
        return [{"pixel_values": probe[i : i + size]["pixel_values"]} for i in range(0, len(probe), size)]


class _TextTask:
    name, metric = "causal-lm", "perplexity"

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
            raise ValueError(f"Split {self.eval_split!r} of --dataset {settings.dataset!r} is shorter than one block "
                             f"({self.block_size} tokens).")
        self.sizes = {"train_blocks": len(self.train), "block_size": self.block_size, "eval_tokens": len(self.stream)}
        self.summary = (
            f"{settings.model} on {settings.dataset} ({len(self.train)} train blocks of {self.block_size} tokens, "
            f"{self.stream.numel()} {self.eval_split} tokens, vocabulary {len(self.processing)})"
        )

    def build(self, variant: str) -> torch.nn.Module:
        vocab_size = len(self.processing)
        # The preset's adaptive-softmax cutoffs assume its own vocabulary; keep those that fit this one.
        cutoffs = [c for c in self.preset.adaptive_softmax_cutoffs or () if c < vocab_size] or None
        config = NeuTRENOGPTConfig.from_preset(
            self.settings.model,
            vocab_size=vocab_size,
            pad_token_id=self.processing.pad_token_id,
            eos_token_id=self.processing.eos_token_id,
            bos_token_id=None,
            adaptive_softmax_cutoffs=cutoffs,
            neutreno_lambda=self.neutreno_lambda if variant == "neutreno" else 0.0,
        )
        return NeuTRENOGPTForCausalLM(config)

    def trainer_arguments(self) -> dict:
        return dict(data_collator=DataCollatorForLanguageModeling(self.processing, mlm=False))

    def score(self, trainer: Trainer) -> float:
        progress = not self.settings.no_progress
        return block_eval(trainer.model, self.stream, self.block_size, self.settings.batch_size, progress).perplexity

    def probe_batches(self) -> list[dict]:
        count = min(self.settings.probe_samples, self.stream.numel() // self.block_size)
        blocks = self.stream[: count * self.block_size].view(count, self.block_size)
        return [{"input_ids": batch} for batch in blocks.split(self.settings.batch_size)]


class _SegmentationTask(_ImageSplits):
    name, metric = "semantic-segmentation", "mean_iou"

    def __init__(self, settings, dataset):
        columns = _segmentation_columns(dataset)
        if columns is None:
            kind = (f" it is an image-classification dataset; classifier presets: {IMAGE_MODELS}."
                    if _has_class_labels(dataset) else "")
            raise ValueError(
                f"--model {settings.model} is a segmentation preset, but --dataset {settings.dataset!r} has no Image "
                f"column and `{ANNOTATION_COLUMN}` label-map column (it has {_columns(dataset)}).{kind} Segmentation "
                f"datasets: {SEGMENTATION_DATASETS}."
            )
        image_column, annotation_column = columns
        self.settings, self.eval_split = settings, _eval_split(dataset, ("validation", "test"))
        self.labels, reduce_labels = _segmentation_labels(settings.dataset)
        self.preset = NeuTRENOViTConfig.from_preset(settings.model)
        self.neutreno_lambda = settings.neutreno_lambda or self.preset.neutreno_lambda
        self.processing = make_image_processor(self.preset, do_reduce_labels=reduce_labels)

        def transform(batch: dict) -> dict:
            encoded = self.processing(images=[image.convert("RGB") for image in batch[image_column]],
                                      segmentation_maps=list(batch[annotation_column]), return_tensors="pt")
            return {"pixel_values": encoded["pixel_values"], "labels": encoded["labels"]}

        self._set_splits(dataset, transform)

    def build(self, variant: str) -> torch.nn.Module:
        id2label = dict(enumerate(self.labels))
        fields = {k: v for k, v in NeuTRENOViTConfig.presets[self.settings.model].items() if k != "num_labels"}
        lam = self.neutreno_lambda if variant == "neutreno" else 0.0  # the decoder follows the encoder's λ
        config = NeuTRENOViTConfig(**fields, id2label=id2label, label2id={v: k for k, v in id2label.items()},
                                   neutreno_lambda=lam)
        return NeuTRENOViTForSemanticSegmentation(config)

    def trainer_arguments(self) -> dict:
        return dict(data_collator=collate_images)

    def score(self, trainer: Trainer) -> float:
        """Mean IoU over the evaluation images at the preset's size (single scale): logits upsampled bilinearly to
        the label maps, as the image processor's `post_process_semantic_segmentation` does."""
        model, size = trainer.model, self.settings.batch_size
        metric = MeanIoU(model.config.num_labels, ignore_index=model.config.semantic_loss_ignore_index)
        model.eval()
        with torch.inference_mode():
            for start in range(0, len(self.eval), size):
                batch = self.eval[start : start + size]
                logits = model(pixel_values=batch["pixel_values"]).logits
                logits = torch.nn.functional.interpolate(logits, size=batch["labels"].shape[-2:], mode="bilinear",
                                                         align_corners=False)
                metric.update(logits.argmax(dim=1), batch["labels"])
        return float(metric.compute()["mean_iou"])

    def probe_batches(self) -> list[dict]:
        probe = self.eval.select(range(min(self.settings.probe_samples, len(self.eval))))
        size = self.settings.batch_size
        return [{"pixel_values": probe[i : i + size]["pixel_values"]} for i in range(0, len(probe), size)]


def _has_class_labels(dataset) -> bool:
    try:
        image_and_label_columns(dataset)
    except ValueError:
        return False
    return True


def _segmentation_labels(dataset_name: str) -> tuple[list[str], bool]:
    """(class names, whether label 0 is ignored and the others shifted down): a folder's `id2label.json` names its
    classes as the label maps number them; without one, scene_parse_150's convention (ADE20K's 150 classes)."""
    path = Path(dataset_name) / LABELS_FILE
    if not path.is_file():
        return [str(i) for i in range(ADE20K_CLASSES)], True
    try:
        id2label = {int(k): str(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except (ValueError, AttributeError) as error:
        raise ValueError(f"--dataset {dataset_name!r}: {LABELS_FILE} is not a JSON object of label -> name "
                         f"({error}).") from None
    if sorted(id2label) != list(range(len(id2label))) or len(id2label) < 2:
        raise ValueError(f"--dataset {dataset_name!r}: {LABELS_FILE} must name the classes 0, 1, ..., K - 1 (K >= 2); "
                         f"it has keys {sorted(id2label)[:12]}.")
    return [id2label[i] for i in range(len(id2label))], False


# ---------------------------------------------------------------------------------------------------------------------
# Training, measuring, saving, reporting


def _describe(variant: str, neutreno_lambda: float) -> str:
    if variant == "neutreno":
        return f"NeuTRENO, λ={neutreno_lambda:g}"
    return {"baseline": "softmax, λ=0", "vit-minus": "ViT⁻, Λ=−ψ²"}[variant]


def _copy_shared_weights(model: torch.nn.Module, reference: dict[str, torch.Tensor]) -> None:
    """Start from the baseline's initial weights wherever the names and shapes coincide (all of them for neutreno;
    all but the value/output projections for ViT⁻), so the variants differ only where their designs do."""
    own = model.state_dict()
    shared = {name: tensor for name, tensor in reference.items() if name in own and own[name].shape == tensor.shape}
    model.load_state_dict(shared, strict=False)


def _fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of the model's weights (names and values): equal for two models that start from the same weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _training_arguments(settings, output_dir: str, seed: int, remove_unused_columns: bool) -> TrainingArguments:
    return TrainingArguments(
        output_dir=output_dir,  # a temporary folder: Trainer itself saves nothing
        seed=seed,
        data_seed=seed,  # the same batches in the same order for every variant of this seed
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        weight_decay=0.05,
        warmup_steps=0.1,
        lr_scheduler_type="cosine",
        logging_strategy="steps",
        logging_steps=0.1,  # ten points of the learning curve per run
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=settings.no_progress,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning helps only a GPU, and warns without one
        remove_unused_columns=remove_unused_columns,  # image transforms need the raw image columns
    )


def _mean_std(values: list[float]) -> dict:
    """Mean and sample standard deviation (None for one value)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None}


def _summarise(results: dict) -> None:
    """Per variant: mean ± std over the finished seeds, and the paired difference from the baseline on the seeds
    both finished, with the seeds where the variant is better (`HIGHER_IS_BETTER`)."""
    metric = results["metric"]
    baseline = {run["seed"]: run for run in results["variants"]["baseline"]["per_seed"]}
    for name, entry in results["variants"].items():
        runs = entry["per_seed"]
        for key in (metric, "last_layer_cosine"):
            entry[key] = _mean_std([run[key] for run in runs])
        entry["cosine_similarity"] = {
            "mean": [statistics.fmean(layer) for layer in zip(*(run["cosine_similarity"] for run in runs))],
            "min": [min(layer) for layer in zip(*(run["cosine_similarity"] for run in runs))],
            "max": [max(layer) for layer in zip(*(run["cosine_similarity"] for run in runs))],
        }
        entry["train_seconds"] = statistics.fmean(run["train_seconds"] for run in runs)
        if name == "baseline":
            continue
        paired = [run for run in runs if run["seed"] in baseline]
        entry["difference_from_baseline"] = {}
        for key in (metric, "last_layer_cosine"):
            differences = [run[key] - baseline[run["seed"]][key] for run in paired]
            sign = 1 if HIGHER_IS_BETTER[key] else -1
            entry["difference_from_baseline"][key] = {
                **_mean_std(differences), "wins": sum(sign * d > 0 for d in differences), "seeds": len(differences)}


def _learning_curve(trainer: Trainer) -> list[dict]:
    return [{"step": log["step"], "epoch": log["epoch"], "loss": log["loss"]}
            for log in trainer.state.log_history if "loss" in log]


def _compare(settings: CompareSettings, task, replace: bool) -> dict:
    from .diagnostics import measure_oversmoothing

    output_dir = Path(settings.output_dir)
    if replace:
        print(f"Replacing the earlier compare run in {output_dir}.")
        for entry in output_dir.iterdir():
            _remove(entry)
    output_dir.mkdir(parents=True, exist_ok=True)
    variants = ["baseline", "neutreno"] + (["vit-minus"] if settings.vit_minus else [])
    seeds = list(range(settings.seed, settings.seed + settings.seeds))
    budget = f"{settings.max_steps} steps" if settings.max_steps else f"{settings.epochs:g} epochs"
    print(f"{COMMAND}: {task.summary}; {', '.join(variants)}; {budget}, batch {settings.batch_size}, "
          f"seeds {', '.join(map(str, seeds))}")
    results = {
        "command": COMMAND,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "settings": dataclasses.asdict(settings),
        "task": task.name,
        "metric": task.metric,
        "eval_split": task.eval_split,
        "data": task.sizes,
        "seeds": seeds,
        "models_from_seed": seeds[0],
        "variants": {},
    }
    _write_json(output_dir / RESULTS_FILE, results)
    probe = task.probe_batches()
    for seed in seeds:
        reference = None  # this seed's initial weights, which every variant starts from
        for variant in variants:
            print(f"\n[{variant}, seed {seed}] {_describe(variant, task.neutreno_lambda)}")
            set_seed(seed)
            model = task.build(variant)
            if reference is None:
                reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
            else:
                _copy_shared_weights(model, reference)
            initial_weights = _fingerprint(model)
            with tempfile.TemporaryDirectory(prefix="hf-neutreno-compare-") as scratch:
                trainer = Trainer(
                    model=model,
                    args=_training_arguments(settings, scratch, seed, remove_unused_columns=task.name == "causal-lm"),
                    train_dataset=task.train,
                    processing_class=task.processing,
                    **task.trainer_arguments(),
                )
                start = time.perf_counter()
                train_output = trainer.train()
                seconds = time.perf_counter() - start
                score = task.score(trainer)
            report = measure_oversmoothing(
                model, probe, metrics=["cosine_similarity"], progress=not settings.no_progress, model_name=variant
            )
            if seed == seeds[0]:
                def save(folder: Path, model=model) -> None:
                    model.save_pretrained(folder)
                    task.processing.save_pretrained(folder)

                _write_complete(output_dir / variant, save)
            # The last block of the encoder (a Segmenter's decoder blocks follow it in the report)
            decoder_layers = report.metadata.get("decoder_layers", [])
            layers = report.layer_indices("cosine_similarity")
            cosine = report.per_layer("cosine_similarity")
            last_layer = max(layer for layer in layers if layer not in decoder_layers)
            results.update(cosine_layers=layers, decoder_layers=decoder_layers, last_layer=last_layer,
                           probe_samples=report.num_samples)
            entry = results["variants"].setdefault(variant, {
                "description": _describe(variant, task.neutreno_lambda),
                "model_type": model.config.model_type,
                "neutreno_lambda": model.config.neutreno_lambda,
                "parameters": model.num_parameters(),
                "model_dir": variant,
                "per_seed": [],
            })
            entry["per_seed"].append({
                "seed": seed,
                "initial_weights_sha256": initial_weights,  # what pairs the variants of a seed
                task.metric: score,
                "last_layer_cosine": cosine[layers.index(last_layer)],
                "cosine_similarity": cosine,  # per hidden state in `cosine_layers`: 0 = embeddings, ℓ = block ℓ
                "train_seconds": seconds,
                "train_loss": train_output.training_loss,
                "learning_curve": _learning_curve(trainer),  # training loss, ten points
            })
            _summarise(results)
            _write_json(output_dir / RESULTS_FILE, results)

    title = f"{settings.model} on {Path(settings.dataset).name}, seeds {seeds[0]}-{seeds[-1]}"
    _write_complete(output_dir / PLOT_FILE, lambda path: _plot(path, results, title))
    results.update(complete=True, plot=PLOT_FILE)
    _write_json(output_dir / RESULTS_FILE, results)
    return results


def _plot(path: Path, results: dict, title: str) -> None:
    """Two panels: the training loss of every seed (thin lines), and the token cosine similarity per layer (mean
    over seeds, band from the lowest to the highest seed)."""
    from matplotlib.figure import Figure  # no pyplot: nothing global changes

    figure = Figure(figsize=(10, 3.8), layout="constrained")
    loss_axes, cosine_axes = figure.subplots(1, 2)
    layers = results["cosine_layers"]
    for index, (variant, entry) in enumerate(results["variants"].items()):
        color = f"C{index}"
        for number, run in enumerate(entry["per_seed"]):
            curve = run["learning_curve"]
            loss_axes.plot([p["step"] for p in curve], [p["loss"] for p in curve], color=color, linewidth=0.8,
                           alpha=0.8, label=variant if number == 0 else None)
        cosine = entry["cosine_similarity"]
        cosine_axes.plot(layers, cosine["mean"], color=color, marker="o", markersize=3, label=variant)
        cosine_axes.fill_between(layers, cosine["min"], cosine["max"], color=color, alpha=0.2, linewidth=0)
    if results["decoder_layers"]:
        first = results["decoder_layers"][0]
        cosine_axes.axvline(first - 0.5, color="grey", linestyle=":", linewidth=1)
        cosine_axes.text(first - 0.4, 0.02, "decoder", transform=cosine_axes.get_xaxis_transform(), color="grey",
                         fontsize="small")
    loss_axes.set(title="training loss, one line per seed", xlabel="step")
    cosine_axes.set(title="token cosine similarity (mean; band: seed range)", xlabel="layer (0 = embeddings)")
    for axes in (loss_axes, cosine_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle(title)
    figure.savefig(path, dpi=110)


def _number(value: float, metric: str, signed: bool = False) -> str:
    return f"{value:{'+' if signed else ''}.{2 if metric == 'perplexity' else 4}f}"


def _spread(stats: dict, metric: str, signed: bool = False) -> str:
    text = _number(stats["mean"], metric, signed)
    return text if stats["std"] is None else f"{text} ± {_number(stats['std'], metric)}"


def format_table(results: dict) -> str:
    """The side-by-side table of a results.json, one row per variant, and the lines that explain it."""
    metric = results["metric"]
    title = metric.replace("_", " ").replace("mean iou", "mean IoU")
    header = ["variant", "attention", title, "Δ (wins)", "last-layer cosine", "Δ (wins)", "train time"]
    rows = []
    for name, entry in results["variants"].items():
        cells = [name, entry["description"]]
        for key in (metric, "last_layer_cosine"):
            cells.append(_spread(entry[key], key if key == metric else "cosine"))
            difference = entry.get("difference_from_baseline", {}).get(key)
            cells.append("" if difference is None else f"{_spread(difference, key, signed=True)} "
                         f"({difference['wins']}/{difference['seeds']})")
        cells.append(f"{entry['train_seconds']:.1f} s")
        rows.append(cells)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    seeds = results["seeds"]
    better = "lower" if not HIGHER_IS_BETTER[metric] else "higher"
    where = "the encoder's last block" if results["decoder_layers"] else "the last block"
    notes = [
        f"Mean ± sample std over {len(seeds)} seeds ({', '.join(map(str, seeds))}); Δ: the paired difference from the "
        f"baseline (same seed), mean ± std; wins: seeds where the variant is better ({better} {title}, lower cosine).",
        f"{title.capitalize() if metric != 'mean_iou' else title} on {_scored(results)}; last-layer cosine: mean "
        f"cosine similarity of all token pairs after {where}, on the first {results['probe_samples']} "
        f"{_eval_unit(results)}; train time: per seed.",
    ]
    lines += [line for note in notes for line in textwrap.wrap(note, width=118)]
    return "\n".join(lines)


def _eval_unit(results: dict) -> str:
    if results["task"] == "causal-lm":
        return f"blocks of {results['data']['block_size']} {results['eval_split']} tokens"
    return f"{results['eval_split']} images"


def _scored(results: dict) -> str:
    data = results["data"]
    if results["task"] == "causal-lm":
        return f"{data['eval_tokens']} {results['eval_split']} tokens"
    return f"the {data['eval_images']} {results['eval_split']} images"


__all__ = ["LOADERS", "VARIANTS", "CompareSettings", "format_table", "run_comparison"]
