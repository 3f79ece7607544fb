"""The CIFAR-10 units' training and scoring: the poster's ViT-Ti set-up (patch 4, 32 px) with this package's recipe for
every variant, test accuracy after every epoch, per-layer over-smoothing and dominating eigenvalues, and the
corruptions."""

import functools
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model
from transformers import Trainer, TrainingArguments, ViTImageProcessorPil

from hf_neutreno import EigenViTConfig, NeuTRENOViTConfig
from hf_neutreno.data.corruptions import CORRUPTIONS, SEVERITIES, corruption_accuracy
from hf_neutreno.data.image_transforms import collate_images, image_transform
from hf_neutreno.data.loading import load_image_dataset, subset
from hf_neutreno.data.scores import accuracy
from hf_neutreno.diagnostics import measure_oversmoothing, spectral_dominance
from hf_neutreno.engine.model_factories import image_classifier
from hf_neutreno.engine.variants import VARIANTS, build_variant
from hf_neutreno.examples import recipes
from hf_neutreno.runtime import has_accelerator
from hf_neutreno.value_path import learned_coefficients

from .reproduce_budget import Budget
from .reproduce_training import Context, CurvePoints, dataset_source, precision, train_resumably

VIT_LAMBDA = NeuTRENOViTConfig().neutreno_lambda  # 0.6: NeuTRENO DeiT (official code)
CORRUPTION_SEED = 0  # one corrupted copy of the test images, shared by every model
VALIDATION_IMAGES = 5000  # held out of CIFAR-10's 50,000 training images (split seed 0) for the λ sweep
VALIDATION_SPLIT_SEED = 0
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size")


@functools.cache
def cifar10(data: str | None):
    return load_image_dataset(*dataset_source(data, "cifar10"))


@functools.cache
def processor():
    return ViTImageProcessorPil(size={"height": 32, "width": 32})  # mean = std = 0.5, as run_eigen_vit.py


@functools.cache
def test_images(data: str | None, count: int | None) -> tuple[list, torch.Tensor, torch.Tensor]:
    """The fixed test subset (the same for every seed and variant): PIL images, pixel values, labels."""
    test = subset(cifar10(data)["test"], count, seed=0)
    images = [image.convert("RGB") for image in test["img"]]
    return images, processor()(images, return_tensors="pt")["pixel_values"], torch.tensor(test["label"])


@functools.cache
def validation_split(data: str | None, count: int | None) -> tuple:
    """The λ sweep's split of CIFAR-10's training images: (training rows, held-out pixel values, held-out labels),
    the held-out images cut to the first `count` (the budget's `test_samples`; None: all 5,000)."""
    split = cifar10(data)["train"].train_test_split(test_size=VALIDATION_IMAGES, seed=VALIDATION_SPLIT_SEED)
    held_out = split["test"].select(range(min(count or VALIDATION_IMAGES, VALIDATION_IMAGES)))
    images = [image.convert("RGB") for image in held_out["img"]]
    return split["train"], processor()(images, return_tensors="pt")["pixel_values"], torch.tensor(held_out["label"])


