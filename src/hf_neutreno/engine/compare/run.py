"""Train attention variants (softmax, NeuTRENO, ...) on the same data and budget, paired over several seeds; compare.

    from hf_neutreno.engine.compare import CompareSettings, run_comparison
    results = run_comparison(CompareSettings(model="vit-micro", max_steps=200, output_dir="runs/compare"))

`run_comparison` trains every variant once per seed (`hf_neutreno.engine.experiment` pairs them), then writes
`results.json`, `comparison.png` and one model folder per variant (the first seed's) to `output_dir`, and returns
the results; `format_table` prints them. A run in progress lives in `<output_dir>.incomplete` and replaces
`output_dir` only once complete; `resume=True` continues an interrupted one. `hf-neutreno compare`
(`hf_neutreno.commands.compare`) is its command line, whose help describes the variants, scores and files. The
settings and their defaults are `hf_neutreno.engine.compare.settings` (importable without torch).
"""

import dataclasses
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import PrinterCallback, ProgressCallback, Trainer, TrainerCallback, TrainingArguments

from ...checkpoints import check_source
from ...data.loading import BUILTIN_DIGITS, load_dataset_splits
from ...models.value_path import (
    coefficient_parameters,
    is_saveable,
    is_value_path_model,
    learned_coefficients,
    value_path_parameters,
)
from ...names import IMAGE_MODELS
from ...runtime import has_accelerator
from ..experiment import Run, pairing_arguments, run_paired, summary
from ..model_tasks import CheckedModel, ModelTask, is_model_reference
from ..preset_tasks import PRESETS, ImageTask, TextTask, preset_architecture, task_class, task_for
from ..tasks import EVAL_SPLITS, TASKS
from ..variants import ANY_MODEL_VARIANTS, BASELINE, VARIANTS, default_coefficient
from .output import (
    COMMAND,
    FORMAT_VERSION,
    PLOT_FILE,
    RESULTS_FILE,
    OutputFolders,
    no_nan,
    settings_record,
    write_complete,
    write_json,
)
from .report import format_table, plot
from .settings import FINE_TUNING, FROM_SCRATCH, CompareSettings, checked_common
from .verdict import paired_reading, verdict

# results["task"] -> the Auto classes that load a variant's model and its image processor or tokenizer
LOADERS = {name: (task.auto_class, task.processing_class) for name, task in TASKS.items()}


def run_comparison(settings: CompareSettings) -> dict:
    """Train and compare the variants as `settings` say; returns what `results.json` holds.

    Every check, and loading the data, comes before the first model trains: bad input costs seconds and raises
    `ValueError` naming the flag. torch's thread count is restored afterwards.
    """
    settings = checked_common(dataclasses.replace(settings))
    checked_model = None if settings.model in PRESETS else _checked_model(settings)
    settings = _checked(settings, checked_model)  # the model is checked before any data is loaded
    folders = _output_folders(settings)
    if folders.finished is not None:
        print(f"{settings.output_dir} already holds this comparison, complete: nothing to resume.")
        return folders.finished
    try:
        import matplotlib  # noqa: F401  (the plot is drawn after training: fail now, not then)
    except ImportError:
        raise ValueError("The comparison plot needs matplotlib: pip install 'hf-neutreno[compare]'.") from None
    dataset = _load_dataset(settings.dataset, settings.dataset_config)
    if checked_model is not None:
        if "train" not in dataset:
            raise ValueError(f"--dataset {settings.dataset!r} needs a `train` split; it has {sorted(dataset)}.")
        task = checked_model.prepare(dataset)
    else:
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


def _checked_model(settings: CompareSettings) -> CheckedModel:
    """The transformers model `--model` names (`gpt2`, `owner/name`, a folder), checked before any data is loaded."""
    try:
        return CheckedModel(settings)
    except ValueError as error:
        if is_model_reference(settings.model):  # a folder or owner/name: the message says what is wrong with it
            raise
        raise ValueError(f"{error} This package's presets: {PRESETS}.") from None


