"""Train attention variants (softmax, NeuTRENO, ...) on the same data and budget, paired over several seeds; compare.

    from hf_neutreno.compare import CompareSettings, run_comparison
    results = run_comparison(CompareSettings(model="vit-micro", max_steps=200, output_dir="runs/compare"))

`run_comparison` trains every variant once per seed (`hf_neutreno.experiment` pairs them), then writes
`results.json`, `comparison.png` and one model folder per variant (the first seed's) to `output_dir`, and returns
the results; `format_table` prints them. A run in progress lives in `<output_dir>.incomplete` and replaces
`output_dir` only once complete; `resume=True` continues an interrupted one. `hf-neutreno compare`
(`hf_neutreno.commands.compare`) is its command line, whose help describes the variants, scores and files.
"""

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainingArguments

from .compare_output import COMMAND, FORMAT_VERSION, PLOT_FILE, RESULTS_FILE, OutputFolders, no_nan, write_complete
from .compare_output import settings_record, write_json
from .compare_report import HIGHER_IS_BETTER, format_table, plot
from .compare_tasks import EVAL_SPLITS, IMAGE_MODELS, ImageTask, task_class, task_for
from .data import BUILTIN_DIGITS, load_dataset_splits
from .experiment import pairing_arguments, paired, paired_model, summary, weights_fingerprint
from .value_path import DEFAULT_COEFFICIENTS, apply_value_path
from .value_path import VARIANTS as VALUE_PATHS

