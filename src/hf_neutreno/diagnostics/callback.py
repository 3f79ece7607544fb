"""`OversmoothingCallback`: measure over-smoothing on a fixed probe set at every evaluation of a `Trainer`."""

from collections.abc import Iterable, Mapping, Sequence

import torch
from transformers import TrainerCallback

from ..names import check_metrics
from .oversmoothing import measure_oversmoothing
from .report import OversmoothingReport


class OversmoothingCallback(TrainerCallback):
    """At each evaluation, measure a fixed probe set and log per-layer values through `trainer.log`.

    The entries are named `{prefix}/{metric}/layer_{ℓ}` (e.g. `oversmoothing/cosine_similarity/layer_12`), so they
    reach `state.log_history` and every `report_to` backend (TensorBoard, trackio, W&B, ...) like the eval metrics.

    `trainer.log` needs the trainer, which callbacks are not given; bind it with `attach`:

        callback = OversmoothingCallback(probe_batches).attach(trainer)   # adds itself to the trainer

    or pass `trainer=` to the constructor and `trainer.add_callback(callback)`.

    Args:
        probe_batches: the probe set, a DataLoader or a list of dicts of tensors (kept and re-used at every
            evaluation; a one-shot iterator is turned into a list). Keep it small: it runs at every evaluation.
        trainer: the `Trainer` to log through (or use `attach`).
        metrics, layers: as in `measure_oversmoothing` (default: the `DEFAULT_METRICS` the model provides, every
            layer).
        prefix: the first part of the logged names.

    The last report is kept in `last_report`. Every process measures (so sharded models keep working) and
    `trainer.log` decides who reports.
    """

    def __init__(
        self,
        probe_batches: Iterable[Mapping[str, torch.Tensor]],
        trainer=None,
        metrics: Sequence[str] | None = None,
        layers: Sequence[int] | None = None,
        prefix: str = "oversmoothing",
    ):
        if iter(probe_batches) is probe_batches:  # a generator would be empty at the second evaluation
            probe_batches = list(probe_batches)
        self.probe_batches = probe_batches
        self.metrics = None if metrics is None else list(check_metrics(metrics))
        self.layers = layers
        self.prefix = prefix
        self.trainer = trainer
        self.last_report: OversmoothingReport | None = None
        self._last_step: int | None = None

    def attach(self, trainer) -> "OversmoothingCallback":
        """Log through `trainer` and add this callback to it (once). Returns the callback."""
        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        return self

    def on_train_end(self, args, state, control, **kwargs):
        # `load_best_model_at_end` has loaded another model at the same step: an evaluation after training measures it
        self._last_step = None

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if self.trainer is None:
            raise RuntimeError(
                "OversmoothingCallback logs through the Trainer: bind it with `callback.attach(trainer)` or "
                "`OversmoothingCallback(..., trainer=trainer)`."
            )
        if state.global_step == self._last_step:  # several eval datasets evaluate at the same step: measure once
            return
        self._last_step = state.global_step
        report = measure_oversmoothing(
            model if model is not None else self.trainer.model,
            self.probe_batches,
            metrics=self.metrics,
            layers=self.layers,
            progress=False,
        )
        self.last_report = report
        self.trainer.log(report.to_logs(self.prefix))
