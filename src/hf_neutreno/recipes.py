"""Training recipes: models from presets, the papers' training arguments, transforms, losses and metrics.

The examples, `hf-neutreno compare` and `benchmarks/reproduce.py` build and train through these, so every entry
point trains the same way.

    from hf_neutreno import recipes
    model = recipes.image_classifier("vit-", "vit-tiny", labels=names)            # ViT⁻ of the poster's ViT-Ti
    args = TrainingArguments(output_dir, **recipes.POSTER_CIFAR_TRAINING)       # its CIFAR recipe
"""

import copy
import functools
import json
import os
import random

import numpy as np
import torch
from PIL import Image, ImageOps
from transformers import Trainer

from .models.configuration_eigen_vit import EigenViTConfig
from .models.configuration_neutreno_gpt import NeuTRENOGPTConfig
from .models.configuration_neutreno_vit import NeuTRENOViTConfig
from .models.modeling_eigen_vit import EigenViTForImageClassification
from .models.modeling_neutreno_gpt import NeuTRENOGPTForCausalLM
from .models.modeling_neutreno_vit import NeuTRENOViTForImageClassification

# ---------------------------------------------------------------------------------------------------------------------
# The papers' training arguments (`TrainingArguments(**...)`; every field can be overridden)

# The poster's CIFAR recipe for ViT-Ti and its eigen-parameterised variants (with drop path 0.1 in the model and
# random crops of the 4-px padded image + flips).
POSTER_CIFAR_TRAINING = dict(
    num_train_epochs=100, per_device_train_batch_size=128, learning_rate=1e-3, weight_decay=0.05, warmup_steps=0.05,
    lr_scheduler_type="cosine", label_smoothing_factor=0.1,
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

# ---------------------------------------------------------------------------------------------------------------------
# Models from presets

# variant: what it is. "vit" and "neutreno" are NeuTRENO ViTs (λ = 0 and λ > 0), "vit-"/"vit+" EigenViTs.
IMAGE_VARIANTS = {
    "vit": "softmax ViT (λ = 0)",
    "neutreno": "NeuTRENO ViT",
    "vit-": "ViT⁻ (EigenViT, Λ = −ψ²)",
    "vit+": "ViT⁺ (EigenViT, Λ = +ψ²)",
}
IMAGE_PRESETS = sorted(EigenViTConfig.presets)  # the NeuTRENO ViT's presets and the poster's ViT-Ti


def image_classifier(variant: str, preset: str, labels: list[str], *, neutreno_lambda: float = 0.6,
                     eigenvalue_range: list[float] | None = None, **config):
    """A classifier of `variant` (`IMAGE_VARIANTS`) in the shape of `preset`, for `labels`; `config` overrides any
    config field (`num_hidden_layers`, `drop_path_rate`, ...). `eigenvalue_range` is ViT⁻'s; ViT⁺ gets it mirrored."""
    if variant not in IMAGE_VARIANTS:
        raise ValueError(f"Unknown image variant {variant!r}; choose from {list(IMAGE_VARIANTS)}.")
    if preset not in EigenViTConfig.presets:
        raise ValueError(f"Unknown image preset {preset!r}; choose from {IMAGE_PRESETS}.")
    id2label = dict(enumerate(labels))
    fields = {**copy.deepcopy(EigenViTConfig.presets[preset]), "id2label": id2label,
              "label2id": {name: index for index, name in id2label.items()}, **config}
    if variant in ("vit", "neutreno"):
        lam = neutreno_lambda if variant == "neutreno" else 0.0
        return NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**fields, neutreno_lambda=lam))
    sign = "negative" if variant == "vit-" else "positive"
    if eigenvalue_range is not None and sign == "positive":
        low, high = eigenvalue_range
        eigenvalue_range = [-high, -low]
    config = EigenViTConfig(**fields, spectrum_sign=sign, eigenvalue_range=eigenvalue_range)
    return EigenViTForImageClassification(config)


def language_model(preset: str, tokenizer, *, block_size: int | None = None, **config) -> NeuTRENOGPTForCausalLM:
    """A NeuTRENO GPT of `preset` for `tokenizer`'s vocabulary; `config` overrides any config field. The preset's
    adaptive-softmax cutoffs that do not fit the vocabulary are dropped. With `block_size`, the model records its
    training context as `max_position_embeddings` (evaluate-lm's default window)."""
    if preset not in NeuTRENOGPTConfig.presets:
        raise ValueError(f"Unknown language-model preset {preset!r}; choose from {sorted(NeuTRENOGPTConfig.presets)}.")
    vocab_size = len(tokenizer)
    cutoffs = [c for c in NeuTRENOGPTConfig.presets[preset].get("adaptive_softmax_cutoffs") or () if c < vocab_size]
    fields = dict(vocab_size=vocab_size, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                  adaptive_softmax_cutoffs=cutoffs or None)
    if block_size is not None:
        fields["max_position_embeddings"] = block_size
    fields.update(config)
    return NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig.from_preset(preset, **fields))


