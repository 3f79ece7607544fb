"""The papers' training recipes, as `TrainingArguments` fields (every field can be overridden).

    from hf_neutreno.examples import recipes
    args = TrainingArguments(output_dir, **recipes.POSTER_CIFAR_TRAINING)       # the poster's CIFAR recipe

Models come from `hf_neutreno.engine.model_factories`, transforms from `hf_neutreno.data.image_transforms`, Mixup/CutMix
from `hf_neutreno.examples.mixup` and metrics from `hf_neutreno.data.scores`.
"""

# The poster's CIFAR recipe for ViT-Ti and its eigen-parameterised variants (with drop path 0.1 in the model and
# random crops of the 4-px padded image + flips).
POSTER_CIFAR_TRAINING = dict(
    num_train_epochs=100,
    per_device_train_batch_size=128,
    learning_rate=1e-3,
    weight_decay=0.05,
    warmup_steps=0.05,
    lr_scheduler_type="cosine",
    label_smoothing_factor=0.1,
)
POSTER_CIFAR_DROP_PATH = 0.1
CIFAR_CROP_PADDING = 4

# The NeuTRENO paper's WikiText-103 schedule (App. A.3). Adam: AdamW with weight decay 0 is the same update.
PAPER_LM_TRAINING = dict(
    learning_rate=2.5e-4,
    warmup_steps=2000,
    lr_scheduler_type="cosine",  # to 0 at max_steps
    max_steps=500_000,
    max_grad_norm=0.25,
    optim="adamw_torch",
    weight_decay=0.0,
    per_device_train_batch_size=96,  # blocks of 256 tokens
    per_device_eval_batch_size=16,
    seed=1111,
)

__all__ = ["CIFAR_CROP_PADDING", "PAPER_LM_TRAINING", "POSTER_CIFAR_DROP_PATH", "POSTER_CIFAR_TRAINING"]
