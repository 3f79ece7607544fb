"""What the example training scripts (examples/run_*.py) share, as transformers' own run_*.py examples do it:
the output folder is never overwritten by accident, an interrupted run resumes from its last checkpoint, config
overrides are parsed from one flag, and a multi-process launch that Trainer would not join is refused.

    parser = script_parser(ModelArguments, DataArguments)     # + --overwrite-output-dir, bare --resume-from-checkpoint
    model_args, data_args, script_args, training_args = parser.parse_args_into_dataclasses()
    checkpoint = checkpoint_to_resume(training_args, script_args.overwrite_output_dir)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = train_metrics(trainer, result, checkpoint)     # train_loss over the whole run, resumed or not

or, in the steps the image scripts take:

    model_args, data_args, script_args, training_args = parse_script_arguments(parser, argv)
    checkpoint, push = prepare_output(training_args, script_args.overwrite_output_dir)
    ...
    metrics, eval_metrics = train_and_evaluate(trainer, checkpoint)
"""

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser, TrainerState, TrainingArguments
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..hub import prepare_trainer_push
from ..runtime import has_accelerator

LAST_CHECKPOINT = "last"  # `--resume-from-checkpoint` without a path (also `true`): the output folder's last one


@dataclass
class ScriptArguments:
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into --output-dir even if it holds a trained model, results or checkpoints (its "
            "checkpoint-* folders are removed first). Without it such a folder is refused."
        },
    )


def neutreno_lambda_field(
    config_class,
    help: str = "λ of the NeuTRENO term; 0 = softmax baseline.",
    built: str = "a preset or a converted native checkpoint",
):
    """A script's `--neutreno-lambda`, None unless given: a NeuTRENO checkpoint keeps its own λ, and a model `built`
    (from a preset, by conversion) gets `config_class`'s (the registry's, written nowhere else), which the help
    names."""
    default = config_class().neutreno_lambda
    return field(
        default=None,
        metadata={"help": f"{help} Default: {default} (the registry's) for {built}; a NeuTRENO checkpoint's own."},
    )


def neutreno_layers_field(built: str = "a preset or a converted native checkpoint"):
    """A script's `--neutreno-layers`, None unless given: a NeuTRENO checkpoint keeps its own, a model `built` (from a
    preset, by conversion) gets the model's default, every layer but the first."""
    return field(
        default=None,
        metadata={"help": f"Layers with the term. Default: all but 0 for {built}; a NeuTRENO checkpoint's own."},
    )


def given(**flags) -> dict:
    """The flags the user set (not None), as keyword arguments: a checkpoint's own fields stay where a flag is not
    given."""
    return {name: value for name, value in flags.items() if value is not None}


def config_overrides_field(
    help: str = "Other config fields of a model trained from scratch: 'num_hidden_layers=6,hidden_size=256'.",
):
    """A script's `--config-overrides`, read by `parse_config_overrides`."""
    return field(default=None, metadata={"help": help})


def trust_remote_code_field():
    return field(default=False, metadata={"help": "Allow code from a checkpoint's folder."})


class _ScriptParser(HfArgumentParser):
    """Parses as `HfArgumentParser`; then pins DataLoader memory only where an accelerator can use it (torch warns
    about `pin_memory` on every DataLoader of a machine without one). The parsed arguments alone are changed."""

    def parse_args_into_dataclasses(self, *args, **kwargs):
        return _pin_memory_where_useful(super().parse_args_into_dataclasses(*args, **kwargs))

    def parse_json_file(self, *args, **kwargs):
        return _pin_memory_where_useful(super().parse_json_file(*args, **kwargs))


def _pin_memory_where_useful(parsed: tuple) -> tuple:
    for arguments in parsed:
        if isinstance(arguments, TrainingArguments) and not has_accelerator():
            arguments.dataloader_pin_memory = False
    return parsed


def run_script(main) -> None:
    """An example script's entry point: `main()`, where a dataset the Hub cannot serve (no network, offline mode)
    ends the script with one line naming it and exit status 2, not a traceback."""
    try:
        main()
    except ConnectionError as error:
        # datasets 4: "Couldn't reach 'name' on the Hub (...)"; datasets 3: "... for dataset 'name': Offline mode ...."
        message = " ".join(str(error).split()).rstrip(".")
        print(
            f"{Path(sys.argv[0]).name}: error: {message}. Check the network (and HF_HUB_OFFLINE), or pass a local "
            "copy (a folder of the dataset's Parquet files) in place of the Hub name; the image dataset `digits` "
            "(bundled with scikit-learn) needs no network.",
            file=sys.stderr,
        )
        sys.exit(2)


def script_parser(*dataclass_types) -> HfArgumentParser:
    """`HfArgumentParser` over `dataclass_types`, `ScriptArguments` and `TrainingArguments` (parsed in that order),
    whose `--resume-from-checkpoint` also works without a path: then it resumes from the output folder's last
    checkpoint."""
    parser = _ScriptParser((*dataclass_types, ScriptArguments, TrainingArguments))
    for action in parser._actions:  # argparse offers no public way to change an option once added
        if action.dest == "resume_from_checkpoint":
            action.nargs, action.const = "?", LAST_CHECKPOINT
            action.help = (
                "A checkpoint folder to resume training from; without a path, the last checkpoint-* in --output-dir."
            )
    return parser


