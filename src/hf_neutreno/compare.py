"""Train a baseline and a NeuTRENO model (optionally ViT⁻) on the same data, seed and budget; compare them.

    hf-neutreno compare                                  # vit-micro on scikit-learn's digits, offline, ~1 min on a CPU
    hf-neutreno compare --vit-minus                      # also ViT⁻ (EigenViT, negative spectrum) of the same shape
    hf-neutreno compare --dataset ../shared/data/cifar10 --model vit-tiny --epochs 1 --max-train-samples 5000
    hf-neutreno compare --dataset ../shared/data/wikitext-2-v1 --model gpt-micro --max-steps 300 --max-eval-samples 200

Variants: `baseline` (softmax attention, λ = 0), `neutreno` (λ = --neutreno-lambda) and, with --vit-minus,
`vit-minus`. Each starts from the same seed (and from the baseline's initial weights wherever the shapes coincide),
sees the same batches in the same order and trains for the same budget with `Trainer`. Each is then scored on the
test split (else validation): accuracy for an image preset, perplexity for a language-model preset (non-overlapping
blocks of the context length, `hf_neutreno.lm_eval`). The mean pairwise token cosine similarity of every layer is
measured on one probe set for all variants: the first --probe-samples evaluation samples.

Prints one row per variant (score, last-layer cosine, training wall time, parameters) and writes to --output-dir:
`results.json`, `comparison.png` (the per-layer cosine curves) and one folder per variant with the model and its image
processor or tokenizer, which `AutoModelForImageClassification` / `AutoModelForCausalLM.from_pretrained(folder,
trust_remote_code=True)` loads without this package. A model folder appears only once complete (it is written under
a temporary name, then renamed) and results.json is rewritten after each variant, so Ctrl-C leaves the finished
variants usable. An earlier compare run in --output-dir is replaced; a folder holding anything else is refused before
anything is trained.
"""

