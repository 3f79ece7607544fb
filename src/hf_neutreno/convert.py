"""Turn pretrained native `transformers` checkpoints into NeuTRENO models (the paper's "NeuTRENO adaptation").

Every weight is carried over; with ``neutreno_lambda=0`` the converted model computes exactly what the source did,
so fine-tuning starts from the pretrained function and only the NeuTRENO term is new.
"""

import os

import torch
from transformers import PreTrainedModel

from .models.configuration_neutreno_vit import NeuTRENOViTConfig
from .models.modeling_neutreno_vit import NeuTRENOViTForImageClassification

# transformers' ViT and DeiT configs -> NeuTRENOViTConfig fields of the same meaning
_VIT_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
    "layer_norm_eps",
    "image_size",
    "patch_size",
    "num_channels",
    "qkv_bias",
    "id2label",
    "label2id",
    "problem_type",
)


def _load_source(model_or_path, auto_class):
    if isinstance(model_or_path, PreTrainedModel):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return auto_class.from_pretrained(model_or_path)
    raise TypeError(f"Expected a transformers model or a checkpoint path, got {type(model_or_path).__name__}.")


def vit_to_neutreno(
    model_or_path, neutreno_lambda: float = 0.6, **config_overrides
) -> NeuTRENOViTForImageClassification:
    """Convert a `ViTForImageClassification` or `DeiTForImageClassification` (in memory, a folder or a Hub id).

    `config_overrides` set any other `NeuTRENOViTConfig` field (e.g. `neutreno_layers`, `drop_path_rate`).
    DeiT's distillation token is kept (`use_distillation_token=True`) so the logits are unchanged at λ = 0;
    `DeiTForImageClassificationWithTeacher` (two heads) is not supported.
    """
    from transformers import AutoModelForImageClassification

    source = _load_source(model_or_path, AutoModelForImageClassification)
    kind = type(source).__name__
    if kind not in ("ViTForImageClassification", "DeiTForImageClassification"):
        raise ValueError(
            f"vit_to_neutreno converts ViTForImageClassification or DeiTForImageClassification, got {kind}."
        )
    src_config = source.config
    fields = {name: getattr(src_config, name) for name in _VIT_FIELDS if getattr(src_config, name, None) is not None}
    fields.update(
        neutreno_lambda=neutreno_lambda,
        use_distillation_token=kind.startswith("DeiT"),
        pooling="cls",
    )
    fields.update(config_overrides)
    config = NeuTRENOViTConfig(**fields)
    config._attn_implementation = src_config._attn_implementation
    state = source.state_dict()
    if kind.startswith("DeiT"):
        state = {("vit." + k[len("deit.") :] if k.startswith("deit.") else k): v for k, v in state.items()}
    target = NeuTRENOViTForImageClassification(config)
    try:
        missing, unexpected = target.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise ValueError(f"The {kind} weights do not fit the NeuTRENO ViT built with {config_overrides}: {err}") from err
    if missing or unexpected:
        raise ValueError(
            f"The {kind} weights do not fit the NeuTRENO ViT built from its config and {config_overrides}: "
            f"missing {missing}, unexpected {unexpected}. Overrides may not change shapes or drop projections "
            "(e.g. `symmetric_attention`)."
        )
    dtype = next(source.parameters()).dtype
    return target.to(dtype=dtype).train(source.training)