def parse_script_arguments(parser: HfArgumentParser, argv: list[str] | None, json_file: bool = True) -> tuple:
    """The parsed dataclasses of `argv` (None: the command line), or, with `json_file`, of the JSON file that is a
    command line's only argument (as transformers' examples take one)."""
    if json_file and argv is None and len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        return parser.parse_json_file(os.path.abspath(sys.argv[1]))
    return parser.parse_args_into_dataclasses(argv)


def resume_requested(value: str | bool | None) -> bool:
    return value is not None and str(value).strip().lower() not in ("false", "none", "")


def resolve_checkpoint(output_dir: str | os.PathLike, resume_from_checkpoint: str | bool | None) -> str | None:
    """The checkpoint folder `--resume-from-checkpoint` names: a path as given, `last` (or `true`) the last
    `checkpoint-*` in `output_dir`; None if no resumption was asked for. Raises naming the flag if there is none."""
    if not resume_requested(resume_from_checkpoint):
        return None
    value = str(resume_from_checkpoint).strip()
    if value.lower() in (LAST_CHECKPOINT, "true"):
        last = get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None
        if last is None:
            raise ValueError(
                f"--resume-from-checkpoint: --output-dir {str(output_dir)!r} holds no "
                f"{PREFIX_CHECKPOINT_DIR}-* folder to resume from; pass a checkpoint's path, or train "
                "without the flag."
            )
        return last
    if not (Path(value) / TRAINER_STATE_NAME).is_file():
        raise ValueError(
            f"--resume-from-checkpoint {value!r} is not a checkpoint folder (it has no "
            f"{TRAINER_STATE_NAME}); give a {PREFIX_CHECKPOINT_DIR}-* folder, or no path for the last "
            "one in --output-dir."
        )
    return value


def refuse_to_overwrite(output_dir: str | os.PathLike, overwrite_output_dir: bool, main_process: bool = True) -> None:
    """Raise if `output_dir` holds anything (a trained model, results, checkpoints) unless `overwrite_output_dir`;
    then its `checkpoint-*` folders are removed (by the main process), so that a later resumption cannot pick up
    the replaced run's."""
    folder = Path(output_dir)
    entries = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if not entries:
        return
    if not overwrite_output_dir:
        checkpoints = [name for name in entries if name.startswith(f"{PREFIX_CHECKPOINT_DIR}-")]
        what = (
            "a trained model"
            if "config.json" in entries
            else "results"
            if any(name.endswith("results.json") for name in entries)
            else "checkpoints"
            if checkpoints
            else "files"
        )
        shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
        raise ValueError(
            f"--output-dir {str(folder)!r} already holds {what} ({shown}). Pass --resume-from-checkpoint to continue "
            "an interrupted run from its last checkpoint, --overwrite-output-dir to train afresh into it, or choose "
            "another --output-dir; nothing was written."
        )
    if main_process:
        for name in entries:
            if name.startswith(f"{PREFIX_CHECKPOINT_DIR}-") and (folder / name).is_dir():
                shutil.rmtree(folder / name)


def checkpoint_to_resume(training_args: TrainingArguments, overwrite_output_dir: bool) -> str | None:
    """Before training: the checkpoint to resume from (`--resume-from-checkpoint`), else None after checking that
    training will not overwrite an earlier run's output (`refuse_to_overwrite`). An evaluation-only run
    (`--do-train false`) writes no model and is never refused."""
    checkpoint = resolve_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
    if checkpoint is None and training_args.do_train:
        refuse_to_overwrite(training_args.output_dir, overwrite_output_dir, training_args.process_index == 0)
    return checkpoint


def prepare_output(training_args: TrainingArguments, overwrite_output_dir: bool) -> tuple[str | None, bool]:
    """Before any data is loaded: the checkpoint to resume from (`checkpoint_to_resume`: an earlier run is never
    overwritten by accident) and whether to push at the end (`prepare_trainer_push`: with `--push-to-hub` the Hub
    is checked now, not after training; the scripts push once, at the end)."""
    checkpoint = checkpoint_to_resume(training_args, overwrite_output_dir)
    return checkpoint, prepare_trainer_push(training_args)


def whole_run_training_loss(state, session_loss: float, resumed_at: int) -> float | None:
    """The mean training loss over every step of a run that resumed at step `resumed_at` (0: not resumed), from
    Trainer's `state` after `train()` and its `training_loss`, which averages the resumed session's steps only (0.0 when
    the checkpoint was the last step). The earlier steps' losses are in the log history the checkpoint kept; None when
    those logs stop short of the checkpoint (its step is not a multiple of the logging steps)."""
    earlier, logged = 0.0, 0
    for entry in state.log_history:
        if "loss" in entry and entry["step"] <= resumed_at:
            earlier, logged = earlier + entry["loss"] * (entry["step"] - logged), entry["step"]
    if logged != resumed_at:
        return None
    return (earlier + session_loss * (state.global_step - resumed_at)) / state.global_step


