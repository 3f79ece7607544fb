"""What every reproduction unit's training shares: where the datasets come from, the context a unit runs in, the
precision, and resumable training with a clock and learning-curve points kept in the Trainer's checkpoints."""

import dataclasses
import os
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from hf_neutreno.examples.scripts import whole_run_training_loss

from .reproduce_budget import Budget

ROOT = Path(__file__).resolve().parents[2]  # the repository
# Where the datasets come from: the Hub by default; `--data DIR` reads a local copy in the same layout
# (`DIR/cifar10`, `DIR/wikitext-2-v1`, Parquet files with the Hub datasets' columns).
HUB_DATA = {"cifar10": ("uoft-cs/cifar10", None), "wikitext-2-v1": ("Salesforce/wikitext", "wikitext-2-v1")}


def dataset_source(data: str | None, name: str) -> tuple[str, str | None]:
    """(name or folder, configuration) of dataset `name` for `load_image_dataset` / `load_wikitext`."""
    return (str(Path(data) / name), None) if data else HUB_DATA[name]


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a unit runs: the budget, the run folder (what earlier units kept), the local datasets (None: the Hub)
    and the unit's Trainer output folder (its checkpoints, so that a unit cut off resumes where it stopped)."""

    budget: Budget
    out: Path
    data: str | None
    work_dir: str


def precision(budget: Budget) -> dict:
    """TrainingArguments for the budget's precision. bf16 autocast also runs on a CPU (the gpu tier's scaled-down
    check), where Trainer asks for `use_cpu` to allow it."""
    if not budget.bf16:
        return {}
    return {"bf16": True, "use_cpu": not torch.cuda.is_available()}


class CurvePoints(TrainerCallback):
    """Learning-curve points go into `state.log_history`, which every checkpoint saves, as {"curve": point,
    "seconds": time since the unit started, summed over the sessions that resumed it}. Every log entry carries
    that clock too: the Trainer logs before it saves, so a checkpoint keeps the time spent even without a curve."""

    def __init__(self):
        self.start, self.before = time.perf_counter(), 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        clocks = [entry["seconds"] for entry in state.log_history if "seconds" in entry]  # from the checkpoint
        self.before = clocks[-1] if clocks else 0.0

    def on_log(self, args, state, control, **kwargs):
        state.log_history[-1]["seconds"] = self.seconds()  # the entry the Trainer has just appended

    def seconds(self) -> float:
        return self.before + time.perf_counter() - self.start

    def add(self, state, point: dict) -> None:
        state.log_history.append({"curve": point, "seconds": self.seconds()})


def train_resumably(trainer, work_dir: str) -> tuple:
    """`trainer.train()`, resumed from the last checkpoint in `work_dir` if a cut-off run left one. Returns the
    train output, the mean training loss over all steps, the curve points and the seconds earlier sessions spent.
    The Trainer must log its loss when it saves, so that the logs kept in a checkpoint cover every step before it."""
    checkpoint = get_last_checkpoint(work_dir) if os.path.isdir(work_dir) else None
    trained = trainer.train(resume_from_checkpoint=checkpoint)
    resumed_at = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    loss = whole_run_training_loss(trainer.state, trained.training_loss, resumed_at)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CurvePoints))
    return trained, loss, [entry["curve"] for entry in trainer.state.log_history if "curve" in entry], callback.before
