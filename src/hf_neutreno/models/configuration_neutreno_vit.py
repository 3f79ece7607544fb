"""Configuration of the NeuTRENO vision transformer (ViT / DeiT shapes) and of its Segmenter decoder."""

import copy
from typing import ClassVar, Literal

from huggingface_hub.dataclasses import strict, validated_field
from transformers import PreTrainedConfig

from .neutreno_common import (
    TRANSFORMER_SHAPE_FIELDS,
    NeuTRENOConfigMixin,
    activation_field,
    check_heads,
    dropout_field,
    neutreno_lambda_field,
    neutreno_layers_field,
    optional_positive_int_field,
    positive_int_field,
)
from .presets import NEUTRENO_VIT_PRESETS


def _size_field(name: str, default: int):
    """An integer >= 1 or [height, width]."""

    def rule(value):
        size = [value] if isinstance(value, int) else list(value)
        if len(size) not in (1, 2) or min(size) < 1 or (len(size) == 1 and not isinstance(value, int)):
            raise ValueError(f"`{name}` must be an integer >= 1 or [height, width], got {value!r}.")

    return validated_field(rule, default=default)


@strict
class NeuTRENOViTConfig(NeuTRENOConfigMixin, PreTrainedConfig):
    r"""
    Configuration of [`NeuTRENOViTModel`], [`NeuTRENOViTForImageClassification`] and
    [`NeuTRENOViTForSemanticSegmentation`]. The defaults are DeiT-tiny (the paper's main model): dim 192, 12 layers,
    3 heads, patch 16, 224 px, λ = 0.6 in every layer but the first.

    NeuTRENO fields:
        neutreno_lambda (`float`, defaults to 0.6): λ in ``U = A V + λ (V_0 − V)``; 0 gives exactly the plain ViT.
        neutreno_layers (`list[int]`, *optional*): 0-based layers that add the term (default: all but layer 0,
            which provides V_0), each in [1, num_hidden_layers - 1]: checked when the list is set, and by a built
            model at every forward (an in-place edit of the list).
        symmetric_attention (`bool`, defaults to `False`): W_Q = W_K (the paper's Sym-DeiT); the model has no `q_proj`.
        featscale (`bool`, defaults to `False`): add FeatScale (Wang et al., 2022) after each attention output
            projection, ``x + s_d ⊙ mean_tokens(x) + s_h ⊙ (x − mean_tokens(x))`` with zero-initialised s_d, s_h.
        attention_kernel (`str`, defaults to `"softmax"`): `"softmax"`, or `"linear"` for kernel attention with the
            feature map elu(x) + 1 (Katharopoulos et al., 2020; NeuTRENO App. F.2). The linear kernel is computed in
            O(N d²) by this model itself, so `attn_implementation` does not apply to it and it returns no maps.

    Vision fields follow `transformers.ViTConfig`; additions: `pooling` ("cls" or "mean" over patch tokens),
    `drop_path_rate` (stochastic depth, linearly increasing with depth as in timm/DeiT) and
    `use_distillation_token` (DeiT's second prefix token, kept so converted DeiT checkpoints are exact).

    Semantic segmentation fields ([`NeuTRENOViTForSemanticSegmentation`], Segmenter; the other models ignore them, as
    BEiT's config keeps its own):
        decoder_type (`str`, defaults to `"mask_transformer"`): Segmenter's mask transformer, or `"linear"` (one
            linear layer per patch token).
        decoder_num_layers (`int`, defaults to 2): blocks of the mask transformer.
        decoder_hidden_size (`int`, *optional*): its width d_model (default: `hidden_size`, as in Segmenter).
        decoder_num_attention_heads (`int`, *optional*): its heads (default: `num_attention_heads`).
        decoder_neutreno_lambda (`float`, *optional*): λ of its blocks after the first, whose values are the
            decoder's own V_0 (default: `neutreno_lambda`).
        decoder_dropout (`float`, defaults to 0.1): dropout of the mask transformer (Segmenter's), on its attention
            probabilities, on both residual branches of each block and inside its MLP, after the GELU.
        semantic_loss_ignore_index (`int`, defaults to 255): the label value the loss and the metrics ignore; it
            must lie outside the classes [0, num_labels - 1] (the segmentation model checks it).

    Validation (`@strict`, as every transformers config): each field's type and its own rule (e.g. λ finite and
    >= 0) are checked on every assignment, so a bad value is refused where it is written; the rules across fields
    are the `validate_*` methods, run at construction, by `config.validate()`, by the models and, before anything
    is written, by `save_pretrained`.

    Settings a built model reads at each forward, so editing them on `model.config` takes effect at once:
    `neutreno_lambda`, `neutreno_layers`, `decoder_neutreno_lambda`, `pooling`, `semantic_loss_ignore_index`. The
    fields in `architecture_fields` (and `decoder_architecture_fields` for a Segmenter) fix the model's parameters,
    attention classes and dropout rates when it is built: a model refuses to run or be saved once one of them was
    edited on its config (pass them to the constructor or to `from_pretrained` instead).
    """

    model_type = "neutreno_vit"
    # Fixed when a model is built (its parameters, attention classes, dropout rates): the models refuse to run or be
    # saved once one was edited on their config. The other fields are read at each forward, or only initialise the
    # weights.
    architecture_fields: ClassVar[tuple[str, ...]] = (
        *TRANSFORMER_SHAPE_FIELDS,
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "drop_path_rate",
        "layer_norm_eps",
        "image_size",
        "patch_size",
        "num_channels",
        "qkv_bias",
        "use_distillation_token",
        "symmetric_attention",
        "featscale",
        "attention_kernel",
    )
    decoder_architecture_fields: ClassVar[tuple[str, ...]] = (
        "decoder_type",
        "decoder_num_layers",
        "decoder_hidden_size",
        "decoder_num_attention_heads",
        "decoder_dropout",
    )
    dropout_fields = ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate", "decoder_dropout")
    presets = NEUTRENO_VIT_PRESETS

    hidden_size: int = positive_int_field("hidden_size", 192)
    num_hidden_layers: int = positive_int_field("num_hidden_layers", 12)
    num_attention_heads: int = positive_int_field("num_attention_heads", 3)
    intermediate_size: int = positive_int_field("intermediate_size", 768)
    hidden_act: str = activation_field("gelu")
    hidden_dropout_prob: float | int = dropout_field("hidden_dropout_prob", 0.0)
    attention_probs_dropout_prob: float | int = dropout_field("attention_probs_dropout_prob", 0.0)
    drop_path_rate: float | int = dropout_field("drop_path_rate", 0.0)
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-6
    image_size: int | list[int] | tuple[int, int] = _size_field("image_size", 224)
    patch_size: int | list[int] | tuple[int, int] = _size_field("patch_size", 16)
    num_channels: int = positive_int_field("num_channels", 3)
    qkv_bias: bool = True
    pooling: Literal["cls", "mean"] = "cls"
    use_distillation_token: bool = False
    neutreno_lambda: float | int = neutreno_lambda_field(0.6)
    neutreno_layers: list[int] | None = neutreno_layers_field()
    symmetric_attention: bool = False
    featscale: bool = False
    attention_kernel: Literal["softmax", "linear"] = "softmax"
    decoder_type: Literal["mask_transformer", "linear"] = "mask_transformer"
    decoder_num_layers: int = positive_int_field("decoder_num_layers", 2)
    decoder_hidden_size: int | None = optional_positive_int_field("decoder_hidden_size", None, "the encoder's value")
    decoder_num_attention_heads: int | None = optional_positive_int_field(
        "decoder_num_attention_heads", None, "the encoder's value"
    )
    decoder_neutreno_lambda: float | int | None = neutreno_lambda_field(
        None, name="decoder_neutreno_lambda", none_means="`neutreno_lambda`"
    )
    decoder_dropout: float | int = dropout_field("decoder_dropout", 0.1)
    semantic_loss_ignore_index: int = 255

    def validate_architecture(self) -> None:
        super().validate_architecture()  # and `hidden_size` divisible by `num_attention_heads`
        if any(s % p for s, p in zip(self.image_size_2d, self.patch_size_2d)):
            raise ValueError(
                f"`image_size` {list(self.image_size_2d)} must be divisible by `patch_size` {list(self.patch_size_2d)}."
            )

    def validate_decoder(self) -> None:
        hidden, heads = self.decoder_shape
        check_heads(hidden, heads, names=("decoder_hidden_size", "decoder_num_attention_heads"))

    @property
    def image_size_2d(self) -> tuple[int, int]:
        size = self.image_size
        return (size, size) if isinstance(size, int) else tuple(size)

    @property
    def patch_size_2d(self) -> tuple[int, int]:
        size = self.patch_size
        return (size, size) if isinstance(size, int) else tuple(size)

    @property
    def num_prefix_tokens(self) -> int:
        return 1 + int(self.use_distillation_token)

    @property
    def decoder_shape(self) -> tuple[int, int]:
        """(width, heads) of the mask transformer: the decoder fields, or the encoder's where they are None."""
        hidden = self.decoder_hidden_size if self.decoder_hidden_size is not None else self.hidden_size
        heads = self.decoder_num_attention_heads
        return hidden, heads if heads is not None else self.num_attention_heads

    @property
    def decoder_lambda(self) -> float:
        """λ of the mask transformer's blocks after the first: `decoder_neutreno_lambda`, else `neutreno_lambda`."""
        lam = self.decoder_neutreno_lambda
        return float(lam if lam is not None else self.neutreno_lambda)

    def decoder_config(self) -> "NeuTRENOViTConfig":
        """The config of the mask transformer's blocks, which are this model's blocks at the decoder's shape.

        Segmenter's decoder blocks: pre-LN, MLP ratio 4, softmax attention with qkv bias, dropout `decoder_dropout`
        (as `hidden_dropout_prob` and `attention_probs_dropout_prob`; the mask transformer adds it inside the MLP),
        no drop path. The attention implementation and activation are the encoder's, and so is the LayerNorm eps
        (`layer_norm_eps`, 1e-6 by default), where Segmenter's decoder uses PyTorch's default 1e-5: a choice. Its
        `neutreno_lambda` is `decoder_lambda` at construction; the blocks read the segmentation model's `decoder_lambda`
        at each forward, so an edit of the decoder's λ applies at once.
        """
        hidden, heads = self.decoder_shape
        config = copy.deepcopy(self)  # keeps the attention implementation chosen for the encoder
        fields = dict(
            hidden_size=hidden,
            num_attention_heads=heads,
            num_hidden_layers=self.decoder_num_layers,
            intermediate_size=4 * hidden,
            hidden_dropout_prob=self.decoder_dropout,
            attention_probs_dropout_prob=self.decoder_dropout,
            drop_path_rate=0.0,
            qkv_bias=True,
            neutreno_lambda=self.decoder_lambda,
            neutreno_layers=None,
            symmetric_attention=False,
            featscale=False,
            attention_kernel="softmax",
            use_distillation_token=False,
            pooling="cls",
        )
        for name, value in fields.items():
            setattr(config, name, value)
        config.validate()
        return config


__all__ = ["NeuTRENOViTConfig"]
