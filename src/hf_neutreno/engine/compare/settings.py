"""The settings of `hf_neutreno.engine.compare.run_comparison`, their defaults, which `hf-neutreno compare --help`
shows, and the checks that do not depend on the model: a module that imports neither torch nor transformers, so that
the help and a bad flag's error are fast.
"""

import dataclasses
import math

from ...names import BUILTIN_DIGITS, IMAGE_MODELS, SEGMENTATION_MODELS, TASK_SPECS, TEXT_MODELS
from ..variants import BASELINE, VARIANTS, default_variants

# Training defaults: a preset trains from scratch; a transformers model is fine-tuned from its weights, with the
# settings usual for a ~100M-parameter model (BERT's and ViT's fine-tuning recipes: a small learning rate, light weight
# decay, a few epochs), and its learnable coefficients, which start at 0, get a learning rate of their own (at
# 5e-5 a scalar would move by at most ~0.05 in a thousand Adam steps).
FROM_SCRATCH = {"epochs": 8, "weight_decay": 0.05}  # learning rate: 3e-3 image classifiers, 1e-3 the others
FINE_TUNING = {"epochs": 3, "weight_decay": 0.01, "learning_rate": 5e-5, "coefficient_learning_rate": 1e-2}


@dataclasses.dataclass
class CompareSettings:
    """What `run_comparison` trains and how; `hf-neutreno compare --help` explains each field (flag `--model` for
    `model`, `--max-steps` for `max_steps`, ...). `model` is a preset of this package (trained from scratch) or a
    transformers model, a Hub id or a saved folder (fine-tuned from its weights unless `from_scratch`). None picks the
    default: `FROM_SCRATCH` or `FINE_TUNING` for the training settings (a preset's learning rate: 3e-3 for image
    classifiers, 1e-3 for language models and Segmenters), and `hf_neutreno.engine.variants.default_coefficient` for λ
    and α. The variants train once per seed `seed, seed + 1, ..., seed + seeds - 1`."""

    model: str = "vit-micro"
    dataset: str = BUILTIN_DIGITS
    dataset_config: str | None = None
    task: str | None = None
    from_scratch: bool = False
    text_column: str | None = None
    label_column: str | None = None
    image_column: str | None = None
    max_length: int | None = None
    variants: tuple[str, ...] | None = None  # None: `default_variants` of the model
    neutreno_lambda: float | None = None
    value_residual_alpha: float | None = None
    output_dir: str = "runs/compare"
    resume: bool = False
    epochs: float | None = None
    max_steps: int | None = None
    batch_size: int = 32
    gradient_accumulation_steps: int = 1
    learning_rate: float | None = None
    coefficient_learning_rate: float | None = None
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1
    weight_decay: float | None = None
    bf16: bool = False
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    probe_samples: int = 256
    seed: int = 0
    seeds: int = 3
    threads: int = 1
    no_progress: bool = False
    verbose: bool = False


def checked_common(settings: CompareSettings) -> CompareSettings:
    """`settings` checked where they do not depend on the model, with the baseline the first variant; ValueError
    naming the flag on bad input. `hf-neutreno compare` calls it before it imports the training stack, so that a
    mistyped flag is reported in a moment rather than after torch and transformers have loaded."""
    for name in (
        "batch_size",
        "max_steps",
        "max_train_samples",
        "max_eval_samples",
        "probe_samples",
        "seeds",
        "threads",
        "gradient_accumulation_steps",
    ):
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")
    if settings.max_length is not None and settings.max_length < 2:
        raise ValueError(f"--max-length must be at least 2 tokens, got {settings.max_length}.")
    for name in ("epochs", "learning_rate", "coefficient_learning_rate", "weight_decay", "neutreno_lambda"):
        value = getattr(settings, name)
        if value is not None and not math.isfinite(value):  # NaN and infinities fail here, before anything runs
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number, got {value}.")
    for name in ("epochs", "learning_rate", "coefficient_learning_rate"):
        if getattr(settings, name) is not None and not getattr(settings, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(settings, name)}.")
    if settings.weight_decay is not None and not settings.weight_decay >= 0:
        raise ValueError(f"--weight-decay must be >= 0, got {settings.weight_decay}.")
    if not 0 <= settings.warmup_ratio < 1:
        raise ValueError(f"--warmup-ratio must be in [0, 1), got {settings.warmup_ratio}.")
    if settings.task is not None and settings.task not in TASK_SPECS:
        raise ValueError(f"--task {settings.task!r}: choose from {list(TASK_SPECS)}.")
    if settings.variants is None:  # a preset's, or a pretrained model's (`--model` a folder or Hub id)
        presets = {*IMAGE_MODELS, *SEGMENTATION_MODELS, *TEXT_MODELS}
        settings.variants = default_variants(pretrained=settings.model not in presets and not settings.from_scratch)
    check_variants(settings)
    return settings


def check_variants(settings: CompareSettings) -> None:
    """The variant names (the baseline first) and their coefficients' flags; ValueError naming the flag."""
    names = list(dict.fromkeys(settings.variants))
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or BASELINE not in names or len(names) < 2:
        raise ValueError(
            f"--variants {','.join(settings.variants)!r}: choose two or more of {list(VARIANTS)}, "
            f"{BASELINE} (the baseline the others are compared with) among them"
            + (f"; unknown: {unknown}." if unknown else ".")
        )
    settings.variants = tuple([BASELINE] + [name for name in names if name != BASELINE])  # the baseline first
    fixed = {VARIANTS[name].method for name in names if VARIANTS[name].method and not VARIANTS[name].learnable}
    if settings.neutreno_lambda is not None and not (
        settings.neutreno_lambda > 0 or (settings.neutreno_lambda == 0 and "neutreno" not in fixed)
    ):
        raise ValueError(
            f"--neutreno-lambda must be > 0 (λ = 0 is the softmax variant; 0 is allowed as the start of "
            f"neutreno-learnable alone), got {settings.neutreno_lambda}."
        )
    alpha = settings.value_residual_alpha
    if alpha is not None and not (0 < alpha <= 1 or (alpha == 0 and "value_residual" not in fixed)):  # NaN fails
        raise ValueError(
            f"--value-residual-alpha must be in (0, 1] (α = 0 is the softmax variant; 0 is allowed as the start of "
            f"value-residual-learnable alone), got {alpha}."
        )