def budget_vit_shape(budget: Budget) -> dict:
    """The ViTs' shape: the poster's ViT-Ti with the budget's overrides."""
    preset = EigenViTConfig.from_preset("vit-tiny")
    shape = {
        k: getattr(preset, k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
    }
    if budget.vit_layers:
        shape["num_hidden_layers"] = budget.vit_layers
    if budget.vit_hidden_size:
        shape.update(hidden_size=budget.vit_hidden_size, intermediate_size=4 * budget.vit_hidden_size)
    if budget.vit_heads:
        shape["num_attention_heads"] = budget.vit_heads
    return shape


def vit_builder(context: Context, neutreno_lambda: float = VIT_LAMBDA, kernel: str | None = None, coefficients=None):
    """`build(variant)` for `run_paired`: a registry variant in the poster's ViT-Ti shape with the budget's
    overrides; a value path (`coefficients`: its coefficient by method) goes on the softmax ViT."""
    shape = {"drop_path_rate": recipes.POSTER_CIFAR_DROP_PATH, **budget_vit_shape(context.budget)}
    if context.budget.attn_implementation:
        shape["attn_implementation"] = context.budget.attn_implementation
    if kernel:
        shape["attention_kernel"] = kernel
    labels = cifar10(context.data)["train"].features["label"].names

    def build(name: str):
        method = VARIANTS[name].method
        value_path = method is not None and name != "neutreno"  # NeuTRENO at a fixed λ is the preset's own
        model = image_classifier(
            "softmax" if value_path else name, "vit-tiny", labels, neutreno_lambda=neutreno_lambda, **shape
        )
        return build_variant(model, name, coefficients[method]) if value_path else model

    return build


class EpochAccuracy(CurvePoints):
    """A curve point {epoch, step, accuracy} on the fixed test images at the end of every epoch."""

    def __init__(self, pixel_values: torch.Tensor, labels: torch.Tensor):
        super().__init__()
        self.pixel_values, self.labels = pixel_values, labels

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        point = {"epoch": round(state.epoch, 4), "step": state.global_step}
        self.add(state, point | {"accuracy": accuracy(model, self.pixel_values, self.labels)})
        model.train()


def analyse(model, pixel_values: torch.Tensor, budget: Budget) -> dict:
    """Per-layer over-smoothing (hidden state 0 = embeddings) and the dominating-eigenvalue shares (softmax attention
    only: kernel attention forms no attention matrix)."""
    batches = [{"pixel_values": chunk} for chunk in pixel_values[: budget.oversmoothing_samples].split(250)]
    smoothing = measure_oversmoothing(model, batches, metrics=["cosine_similarity", "hfc_lfc_ratio"], progress=False)
    # The eigen-analysis reads softmax attention maps and W_V W_O; kernel attention has no map, and a value path
    # changes what the values are, so neither fits it.
    if getattr(model.config, "attention_kernel", "softmax") != "softmax" or getattr(model.config, "value_path", None):
        return {"oversmoothing": smoothing.to_dict()}
    device = next(model.parameters()).device
    spectral = spectral_dominance(model.cpu(), pixel_values[: budget.spectral_samples])
    model.to(device)
    return {"oversmoothing": smoothing.to_dict(), "spectral": spectral.to_dict()["overall"]}


def training_data(context: Context, seed: int, fraction: float, validation: bool) -> tuple:
    """(training rows, scored images or None, scored pixel values, labels): the seed's training subset (the same
    for every variant; a fraction keeps a nested, seeded part of it) and the test images, or with `validation` the
    training images less the λ sweep's held-out split, scored on that split (the test images are not touched)."""
    budget, data = context.budget, context.data
    if validation:
        train, pixel_values, targets = validation_split(data, budget.test_samples)
        images = None
    else:
        train = cifar10(data)["train"]
        images, pixel_values, targets = test_images(data, budget.test_samples)
    train = subset(train, budget.train_samples, seed=seed)
    return subset(train, fraction if fraction < 1 else None, seed=seed), images, pixel_values, targets


def trainer(model, context: Context, seed: int, train, callback, epochs: float | None) -> Trainer:
    """The package's CIFAR recipe (recipes.POSTER_CIFAR_TRAINING: AdamW lr 1e-3, wd 0.05, 5 % warm-up then cosine, label
    smoothing 0.1, drop path 0.1, random crop + flip); only epochs and batch size from the budget. A checkpoint after
    every epoch."""
    budget = context.budget
    recipe = {
        **recipes.POSTER_CIFAR_TRAINING,
        "num_train_epochs": budget.epochs if epochs is None else epochs,
        "per_device_train_batch_size": budget.batch_size,
    }
    args = TrainingArguments(
        output_dir=context.work_dir,
        **recipe,
        seed=seed,
        **precision(budget),
        dataloader_pin_memory=has_accelerator(),  # pinning helps only an accelerator, and warns without one
        save_strategy="epoch",
        save_total_limit=1,
        logging_strategy="epoch",
        report_to=[],
        remove_unused_columns=False,
        disable_tqdm=True,
        dataloader_num_workers=budget.dataloader_workers,
    )
    transform = image_transform(processor(), "img", "label", augment=True, crop_padding=recipes.CIFAR_CROP_PADDING)
    train = train.with_transform(transform)
    return Trainer(model=model, args=args, train_dataset=train, data_collator=collate_images, callbacks=[callback])


def run_cifar(
    model,
    context: Context,
    seed: int,
    *,
    fraction: float = 1.0,
    validation: bool = False,
    start_from: Path | None = None,
    epochs: float | None = None,
    keep: Path | None = None,
    robustness: bool = False,
) -> dict:
    """`model` (built by `vit_builder`) trained with the package's CIFAR recipe and scored. `validation`: trained
    and scored on the λ sweep's split; `start_from` loads a trained model's weights (every one) and `epochs` sets the
    length; `keep` saves the trained model with its image processor; `robustness` scores the corruptions."""
    train, images, pixel_values, targets = training_data(context, seed, fraction, validation)
    if start_from is not None:
        load_model(model, Path(start_from) / "model.safetensors")  # strict: every weight comes from the parent
    config = model.config
    result = {
        "train_images": len(train),
        "parameters": model.num_parameters(),
        "scored_on": "validation" if validation else "test",
        "neutreno_lambda": config.neutreno_lambda,
        "attention_kernel": config.attention_kernel,
        "shape": {k: getattr(config, k) for k in (*SHAPE_FIELDS, "patch_size")},
    }
    if start_from is not None:
        result["start_from"] = Path(start_from).name
    if fraction == 1.0 and not validation:
        result["init"] = analyse(model, pixel_values, context.budget)
    # The learning curve (models on all the data): test accuracy after every epoch; the last point is the result.
    callback = EpochAccuracy(pixel_values, targets) if fraction == 1.0 else CurvePoints()
    run = trainer(model, context, seed, train, callback, epochs)
    trained, loss, curve, result["seconds_before_resume"] = train_resumably(run, context.work_dir)
    result.update(steps=trained.global_step, train_loss=loss, train_seconds=trained.metrics["train_runtime"])
    if curve and curve[-1]["step"] == trained.global_step:
        result["accuracy"], result["curve"] = curve[-1]["accuracy"], curve
    else:
        result["accuracy"] = accuracy(model, pixel_values, targets)
    if fraction == 1.0:
        result["trained"] = analyse(model, pixel_values, context.budget)
        if robustness:
            n = context.budget.corruption_samples
            result["corruptions"] = corruption_accuracy(
                model, processor(), images[:n], targets[:n], CORRUPTIONS, (0, *SEVERITIES), seed=CORRUPTION_SEED
            )
    if getattr(config, "value_path", None):
        result.update(value_path=config.value_path, learned_coefficients=learned_coefficients(model))
    if keep is not None:
        result["model_dir"] = save(model, keep)
    return result


def save(model, keep: Path) -> str:
    """The trained model with its image processor in `keep`, complete or absent (written beside, then renamed); the
    folder relative to the run folder."""
    partial = Path(keep).with_name(Path(keep).name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    processor().save_pretrained(partial)
    shutil.rmtree(keep, ignore_errors=True)
    partial.rename(keep)
    return str(Path(keep).relative_to(Path(keep).parents[1]))
