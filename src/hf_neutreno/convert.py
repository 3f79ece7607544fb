"""Turn pretrained native `transformers` checkpoints into NeuTRENO models (the paper's "NeuTRENO adaptation"), and
NeuTRENO ViTs that compute a plain ViT back into native ones.

Every weight is carried over; with ``neutreno_lambda=0`` the converted model computes exactly what the source did,
so fine-tuning starts from the pretrained function and only the NeuTRENO term is new.
"""

import os

import torch
from transformers import PreTrainedModel
from transformers.utils import logging

from .checkpoints import load_checkpoint
from .models.configuration_neutreno_vit import NeuTRENOViTConfig
from .models.modeling_neutreno_vit import NeuTRENOViTForImageClassification, NeuTRENOViTForSemanticSegmentation
from .models.neutreno_common import TRANSFORMER_SHAPE_FIELDS

logger = logging.get_logger(__name__)

# --- ViT / DeiT -> NeuTRENO ViT ---------------------------------------------------------------------------------

# transformers' ViT and DeiT configs -> NeuTRENOViTConfig fields of the same meaning
_VIT_FIELDS = (
    *TRANSFORMER_SHAPE_FIELDS,
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
    if not isinstance(model_or_path, (str, os.PathLike)):
        raise TypeError(f"Expected a transformers model or a checkpoint path, got {type(model_or_path).__name__}.")
    return load_checkpoint(model_or_path, auto_class, what="checkpoint")


# vit_to_neutreno's targets
TASKS = ("image-classification", "semantic-segmentation")
# Backbones a Segmenter can start from (the encoder of any of them, as `model.base_model`).
_SEGMENTER_BACKBONES = ("ViTModel", "DeiTModel", "NeuTRENOViTModel")
# Fields of a NeuTRENO source that describe its head or labels, not its encoder: a Segmenter sets its own.
_HEAD_FIELDS = ("id2label", "label2id", "problem_type", "num_labels")


def vit_to_neutreno(
    model_or_path, neutreno_lambda: float | None = None, task: str = "image-classification", **config_overrides
) -> NeuTRENOViTForImageClassification | NeuTRENOViTForSemanticSegmentation:
    """Convert a `ViTForImageClassification` or `DeiTForImageClassification` (in memory, a folder or a Hub id).

    `config_overrides` set any other `NeuTRENOViTConfig` field (e.g. `neutreno_layers`, `drop_path_rate`).
    DeiT's distillation token is kept (`use_distillation_token=True`) so the logits are unchanged at λ = 0;
    `DeiTForImageClassificationWithTeacher` (two heads) is not supported.

    `task="semantic-segmentation"` builds a `NeuTRENOViTForSemanticSegmentation` (Segmenter) whose encoder is the
    source's and whose decoder is freshly initialised: see `vit_to_segmenter`.
    """
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {list(TASKS)}, got {task!r}.")
    if task == "semantic-segmentation":
        return vit_to_segmenter(model_or_path, neutreno_lambda, **config_overrides)
    from transformers import AutoModelForImageClassification

    source = _load_source(model_or_path, AutoModelForImageClassification)
    kind = type(source).__name__
    if kind not in ("ViTForImageClassification", "DeiTForImageClassification"):
        raise ValueError(
            f"vit_to_neutreno converts ViTForImageClassification or DeiTForImageClassification, got {kind}."
        )
    src_config = source.config
    fields = {name: getattr(src_config, name) for name in _VIT_FIELDS if getattr(src_config, name, None) is not None}
    fields.update(use_distillation_token=kind.startswith("DeiT"), pooling="cls")
    if neutreno_lambda is not None:  # else the NeuTRENO ViT's default
        fields["neutreno_lambda"] = neutreno_lambda
    fields.update(config_overrides)
    config = NeuTRENOViTConfig(**fields)
    config._attn_implementation = src_config._attn_implementation
    state = source.state_dict()
    if kind.startswith("DeiT"):
        state = {("vit." + k[len("deit.") :] if k.startswith("deit.") else k): v for k, v in state.items()}
    target = NeuTRENOViTForImageClassification(config)
    _load_weights(target, state, f"The {kind} weights", f"the NeuTRENO ViT built with {config_overrides}")
    dtype = next(source.parameters()).dtype
    return target.to(dtype=dtype).train(source.training)


def vit_to_segmenter(
    model_or_path, neutreno_lambda: float | None = None, **config_overrides
) -> NeuTRENOViTForSemanticSegmentation:
    """A NeuTRENO Segmenter whose encoder starts from a pretrained backbone, as Segmenter starts from ImageNet weights.

    The source (in memory, a folder or a Hub id) is a native `ViTModel` / `DeiTModel` or any model built on one
    (`ViTForImageClassification`, `DeiTForImageClassification[WithTeacher]`), or a NeuTRENO ViT (`NeuTRENOViTModel`,
    `NeuTRENOViTForImageClassification`, whose other encoder fields are kept). Every encoder weight is carried over;
    heads and poolers are dropped; the decoder is initialised afresh (Segmenter's initialisation, from torch's global
    generator). `config_overrides` set the segmentation fields (`num_labels` or `id2label`/`label2id`, `decoder_*`,
    `semantic_loss_ignore_index`) and any encoder field that does not change a weight's shape, except `image_size`:
    a new image size resamples the patch grid of the position embeddings bicubically, as the native ViT's
    `interpolate_pos_encoding` does, so the encoder computes at the new size what the source computes there with
    interpolation. `neutreno_lambda` is the encoder's λ (0 keeps the source's function exactly); the decoder's
    defaults to it (`decoder_neutreno_lambda`).
    """
    from transformers import AutoModel

    source = _load_source(model_or_path, AutoModel)
    backbone = source.base_model
    kind = type(backbone).__name__
    if kind not in _SEGMENTER_BACKBONES:
        raise ValueError(
            f"vit_to_neutreno(task='semantic-segmentation') takes a ViT, DeiT or NeuTRENO ViT backbone or classifier; "
            f"{type(source).__name__} has the backbone {kind}."
        )
    config = _segmenter_config(backbone, neutreno_lambda, config_overrides)
    target = NeuTRENOViTForSemanticSegmentation(config)
    what = f"the Segmenter's encoder built with {config_overrides}"
    _load_weights(target, _encoder_state(backbone, config), f"The {kind} weights", what, ignore="decoder.")
    weight = next(source.parameters())
    return target.to(device=weight.device, dtype=weight.dtype).train(source.training)


def _segmenter_config(backbone, neutreno_lambda: float | None, config_overrides: dict) -> NeuTRENOViTConfig:
    """The Segmenter's config: the backbone's encoder fields (a NeuTRENO ViT's all, a native one's that the NeuTRENO
    ViT shares), then `neutreno_lambda` and the overrides; the patch size and prefix tokens must stay the source's."""
    src_config, kind = backbone.config, type(backbone).__name__
    if kind == "NeuTRENOViTModel":
        fields = {
            k: v
            for k, v in src_config.to_diff_dict().items()
            if k in NeuTRENOViTConfig.__annotations__ and not k.startswith("decoder_") and k not in _HEAD_FIELDS
        }
    else:
        fields = {
            name: getattr(src_config, name)
            for name in _VIT_FIELDS
            if name not in _HEAD_FIELDS and getattr(src_config, name, None) is not None
        }
        fields.update(use_distillation_token=kind == "DeiTModel", pooling="cls")
    if neutreno_lambda is not None:  # else the NeuTRENO ViT's default
        fields["neutreno_lambda"] = neutreno_lambda
    fields.update(config_overrides)
    config = NeuTRENOViTConfig(**fields)
    config._attn_implementation = src_config._attn_implementation
    if config.patch_size_2d != _pair(src_config.patch_size) or config.num_prefix_tokens != _num_prefix(backbone):
        raise ValueError(
            f"`patch_size` {list(config.patch_size_2d)} and `use_distillation_token` must be the source's "
            f"({list(_pair(src_config.patch_size))}, {_num_prefix(backbone) == 2}): they fix the weights' shapes."
        )
    return config


def _encoder_state(backbone, config: NeuTRENOViTConfig) -> dict[str, torch.Tensor]:
    """The backbone's weights under the Segmenter's names, without the pooler, the position embeddings resampled to
    the new patch grid where the image size changed."""
    state = {"vit." + k: v for k, v in backbone.state_dict().items() if not k.startswith("pooler.")}
    position = "vit.embeddings.position_embeddings"
    source_grid = _grid(backbone.config.image_size, backbone.config.patch_size)
    target_grid = _grid(config.image_size, config.patch_size)
    if source_grid != target_grid:
        state[position] = resample_position_embeddings(
            state[position], source_grid, target_grid, config.num_prefix_tokens
        )
    return state


def _load_weights(target, state: dict, weights: str, what: str, ignore: str | None = None) -> None:
    """`state` into `target`, or `ValueError` naming what does not fit; `ignore`: a prefix of `target`'s weights
    that `state` does not hold (a new decoder)."""
    try:
        missing, unexpected = target.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise ValueError(f"{weights} do not fit {what}: {err}") from err
    missing = [name for name in missing if not (ignore and name.startswith(ignore))]
    if missing or unexpected:
        raise ValueError(
            f"{weights} do not fit {what}: missing {missing}, unexpected {unexpected}. Overrides may not change "
            "shapes or drop projections (e.g. `symmetric_attention`)."
        )


def resample_position_embeddings(
    position_embeddings: torch.Tensor, source_grid: tuple[int, int], target_grid: tuple[int, int], num_prefix: int
) -> torch.Tensor:
    """(1, prefix + rows·cols, dim) position embeddings resampled to another patch grid: the prefix tokens' kept,
    the patch grid's bicubic (align_corners=False), as `interpolate_pos_encoding` of the native ViT and this model."""
    prefix, grid = position_embeddings[:, :num_prefix], position_embeddings[:, num_prefix:]
    dim = grid.shape[-1]
    grid = grid.reshape(1, *source_grid, dim).permute(0, 3, 1, 2)
    grid = torch.nn.functional.interpolate(grid.float(), size=target_grid, mode="bicubic", align_corners=False)
    grid = grid.to(position_embeddings.dtype).permute(0, 2, 3, 1).reshape(1, -1, dim)
    return torch.cat((prefix, grid), dim=1)


def _pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def _grid(image_size, patch_size) -> tuple[int, int]:
    (height, width), (patch_h, patch_w) = _pair(image_size), _pair(patch_size)
    return height // patch_h, width // patch_w


def _num_prefix(backbone) -> int:
    """CLS (and DeiT's distillation token): the position embeddings beyond the patch grid."""
    grid = _grid(backbone.config.image_size, backbone.config.patch_size)
    return backbone.embeddings.position_embeddings.shape[1] - grid[0] * grid[1]


# --- NeuTRENO ViT -> ViT / DeiT ---------------------------------------------------------------------------------

# NeuTRENO ViT options the native ViT does not compute: (field, the value it needs, what the option does).
_NATIVE_VIT_NEEDS = (
    ("symmetric_attention", False, "keys replace queries, W_Q = W_K"),
    ("featscale", False, "FeatScale after each attention output"),
    ("attention_kernel", "softmax", "kernel attention"),
    ("pooling", "cls", "the image representation is the mean of the patch tokens"),
)


def _check_native_computes(model) -> None:
    """`ValueError` unless the native ViT computes what this NeuTRENO ViT computes (stochastic depth, which acts only
    in training, is dropped with a warning)."""
    config = model.config
    with_term = [i for i, layer in enumerate(model.base_model.layers) if layer.attention.neutreno_lambda != 0]
    if with_term:
        raise ValueError(
            f"`neutreno_lambda={config.neutreno_lambda}` adds the NeuTRENO term in layers {with_term}, which the "
            "native ViT does not compute; only `neutreno_lambda=0` or `neutreno_layers=[]` converts."
        )
    for field, needed, meaning in _NATIVE_VIT_NEEDS:
        if getattr(config, field) != needed:
            raise ValueError(
                f"This NeuTRENO ViT has `{field}={getattr(config, field)!r}` ({meaning}), which the native ViT does "
                f"not compute; only `{field}={needed!r}` converts."
            )
    if config.drop_path_rate > 0:
        logger.warning(
            f"`drop_path_rate={config.drop_path_rate}` is dropped: the native ViT has no stochastic depth. The "
            "converted model computes the same function in evaluation; fine-tuning it trains without stochastic depth."
        )


def neutreno_to_vit(model) -> PreTrainedModel:
    """A NeuTRENO ViT that computes a plain ViT, as the native `transformers` model: no remote code needed to load it.

    `NeuTRENOViTForImageClassification` becomes `ViTForImageClassification` and `NeuTRENOViTModel` becomes `ViTModel`
    (`DeiTForImageClassification` / `DeiTModel` with `use_distillation_token`), every weight carried over, with the
    same outputs. The backbone's pooler is the identity (`pooler_act="linear"`), so `pooler_output` stays the CLS
    token. An EigenViT is exported with `to_neutreno_vit()` first. Only models without the NeuTRENO term convert
    (λ = 0, or no layer in `neutreno_layers`); symmetric attention, FeatScale, the linear kernel and mean pooling
    raise `ValueError`. Stochastic depth (`drop_path_rate`) acts only in training and the native ViT has none: it is
    dropped, with a warning.
    """
    from transformers import (
        DeiTConfig,
        DeiTForImageClassification,
        DeiTModel,
        ViTConfig,
        ViTForImageClassification,
        ViTModel,
    )

    if hasattr(model, "to_neutreno_vit"):  # an EigenViT: its eigen layers become plain v_proj / o_proj
        model = model.to_neutreno_vit()
    kind = type(model).__name__
    if kind not in ("NeuTRENOViTForImageClassification", "NeuTRENOViTModel"):
        raise ValueError(
            f"neutreno_to_vit converts NeuTRENOViTForImageClassification, NeuTRENOViTModel or an EigenViT, got {kind}."
        )
    config = model.config
    _check_native_computes(model)

    if config.use_distillation_token:
        config_class, backbone_class, classifier_class = DeiTConfig, DeiTModel, DeiTForImageClassification
    else:
        config_class, backbone_class, classifier_class = ViTConfig, ViTModel, ViTForImageClassification
    backbone = kind == "NeuTRENOViTModel"
    fields = {name: getattr(config, name) for name in _VIT_FIELDS}
    if backbone:  # an identity pooler: `pooler_output` stays the CLS token
        fields.update(pooler_output_size=config.hidden_size, pooler_act="linear")
    native_config = config_class(**fields)
    native_config._attn_implementation = config._attn_implementation
    target = (backbone_class if backbone else classifier_class)(native_config)
    state = model.state_dict()
    if backbone:
        state["pooler.dense.weight"] = torch.eye(config.hidden_size)
        state["pooler.dense.bias"] = torch.zeros(config.hidden_size)
    else:  # `vit.` -> `deit.` for DeiT
        state = {target.base_model_prefix + k[len("vit") :] if k.startswith("vit.") else k: v for k, v in state.items()}
    target.load_state_dict(state, strict=True)
    weight = next(model.parameters())
    return target.to(device=weight.device, dtype=weight.dtype).train(model.training)


# --- GPT-2 -> NeuTRENO GPT -------------------------------------------------------------------------------------

# GPT-2 options NeuTRENO GPT cannot represent, with the value it needs and what the option does.
_GPT2_UNSUPPORTED = {
    "scale_attn_weights": (True, "attention scores not divided by √head_dim"),
    "scale_attn_by_inverse_layer_idx": (False, "attention scores divided by (layer index + 1)"),
    "reorder_and_upcast_attn": (False, "a reordered fp32 attention (Mistral's recipe)"),
    "add_cross_attention": (False, "cross-attention blocks (an encoder-decoder)"),
}


def _gpt2_source(model_or_path):
    from transformers import AutoModelForCausalLM

    source = _load_source(model_or_path, AutoModelForCausalLM)
    if type(source).__name__ != "GPT2LMHeadModel":
        raise ValueError(f"gpt2_to_neutreno converts a GPT2LMHeadModel, got {type(source).__name__}.")
    for field, (needed, meaning) in _GPT2_UNSUPPORTED.items():
        if getattr(source.config, field, needed) != needed:
            raise ValueError(
                f"This GPT-2 has `{field}={getattr(source.config, field)}` ({meaning}), which NeuTRENO GPT does "
                f"not represent exactly; only `{field}={needed}` converts."
            )
    return source


def gpt2_config_to_neutreno(gpt2_config, neutreno_lambda: float | None = None, **config_overrides):
    """The `NeuTRENOGPTConfig` of the same architecture as a `GPT2Config` (pre-LN, learned positions, tied head)."""
    from .models.configuration_neutreno_gpt import NeuTRENOGPTConfig

    c = gpt2_config
    fields = dict(
        vocab_size=c.vocab_size,
        hidden_size=c.n_embd,
        num_hidden_layers=c.n_layer,
        num_attention_heads=c.n_head,
        intermediate_size=c.n_inner if c.n_inner is not None else 4 * c.n_embd,
        hidden_act=c.activation_function,
        max_position_embeddings=c.n_positions,
        position_embedding_type="learned",
        norm_position="pre",
        layer_norm_eps=c.layer_norm_epsilon,
        attention_bias=True,
        scale_embeddings=False,
        lm_head_bias=False,
        adaptive_softmax_cutoffs=None,
        embedding_dropout=c.embd_pdrop,
        attention_dropout=c.attn_pdrop,
        hidden_dropout=c.resid_pdrop,  # GPT-2 drops both residual branches with resid_pdrop, nothing else
        activation_dropout=0.0,
        output_dropout=0.0,
        initializer_range=c.initializer_range,
        tie_word_embeddings=getattr(c, "tie_word_embeddings", True),
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
    )
    if neutreno_lambda is not None:  # else the NeuTRENO GPT's default
        fields["neutreno_lambda"] = neutreno_lambda
    fields.update(config_overrides)
    return NeuTRENOGPTConfig(**fields)


def gpt2_state_dict_to_neutreno(state_dict: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Rename GPT-2 weights to NeuTRENO GPT's: every Conv1D (weight stored as (in, out)) becomes an `nn.Linear` with
    the transposed weight; `c_attn`, whose output columns are q, then k, then v, becomes the fused `qkv_proj` with
    the same order. Raises on a GPT-2 weight it does not use."""
    source = {k.removeprefix("transformer."): v for k, v in state_dict.items()}
    target, used = {}, set()

    def take(name: str) -> torch.Tensor:
        used.add(name)
        return source[name]

    target["model.embed_tokens.weight"] = take("wte.weight")
    target["model.embed_positions.weight"] = take("wpe.weight")
    for i in range(num_layers):
        src, dst = f"h.{i}.", f"model.layers.{i}."
        for gpt2_norm, norm in (("ln_1", "self_attn_layer_norm"), ("ln_2", "mlp_layer_norm")):
            target[f"{dst}{norm}.weight"] = take(f"{src}{gpt2_norm}.weight")
            target[f"{dst}{norm}.bias"] = take(f"{src}{gpt2_norm}.bias")
        conv1d_to_linear = (
            ("attn.c_attn", "self_attn.qkv_proj"),
            ("attn.c_proj", "self_attn.o_proj"),
            ("mlp.c_fc", "mlp.fc1"),
            ("mlp.c_proj", "mlp.fc2"),
        )
        for gpt2_linear, linear in conv1d_to_linear:
            target[f"{dst}{linear}.weight"] = take(f"{src}{gpt2_linear}.weight").t().contiguous()
            target[f"{dst}{linear}.bias"] = take(f"{src}{gpt2_linear}.bias")
    target["model.norm.weight"] = take("ln_f.weight")
    target["model.norm.bias"] = take("ln_f.bias")
    tied = "lm_head.weight" not in source
    target["lm_head.weight"] = target["model.embed_tokens.weight"] if tied else take("lm_head.weight")
    unused = sorted(set(source) - used)
    if unused:
        raise ValueError(f"GPT-2 weights with no NeuTRENO GPT counterpart: {unused[:8]}.")
    return target


def gpt2_to_neutreno(model_or_path, neutreno_lambda: float | None = None, **config_overrides):
    """Convert a `GPT2LMHeadModel` (in memory, a folder or a Hub id) into a `NeuTRENOGPTForCausalLM`.

    The result has GPT-2's architecture (pre-LN, learned positions, `gelu_new`, tied head) and every weight;
    at ``neutreno_lambda=0`` its logits equal GPT-2's. `config_overrides` set other `NeuTRENOGPTConfig` fields that
    do not change the weights (e.g. `neutreno_layers`, the dropouts). GPT-2 variants it cannot represent exactly
    (`scale_attn_by_inverse_layer_idx`, `reorder_and_upcast_attn`, unscaled attention, cross-attention) raise
    `ValueError`. Tokenizers need no conversion: save GPT-2's next to the result.
    """
    from .models.modeling_neutreno_gpt import NeuTRENOGPTForCausalLM

    source = _gpt2_source(model_or_path)
    config = gpt2_config_to_neutreno(source.config, neutreno_lambda, **config_overrides)
    weights = gpt2_state_dict_to_neutreno(source.state_dict(), source.config.n_layer)
    dtype = next(source.parameters()).dtype
    model = NeuTRENOGPTForCausalLM(config).to(dtype)
    model.load_state_dict(weights, strict=True)
    model.generation_config.update(**source.generation_config.to_diff_dict())
    return model.train(source.training)