def parse_config_overrides(text: str | None, config_class) -> dict:
    """'num_hidden_layers=6,hidden_act=relu' -> {'num_hidden_layers': 6, 'hidden_act': 'relu'}: each value typed like
    the `config_class` field it sets (the `--config_overrides` flag of the examples)."""
    overrides, defaults = {}, config_class()
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not hasattr(defaults, key):
            raise ValueError(f"--config_overrides: {item!r} is not `field=value` for a {config_class.__name__} field.")
        current = getattr(defaults, key)
        if isinstance(current, bool):
            overrides[key] = value.lower() in ("1", "true", "yes")
        elif isinstance(current, (int, float)):
            overrides[key] = type(current)(value)
        else:  # lists and None as JSON ('[2000, 10000]', 'null'), anything else as the string
            try:
                overrides[key] = json.loads(value)
            except json.JSONDecodeError:
                overrides[key] = value
    return overrides


def copy_shared_weights(model: torch.nn.Module, reference: torch.nn.Module | dict) -> None:
    """Start `model` from `reference`'s weights wherever the names and shapes coincide (all of them for a NeuTRENO
    variant of a ViT; all but the value/output maps for ViT⁻/ViT⁺), so paired variants differ only by design."""
    state = reference if isinstance(reference, dict) else reference.state_dict()
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in own and own[k].shape == v.shape}, strict=False)


# ---------------------------------------------------------------------------------------------------------------------
# Images: transforms, Mixup/CutMix, losses, metrics


def image_transform(processor, image_column: str, label_column: str, augment: bool = False, crop_padding: int = 0):
    """A `Dataset.set_transform` function: PIL images -> `pixel_values` (+ `labels`).

    With `augment`, each image is randomly flipped horizontally and, with `crop_padding` > 0, randomly cropped
    from a zero-padded copy (the CIFAR recipe); the processor then resizes and normalises.
    """

    def transform(batch: dict) -> dict:
        images = [image.convert("RGB") for image in batch[image_column]]
        if augment:
            images = [_augment(image, crop_padding) for image in images]
        out = processor(images, return_tensors="pt")
        out = {"pixel_values": out["pixel_values"]}
        if label_column in batch:
            out["labels"] = torch.as_tensor(batch[label_column])
        return out

    return transform


def _augment(image: Image.Image, crop_padding: int) -> Image.Image:
    if random.random() < 0.5:
        image = ImageOps.mirror(image)
    if crop_padding > 0:
        width, height = image.size
        padded = ImageOps.expand(image, border=crop_padding, fill=0)
        left, top = random.randint(0, 2 * crop_padding), random.randint(0, 2 * crop_padding)
        image = padded.crop((left, top, left + width, top + height))
    return image


def collate_images(examples: list[dict]) -> dict[str, torch.Tensor]:
    batch = {"pixel_values": torch.stack([e["pixel_values"] for e in examples])}
    if "labels" in examples[0]:
        batch["labels"] = torch.stack([torch.as_tensor(e["labels"]) for e in examples])
    return batch


class MixupCutmix:
    """Batch-level Mixup / CutMix with label smoothing folded into soft targets (DeiT's recipe, as timm's Mixup).

    Called on a collated batch; each batch is mixed with its reverse. When both alphas are > 0, a batch uses CutMix
    with probability `switch_prob`. Labels become soft targets of shape (batch, num_labels), for
    `soft_target_cross_entropy`. The random draws come from torch's global generator, which Trainer seeds
    (`--seed`) and saves in its checkpoints, so a resumed run mixes exactly as an uninterrupted one.
    """

    def __init__(
        self,
        num_labels: int,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        label_smoothing: float = 0.1,
        switch_prob: float = 0.5,
    ):
        if mixup_alpha < 0 or cutmix_alpha < 0 or (mixup_alpha == 0 and cutmix_alpha == 0):
            raise ValueError(
                f"`mixup_alpha` ({mixup_alpha}) and `cutmix_alpha` ({cutmix_alpha}) must be >= 0, one of them > 0."
            )
        self.num_labels = num_labels
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha
        self.label_smoothing, self.switch_prob = label_smoothing, switch_prob

    @staticmethod
    def _uniform() -> float:
        return float(torch.rand(()))

    @staticmethod
    def _beta(alpha: float) -> float:
        return float(torch.distributions.Beta(alpha, alpha).sample())

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        pixels, labels = batch["pixel_values"], batch["labels"]
        off = self.label_smoothing / self.num_labels
        targets = torch.full((labels.shape[0], self.num_labels), off, device=labels.device)
        targets.scatter_(1, labels.view(-1, 1), 1.0 - self.label_smoothing + off)
        use_cutmix = self.cutmix_alpha > 0 and (self.mixup_alpha == 0 or self._uniform() < self.switch_prob)
        alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
        lam = self._beta(alpha)
        flipped = pixels.flip(0)
        if use_cutmix:
            height, width = pixels.shape[-2:]
            cut_h, cut_w = int(height * np.sqrt(1 - lam)), int(width * np.sqrt(1 - lam))
            cy, cx = int(self._uniform() * height), int(self._uniform() * width)
            y0, y1 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
            x0, x1 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
            pixels = pixels.clone()
            pixels[..., y0:y1, x0:x1] = flipped[..., y0:y1, x0:x1]
            lam = 1 - (y1 - y0) * (x1 - x0) / (height * width)  # the area actually kept
        else:
            pixels = lam * pixels + (1 - lam) * flipped
        return {**batch, "pixel_values": pixels, "labels": lam * targets + (1 - lam) * targets.flip(0)}


