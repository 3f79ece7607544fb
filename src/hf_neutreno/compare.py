"""Train a baseline and a NeuTRENO model (optionally ViT⁻) on the same data, seed and budget; compare them.

    from hf_neutreno.compare import CompareSettings, run_comparison
    results = run_comparison(CompareSettings(model="vit-micro", max_steps=200, output_dir="runs/compare"))

`run_comparison` trains the variants, writes `results.json`, `comparison.png` and one model folder per variant to
`output_dir`, and returns the results; `hf-neutreno compare` (`hf_neutreno.commands.compare`) is its command line,
whose help describes the variants, the scores and the output folder.
"""

import dataclasses
import json
import os
import shutil
import tempfile
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
)
from .data import BUILTIN_DIGITS, image_and_label_columns, label_names, load_image_dataset, subset
from .lm_eval import block_eval
from .text_data import TEXT_COLUMN, group_into_blocks, token_stream, train_word_tokenizer
from .recipes import accuracy_metrics, collate_images, image_transform

COMMAND = "hf-neutreno compare"
FORMAT_VERSION = 1
VARIANTS = ("baseline", "neutreno", "vit-minus")
IMAGE_MODELS = sorted(NeuTRENOViTConfig.presets)
TEXT_MODELS = sorted(NeuTRENOGPTConfig.presets)
RESULTS_FILE, PLOT_FILE = "results.json", "comparison.png"
PARTIAL = ".partial."  # prefix of an entry being written; it is renamed to its real name once complete
EVAL_SPLITS = ("test", "validation")  # the first one the dataset has
IMAGE_DATASETS = "digits or uoft-cs/cifar10 (or a local folder of Parquet files or images)"
TEXT_DATASETS = "Salesforce/wikitext with --dataset-config wikitext-2-v1 (or a local folder of its Parquet files)"
# results["task"] -> the Auto classes that load a variant's model and its image processor or tokenizer
LOADERS = {
    "image-classification": ("AutoModelForImageClassification", "AutoImageProcessor"),
    "causal-lm": ("AutoModelForCausalLM", "AutoTokenizer"),
}


@dataclasses.dataclass
class CompareSettings:
    """What `run_comparison` trains and how; `hf-neutreno compare --help` explains each field (flag `--model` for
    `model`, `--max-steps` for `max_steps`, ...). `learning_rate=None` picks 3e-3 for image presets, 1e-3 for language
    models, and `neutreno_lambda=None` the preset's λ."""

    model: str = "vit-micro"
    dataset: str = BUILTIN_DIGITS
    dataset_config: str | None = None
    vit_minus: bool = False
    neutreno_lambda: float | None = None
    output_dir: str = "runs/compare"
    epochs: float = 10
    max_steps: int | None = None
    batch_size: int = 32
    learning_rate: float | None = None
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    probe_samples: int = 256
    seed: int = 0
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
    for name in ("batch_size", "max_steps", "max_train_samples", "max_eval_samples", "probe_samples", "threads"):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    for name in ("epochs", "learning_rate"):
        if getattr(settings, name) is not None and not getattr(settings, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(settings, name)}.")
    if settings.neutreno_lambda is not None and not settings.neutreno_lambda > 0:
        raise ValueError(f"--neutreno-lambda must be > 0 (λ = 0 is the baseline), got {settings.neutreno_lambda}.")
    is_image = settings.model in IMAGE_MODELS
    if settings.learning_rate is None:
        settings.learning_rate = 3e-3 if is_image else 1e-3
    if settings.vit_minus and not is_image:
        raise ValueError(
            f"--vit-minus needs an image preset {IMAGE_MODELS}; --model {settings.model} is a language model."
        )
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
    return (_ImageTask if is_image else _TextTask)(settings, dataset), replace


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


def _eval_split(dataset) -> str:
    return next(split for split in EVAL_SPLITS if split in dataset)


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


class _ImageTask:
    metric = "accuracy"

    def __init__(self, settings, dataset):
        try:
            image_column, label_column = image_and_label_columns(dataset)
        except ValueError:
            raise ValueError(
                f"--model {settings.model} is an image classifier, but --dataset {settings.dataset!r} has no Image "
                f"column and ClassLabel column (it has {_columns(dataset)}). Image datasets: {IMAGE_DATASETS}."
            ) from None
        self.settings, self.eval_split = settings, _eval_split(dataset)
        self.labels = label_names(dataset)
        self.preset = NeuTRENOViTConfig.from_preset(settings.model)
        self.neutreno_lambda = settings.neutreno_lambda or self.preset.neutreno_lambda
        height, width = self.preset.image_size_2d
        self.processing = ViTImageProcessorPil(
            size={"height": height, "width": width}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
        )
        self.train = _capped(dataset["train"], settings.max_train_samples, settings.seed)
        self.eval = _capped(dataset[self.eval_split], settings.max_eval_samples, settings.seed)
        transform = image_transform(self.processing, image_column, label_column)
        self.train.set_transform(transform)
        self.eval.set_transform(transform)
        self.sizes = {"train_images": len(self.train), "eval_images": len(self.eval)}
        self.summary = (
            f"{settings.model} on {settings.dataset} ({len(self.train)} train / {len(self.eval)} {self.eval_split} "
            f"images, {len(self.labels)} classes, resized to {height}×{width})"
        )

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
    metric = "perplexity"

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


