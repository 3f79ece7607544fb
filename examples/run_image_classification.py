#!/usr/bin/env python
"""Train or fine-tune a NeuTRENO ViT/DeiT image classifier with `Trainer`.

From scratch (a preset), a NeuTRENO checkpoint, or a native ViT/DeiT checkpoint converted with the paper's
"NeuTRENO adaptation" (`hf_neutreno.convert.vit_to_neutreno`). `--neutreno_lambda 0` trains the softmax baseline.

    # DeiT-tiny on CIFAR-10, NeuTRENO λ = 0.6, with the DeiT recipe's knobs this script has (no RandAugment, below)
    python examples/run_image_classification.py --model-name-or-path deit-tiny --image-size 32 --patch-size 4 \
        --dataset-name uoft-cs/cifar10 --neutreno-lambda 0.6 --drop-path-rate 0.1 \
        --mixup-alpha 0.8 --cutmix-alpha 1.0 --label-smoothing-factor 0.1 --augment --crop-padding 4 \
        --output-dir runs/neutreno-cifar10 --learning-rate 1e-3 --weight-decay 0.05 --warmup-steps 0.05 \
        --lr-scheduler-type cosine --num-train-epochs 100 --per-device-train-batch-size 128 \
        --eval-strategy epoch --save-strategy epoch --bf16   # on a GPU; add --push-to-hub to publish

Of the DeiT recipe (Touvron et al. 2021, facebookresearch/deit) it has AdamW with DeiT's weight decay (none on the
position embeddings, the CLS and distillation tokens, nor on any tensor of at most one dimension:
`hf_neutreno.examples.weight_decay`), warm-up and cosine decay, label smoothing, drop path, Mixup and CutMix (one λ
per batch, as timm's `Mixup` in batch mode). It lacks RandAugment, random erasing, repeated augmentation and DeiT's
random-resized crops: its augmentation is flips and random crops of the padded image (`--augment`,
`--crop-padding`), so a run with the flags above is DeiT's recipe without those.

It trains, then evaluates (`--do-train false` only evaluates the given model). An `--output-dir` that already holds a
run is refused unless `--overwrite-output-dir` is given; `--resume-from-checkpoint` continues an interrupted run
from its last checkpoint there (or from the checkpoint folder it names). A local copy of the dataset (a folder of
Parquet files with the Hub's columns) works as `--dataset-name`. Flags are written with dashes here; the
underscore spellings of `TrainingArguments` work too. Runs unchanged under `accelerate launch` / `torchrun` for
multi-GPU or multi-node training (see examples/accelerate_configs/).
"""

import logging
from dataclasses import dataclass, field

import torch
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    Trainer,
    ViTImageProcessorPil,
    set_seed,
)
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.convert import vit_to_neutreno
from hf_neutreno.data.image_transforms import collate_images, image_transform
from hf_neutreno.data.loading import get_split, image_and_label_columns, label_names, load_image_dataset, subset
from hf_neutreno.data.scores import accuracy_metrics
from hf_neutreno.engine.model_factories import IMAGE_PRESETS, image_classifier
from hf_neutreno.examples import scripts
from hf_neutreno.examples.mixup import MixupCutmix, MixupTrainer, soft_target_cross_entropy
from hf_neutreno.examples.weight_decay import DeiTWeightDecayMixin
from hf_neutreno.hub import HubTrainer, ModelCardMixin

logger = logging.getLogger(__name__)


class DeiTHubTrainer(DeiTWeightDecayMixin, HubTrainer):
    """HubTrainer with DeiT's weight decay: none on the position embeddings, CLS and distillation tokens, nor on any
    tensor of ndim <= 1 (`hf_neutreno.examples.weight_decay`)."""


class MixupHubTrainer(ModelCardMixin, DeiTWeightDecayMixin, MixupTrainer):
    """MixupTrainer with DeiT's weight decay whose `push_to_hub` publishes hf-neutreno's model card."""