import argparse
import json
import os
import shutil
import sys
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
IMAGE_DATASETS = "digits, ../shared/data/cifar10 or uoft-cs/cifar10"
TEXT_DATASETS = "../shared/data/wikitext-2-v1, or Salesforce/wikitext with --dataset-config wikitext-2-v1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="vit-micro", choices=IMAGE_MODELS + TEXT_MODELS, metavar="PRESET",
                        help=f"image presets {IMAGE_MODELS}, language-model presets {TEXT_MODELS} (default: vit-micro)")
    parser.add_argument("--dataset", default=BUILTIN_DIGITS, metavar="NAME_OR_DIR",
                        help="'digits' (bundled with scikit-learn, no download; the default), a Hub dataset name or a "
                        "local folder (Parquet files named as on the Hub, or an imagefolder tree)")
    parser.add_argument("--dataset-config", default=None, help="configuration name of a Hub dataset")
    parser.add_argument("--vit-minus", action="store_true",
                        help="also train ViT⁻ (EigenViT with a negative spectrum) of the same shape (image presets)")
    parser.add_argument("--neutreno-lambda", type=float, default=None,
                        help="λ of the neutreno variant (default: the preset's, 0.6 for images, 0.4 for text)")
    parser.add_argument("--output-dir", default="runs/compare",
                        help="results, plot and models (default: runs/compare); an earlier compare run there is "
                        "replaced, any other content is refused")
    parser.add_argument("--epochs", type=float, default=10, help="training epochs (default: 10)")
    parser.add_argument("--max-steps", type=int, default=None, help="train for this many steps instead of --epochs")
    parser.add_argument("--batch-size", type=int, default=32, help="training batch size (default: 32)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="AdamW peak learning rate; 10%% warm-up, then cosine decay (default: 3e-3 for image "
                        "presets, 1e-3 for language models, whose post-LN softmax baseline diverges at 3e-3)")
    parser.add_argument("--max-train-samples", type=int, default=None,
                        help="train on a seeded random subset of this many samples (images, or blocks of text)")
    parser.add_argument("--max-eval-samples", type=int, default=None,
                        help="evaluate on a seeded random subset of this many images, or the first blocks of text")
    parser.add_argument("--probe-samples", type=int, default=256,
                        help="evaluation samples the token cosine similarity is measured on (default: 256)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the weights, the data order and the subsets (default: 0)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (default: 1; the micro presets train fastest on one core)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    if args.no_progress:  # also the bars of datasets (tokenizing) and transformers (saving)
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    # Every check, and loading the data, comes before the first model trains: a bad input costs seconds.
    try:
        task, replace = _prepare(args)
    except ValueError as error:
        print(f"{COMMAND}: error: {error}", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        _compare(args, task, replace)
    except KeyboardInterrupt:
        print(f"\nStopped: {args.output_dir}/{RESULTS_FILE} lists the variants that finished; their models are "
              "complete.", file=sys.stderr)
        raise  # the CLI exits with 130
    finally:
        torch.set_num_threads(threads)
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# Checks and data


def _prepare(args: argparse.Namespace):
    """The task (data, processing, model builder) and whether an earlier run is replaced; ValueError on bad input."""
    for name in ("batch_size", "max_steps", "max_train_samples", "max_eval_samples", "probe_samples", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    for name in ("epochs", "learning_rate"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}.")
    if args.neutreno_lambda is not None and not args.neutreno_lambda > 0:
        raise ValueError(f"--neutreno-lambda must be > 0 (λ = 0 is the baseline), got {args.neutreno_lambda}.")
    is_image = args.model in IMAGE_MODELS
    if args.learning_rate is None:
        args.learning_rate = 3e-3 if is_image else 1e-3
    if args.vit_minus and not is_image:
        raise ValueError(f"--vit-minus needs an image preset {IMAGE_MODELS}; --model {args.model} is a language model.")
    replace = _check_output_dir(Path(args.output_dir))
    try:
        import matplotlib  # noqa: F401  (the plot is drawn after training: fail now, not then)
    except ImportError:
        raise ValueError("The comparison plot needs matplotlib: pip install 'hf-neutreno[compare]'.") from None
    dataset = _load_dataset(args.dataset, args.dataset_config)
    if "train" not in dataset or not any(split in dataset for split in EVAL_SPLITS):
        raise ValueError(
            f"--dataset {args.dataset!r} needs a `train` split and a `test` or `validation` split; it has "
            f"{sorted(dataset)}."
        )
    return (_ImageTask if is_image else _TextTask)(args, dataset), replace


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
    auto_class, processing_auto_class = "AutoModelForImageClassification", "AutoImageProcessor"

    def __init__(self, args, dataset):
        try:
            image_column, label_column = image_and_label_columns(dataset)
        except ValueError:
            raise ValueError(
                f"--model {args.model} is an image classifier, but --dataset {args.dataset!r} has no Image column and "
                f"ClassLabel column (it has {_columns(dataset)}). Image datasets: {IMAGE_DATASETS}."
            ) from None
        self.args, self.eval_split = args, _eval_split(dataset)
        self.labels = label_names(dataset)
        self.preset = NeuTRENOViTConfig.from_preset(args.model)
        self.neutreno_lambda = args.neutreno_lambda or self.preset.neutreno_lambda
        height, width = self.preset.image_size_2d
        self.processing = ViTImageProcessorPil(
            size={"height": height, "width": width}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
        )
        self.train = _capped(dataset["train"], args.max_train_samples, args.seed)
        self.eval = _capped(dataset[self.eval_split], args.max_eval_samples, args.seed)
        transform = image_transform(self.processing, image_column, label_column)
        self.train.set_transform(transform)
        self.eval.set_transform(transform)
        self.sizes = {"train_images": len(self.train), "eval_images": len(self.eval)}
        self.summary = (
            f"{args.model} on {args.dataset} ({len(self.train)} train / {len(self.eval)} {self.eval_split} images, "
            f"{len(self.labels)} classes, resized to {height}×{width})"
        )

    def build(self, variant: str) -> torch.nn.Module:
        id2label = dict(enumerate(self.labels))
        fields = dict(NeuTRENOViTConfig.presets[self.args.model], id2label=id2label,
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
        probe = self.eval.select(range(min(self.args.probe_samples, len(self.eval))))
        size = self.args.batch_size
        return [{"pixel_values": probe[i : i + size]["pixel_values"]} for i in range(0, len(probe), size)]


class _TextTask:
    metric = "perplexity"
    auto_class, processing_auto_class = "AutoModelForCausalLM", "AutoTokenizer"

    def __init__(self, args, dataset):
        if TEXT_COLUMN not in dataset["train"].features:
            raise ValueError(
                f"--model {args.model} is a language model, but --dataset {args.dataset!r} has no `{TEXT_COLUMN}` "
                f"column (it has {_columns(dataset)}). Text datasets: {TEXT_DATASETS}."
            )
        self.args, self.eval_split = args, _eval_split(dataset)
        self.preset = NeuTRENOGPTConfig.from_preset(args.model)
        self.neutreno_lambda = args.neutreno_lambda or self.preset.neutreno_lambda
        self.block_size = self.preset.max_position_embeddings
        self.processing = train_word_tokenizer(dataset["train"])  # word level, as WikiText is written
        blocks = group_into_blocks(dataset["train"], self.processing, self.block_size)
        self.train = _capped(blocks, args.max_train_samples, args.seed)
        max_tokens = None if args.max_eval_samples is None else args.max_eval_samples * self.block_size
        self.stream = token_stream(dataset[self.eval_split], self.processing, max_tokens=max_tokens)
        if self.stream.numel() < self.block_size:
            raise ValueError(f"Split {self.eval_split!r} of --dataset {args.dataset!r} is shorter than one block "
                             f"({self.block_size} tokens).")
        self.sizes = {"train_blocks": len(self.train), "block_size": self.block_size, "eval_tokens": len(self.stream)}
        self.summary = (
            f"{args.model} on {args.dataset} ({len(self.train)} train blocks of {self.block_size} tokens, "
            f"{self.stream.numel()} {self.eval_split} tokens, vocabulary {len(self.processing)})"
        )

    def build(self, variant: str) -> torch.nn.Module:
        vocab_size = len(self.processing)
        # The preset's adaptive-softmax cutoffs assume its own vocabulary; keep those that fit this one.
        cutoffs = [c for c in self.preset.adaptive_softmax_cutoffs or () if c < vocab_size] or None
        config = NeuTRENOGPTConfig.from_preset(
            self.args.model,
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
        progress = not self.args.no_progress
        return block_eval(trainer.model, self.stream, self.block_size, self.args.batch_size, progress).perplexity

    def probe_batches(self) -> list[dict]:
        count = min(self.args.probe_samples, self.stream.numel() // self.block_size)
        blocks = self.stream[: count * self.block_size].view(count, self.block_size)
        return [{"input_ids": batch} for batch in blocks.split(self.args.batch_size)]


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


def _training_arguments(args, output_dir: str, is_image: bool) -> TrainingArguments:
    return TrainingArguments(
        output_dir=output_dir,  # a temporary folder: Trainer itself saves nothing
        seed=args.seed,
        data_seed=args.seed,  # the same batches in the same order for every variant
        num_train_epochs=args.epochs,
        max_steps=args.max_steps or -1,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        weight_decay=0.05,
        warmup_steps=0.1,
        lr_scheduler_type="cosine",
        logging_strategy="steps",
        logging_steps=0.2,  # five loss reports per run
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=args.no_progress,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning helps only a GPU, and warns without one
        remove_unused_columns=not is_image,  # the image transform needs the raw image column
    )


def _compare(args, task, replace: bool) -> None:
    from .diagnostics import measure_oversmoothing

    output_dir = Path(args.output_dir)
    if replace:
        print(f"Replacing the earlier compare run in {output_dir}.")
        for entry in output_dir.iterdir():
            _remove(entry)
    output_dir.mkdir(parents=True, exist_ok=True)
    variants = ["baseline", "neutreno"] + (["vit-minus"] if args.vit_minus else [])
    is_image = isinstance(task, _ImageTask)
    budget = f"{args.max_steps} steps" if args.max_steps else f"{args.epochs:g} epochs"
    print(f"{COMMAND}: {task.summary}; {', '.join(variants)}; {budget}, batch {args.batch_size}, seed {args.seed}")
    results = {
        "command": COMMAND,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "command"},
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
        set_seed(args.seed)
        model = task.build(variant)
        if reference is None:
            reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        else:
            _copy_shared_weights(model, reference)
        with tempfile.TemporaryDirectory(prefix="hf-neutreno-compare-") as scratch:
            trainer = Trainer(
                model=model,
                args=_training_arguments(args, scratch, is_image),
                train_dataset=task.train,
                processing_class=task.processing,
                **task.trainer_arguments(),
            )
            start = time.perf_counter()
            train_output = trainer.train()
            seconds = time.perf_counter() - start
            score = task.score(trainer)
        reports[variant] = measure_oversmoothing(
            model, probe, metrics=["cosine_similarity"], progress=not args.no_progress, model_name=variant
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
    title = f"{args.model} on {Path(args.dataset).name}, {first.num_samples} probe samples"
    _write_complete(
        output_dir / PLOT_FILE,
        lambda path: first.plot(path, others=others, labels=variants, metrics=["cosine_similarity"], title=title),
    )
    results.update(complete=True, probe_samples=first.num_samples, plot=PLOT_FILE)
    _write_json(output_dir / RESULTS_FILE, results)
    print()
    print(format_table(results))
    _print_usage(output_dir, variants, task)


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


def _print_usage(output_dir: Path, variants: list[str], task) -> None:
    folder = str(output_dir / "neutreno")
    is_image = isinstance(task, _ImageTask)
    name, remote = ("processor", "") if is_image else ("tokenizer", ", trust_remote_code=True")
    print(
        f"\nWritten to {output_dir}/: {RESULTS_FILE}, {PLOT_FILE} and the models "
        f"{', '.join(v + '/' for v in variants)}.\nLoad one anywhere, with or without hf_neutreno installed:\n"
        f"    from transformers import {task.auto_class}, {task.processing_auto_class}\n"
        f"    model = {task.auto_class}.from_pretrained({folder!r}, trust_remote_code=True)\n"
        f"    {name} = {task.processing_auto_class}.from_pretrained({folder!r}{remote})"
    )


__all__ = ["VARIANTS", "format_table"]