def _training_arguments(settings, output_dir: str, is_image: bool) -> TrainingArguments:
    return TrainingArguments(
        output_dir=output_dir,  # a temporary folder: Trainer itself saves nothing
        seed=settings.seed,
        data_seed=settings.seed,  # the same batches in the same order for every variant
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1,
        per_device_train_batch_size=settings.batch_size,
        per_device_eval_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        weight_decay=0.05,
        warmup_steps=0.1,
        lr_scheduler_type="cosine",
        logging_strategy="steps",
        logging_steps=0.2,  # five loss reports per run
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=settings.no_progress,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning helps only a GPU, and warns without one
        remove_unused_columns=not is_image,  # the image transform needs the raw image column
    )


def _compare(settings: CompareSettings, task, replace: bool) -> dict:
    from .diagnostics import measure_oversmoothing

    output_dir = Path(settings.output_dir)
    if replace:
        print(f"Replacing the earlier compare run in {output_dir}.")
        for entry in output_dir.iterdir():
            _remove(entry)
    output_dir.mkdir(parents=True, exist_ok=True)
    variants = ["baseline", "neutreno"] + (["vit-minus"] if settings.vit_minus else [])
    is_image = isinstance(task, _ImageTask)
    budget = f"{settings.max_steps} steps" if settings.max_steps else f"{settings.epochs:g} epochs"
    print(f"{COMMAND}: {task.summary}; {', '.join(variants)}; {budget}, batch {settings.batch_size}, "
          f"seed {settings.seed}")
    results = {
        "command": COMMAND,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "settings": dataclasses.asdict(settings),
        "task": "image-classification" if is_image else "causal-lm",
        "metric": task.metric,
        "eval_split": task.eval_split,
        "data": task.sizes,
        "variants": {},
    }
    _write_json(output_dir / RESULTS_FILE, results)
    probe = task.probe_batches()
    reference, reports = None, {}
    for variant in variants:
        print(f"\n[{variant}] {_describe(variant, task.neutreno_lambda)}")
        set_seed(settings.seed)
        model = task.build(variant)
        if reference is None:
            reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        else:
            _copy_shared_weights(model, reference)
        with tempfile.TemporaryDirectory(prefix="hf-neutreno-compare-") as scratch:
            trainer = Trainer(
                model=model,
                args=_training_arguments(settings, scratch, is_image),
                train_dataset=task.train,
                processing_class=task.processing,
                **task.trainer_arguments(),
            )
            start = time.perf_counter()
            train_output = trainer.train()
            seconds = time.perf_counter() - start
            score = task.score(trainer)
        reports[variant] = measure_oversmoothing(
            model, probe, metrics=["cosine_similarity"], progress=not settings.no_progress, model_name=variant
        )

        def save(folder: Path, model=model) -> None:
            model.save_pretrained(folder)
            task.processing.save_pretrained(folder)

        _write_complete(output_dir / variant, save)
        cosine = reports[variant].per_layer("cosine_similarity")
        results["variants"][variant] = {
            "description": _describe(variant, task.neutreno_lambda),
            "model_type": model.config.model_type,
            "neutreno_lambda": model.config.neutreno_lambda,
            task.metric: score,
            "last_layer_cosine": cosine[-1],
            "cosine_similarity": cosine,  # per hidden state: 0 = embeddings, ℓ = block ℓ
            "train_seconds": seconds,
            "train_loss": train_output.training_loss,
            "parameters": model.num_parameters(),
            "model_dir": variant,
        }
        _write_json(output_dir / RESULTS_FILE, results)

    first, *others = [reports[v] for v in variants]
    title = f"{settings.model} on {Path(settings.dataset).name}, {first.num_samples} probe samples"
    _write_complete(
        output_dir / PLOT_FILE,
        lambda path: first.plot(path, others=others, labels=variants, metrics=["cosine_similarity"], title=title),
    )
    results.update(complete=True, probe_samples=first.num_samples, plot=PLOT_FILE)
    _write_json(output_dir / RESULTS_FILE, results)
    return results


def format_table(results: dict) -> str:
    """The side-by-side table of a results.json: one row per variant."""
    metric = results["metric"]
    header = ["variant", "attention", metric, "last-layer cosine", "train time", "parameters"]
    rows = [
        [
            name,
            entry["description"],
            f"{entry[metric]:.4f}" if metric == "accuracy" else f"{entry[metric]:.2f}",
            f"{entry['last_layer_cosine']:.4f}",
            f"{entry['train_seconds']:.1f} s",
            f"{entry['parameters']:,}",
        ]
        for name, entry in results["variants"].items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


__all__ = ["LOADERS", "VARIANTS", "CompareSettings", "format_table", "run_comparison"]