def train_metrics(trainer, result, checkpoint: str | None) -> dict:
    """The metrics of `result = trainer.train(resume_from_checkpoint=checkpoint)`, with `train_loss` the mean over
    every step of the run (`whole_run_training_loss`) and, for a resumed run, `resumed_from_step`."""
    metrics = dict(result.metrics)
    if checkpoint is not None:
        resumed_at = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)).global_step
        metrics.update(
            train_loss=whole_run_training_loss(trainer.state, result.training_loss, resumed_at),
            resumed_from_step=resumed_at,
        )
    return metrics


def train_and_save(trainer, checkpoint: str | None) -> dict:
    """Train (resuming from `checkpoint`, if any), save the model (with its processing class) to the output folder,
    and return the training metrics (`train_metrics`)."""
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()
    return train_metrics(trainer, result, checkpoint)


def train_and_evaluate(trainer, checkpoint: str | None, **evaluate_kwargs) -> tuple[dict, dict]:
    """Train and save (unless `--do-train false`), then `trainer.evaluate(**evaluate_kwargs)`; every metric is logged
    and saved as `all_results.json`. Returns (all metrics, the evaluation's)."""
    metrics = train_and_save(trainer, checkpoint) if trainer.args.do_train else {}
    eval_metrics = trainer.evaluate(**evaluate_kwargs)
    metrics.update(eval_metrics)
    trainer.log_metrics("all", metrics)
    trainer.save_metrics("all", metrics)
    return metrics, eval_metrics


def hub_base_model(model_name_or_path: str | None, presets=()) -> str | None:
    """The Hub id a run started from, for the model card's `base_model`: None for no checkpoint, a preset (one of
    `presets`) or a local folder."""
    if not model_name_or_path or model_name_or_path in presets or os.path.exists(model_name_or_path):
        return None
    return model_name_or_path


TRUE_WORDS = ("1", "true", "t", "yes", "y", "on")
FALSE_WORDS = ("0", "false", "f", "no", "n", "off")


def _split_outside_brackets(text: str) -> list[str]:
    """`text` split at the commas outside brackets: 'a=1,b=[2,3]' -> ['a=1', 'b=[2,3]']; empty items dropped."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def parse_config_overrides(text: str | None, config_class) -> dict:
    """'num_hidden_layers=6,hidden_act=relu' -> {'num_hidden_layers': 6, 'hidden_act': 'relu'}: each value typed like
    the `config_class` field it sets (the `--config_overrides` flag of the examples). Items are split at the commas
    outside brackets, so a list value stays whole ('adaptive_softmax_cutoffs=[2000,10000]'); a boolean field takes
    the usual words (`TRUE_WORDS`, `FALSE_WORDS`, any case) and refuses any other, naming the field."""
    overrides, defaults = {}, config_class()
    for item in _split_outside_brackets(text or ""):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not hasattr(defaults, key):
            raise ValueError(f"--config_overrides: {item!r} is not `field=value` for a {config_class.__name__} field.")
        current = getattr(defaults, key)
        if isinstance(current, bool):
            if value.lower() not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(
                    f"--config_overrides: {key}={value!r} is not a boolean; write one of {', '.join(TRUE_WORDS)} "
                    f"or {', '.join(FALSE_WORDS)}."
                )
            overrides[key] = value.lower() in TRUE_WORDS
        elif isinstance(current, (int, float)):
            overrides[key] = type(current)(value)
        else:  # lists and None as JSON ('[2000, 10000]', 'null'), anything else as the string
            try:
                overrides[key] = json.loads(value)
            except json.JSONDecodeError:
                overrides[key] = value
    return overrides


def check_distributed_launch(args: TrainingArguments) -> None:
    """Raise if the script runs as several processes (torchrun, accelerate launch) that Trainer does not join.

    On a machine without GPUs, Trainer only forms the process group (gloo) with `--use_cpu`; without it every
    process would silently train its own copy of the model on its own data.
    """
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and args.world_size != launched:
        raise ValueError(
            f"The script was launched as {launched} processes, but Trainer trains in {args.world_size}: each process "
            "would train its own copy. On a machine without GPUs pass --use_cpu (Trainer then joins the processes "
            "with gloo)."
        )


__all__ = [
    "LAST_CHECKPOINT",
    "ScriptArguments",
    "check_distributed_launch",
    "checkpoint_to_resume",
    "config_overrides_field",
    "given",
    "hub_base_model",
    "neutreno_lambda_field",
    "neutreno_layers_field",
    "parse_config_overrides",
    "parse_script_arguments",
    "prepare_output",
    "refuse_to_overwrite",
    "resolve_checkpoint",
    "script_parser",
    "train_and_evaluate",
    "train_and_save",
    "trust_remote_code_field",
]
