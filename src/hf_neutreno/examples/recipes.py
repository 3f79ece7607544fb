"""The papers' training recipes, as `TrainingArguments` fields (every field can be overridden).

    from hf_neutreno.examples import recipes
    args = TrainingArguments(output_dir, **recipes.POSTER_CIFAR_TRAINING)  # for the poster's CIFAR set-up

Models come from `hf_neutreno.engine.model_factories`, transforms from `hf_neutreno.data.image_transforms`, Mixup/CutMix
from `hf_neutreno.examples.mixup` and metrics from `hf_neutreno.data.scores`.
"""

# This package's training recipe for the poster's CIFAR set-up (Dovonon et al.: ViT-Ti and its eigen-parameterised
# variants ViT⁺ and ViT⁻ on CIFAR-100, trained on 100 / 50 / 10 % of the training set). The poster gives the models,
# data and fractions but no training hyperparameters, so these are choices: DeiT's (Touvron et al. 2021,
# facebookresearch/deit) AdamW with weight decay 0.05, warm-up then cosine decay, label smoothing 0.1 and drop path
# 0.1 (`POSTER_CIFAR_DROP_PATH`, in the model); the standard CIFAR augmentation of random crops from the 4-pixel
# zero-padded image and horizontal flips (He et al. 2016; `CIFAR_CROP_PADDING`); and this package's own 100 epochs
# at batch 128 with lr 1e-3 and 5 % warm-up. No Mixup/CutMix or RandAugment.
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
