"""NeuTRENO vision transformer (Nguyen, Nguyen, Baraniuk, NeurIPS 2023), in the layout of `transformers`' ViT.

Every layer after the first adds ``λ (V_0 − V_ℓ)`` to its attention output, per head and before the output
projection, where V_0 are layer 0's values. Parameter names equal the native ViT's (`vit.layers.N.attention.q_proj`,
...), so native ViT/DeiT weights load as they are and PEFT finds `q_proj`/`v_proj`.

Heads: image classification, and semantic segmentation with Segmenter's decoders (Strudel et al., ICCV 2021), whose
mask transformer applies the same rule with its own V_0 (the paper's Table 2).

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""

import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput, SemanticSegmenterOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_neutreno_vit import NeuTRENOViTConfig
from .neutreno_common import (
    NeuTRENOLayerLambda,
    NeuTRENOPreTrainedMixin,
    built_fields,
    check_built_fields,
    eager_attention_forward,
    neutreno_attention,
    values_checkable,
)


class NeuTRENOViTPatchEmbeddings(nn.Module):
    """(batch, channels, height, width) -> (batch, patches, hidden) with one strided convolution."""

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__()
        self.image_size = config.image_size_2d
        self.patch_size = config.patch_size_2d
        self.grid_size = (self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.num_channels = config.num_channels
        self.projection = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=self.patch_size, stride=self.patch_size
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.shape[1] != self.num_channels:
            raise ValueError(
                f"`pixel_values` have {pixel_values.shape[1]} channels, the model expects "
                f"`num_channels`={self.num_channels}."
            )
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class NeuTRENOViTEmbeddings(nn.Module):
    """CLS token (and DeiT's distillation token), patch embeddings and learned position embeddings."""

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.distillation_token = (
            nn.Parameter(torch.zeros(1, 1, config.hidden_size)) if config.use_distillation_token else None
        )
        self.num_prefix_tokens = config.num_prefix_tokens
        self.patch_embeddings = NeuTRENOViTPatchEmbeddings(config)
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, self.patch_embeddings.num_patches + self.num_prefix_tokens, config.hidden_size)
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def interpolate_pos_encoding(self, height: int, width: int) -> torch.Tensor:
        """Bicubic resampling of the patch position grid to another image size (as the native ViT and DINO)."""
        patch_h, patch_w = self.patch_embeddings.patch_size
        new_grid = (height // patch_h, width // patch_w)
        old_grid = self.patch_embeddings.grid_size
        if new_grid == old_grid:
            return self.position_embeddings
        prefix = self.position_embeddings[:, : self.num_prefix_tokens]
        patch_pos = self.position_embeddings[:, self.num_prefix_tokens :]
        dim = patch_pos.shape[-1]
        patch_pos = patch_pos.reshape(1, *old_grid, dim).permute(0, 3, 1, 2)
        patch_pos = nn.functional.interpolate(patch_pos.float(), size=new_grid, mode="bicubic", align_corners=False).to(
            patch_pos.dtype
        )
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, -1, dim)
        return torch.cat((prefix, patch_pos), dim=1)

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        image_size = self.patch_embeddings.image_size
        if pixel_values.ndim != 4:
            raise ValueError(
                "`pixel_values` must have shape (batch, num_channels, height, width), here "
                f"(batch, {self.patch_embeddings.num_channels}, {image_size[0]}, {image_size[1]}); got "
                f"{tuple(pixel_values.shape)}."
            )
        pixel_values = pixel_values.to(self.patch_embeddings.projection.weight.dtype)
        batch_size, _, height, width = pixel_values.shape
        if not interpolate_pos_encoding and (height, width) != tuple(image_size):
            raise ValueError(
                f"Input image size ({height}x{width}) does not match the model's `image_size` "
                f"({image_size[0]}x{image_size[1]}). Resize the images, or pass `interpolate_pos_encoding=True` "
                "to resample the position embeddings."
            )
        patch_h, patch_w = self.patch_embeddings.patch_size
        if height % patch_h or width % patch_w:
            raise ValueError(
                f"Input image size ({height}x{width}) must be divisible by `patch_size` ({patch_h}x{patch_w})."
            )
        embeddings = self.patch_embeddings(pixel_values)
        prefix = [self.cls_token.expand(batch_size, -1, -1)]
        if self.distillation_token is not None:
            prefix.append(self.distillation_token.expand(batch_size, -1, -1))
        embeddings = torch.cat((*prefix, embeddings), dim=1)
        if interpolate_pos_encoding:
            embeddings = embeddings + self.interpolate_pos_encoding(height, width)
        else:
            embeddings = embeddings + self.position_embeddings
        return self.dropout(embeddings)


