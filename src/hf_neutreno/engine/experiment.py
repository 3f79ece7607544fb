"""The experiment engine: paired runs. The variants of one seed start from the same weights and train on the same
batches, and their results are summarised over seeds as mean ± sample standard deviation with paired differences.

`hf-neutreno compare`, `examples/run_eigen_vit.py` and `experiments/evidence/reproduce.py` all pair their variants this
way:

    run_paired(runs, build, train, finished=recorded)                      # the one loop over (variant, seed) runs
    model = paired_model(build, "neutreno", seed, reference="softmax")  # softmax's initial weights, λ > 0
    args = TrainingArguments(output_dir, **pairing_arguments(seed), ...)  # the seed's batches, in the seed's order
    summary({0: 0.71, 1: 0.74, 2: 0.69})                                   # mean ± std over the seeds
    paired({0: 0.73, 1: 0.75}, {0: 0.71, 1: 0.74})                         # variant − baseline, seed by seed

A variant's initial weights depend on its seed alone (not on which variants ran before it), so a run that stops and
later continues with the seeds it has not finished gets the numbers an uninterrupted run gets.
"""

import dataclasses
import hashlib
import math
import statistics
from collections.abc import Callable, Iterable, Mapping

import torch

from ..models.value_path import MARKER, value_path_parameters
from .variants import BASELINE


def copy_shared_weights(model: torch.nn.Module, reference: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
    """Start `model` from `reference`'s weights wherever the names and shapes coincide (all of them for a NeuTRENO
    variant of a softmax model, whose λ is no parameter; all but the value/output maps for ViT⁻/ViT⁺), so that paired
    variants differ only where their designs do."""
    state = reference if isinstance(reference, Mapping) else reference.state_dict()
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in own and own[k].shape == v.shape}, strict=False)


def paired_model(build: Callable[[str], torch.nn.Module], variant: str, seed: int, reference: str) -> torch.nn.Module:
    """`build(variant)`, initialised as `build(reference)` is under `seed` wherever the two share a parameter.

    torch's generator is seeded with `seed`, the reference is built, then the variant (its own parameters drawn
    next), which takes every shared weight from the reference.
    """
    torch.manual_seed(seed)
    base = build(reference)
    if variant == reference:
        return base
    model = build(variant)
    copy_shared_weights(model, base)
    return model


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a paired experiment: `variant` trained from `seed`, with any further coordinates of the plan in
    `setting` as (name, value) pairs (say, the fraction of the training data: `(("fraction", 0.5),)`)."""

    variant: str
    seed: int
    setting: tuple = ()

    def get(self, name: str, default=None):
        return dict(self.setting).get(name, default)


def run_paired(
    runs: Iterable[Run],
    build: Callable[[str], torch.nn.Module] | None,
    train: Callable[[Run, torch.nn.Module | None, str | None], None],
    *,
    finished: Callable[[Run], bool] = lambda run: False,
    reference: str = BASELINE,
) -> list[Run]:
    """The paired-training loop every experiment of this package runs: for each run in order that is not `finished`
    (a resumed experiment's recorded runs), the variant's model paired with the seed's `reference`
    (`paired_model`), then `train(run, model, fingerprint)`, which trains, scores and records it; `fingerprint` is
    `weights_fingerprint` of the shared initial weights. A run's numbers depend on its variant, seed and setting
    alone, so an experiment stopped and resumed gives those of an uninterrupted one. Returns the runs trained.

    `build` None: `train(run, None, None)` builds the model itself, for a run handed to a training script that pairs
    its models by seed on its own (the reproductions' Segmenters, trained by the segmentation example)."""
    trained = []
    for run in runs:
        if finished(run):
            continue
        if build is None:
            train(run, None, None)
        else:
            model = paired_model(build, run.variant, run.seed, reference=reference)
            # a variant's own weights, which its reference has not (a value path's coefficients, gates, marker)
            train(run, model, weights_fingerprint(model, exclude={*value_path_parameters(model), MARKER}))
        trained.append(run)
    return trained


def pairing_arguments(seed: int) -> dict:
    """`TrainingArguments` fields that make every variant of a seed see the same batches in the same order (and the
    same dropout and augmentation draws where the models consume them alike)."""
    return {"seed": seed, "data_seed": seed}


def weights_fingerprint(model: torch.nn.Module, exclude: Iterable[str] = ()) -> str:
    """SHA-256 of the model's weights (names and values), those named in `exclude` left out: equal for two models
    that start from the same weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if name in exclude:
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n − 1 in the denominator; NaN for fewer than two values, and the mean NaN
    for none)."""
    values = [float(v) for v in values]
    return statistics.fmean(values) if values else math.nan, statistics.stdev(values) if len(values) > 1 else math.nan


def summary(per_seed: Mapping) -> dict:
    """{"per_seed": {seed: value}, "mean", "std", "n"} of one quantity over seeds (seeds as strings, as in JSON)."""
    mean, std = mean_std(per_seed.values())
    return {"per_seed": {str(k): v for k, v in per_seed.items()}, "mean": mean, "std": std, "n": len(per_seed)}


def paired(variant: Mapping, baseline: Mapping, higher_is_better: bool = True) -> dict:
    """`variant − baseline` per seed (the seeds both have) as a `summary`, with `wins`: the seeds where the variant is
    better (higher, or lower with `higher_is_better=False`)."""
    differences = {seed: variant[seed] - baseline[seed] for seed in variant if seed in baseline}
    wins = sum((d > 0) if higher_is_better else (d < 0) for d in differences.values())
    return {**summary(differences), "wins": wins, "higher_is_better": higher_is_better}


__all__ = [
    "Run",
    "copy_shared_weights",
    "mean_std",
    "paired",
    "paired_model",
    "pairing_arguments",
    "run_paired",
    "summary",
    "weights_fingerprint",
]
