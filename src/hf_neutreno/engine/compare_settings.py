"""The settings of `hf_neutreno.engine.compare.run_comparison` and their defaults, which `hf-neutreno compare --help`
shows: a module that imports neither torch nor transformers, so that the help is fast.
"""

import dataclasses

from .names import BUILTIN_DIGITS

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
    variants: tuple[str, ...] = ("softmax", "neutreno")
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