def _output_folders(settings: CompareSettings) -> OutputFolders:
    """The output folders, checked (and a killed swap finished) by one process: under torchrun or accelerate launch
    the others get its view of them, or its error."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState(cpu=not has_accelerator())  # CPU processes join over gloo, as Trainer's `use_cpu`
    if state.num_processes == 1:
        return OutputFolders(settings, model_dirs=VARIANTS)
    view = [None]
    if state.is_main_process:
        try:
            view = [OutputFolders(settings, model_dirs=VARIANTS)]
        except ValueError as error:
            view = [error]
    broadcast_object_list(view)
    if isinstance(view[0], ValueError):
        raise view[0]
    return view[0]


def _checked(settings: CompareSettings, checked_model: CheckedModel | None) -> CompareSettings:
    """`settings` (already through `checked_common`) with the defaults that depend on the model filled in;
    ValueError naming the flag on bad input."""
    if checked_model is None:
        for flag in ("task", "text_column", "label_column", "image_column", "max_length"):
            if getattr(settings, flag) is not None:
                raise ValueError(
                    f"--{flag.replace('_', '-')} is for a transformers model; --model {settings.model} is a preset."
                )
        task = task_class(settings.model)
        for name in settings.variants:
            if VARIANTS[name].method == "value_embedding" and task is not TextTask:
                raise ValueError(
                    f"--variants {name} (value embeddings, a table per layer looked up by token id) needs a "
                    f"language-model preset; --model {settings.model} is {task.kind}."
                )
            if preset_architecture(name) not in task.architectures:  # ViT⁻: image classifiers only
                which = (
                    f"an image classifier preset {IMAGE_MODELS}"
                    if VARIANTS[name].preset_only
                    else "an image classifier or language-model preset (a Segmenter has two stacks of layers, each of "
                    "which would need its own V_0)"
                )
                raise ValueError(f"--variants {name} needs {which}; --model {settings.model} is {task.kind}.")
        defaults = {**FROM_SCRATCH, "learning_rate": 3e-3 if task is ImageTask else 1e-3}
    else:
        presets_only = [name for name in settings.variants if name not in ANY_MODEL_VARIANTS]
        if presets_only:
            raise ValueError(
                f"--variants {','.join(presets_only)}: a parameterisation of this package's presets; for a "
                f"transformers model choose from {list(ANY_MODEL_VARIANTS)}."
            )
        defaults = FROM_SCRATCH | {"learning_rate": 1e-3} if settings.from_scratch else FINE_TUNING
    for name, value in defaults.items():
        if getattr(settings, name) is None:
            setattr(settings, name, value)
    return settings


def _load_dataset(name: str, config_name: str | None):
    check_source(name, "--dataset")
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
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        warmup_steps=settings.warmup_ratio,  # a fraction of the training steps
        lr_scheduler_type=settings.lr_scheduler_type,
        bf16=settings.bf16,
        logging_strategy="steps",
        logging_steps=0.1,  # ten points of the learning curve per run
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=settings.no_progress,
        dataloader_pin_memory=has_accelerator(),  # pinning helps only an accelerator, and warns without one
        use_cpu=not has_accelerator(),  # on a CPU-only machine, lets torchrun's processes train together
        remove_unused_columns=remove_unused_columns,  # image transforms need the raw image columns
    )


class _CompareTrainer(Trainer):
    """`Trainer` whose optimizer gives a value path's own parameters (learnable coefficients, gates, value-embedding
    tables) a learning rate of their own (`coefficient_learning_rate`, else the model's) and no weight decay: one
    scalar per layer that starts at 0, or a new table, would barely move at a fine-tuning learning rate, and weight
    decay would pull every coefficient towards 0, the remedy off, whatever the loss wants."""

    def __init__(self, *args, coefficient_learning_rate: float | None = None, **kwargs):
        self.coefficient_learning_rate = coefficient_learning_rate
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        own = [p for p in value_path_parameters(self.model).values() if p.requires_grad]
        if not own:
            return optimizer
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if all(p is not q for q in own)]
        rate = self.args.learning_rate if self.coefficient_learning_rate is None else self.coefficient_learning_rate
        optimizer.add_param_group({"params": own, "lr": rate, "weight_decay": 0.0})
        return optimizer


class _Forecast(TrainerCallback):
    """Says how long the whole comparison will take: after the first run's first steps, and again when that run has
    finished (its whole time, evaluation and measurement aside, is the better guide on a busy machine)."""

    def __init__(self, runs: int):
        self.runs, self.start, self.began = runs, None, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        check = max(2, min(10, state.max_steps // 10))
        if state.global_step == 1:
            self.start = time.perf_counter()  # the first step pays for warm-up
        elif state.global_step == check and self.start is not None:
            per_step = (time.perf_counter() - self.start) / (check - 1)
            total = per_step * state.max_steps * self.runs
            _say(
                f"About {_duration(per_step * state.max_steps)} per run, {_duration(total)} for all {self.runs} runs "
                f"(from the first {check} steps, training only)."
            )

    def on_train_end(self, args, state, control, **kwargs):
        if self.began is not None and self.runs > 1:
            took = time.perf_counter() - self.began
            _say(
                f"The first run trained in {_duration(took)}: about {_duration(took * (self.runs - 1))} more for the "
                f"other {self.runs - 1} runs (training only)."
            )


def _say(text: str) -> None:
    """A line between progress bars (tqdm's), or plainly where there are none."""
    from tqdm.auto import tqdm

    tqdm.write(text)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _summarise(results: dict) -> None:
    """Per variant: mean ± std over the finished seeds, and the paired difference from the baseline on the seeds
    both finished (`verdict.paired_reading`: wins, ties, interval); then the verdict."""
    metric, variants = results["metric"], results["variants"]
    for name, entry in variants.items():
        runs = entry["per_seed"]
        for key in (metric, "last_layer_cosine"):  # a diverged run's numbers are None: left out
            entry[key] = no_nan(summary({run["seed"]: run[key] for run in runs if run[key] is not None}))
        layers = [
            [value for value in layer if value is not None] for layer in zip(*(r["cosine_similarity"] for r in runs))
        ]
        entry["cosine_similarity"] = {
            "mean": [statistics.fmean(layer) if layer else None for layer in layers],
            "min": [min(layer, default=None) for layer in layers],
            "max": [max(layer, default=None) for layer in layers],
        }
        before = [run["cosine_similarity_before"] for run in runs if "cosine_similarity_before" in run]
        if before:  # the same probe before training: what fine-tuning (or training from scratch) changed
            entry["cosine_similarity_before"] = {"mean": [statistics.fmean(layer) for layer in zip(*before)]}
        entry["train_seconds"] = statistics.fmean(run["train_seconds"] for run in runs)
        base = variants[BASELINE]
        if name != BASELINE and set(entry[metric]["per_seed"]) & set(base[metric]["per_seed"]):
            entry["difference_from_baseline"] = {  # with ties and the interval (`verdict.py`)
                key: no_nan(paired_reading(entry[key]["per_seed"], base[key]["per_seed"], key))
                for key in (metric, "last_layer_cosine")
            }
    results["verdict"] = verdict(results)


def _learning_curve(trainer: Trainer) -> list[dict]:
    return [
        {"step": log["step"], "epoch": log["epoch"], "loss": log["loss"]}
        for log in trainer.state.log_history
        if "loss" in log
    ]


def _coefficient(settings: CompareSettings, task, variant: str) -> float | None:
    """λ or α of `variant` in this run: the flag's, else the registry's default for this kind of model."""
    method = VARIANTS[variant].method
    given = {"neutreno": settings.neutreno_lambda, "value_residual": settings.value_residual_alpha}.get(method)
    if given is not None:
        return given
    preset_lambda = task.preset.neutreno_lambda if task.preset is not None else None  # 0.6 images, 0.4 text
    return default_coefficient(variant, pretrained=task.pretrained, preset_lambda=preset_lambda)


def _builder(settings: CompareSettings, task):
    """`build(variant)`: the variant's model with this run's coefficient, for `run_paired` to pair."""

    def build(variant: str) -> torch.nn.Module:
        return task.build(variant, _coefficient(settings, task, variant))

    return build


def _cosine(report) -> tuple[list[int], list[float], int, list[int]]:
    """(layers, cosine per layer, the encoder's last layer, decoder layers) of an over-smoothing report."""
    decoder_layers = report.metadata.get("decoder_layers", [])
    layers = report.layer_indices("cosine_similarity")
    last_layer = max(layer for layer in layers if layer not in decoder_layers)
    return layers, report.per_layer("cosine_similarity"), last_layer, decoder_layers


def _best(results: dict) -> str | None:
    """The verdict's best variant (`verdict.py`: its paired interval over seeds beyond the tie tolerance), where its
    model is saved; None otherwise."""
    best = results.get("verdict", {}).get("best")
    return best if best and results["variants"][best].get("model_dir") else None


def _compare(settings: CompareSettings, task, folders: OutputFolders) -> dict:
    return _Comparison(settings, task, folders).run()


class _Comparison:
    """One call of `run_comparison`: its results (resumed or new), trained run by run through `run_paired` and
    written after each run. Under torchrun / accelerate launch, one process writes and prints."""

    def __init__(self, settings: CompareSettings, task, folders: OutputFolders):
        from accelerate import PartialState

        self.settings, self.task, self.folders = settings, task, folders
        self.state = PartialState()
        self.main = self.state.is_main_process
        self.seeds = list(range(settings.seed, settings.seed + settings.seeds))
        self.results = folders.resumed or self._new_results()
        if isinstance(task, ModelTask):
            self.results.setdefault("model", task.record())

    def say(self, *args, **kwargs) -> None:
        if self.main:
            print(*args, **kwargs)

    def _new_results(self) -> dict:
        settings, task = self.settings, self.task
        return {
            "command": COMMAND,
            "format_version": FORMAT_VERSION,
            "complete": False,
            "settings": settings_record(settings),
            "task": task.name,
            "metric": task.metric,
            "eval_split": task.eval_split,
            "data": task.sizes,
            "seeds": self.seeds,
            "models_from_seed": self.seeds[0],
            "baseline": BASELINE,
            "processes": self.state.num_processes,  # data-parallel processes (torchrun, accelerate launch)
            "variants": {},
        }

    def run(self) -> dict:
        settings, task, work, results = self.settings, self.task, self.folders.work, self.results
        budget = f"{settings.max_steps} steps" if settings.max_steps else f"{settings.epochs:g} epochs"
        self.say(
            f"{COMMAND}: {task.summary}; {', '.join(settings.variants)}; {budget}, batch {settings.batch_size}, "
            f"seeds {', '.join(map(str, self.seeds))}"
        )
        if task.pretrained:
            self.say(
                "Each variant fine-tunes the same pretrained weights. A remedy with a fixed coefficient changes the "
                "function those weights compute, so its difference from softmax includes that change; a learnable "
                "coefficient that starts at 0 starts from the pretrained function."
            )
        if self.folders.resumed:
            self.say(f"Resuming the interrupted run in {work}.")
        if self.main:
            work.mkdir(parents=True, exist_ok=True)
            write_json(work / RESULTS_FILE, results)
        self.probe = task.probe_batches()
        runs = [Run(variant, seed) for seed in self.seeds for variant in settings.variants]
        left = sum(not self.finished(run) for run in runs)
        self.forecast = [_Forecast(left)] if self.main else []  # the first run's, --no-progress too
        run_paired(runs, _builder(settings, task), self.train, finished=self.finished)  # from the seed's softmax

        results["best_variant"] = _best(results)
        if self.main:
            model = Path(settings.model).name if Path(settings.model).is_dir() else settings.model  # not the whole path
            title = f"{model} on {Path(settings.dataset).name}, seeds {self.seeds[0]}-{self.seeds[-1]}"
            write_complete(work / PLOT_FILE, lambda path: plot(path, results, title))
            results.update(complete=True, plot=PLOT_FILE)
            write_json(work / RESULTS_FILE, results)
            self.folders.swap()
        self.state.wait_for_everyone()
        results.update(complete=True, plot=PLOT_FILE)
        return results

    def finished(self, run: Run) -> bool:
        per_seed = self.results["variants"].get(run.variant, {}).get("per_seed", [])
        return any(r["seed"] == run.seed for r in per_seed)

    def train(self, run: Run, model: torch.nn.Module, initial_weights: str) -> None:
        """Train, score and measure one run; record it (and, for the first seed, save its model)."""
        from ...diagnostics import measure_oversmoothing

        settings, task, variant = self.settings, self.task, run.variant
        coefficient = _coefficient(settings, task, variant)
        description = VARIANTS[variant].describe(coefficient)
        self.say(f"\n[{variant}, seed {run.seed}] {description}")
        progress = detailed_progress(settings) and self.main
        with tempfile.TemporaryDirectory(prefix="hf-neutreno-compare-") as scratch:
            trainer = self._trainer(model, scratch, run.seed)
            # Before training, on the device Trainer has put the model on
            before = measure_oversmoothing(
                trainer.model, self.probe, metrics=["cosine_similarity"], progress=progress, model_name=variant
            )
            start = time.perf_counter()
            train_output = trainer.train()
            seconds = time.perf_counter() - start
            try:
                score = task.score(trainer)
            except OverflowError:  # exp of a diverged loss: a perplexity beyond a float's range
                score = math.inf
        model = trainer.model
        report = measure_oversmoothing(
            model, self.probe, metrics=["cosine_similarity"], progress=progress, model_name=variant
        )
        # A run diverged where its score or weights are not finite (NaN weights still give an accuracy, by argmax; and
        # Trainer leaves NaN losses out of its training loss).
        diverged = not math.isfinite(score) or not all(bool(p.isfinite().all()) for p in model.parameters())
        if diverged:
            self.say(f"[{variant}, seed {run.seed}] diverged: its weights or score are not finite.")
        saved = is_saveable(model) and not (diverged and run.seed == self.seeds[0])
        if run.seed == self.seeds[0] and saved and self.main:

            def save(folder: Path, model=model) -> None:
                model.save_pretrained(folder)
                task.processing.save_pretrained(folder)

            write_complete(self.folders.work / variant, save)
        entry = self.results["variants"].setdefault(variant, _variant_entry(model, variant, description, saved))
        record = self._run_record(run, model, initial_weights, score, report, before, seconds, train_output, trainer)
        entry["per_seed"].append(_diverged_record(record, self.task.metric) if diverged else _finite_record(record))
        _summarise(self.results)
        if self.main:
            write_json(self.folders.work / RESULTS_FILE, self.results)  # after the model: a recorded run has its model

    def _trainer(self, model: torch.nn.Module, scratch: str, seed: int) -> Trainer:
        settings, task = self.settings, self.task
        trainer = _CompareTrainer(
            model=model,
            train_dataset=task.train,
            processing_class=task.processing,
            args=_training_arguments(settings, scratch, seed, remove_unused_columns=task.name.endswith("-lm")),
            coefficient_learning_rate=settings.coefficient_learning_rate,
            **task.trainer_arguments(),
        )
        if not settings.verbose:  # one bar per run; Trainer's log dictionaries and evaluation bar: --verbose
            trainer.remove_callback(PrinterCallback)
            trainer.remove_callback(ProgressCallback)
            if not settings.no_progress:
                trainer.add_callback(_TrainingBar)
        if self.forecast:
            trainer.add_callback(self.forecast.pop())
        return trainer

    def _run_record(self, run, model, initial_weights, score, report, before, seconds, train_output, trainer) -> dict:
        # The last block of the encoder (a Segmenter's decoder blocks follow it in the report)
        layers, cosine, last_layer, decoder_layers = _cosine(report)
        self.results.update(
            cosine_layers=layers, decoder_layers=decoder_layers, last_layer=last_layer, probe_samples=report.num_samples
        )
        record = {
            "seed": run.seed,
            "initial_weights_sha256": initial_weights,  # what pairs the variants of a seed
            self.task.metric: score,
            "last_layer_cosine": cosine[layers.index(last_layer)],
            "cosine_similarity": cosine,  # per hidden state in `cosine_layers`: 0 = embeddings, ℓ = block ℓ
            "cosine_similarity_before": _cosine(before)[1],  # the same, before training
            "train_seconds": seconds,
            "train_loss": train_output.training_loss,
            "learning_curve": _learning_curve(trainer),  # training loss, ten points
        }
        if is_value_path_model(model) and model.config.value_path["learnable"] is True:
            record["learned_coefficients"] = learned_coefficients(model)  # as the forward uses them
            # and as parameters: past a bound, where training pushed them (the forward uses the bound)
            record["learned_coefficient_parameters"] = [float(p.item()) for p in coefficient_parameters(model)]
        return record


def _finite_record(record: dict) -> dict:
    """A run's record with every number that is not finite as None (JSON has no NaN): a layer's cosine, a learning
    curve's loss or a learned coefficient of a run whose training went wrong somewhere."""

    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, list):
            return [finite(item) for item in value]
        if isinstance(value, dict):
            return {key: finite(item) for key, item in value.items()}
        return value

    return finite(record)


def _diverged_record(record: dict, metric: str) -> dict:
    """The record of a diverged run: marked, its score None (the accuracy of a model with NaN weights means nothing),
    left out of its variant's reading (`verdict.py`)."""
    return {**_finite_record(record), metric: None, "diverged": True}


def _variant_entry(model: torch.nn.Module, variant: str, description: str, saved: bool) -> dict:
    """What results.json keeps of a variant, besides its runs."""
    return {
        "description": description,
        "model_type": model.config.model_type,
        "neutreno_lambda": getattr(model.config, "neutreno_lambda", None),
        "parameters": model.num_parameters(),
        "model_dir": variant if saved else None,
        "value_path": getattr(model.config, "value_path", None),
        "per_seed": [],
    }


__all__ = ["BASELINE", "LOADERS", "VARIANTS", "CompareSettings", "format_table", "run_comparison"]