class MixupTrainer(Trainer):
    """`Trainer` that mixes training batches (Mixup/CutMix) in the training step, as timm does; evaluation batches
    are left alone. Pair it with `compute_loss_func=soft_target_cross_entropy`."""

    def __init__(self, *args, mixup: MixupCutmix, **kwargs):
        super().__init__(*args, **kwargs)
        self.mixup = mixup

    def training_step(self, model, inputs, num_items_in_batch=None):
        return super().training_step(model, self.mixup(inputs), num_items_in_batch)


def soft_target_cross_entropy(outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """`Trainer(compute_loss_func=...)`: cross-entropy against soft targets (Mixup/CutMix), or class indices.

    Trainer passes `num_items_in_batch`, the number of samples in the whole accumulated (and, under DDP, global)
    batch, and then neither divides a `compute_loss_func` loss by the accumulation steps nor leaves DDP's averaging
    alone; so the loss is the sum over this micro-batch divided by that number, not the micro-batch mean.
    """
    logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
    if labels.dtype.is_floating_point and labels.shape == logits.shape:
        per_sample = torch.sum(-labels * torch.log_softmax(logits.float(), dim=-1), dim=-1)
    else:
        per_sample = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    if num_items_in_batch is None:
        return per_sample.mean()
    return per_sample.sum() / num_items_in_batch


def accuracy_metrics(eval_pred) -> dict[str, float]:
    """`compute_metrics` for classification: top-1 (and top-5 with more than 5 classes).

    Uses `evaluate.load("accuracy")` where the Hub is reachable, and the same formula computed directly offline.
    """
    logits, labels = eval_pred.predictions, eval_pred.label_ids
    logits = logits[0] if isinstance(logits, tuple) else logits
    predictions = logits.argmax(-1)
    metrics = {"accuracy": _accuracy(predictions, labels)}
    if logits.shape[-1] > 5:
        top5 = np.argsort(-logits, axis=-1)[:, :5]
        metrics["top5_accuracy"] = float((top5 == labels[:, None]).any(-1).mean())
    return metrics


def _accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    metric = _hub_accuracy_metric()
    if metric is not None:
        return float(metric.compute(predictions=predictions, references=labels)["accuracy"])
    return float((predictions == labels).mean())


@functools.cache
def _hub_accuracy_metric():
    """`evaluate`'s accuracy script, fetched once from the Hub; None offline (then the direct formula is used)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return None
    try:
        import evaluate

        return evaluate.load("accuracy")
    except Exception:  # the Hub is unreachable
        return None


@torch.no_grad()
def accuracy(model, pixel_values: torch.Tensor, labels: torch.Tensor, batch_size: int = 250) -> float:
    """Top-1 accuracy of `model` on preprocessed images, in eval mode (the caller restores training mode)."""
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for chunk, target in zip(pixel_values.split(batch_size), labels.split(batch_size)):
        correct += (model(pixel_values=chunk.to(device)).logits.argmax(-1).cpu() == target).sum().item()
    return correct / len(labels)


def corruption_accuracy(model, processor, images: list[Image.Image], labels: torch.Tensor, corruptions, severities,
                        seed: int = 0) -> dict[str, dict[str, float]]:
    """{severity: {corruption: accuracy}} on `images` corrupted by `hf_neutreno.corruptions` (image i drawn with
    seed (seed, i), so every model sees the same pixels); severity 0 is the clean accuracy of the same images."""
    from .corruptions import corrupt

    def pixels(batch):
        return processor(batch, return_tensors="pt")["pixel_values"]

    results = {}
    for severity in severities:
        names = corruptions if severity else ["none"]
        results[str(severity)] = {
            name: accuracy(model, pixels(images if not severity else [
                corrupt(image, name, severity, seed=(seed, i)) for i, image in enumerate(images)]), labels)
            for name in names
        }
    return results


def check_distributed_launch(args) -> None:
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