BUILT = "a preset or a converted ViT/DeiT"  # where the model flags' defaults apply; a NeuTRENO checkpoint keeps its own


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="deit-tiny",
        metadata={
            "help": f"A preset {IMAGE_PRESETS} to train from scratch, or a NeuTRENO, "
            "ViT or DeiT checkpoint (folder or Hub id) to fine-tune."
        },
    )
    neutreno_lambda: float | None = scripts.neutreno_lambda_field(NeuTRENOViTConfig, built=BUILT)
    neutreno_layers: list[int] | None = scripts.neutreno_layers_field(BUILT)
    image_size: int | None = field(default=None, metadata={"help": "Image size of a model trained from scratch."})
    patch_size: int | None = field(default=None, metadata={"help": "Patch size of a model trained from scratch."})
    drop_path_rate: float | None = field(
        default=None,
        metadata={"help": f"Stochastic depth (DeiT: 0.1). Default: 0 for {BUILT}; a NeuTRENO checkpoint's own."},
    )
    config_overrides: str | None = scripts.config_overrides_field()
    trust_remote_code: bool = scripts.trust_remote_code_field()


@dataclass
class DataArguments:
    dataset_name: str = field(
        default="uoft-cs/cifar10",
        metadata={"help": "Hub dataset name, local Parquet folder with the Hub's columns, or imagefolder tree."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_split: str = field(default="train")
    eval_split: str | None = field(default=None, metadata={"help": "Default: `validation`, else `test`."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Train on a seeded subset."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on a seeded subset."})
    augment: bool = field(default=False, metadata={"help": "Random horizontal flips (and crops, see crop_padding)."})
    crop_padding: int = field(
        default=0, metadata={"help": "Random crops from a zero-padded image (CIFAR: 4); needs --augment."}
    )
    mixup_alpha: float = field(default=0.0, metadata={"help": "Mixup Beta(α, α); DeiT: 0.8. 0 disables."})
    cutmix_alpha: float = field(default=0.0, metadata={"help": "CutMix Beta(α, α); DeiT: 1.0. 0 disables."})


def build_model(args: ModelArguments, labels: list[str]) -> tuple[torch.nn.Module, object]:
    """The model to train and its image processor. λ, the NeuTRENO layers and drop path are set only where given
    (`scripts.given`): a preset or a converted ViT/DeiT then gets the registry's defaults, a NeuTRENO checkpoint
    keeps its own."""
    id2label = dict(enumerate(labels))
    model_flags = scripts.given(
        neutreno_lambda=args.neutreno_lambda, neutreno_layers=args.neutreno_layers, drop_path_rate=args.drop_path_rate
    )
    if args.model_name_or_path in IMAGE_PRESETS:
        overrides = {k: v for k, v in (("image_size", args.image_size), ("patch_size", args.patch_size)) if v}
        overrides.update(scripts.parse_config_overrides(args.config_overrides, NeuTRENOViTConfig))
        model = image_classifier("neutreno", args.model_name_or_path, labels, **{**model_flags, **overrides})
        size = model.config.image_size_2d
        processor = ViTImageProcessorPil(
            size={"height": size[0], "width": size[1]}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
        )
        return model, processor

    if args.config_overrides:
        raise ValueError("`--config_overrides` applies to a preset, not to a checkpoint.")
    for flag, value in (("--image_size", args.image_size), ("--patch_size", args.patch_size)):
        if value:  # a checkpoint's embeddings fix them
            raise ValueError(f"`{flag}` applies to a model trained from scratch (a preset), not to a checkpoint.")
    source_config = AutoConfig.from_pretrained(args.model_name_or_path, trust_remote_code=args.trust_remote_code)
    processor = AutoImageProcessor.from_pretrained(args.model_name_or_path, trust_remote_code=args.trust_remote_code)
    if source_config.model_type in ("vit", "deit"):
        model = vit_to_neutreno(args.model_name_or_path, **model_flags)
    elif source_config.model_type == NeuTRENOViTConfig.model_type:
        model = NeuTRENOViTForImageClassification.from_pretrained(args.model_name_or_path, **model_flags)
    else:
        raise ValueError(
            f"--model_name_or_path {args.model_name_or_path!r} has model_type {source_config.model_type!r}; "
            f"expected a preset {sorted(NeuTRENOViTConfig.presets)} or a vit, deit or neutreno_vit checkpoint."
        )
    if model.config.id2label != id2label:
        model.reset_classifier(len(labels), id2label)
    return model, processor


def check_data_arguments(data_args: DataArguments) -> None:
    """Refuse flags that would do nothing: random crops (`--crop_padding`) are part of the augmentation, so they are
    refused without `--augment` rather than silently left out."""
    if data_args.crop_padding and not data_args.augment:
        raise ValueError(
            f"--crop_padding {data_args.crop_padding} takes effect only with --augment (random crops are part of the "
            "augmentation): add --augment, or drop --crop_padding."
        )


def main(argv: list[str] | None = None) -> tuple[dict, Trainer]:
    parser = scripts.script_parser(ModelArguments, DataArguments)
    parser.set_defaults(do_train=True)  # the script trains unless told `--do-train false`
    model_args, data_args, script_args, training_args = scripts.parse_script_arguments(parser, argv)
    check_data_arguments(data_args)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    training_args.remove_unused_columns = False  # the transform needs the raw image column
    scripts.check_distributed_launch(training_args)
    # Never overwrite an earlier run by accident; --resume-from-checkpoint (no path: the last one) continues one.
    checkpoint, push = scripts.prepare_output(training_args, script_args.overwrite_output_dir)

    train, evaluation, columns, labels, eval_split = load_data(data_args, training_args.seed)
    set_seed(training_args.seed)  # the model's initial weights are part of the run
    model, processor = build_model(model_args, labels)
    logger.info(
        "Model: %s, %.2fM parameters, λ=%s",
        type(model).__name__,
        model.num_parameters() / 1e6,
        model.config.neutreno_lambda,
    )
    train.set_transform(image_transform(processor, *columns, data_args.augment, data_args.crop_padding))
    evaluation.set_transform(image_transform(processor, *columns))
    trainer = build_trainer(model, processor, training_args, data_args, train, evaluation, len(labels))

    metrics, eval_metrics = scripts.train_and_evaluate(trainer, checkpoint)
    if push:
        # Weights, code, image processor and a model card with these results, in one commit.
        trainer.push_to_hub(
            dataset=data_args.dataset_name,
            dataset_config=data_args.dataset_config_name,
            dataset_split=eval_split,
            results=eval_metrics,
            base_model=scripts.hub_base_model(model_args.model_name_or_path, IMAGE_PRESETS),
        )
    return metrics, trainer


def load_data(data_args: DataArguments, seed: int) -> tuple:
    """The (seeded subsets of the) training and evaluation splits, the image and label columns, the label names and
    the evaluation split's name (default: `validation`, else `test`)."""
    dataset = load_image_dataset(data_args.dataset_name, data_args.dataset_config_name)
    columns = image_and_label_columns(dataset)
    eval_split = data_args.eval_split or ("validation" if "validation" in dataset else "test")
    train = subset(get_split(dataset, data_args.train_split), data_args.max_train_samples, seed)
    evaluation = subset(get_split(dataset, eval_split), data_args.max_eval_samples, seed)
    return train, evaluation, columns, label_names(dataset), eval_split


def build_trainer(model, processor, training_args, data_args: DataArguments, train, evaluation, num_labels: int):
    """A `DeiTHubTrainer`, or with Mixup/CutMix a `MixupHubTrainer` whose loss is a soft-target cross-entropy; both
    decay the weights as DeiT does."""
    common = dict(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=collate_images,
        compute_metrics=accuracy_metrics,
        processing_class=processor,
    )
    if data_args.mixup_alpha > 0 or data_args.cutmix_alpha > 0:
        # Label smoothing goes into Mixup's soft targets; the loss is a soft-target cross-entropy.
        mixup = MixupCutmix(
            num_labels, data_args.mixup_alpha, data_args.cutmix_alpha, training_args.label_smoothing_factor
        )
        return MixupHubTrainer(**common, mixup=mixup, compute_loss_func=soft_target_cross_entropy)
    return DeiTHubTrainer(**common)


if __name__ == "__main__":
    scripts.run_script(main)