# results["task"] -> the Auto classes that load a variant's model and its image processor or tokenizer
LOADERS = {
    "image-classification": ("AutoModelForImageClassification", "AutoImageProcessor"),
    "semantic-segmentation": ("AutoModelForSemanticSegmentation", "AutoImageProcessor"),
    "causal-lm": ("AutoModelForCausalLM", "AutoTokenizer"),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """A row of the comparison: the model a task builds for `architecture` (`compare_tasks.ARCHITECTURES`), then
    `convert(model, coefficients)` if given (a rule put on the softmax model: a value path). Every variant starts from
    the softmax model's initial weights of its seed wherever the two share a parameter. `coefficients` holds the run's
    λ ("neutreno") and α ("value_residual")."""

    description: str  # `{lam}`, `{alpha}`: the run's λ and α
    architecture: str
    convert: Callable[[torch.nn.Module, dict], torch.nn.Module] | None = None
    saved: bool = True  # False: the model is trained and scored, not saved (a value path on this package's models)


def _value_path(method: str, learnable: bool) -> Callable[[torch.nn.Module, dict], torch.nn.Module]:
    def convert(model: torch.nn.Module, coefficients: dict) -> torch.nn.Module:
        return apply_value_path(model, method, coefficients[method], learnable=learnable)

    return convert


BASELINE = "softmax"  # what every other variant is compared with, seed by seed
# --variants names. The value paths (`hf_neutreno.apply_value_path`) run on the softmax model of an image classifier
# or a language model (a Segmenter has two stacks of layers, each of which would need its own V_0); they adapt this
# package's models in memory, which cannot be saved adapted, so their models are not written.
VARIANTS = {
    "softmax": Variant("softmax, λ=0", "softmax"),
    "neutreno": Variant("NeuTRENO, λ={lam:g}", "neutreno"),
    "vit-minus": Variant("ViT⁻, Λ=−ψ²", "vit-minus"),  # the poster's eigen-parameterised ViT, negative spectrum
    **{
        name: Variant(description, "value-path", _value_path(**VALUE_PATHS[name]), saved=False)
        for name, description in (
            ("neutreno-learnable", "NeuTRENO, learnable λ from {lam:g}"),
            ("value-residual", "value residual, α={alpha:g}"),
            ("value-residual-learnable", "value residual, learnable α from {alpha:g}"),
        )
    },
}


@dataclasses.dataclass
class CompareSettings:
    """What `run_comparison` trains and how; `hf-neutreno compare --help` explains each field (flag `--model` for
    `model`, `--max-steps` for `max_steps`, ...). `learning_rate=None` picks 3e-3 for image classifiers, 1e-3 for
    language models and Segmenters, and `neutreno_lambda=None` the preset's λ. The variants train once per seed
    `seed, seed + 1, ..., seed + seeds - 1`."""

    model: str = "vit-micro"
    dataset: str = BUILTIN_DIGITS
    dataset_config: str | None = None
    variants: tuple[str, ...] = ("softmax", "neutreno")
    neutreno_lambda: float | None = None
    value_residual_alpha: float = DEFAULT_COEFFICIENTS["value_residual"]
    output_dir: str = "runs/compare"
    resume: bool = False
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
    verbose: bool = False


def run_comparison(settings: CompareSettings) -> dict:
    """Train and compare the variants as `settings` say; returns what `results.json` holds.

    Every check, and loading the data, comes before the first model trains: bad input costs seconds and raises
    `ValueError` naming the flag. torch's thread count is restored afterwards.
    """
    settings = _checked(dataclasses.replace(settings))
    folders = OutputFolders(settings, model_dirs=VARIANTS)
    if folders.finished is not None:
        print(f"{settings.output_dir} already holds this comparison, complete: nothing to resume.")
        return folders.finished
    try:
        import matplotlib  # noqa: F401  (the plot is drawn after training: fail now, not then)
    except ImportError:
        raise ValueError("The comparison plot needs matplotlib: pip install 'hf-neutreno[compare]'.") from None
    dataset = _load_dataset(settings.dataset, settings.dataset_config)
    if "train" not in dataset or not any(split in dataset for split in EVAL_SPLITS):
        raise ValueError(
            f"--dataset {settings.dataset!r} needs a `train` split and a `test` or `validation` split; "
            f"it has {sorted(dataset)}."
        )
    task = task_for(settings, dataset)
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        return _compare(settings, task, folders)
    finally:
        torch.set_num_threads(threads)


def _checked(settings: CompareSettings) -> CompareSettings:
    """`settings` with the defaults that depend on the preset filled in; ValueError naming the flag on bad input."""
    for name in (
        "batch_size",
        "max_steps",
        "max_train_samples",
        "max_eval_samples",
        "probe_samples",
        "seeds",
        "threads",
    ):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    for name in ("epochs", "learning_rate"):
        if getattr(settings, name) is not None and not getattr(settings, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(settings, name)}.")
    if settings.neutreno_lambda is not None and not settings.neutreno_lambda > 0:
        raise ValueError(
            f"--neutreno-lambda must be > 0 (λ = 0 is the softmax variant), got {settings.neutreno_lambda}."
        )
    if not 0 < settings.value_residual_alpha <= 1:  # NaN fails too
        raise ValueError(
            f"--value-residual-alpha must be in (0, 1] (α = 0 is the softmax variant), got "
            f"{settings.value_residual_alpha}."
        )
    names = list(dict.fromkeys(settings.variants))
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or BASELINE not in names or len(names) < 2:
        raise ValueError(
            f"--variants {','.join(settings.variants)!r}: choose two or more of {list(VARIANTS)}, "
            f"{BASELINE} (the baseline the others are compared with) among them"
            + (f"; unknown: {unknown}." if unknown else ".")
        )
    task = task_class(settings.model)
    for name in names:
        if VARIANTS[name].architecture not in task.architectures:  # ViT⁻: image classifiers only
            which = (
                f"an image classifier preset {IMAGE_MODELS}"
                if name == "vit-minus"
                else "an image classifier or language-model preset (a Segmenter has two stacks of layers, each of "
                "which would need its own V_0)"
            )
            raise ValueError(f"--variants {name} needs {which}; --model {settings.model} is {task.kind}.")
    settings.variants = tuple([BASELINE] + [name for name in names if name != BASELINE])  # the baseline first
    if settings.learning_rate is None:
        settings.learning_rate = 3e-3 if task is ImageTask else 1e-3
    return settings


def _load_dataset(name: str, config_name: str | None):
    try:
        return load_dataset_splits(name, config_name)
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


# ---------------------------------------------------------------------------------------------------------------------
# Training, measuring, saving


class _TrainingBar(ProgressCallback):
    """Trainer's training bar alone, for the default output: no log dictionaries, no evaluation bar."""

    def on_prediction_step(self, args, state, control, **kwargs):
        pass

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


def detailed_progress(settings) -> bool:
    """Whether the bars beyond training's (evaluation, over-smoothing measurement) show: with --verbose only."""
    return settings.verbose and not settings.no_progress


def _training_arguments(settings, output_dir: str, seed: int, remove_unused_columns: bool) -> TrainingArguments:
    return TrainingArguments(
        output_dir=output_dir,  # a temporary folder: Trainer itself saves nothing
        **pairing_arguments(seed),  # the same batches in the same order for every variant of this seed
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


def _summarise(results: dict) -> None:
    """Per variant: mean ± std over the finished seeds, and the paired difference from the baseline on the seeds
    both finished, with the seeds where the variant is better (`HIGHER_IS_BETTER`)."""
    metric, variants = results["metric"], results["variants"]
    for name, entry in variants.items():
        runs = entry["per_seed"]
        for key in (metric, "last_layer_cosine"):
            entry[key] = no_nan(summary({run["seed"]: run[key] for run in runs}))
        layers = list(zip(*(run["cosine_similarity"] for run in runs)))
        entry["cosine_similarity"] = {
            "mean": [statistics.fmean(layer) for layer in layers],
            "min": [min(layer) for layer in layers],
            "max": [max(layer) for layer in layers],
        }
        entry["train_seconds"] = statistics.fmean(run["train_seconds"] for run in runs)
        base = variants[BASELINE]
        if name != BASELINE and set(entry[metric]["per_seed"]) & set(base[metric]["per_seed"]):
            entry["difference_from_baseline"] = {
                key: no_nan(paired(entry[key]["per_seed"], base[key]["per_seed"], HIGHER_IS_BETTER[key]))
                for key in (metric, "last_layer_cosine")
            }


def _learning_curve(trainer: Trainer) -> list[dict]:
    return [
        {"step": log["step"], "epoch": log["epoch"], "loss": log["loss"]}
        for log in trainer.state.log_history
        if "loss" in log
    ]


def _coefficients(settings: CompareSettings, task) -> dict:
    return {"neutreno": task.neutreno_lambda, "value_residual": settings.value_residual_alpha}


def _build(task, name: str, coefficients: dict) -> torch.nn.Module:
    variant = VARIANTS[name]
    model = task.build("softmax" if variant.architecture == "value-path" else variant.architecture)
    return variant.convert(model, coefficients) if variant.convert else model


def _compare(settings: CompareSettings, task, folders: OutputFolders) -> dict:
    from .diagnostics import measure_oversmoothing

    work, variants = folders.work, settings.variants
    seeds = list(range(settings.seed, settings.seed + settings.seeds))
    budget = f"{settings.max_steps} steps" if settings.max_steps else f"{settings.epochs:g} epochs"
    print(
        f"{COMMAND}: {task.summary}; {', '.join(variants)}; {budget}, batch {settings.batch_size}, "
        f"seeds {', '.join(map(str, seeds))}"
    )
    results = folders.resumed or {
        "command": COMMAND,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "settings": settings_record(settings),
        "task": task.name,
        "metric": task.metric,
        "eval_split": task.eval_split,
        "data": task.sizes,
        "seeds": seeds,
        "models_from_seed": seeds[0],
        "baseline": BASELINE,
        "variants": {},
    }
    if folders.resumed:
        print(f"Resuming the interrupted run in {work}.")
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / RESULTS_FILE, results)
    probe = task.probe_batches()
    for seed in seeds:
        for variant in variants:
            finished = results["variants"].get(variant, {}).get("per_seed", [])
            if any(run["seed"] == seed for run in finished):
                continue
            coefficients = _coefficients(settings, task)
            description = VARIANTS[variant].description.format(
                lam=coefficients["neutreno"], alpha=coefficients["value_residual"]
            )
            print(f"\n[{variant}, seed {seed}] {description}")
            # This seed's softmax initial weights, whichever variants ran before: a resumed run trains the same.
            model = paired_model(lambda name: _build(task, name, coefficients), variant, seed, reference=BASELINE)
            initial_weights = weights_fingerprint(model)
            with tempfile.TemporaryDirectory(prefix="hf-neutreno-compare-") as scratch:
                trainer = Trainer(
                    model=model,
                    train_dataset=task.train,
                    processing_class=task.processing,
                    args=_training_arguments(settings, scratch, seed, remove_unused_columns=task.name == "causal-lm"),
                    **task.trainer_arguments(),
                )
                if not settings.verbose:  # one bar per run; Trainer's log dictionaries and evaluation bar: --verbose
                    trainer.remove_callback(PrinterCallback)
                    trainer.remove_callback(ProgressCallback)
                    if not settings.no_progress:
                        trainer.add_callback(_TrainingBar)
                start = time.perf_counter()
                train_output = trainer.train()
                seconds = time.perf_counter() - start
                score = task.score(trainer)
            report = measure_oversmoothing(
                model, probe, metrics=["cosine_similarity"], progress=detailed_progress(settings), model_name=variant
            )
            if seed == seeds[0] and VARIANTS[variant].saved:

                def save(folder: Path, model=model) -> None:
                    model.save_pretrained(folder)
                    task.processing.save_pretrained(folder)

                write_complete(work / variant, save)
            # The last block of the encoder (a Segmenter's decoder blocks follow it in the report)
            decoder_layers = report.metadata.get("decoder_layers", [])
            layers = report.layer_indices("cosine_similarity")
            cosine = report.per_layer("cosine_similarity")
            last_layer = max(layer for layer in layers if layer not in decoder_layers)
            results.update(
                cosine_layers=layers,
                decoder_layers=decoder_layers,
                last_layer=last_layer,
                probe_samples=report.num_samples,
            )
            entry = results["variants"].setdefault(
                variant,
                {
                    "description": description,
                    "model_type": model.config.model_type,
                    "neutreno_lambda": getattr(model.config, "neutreno_lambda", None),
                    "parameters": model.num_parameters(),
                    "model_dir": variant if VARIANTS[variant].saved else None,
                    "value_path": getattr(model.config, "value_path", None),
                    "per_seed": [],
                },
            )
            entry["per_seed"].append(
                {
                    "seed": seed,
                    "initial_weights_sha256": initial_weights,  # what pairs the variants of a seed
                    task.metric: score,
                    "last_layer_cosine": cosine[layers.index(last_layer)],
                    "cosine_similarity": cosine,  # per hidden state in `cosine_layers`: 0 = embeddings, ℓ = block ℓ
                    "train_seconds": seconds,
                    "train_loss": train_output.training_loss,
                    "learning_curve": _learning_curve(trainer),  # training loss, ten points
                }
            )
            _summarise(results)
            write_json(work / RESULTS_FILE, results)  # after the model: a recorded run has its model

    title = f"{settings.model} on {Path(settings.dataset).name}, seeds {seeds[0]}-{seeds[-1]}"
    write_complete(work / PLOT_FILE, lambda path: plot(path, results, title))
    results.update(complete=True, plot=PLOT_FILE)
    write_json(work / RESULTS_FILE, results)
    folders.swap()
    return results


__all__ = ["BASELINE", "LOADERS", "VARIANTS", "CompareSettings", "Variant", "format_table", "run_comparison"]