def linear_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    eps: float = 1e-6,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Kernel attention with φ(x) = elu(x) + 1 (Katharopoulos et al. 2020), O(N d²): no N×N map is formed."""
    if attention_mask is not None:
        raise ValueError("`attention_kernel='linear'` does not take an `attention_mask`.")
    query = nn.functional.elu(query) + 1
    key = nn.functional.elu(key) + 1
    key_value = torch.einsum("bhnd,bhne->bhde", key, value)
    normaliser = torch.einsum("bhnd,bhd->bhn", query, key.sum(dim=2)).clamp_min(eps)
    attn_output = torch.einsum("bhnd,bhde->bhne", query, key_value) / normaliser.unsqueeze(-1)
    return attn_output.transpose(1, 2).contiguous(), None


class NeuTRENOViTSelfAttention(NeuTRENOLayerLambda, nn.Module):
    """A block's queries and keys, its attention backend and the NeuTRENO term: all of its attention but the value and
    output projections, which [`NeuTRENOViTAttention`] adds (and EigenViT's attention, its own way)."""

    def __init__(self, config: NeuTRENOViTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False  # SDPA otherwise defaults to a causal mask
        self.attention_dropout = config.attention_probs_dropout_prob
        self.attention_function = linear_attention_forward if config.attention_kernel == "linear" else None
        inner = config.num_attention_heads * self.head_dim
        self.q_proj = None if config.symmetric_attention else nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)

    def attend(
        self,
        hidden_states: torch.Tensor,
        values: torch.Tensor,
        attention_mask: torch.Tensor | None,
        first_layer_values: torch.Tensor | None,
        recompute_saved: bool,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention of `hidden_states`' queries and keys over this layer's `values` (merged heads), with the
        NeuTRENO term: (output with merged heads (batch, tokens, heads * head_dim), attention maps or None).
        `recompute_saved`: see `neutreno_attention` (False under activation checkpointing)."""
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        if self.q_proj is None:
            query_states = key_states
        else:
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = values.view(hidden_shape).transpose(1, 2)

        attention_interface: Callable = self.attention_function or ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = neutreno_attention(
            lambda: attention_interface(
                self,
                query_states,
                key_states,
                value_states,
                attention_mask,
                dropout=0.0 if not self.training else self.attention_dropout,
                scaling=self.scaling,
                **kwargs,
            ),
            values,
            first_layer_values,
            self.neutreno_lambda,
            recompute_saved,
        )
        return attn_output.reshape(*input_shape, -1), attn_weights


class NeuTRENOViTAttention(NeuTRENOViTSelfAttention):
    """Multi-head self-attention with the NeuTRENO term; returns (output, attention maps, this layer's values).

    The values are returned with merged heads, (batch, tokens, heads * head_dim): layer 0's are the V_0 of the later
    layers. λ is the layer's `neutreno_lambda`, read from the config at each forward (a block of the Segmenter's mask
    transformer: the segmentation model's `decoder_lambda`).

    The paper's ablations, in any combination, when the config sets them (each costs nothing when it is off):

    - `symmetric_attention`: W_Q = W_K (the paper's Sym-DeiT): the keys serve as queries and there is no `q_proj`.
    - `attention_kernel="linear"`: kernel attention (NeuTRENO App. F.2), computed here in O(N d²), so
      `attn_implementation` does not apply to it and it returns no maps.
    - `featscale`: FeatScale (Wang et al., 2022) after the output projection,
      ``x + s_d ⊙ mean_tokens(x) + s_h ⊙ (x − mean_tokens(x))`` with zero-initialised s_d, s_h.
    """

    def __init__(self, config: NeuTRENOViTConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        inner = config.num_attention_heads * self.head_dim
        self.v_proj = nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)
        self.o_proj = nn.Linear(inner, config.hidden_size, bias=True)
        if config.featscale:
            self.featscale_low = nn.Parameter(torch.zeros(config.hidden_size))
            self.featscale_high = nn.Parameter(torch.zeros(config.hidden_size))
        else:
            self.featscale_low = self.featscale_high = None

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        recompute_saved: bool = True,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """`recompute_saved`: see `neutreno_attention` (False under activation checkpointing)."""
        values = self.v_proj(hidden_states)
        attn_output, attn_weights = self.attend(
            hidden_states, values, attention_mask, first_layer_values, recompute_saved, **kwargs
        )
        attn_output = self.o_proj(attn_output)
        if self.featscale_low is not None:
            mean = attn_output.mean(dim=1, keepdim=True)
            attn_output = attn_output + self.featscale_low * mean + self.featscale_high * (attn_output - mean)
        return attn_output, attn_weights, values


class NeuTRENOViTMLP(nn.Module):
    """fc1 → activation → fc2, as ViT/DeiT's MLP. `dropout` > 0 adds dropout after the activation, as Segmenter's
    FeedForward (fc1 → GELU → Dropout → fc2 → Dropout; the last dropout is the block's on the branch): its mask
    transformer's blocks have it, the ViT/DeiT encoder's do not."""

    def __init__(self, config: NeuTRENOViTConfig, dropout: float = 0.0):
        super().__init__()
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        if self.dropout is not None:
            hidden_states = self.dropout(hidden_states)
        return self.fc2(hidden_states)


class NeuTRENOViTDropPath(nn.Module):
    """Stochastic depth: drop the residual branch per sample (DeiT's recipe)."""

    def __init__(self, drop_prob: float):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return hidden_states
        keep = 1.0 - self.drop_prob
        mask = hidden_states.new_empty((hidden_states.shape[0],) + (1,) * (hidden_states.ndim - 1)).bernoulli_(keep)
        return hidden_states * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.drop_prob}"


class NeuTRENOViTLayer(GradientCheckpointingLayer):
    """Pre-LN block; returns (hidden_states, values): layer 0's values, which the model hands to later layers as V_0
    (None from the other layers).

    `attention` is the block's attention module, called as [`NeuTRENOViTAttention`] is (EigenViT passes its own);
    by default [`NeuTRENOViTAttention`]. `mlp_dropout`: dropout inside the MLP, after its activation (Segmenter's
    mask transformer; none in the ViT/DeiT encoder).
    """

    def __init__(
        self, config: NeuTRENOViTConfig, layer_idx: int, attention: nn.Module | None = None, mlp_dropout: float = 0.0
    ):
        super().__init__()
        self.attention = NeuTRENOViTAttention(config, layer_idx) if attention is None else attention
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = NeuTRENOViTMLP(config, dropout=mlp_dropout)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        rate = config.drop_path_rate * layer_idx / max(config.num_hidden_layers - 1, 1)
        self.drop_path = NeuTRENOViTDropPath(rate) if rate > 0 else nn.Identity()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attn_output, _, values = self.attention(
            self.layernorm_before(hidden_states),
            attention_mask,
            first_layer_values,
            # activation checkpointing's own saved-tensor hooks must see every tensor the attention saves
            recompute_saved=not (self.gradient_checkpointing and self.training),
            **kwargs,
        )
        if first_layer_values is not None:
            values = None  # only layer 0's values (V_0) are used later: free the others before the MLP runs
        hidden_states = hidden_states + self.drop_path(self.dropout(attn_output))
        # Free the attention output before the MLP, whose activations set the inference peak: this saves the one
        # (batch, tokens, hidden) tensor that keeping V_0 through the layers costs.
        del attn_output
        mlp_output = self.mlp(self.layernorm_after(hidden_states))
        hidden_states = hidden_states + self.drop_path(self.dropout(mlp_output))
        return hidden_states, values


def pool_image(sequence_output: torch.Tensor, config: NeuTRENOViTConfig) -> torch.Tensor:
    """The image representation: the CLS token, or the mean of the patch tokens (`config.pooling`, read at each
    forward)."""
    if config.pooling == "mean":
        return sequence_output[:, config.num_prefix_tokens :].mean(dim=1)
    return sequence_output[:, 0]


class NeuTRENOViTPreTrainedModel(NeuTRENOPreTrainedMixin, PreTrainedModel):
    config: NeuTRENOViTConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["NeuTRENOViTEmbeddings", "NeuTRENOViTLayer"]
    # Parameters DeiT's recipe does not decay (DeiT's `no_weight_decay()`: pos_embed, cls_token, dist_token; their
    # names in `NeuTRENOViTEmbeddings`), read by `hf_neutreno.examples.weight_decay`; tensors of ndim <= 1 by rule.
    _no_weight_decay = ("position_embeddings", "cls_token", "distillation_token")
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {
        "hidden_states": NeuTRENOViTLayer,
        "attentions": NeuTRENOViTAttention,
    }
    _auto_classes = {
        "AutoModel": "NeuTRENOViTModel",
        "AutoModelForImageClassification": "NeuTRENOViTForImageClassification",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, NeuTRENOViTEmbeddings):
            init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.distillation_token is not None:
                init.trunc_normal_(module.distillation_token, mean=0.0, std=std)
        elif isinstance(module, NeuTRENOViTAttention) and module.featscale_low is not None:
            init.zeros_(module.featscale_low)  # FeatScale starts as the identity
            init.zeros_(module.featscale_high)


class NeuTRENOViTModel(NeuTRENOViTPreTrainedModel):
    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__(config)
        config.validate()  # the config may have been edited after construction
        self.built_fields = built_fields(config, config.architecture_fields)
        self.embeddings = NeuTRENOViTEmbeddings(config)
        self.layers = nn.ModuleList(
            NeuTRENOViTLayer(config, i, self.layer_attention(config, i)) for i in range(config.num_hidden_layers)
        )
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    def layer_attention(self, config: NeuTRENOViTConfig, layer_idx: int) -> nn.Module | None:
        """The attention module of block `layer_idx`; None gives the block its default, [`NeuTRENOViTAttention`].
        (EigenViT overrides this and `layer_kwargs`, and shares the rest of this class.)"""
        return None

    def layer_kwargs(self, kwargs: dict) -> Iterable[dict]:
        """The keyword arguments of each block's call, in layer order: `kwargs` for every block."""
        return itertools.repeat(kwargs, len(self.layers))

    @merge_with_config_defaults
    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        r"""
        pixel_values (`torch.Tensor` of shape `(batch, channels, height, width)`): the images.
        interpolate_pos_encoding (`bool`, *optional*): resample the position embeddings to the input size.
        attention_mask (`torch.Tensor` of shape `(batch, tokens)`, *optional*): 1 for tokens to attend to.
        """
        check_built_fields(self.config, self.built_fields)
        self.config.validate_neutreno_layers()  # read below; an in-place edit of the list passed no check
        if pixel_values is None:
            raise ValueError("`pixel_values` is required.")
        hidden_states = self.embeddings(pixel_values, interpolate_pos_encoding=bool(interpolate_pos_encoding))
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        first_layer_values = None
        for layer, layer_kwargs in zip(self.layers, self.layer_kwargs(kwargs)):
            hidden_states, values = layer(hidden_states, attention_mask, first_layer_values, **layer_kwargs)
            if first_layer_values is None:
                first_layer_values = values
        sequence_output = self.layernorm(hidden_states)
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output, pooler_output=pool_image(sequence_output, self.config)
        )


class NeuTRENOViTForImageClassification(NeuTRENOViTPreTrainedModel):
    backbone_class = NeuTRENOViTModel  # EigenViT's head sets its own backbone and shares the rest of this class

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = self.backbone_class(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()

    def get_classifier(self) -> nn.Module:
        return self.classifier

    def reset_classifier(self, num_labels: int, id2label: dict[int, str] | None = None) -> None:
        """Replace the head (fine-tuning on another label set), keeping the backbone."""
        if id2label is not None and len(id2label) != num_labels:
            raise ValueError(f"`id2label` has {len(id2label)} entries, `num_labels` is {num_labels}.")
        self.config.id2label = id2label or {i: f"LABEL_{i}" for i in range(num_labels)}
        self.config.label2id = {v: k for k, v in self.config.id2label.items()}
        self.num_labels = num_labels
        weight = self.vit.layernorm.weight
        self.classifier = nn.Linear(self.config.hidden_size, num_labels).to(weight.device, weight.dtype)
        init.trunc_normal_(self.classifier.weight, std=self.config.initializer_range)
        init.zeros_(self.classifier.bias)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> ImageClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch,)`, *optional*): class indices (or floats for regression and
            multi-label targets); the loss follows `config.problem_type` as in the native ViT.
        """
        outputs: BaseModelOutputWithPooling = self.vit(
            pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, attention_mask=attention_mask, **kwargs
        )
        logits = self.classifier(outputs.pooler_output)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        return ImageClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@dataclass
class NeuTRENOViTSemanticSegmenterOutput(SemanticSegmenterOutput):
    r"""
    `SemanticSegmenterOutput` (logits at patch resolution; `hidden_states` and `attentions` are the encoder's) and
    the mask transformer's own:

    decoder_hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned with `output_hidden_states=True`): the
        input of the mask transformer's first block (projected patch tokens, then the K class embeddings) and the
        output of each block, (batch, patches + K, decoder_hidden_size). None for the linear decoder.
    decoder_attentions (`tuple(torch.FloatTensor)`, *optional*, returned with `output_attentions=True` under eager
        attention): each block's attention maps, (batch, heads, patches + K, patches + K).
    """

    decoder_hidden_states: tuple[torch.FloatTensor, ...] | None = None
    decoder_attentions: tuple[torch.FloatTensor, ...] | None = None


class NeuTRENOViTMaskTransformer(NeuTRENOViTPreTrainedModel):
    """Segmenter's mask transformer with the NeuTRENO rule, built from `config.decoder_config()`.

    The encoder's patch tokens are projected to d_model (`proj_dec`) and K learnable class embeddings are appended
    after them; `decoder_num_layers` NeuTRENO blocks process both (block 0 provides the decoder's own V_0); then
    `decoder_norm`, ``patches @ proj_patch`` and ``classes @ proj_classes``, both L2-normalised, masks = patches ·
    classesᵀ, and `mask_norm` (a LayerNorm over the K classes) give one logit per patch and class.

    Dropout at `decoder_dropout` where Segmenter's blocks have it (segm/model/blocks.py): the attention
    probabilities, the attention's output projection, inside the MLP after the GELU, and the MLP's output. Every
    LayerNorm (the blocks', `decoder_norm`, `mask_norm`) takes the encoder's `layer_norm_eps` (1e-6 by default, as
    DeiT's), where Segmenter's decoder keeps PyTorch's default 1e-5: a choice, one eps for the whole model.

    A `PreTrainedModel` of its own (of the decoder's shape), so that `set_attn_implementation`, `output_hidden_states`
    and `output_attentions` reach its blocks as they reach the encoder's.
    """

    _auto_classes = {}  # never saved alone: the segmentation model's config rebuilds it

    def __init__(
        self, config: NeuTRENOViTConfig, encoder_hidden_size: int, segmentation_config: NeuTRENOViTConfig | None = None
    ):
        super().__init__(config)
        self.proj_dec = nn.Linear(encoder_hidden_size, config.hidden_size)
        self.class_embeddings = nn.Parameter(torch.zeros(1, config.num_labels, config.hidden_size))
        # Segmenter's blocks drop out after the MLP's GELU too, at the decoder's rate (`hidden_dropout_prob` of the
        # decoder's config is `decoder_dropout`)
        self.layers = nn.ModuleList(
            NeuTRENOViTLayer(config, i, mlp_dropout=config.hidden_dropout_prob) for i in range(config.num_hidden_layers)
        )
        for layer in self.layers:  # λ: the segmentation model's `decoder_lambda`, read at each forward
            layer.attention.segmentation_config = segmentation_config
        self.decoder_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.proj_patch = nn.Parameter(torch.zeros(config.hidden_size, config.hidden_size))
        self.proj_classes = nn.Parameter(torch.zeros(config.hidden_size, config.hidden_size))
        self.mask_norm = nn.LayerNorm(config.num_labels, eps=config.layer_norm_eps)
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, NeuTRENOViTMaskTransformer):  # Segmenter's initialisation
            init.trunc_normal_(module.class_embeddings, mean=0.0, std=self.config.initializer_range)
            init.normal_(module.proj_patch, mean=0.0, std=self.config.hidden_size**-0.5)
            init.normal_(module.proj_classes, mean=0.0, std=self.config.hidden_size**-0.5)

    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        patch_tokens: torch.Tensor,
        grid_size: tuple[int, int],
        **kwargs: Unpack[TransformersKwargs],
    ) -> SemanticSegmenterOutput:
        r"""
        patch_tokens (`torch.Tensor` of shape `(batch, patches, encoder hidden size)`): the encoder's output without
            its prefix tokens, in row-major patch order.
        grid_size (`tuple[int, int]`): the patch grid (rows, columns).
        """
        batch_size, num_patches = patch_tokens.shape[:2]
        hidden_states = self.proj_dec(patch_tokens)
        hidden_states = torch.cat((hidden_states, self.class_embeddings.expand(batch_size, -1, -1)), dim=1)
        first_layer_values = None
        for layer in self.layers:
            hidden_states, values = layer(hidden_states, None, first_layer_values, **kwargs)
            if first_layer_values is None:
                first_layer_values = values
        hidden_states = self.decoder_norm(hidden_states)
        patches = hidden_states[:, :num_patches] @ self.proj_patch
        classes = hidden_states[:, num_patches:] @ self.proj_classes
        patches = patches / patches.norm(dim=-1, keepdim=True)
        classes = classes / classes.norm(dim=-1, keepdim=True)
        masks = self.mask_norm(patches @ classes.transpose(1, 2))  # (batch, patches, classes)
        return SemanticSegmenterOutput(logits=masks.transpose(1, 2).reshape(batch_size, -1, *grid_size))


class NeuTRENOViTLinearDecoder(nn.Module):
    """Segmenter's linear decoder: one `nn.Linear(hidden_size, num_labels)` applied to every patch token."""

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__()
        self.head = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, patch_tokens: torch.Tensor, grid_size: tuple[int, int], **kwargs) -> SemanticSegmenterOutput:
        logits = self.head(patch_tokens).transpose(1, 2)
        return SemanticSegmenterOutput(logits=logits.reshape(*logits.shape[:2], *grid_size))


class NeuTRENOViTForSemanticSegmentation(NeuTRENOViTPreTrainedModel):
    """Segmenter (Strudel et al., 2021) on the NeuTRENO ViT: the encoder (`vit`, so ViT/DeiT and NeuTRENO classifier
    weights load by name), its CLS (and distillation) tokens dropped, then the mask transformer or the linear decoder
    (`config.decoder_type`).

    Logits come out at patch resolution, (batch, num_labels, height / patch, width / patch); with `labels` the loss
    upsamples them bilinearly to the labels' size, cross-entropy ignoring `semantic_loss_ignore_index`, as
    `transformers`' segmentation models do. `hidden_states` / `attentions` are the encoder's, `decoder_hidden_states`
    / `decoder_attentions` the mask transformer's. Images larger than the training crop: `sliding_window_logits`.
    """

    _auto_classes = {
        "AutoModel": "NeuTRENOViTModel",
        "AutoModelForSemanticSegmentation": "NeuTRENOViTForSemanticSegmentation",
    }
    # The loss is a mean over the labelled pixels of the batch: Trainer's `num_items_in_batch` counts labels that
    # are not -100, which includes pixels at `semantic_loss_ignore_index` (255), so it is not taken.
    accepts_loss_kwargs = False

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__(config)
        if config.num_labels < 2:
            raise ValueError(
                f"Semantic segmentation needs `num_labels` >= 2 (the classes, background included), got "
                f"{config.num_labels}."
            )
        check_ignore_index(config)
        self.built_fields = built_fields(config, config.decoder_architecture_fields)
        self.num_labels = config.num_labels
        self.vit = NeuTRENOViTModel(config)
        if config.decoder_type == "linear":
            self.decoder = NeuTRENOViTLinearDecoder(config)
        else:
            self.decoder = NeuTRENOViTMaskTransformer(
                config.decoder_config(), encoder_hidden_size=config.hidden_size, segmentation_config=config
            )
        self.post_init()

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        # The loss reads `semantic_loss_ignore_index` live; saved inside the classes, no model could be built from it.
        check_ignore_index(self.config)
        return super().save_pretrained(save_directory, *args, **kwargs)

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> NeuTRENOViTSemanticSegmenterOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch, height, width)`, *optional*): the class of every pixel, in
            [0, num_labels - 1] or `semantic_loss_ignore_index`; the same height and width as `pixel_values`.
        interpolate_pos_encoding (`bool`, *optional*): resample the position embeddings, for any image size that
            is a multiple of the patch size.
        """
        check_built_fields(self.config, self.built_fields)
        # The decoder follows the same output flags as the encoder, also when they are set in the config.
        for name in ("output_hidden_states", "output_attentions"):
            kwargs.setdefault(name, getattr(self.config, name, False))
        outputs: BaseModelOutputWithPooling = self.vit(
            pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, **kwargs
        )
        patch_h, patch_w = self.config.patch_size_2d
        grid_size = (pixel_values.shape[-2] // patch_h, pixel_values.shape[-1] // patch_w)
        patch_tokens = outputs.last_hidden_state[:, self.config.num_prefix_tokens :]
        decoded = self.decoder(patch_tokens, grid_size, **kwargs)
        loss = None
        if labels is not None:
            check_segmentation_labels(labels, pixel_values, self.config)
            loss = self.loss_function(decoded.logits, labels, ignore_index=self.config.semantic_loss_ignore_index)
        return NeuTRENOViTSemanticSegmenterOutput(
            loss=loss,
            logits=decoded.logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            decoder_hidden_states=decoded.hidden_states,
            decoder_attentions=decoded.attentions,
        )

    def sliding_window_logits(
        self,
        pixel_values: torch.Tensor,
        window_size: int | tuple[int, int] | None = None,
        window_stride: int | tuple[int, int] | None = None,
        batch_size: int = 8,
    ) -> torch.Tensor:
        """Logits at the images' size, (batch, num_labels, height, width), by Segmenter's sliding-window inference.

        Windows of `window_size` (default: `config.image_size`, the training crop) start every `window_stride`
        pixels (default: the window size, as Segmenter on ADE20K), the last row and column of windows flush with the
        image's edge; each window's logits are upsampled bilinearly to the window and overlapping windows averaged.
        An image smaller than the window is first enlarged (bilinear, aspect ratio kept) until the window fits, and
        the result resized back, as Segmenter does. `batch_size` windows run per forward pass. Call it in eval mode,
        under `torch.inference_mode()` for inference.
        """
        window = _pair("window_size", window_size if window_size is not None else self.config.image_size_2d)
        stride = _pair("window_stride", window_stride if window_stride is not None else window)
        patch_size = self.config.patch_size_2d
        if window[0] % patch_size[0] or window[1] % patch_size[1]:
            raise ValueError(f"`window_size` {list(window)} must be a multiple of `patch_size` {list(patch_size)}.")
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        if pixel_values.ndim != 4:
            raise ValueError(
                f"`pixel_values` must be (batch, channels, height, width), got {tuple(pixel_values.shape)}."
            )
        height, width = pixel_values.shape[-2:]
        images = pixel_values
        if height < window[0] or width < window[1]:
            scale = max(window[0] / height, window[1] / width)
            size = (max(window[0], int(height * scale)), max(window[1], int(width * scale)))
            images = nn.functional.interpolate(pixel_values, size=size, mode="bilinear", align_corners=False)
        batch, _, full_h, full_w = images.shape
        anchors = [
            (top, left)
            for top in _window_starts(full_h, window[0], stride[0])
            for left in _window_starts(full_w, window[1], stride[1])
        ]
        # Crop j is window j // batch of image j % batch.
        crops = torch.cat([images[:, :, top : top + window[0], left : left + window[1]] for top, left in anchors])
        interpolate = window != tuple(self.config.image_size_2d)
        total = count = None
        for start, chunk in zip(range(0, len(crops), batch_size), crops.split(batch_size)):
            logits = self(pixel_values=chunk, interpolate_pos_encoding=interpolate).logits
            logits = nn.functional.interpolate(logits, size=window, mode="bilinear", align_corners=False)
            if total is None:
                total = logits.new_zeros(batch, logits.shape[1], full_h, full_w)
                count = logits.new_zeros(1, 1, full_h, full_w)
            for j, crop_logits in enumerate(logits, start):
                (top, left), image = anchors[j // batch], j % batch
                total[image, :, top : top + window[0], left : left + window[1]] += crop_logits
                if image == 0:
                    count[..., top : top + window[0], left : left + window[1]] += 1
        logits = total / count
        if (full_h, full_w) != (height, width):
            logits = nn.functional.interpolate(logits, size=(height, width), mode="bilinear", align_corners=False)
        return logits


def check_ignore_index(config: NeuTRENOViTConfig) -> None:
    """`semantic_loss_ignore_index` must lie outside the classes: a class equal to it would never be trained or
    scored. Plain integers, no tensor: free in every forward."""
    ignore_index, num_labels = config.semantic_loss_ignore_index, config.num_labels
    if 0 <= ignore_index < num_labels:
        raise ValueError(
            f"`semantic_loss_ignore_index` ({ignore_index}) is one of the classes [0, {num_labels - 1}] "
            f"(`num_labels`={num_labels}): that class would never be trained or scored. Use a value outside them "
            "(255 or -100 are usual)."
        )


def check_segmentation_labels(labels: torch.Tensor, pixel_values: torch.Tensor, config: NeuTRENOViTConfig) -> None:
    """Shape, dtype and class checks of segmentation labels, with errors that name the field and the classes.

    Shapes and dtypes are metadata, checked always. The values are checked only on the CPU (as the data collator
    makes them): reading a device tensor's values into Python would wait for the device at every training step.
    """
    check_ignore_index(config)
    expected = (pixel_values.shape[0], *pixel_values.shape[-2:])
    if labels.ndim != 3 or tuple(labels.shape) != expected:
        raise ValueError(
            f"`labels` must be (batch, height, width) = {expected}, the size of `pixel_values` "
            f"{tuple(pixel_values.shape)}; got {tuple(labels.shape)}. Resize the label maps with the images "
            "(nearest neighbour), e.g. with the image processor's `segmentation_maps`."
        )
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"`labels` must hold integer class indices, got dtype {labels.dtype}.")
    if not values_checkable(labels):
        return
    ignore_index, num_labels = config.semantic_loss_ignore_index, config.num_labels
    outside = (labels != ignore_index) & ((labels < 0) | (labels >= num_labels))
    if outside.any():
        values = torch.unique(labels[outside]).tolist()
        raise ValueError(
            f"`labels` hold {values[:10]}{' ...' if len(values) > 10 else ''}, outside the classes "
            f"[0, {num_labels - 1}] (`num_labels`={num_labels}); only `semantic_loss_ignore_index` "
            f"({ignore_index}) may lie outside them."
        )


def _pair(name: str, value) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and v >= 1 for v in pair):
        raise ValueError(f"`{name}` must be an integer >= 1 or (height, width), got {value!r}.")
    return pair


def _window_starts(size: int, window: int, stride: int) -> list[int]:
    """Segmenter's window positions along one side: every `stride` pixels, then one flush with the far edge."""
    return list(range(0, size - window, stride)) + [size - window]


__all__ = [
    "NeuTRENOViTForImageClassification",
    "NeuTRENOViTForSemanticSegmentation",
    "NeuTRENOViTMaskTransformer",
    "NeuTRENOViTModel",
    "NeuTRENOViTPreTrainedModel",
]


def __getattr__(name: str):
    # A checkpoint saved with a value path names ``ValuePath<Class>`` of this file in its `auto_map`: built on use.
    from .value_path import sibling_attribute

    return sibling_attribute(name, globals())
