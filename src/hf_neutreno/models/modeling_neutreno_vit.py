"""NeuTRENO vision transformer (Nguyen, Nguyen, Baraniuk, NeurIPS 2023), in the layout of `transformers`' ViT.

Every layer after the first adds ``λ (V_0 − V_ℓ)`` to its attention output, per head and before the output
projection, where V_0 are layer 0's values. Parameter names equal the native ViT's (`vit.layers.N.attention.q_proj`,
...), so native ViT/DeiT weights load as they are and PEFT finds `q_proj`/`v_proj`.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""


from collections.abc import Callable

import torch
from torch import nn

from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_neutreno_vit import NeuTRENOViTConfig
from .neutreno_common import add_auto_map, eager_attention_forward, neutreno_lambda_for_layer, neutreno_projection


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
        patch_pos = nn.functional.interpolate(
            patch_pos.float(), size=new_grid, mode="bicubic", align_corners=False
        ).to(patch_pos.dtype)
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, -1, dim)
        return torch.cat((prefix, patch_pos), dim=1)

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        batch_size, _, height, width = pixel_values.shape
        image_size = self.patch_embeddings.image_size
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


class NeuTRENOViTAttention(nn.Module):
    """Multi-head self-attention with the NeuTRENO term; returns (output, attention maps, this layer's values)."""

    def __init__(self, config: NeuTRENOViTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False  # SDPA otherwise defaults to a causal mask
        self.attention_dropout = config.attention_probs_dropout_prob
        self.neutreno_lambda = neutreno_lambda_for_layer(config, layer_idx)
        inner = config.num_attention_heads * self.head_dim
        if not config.symmetric_attention:
            self.q_proj = nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, inner, bias=config.qkv_bias)
        self.o_proj = nn.Linear(inner, config.hidden_size, bias=True)
        if config.featscale:
            self.featscale_low = nn.Parameter(torch.zeros(config.hidden_size))
            self.featscale_high = nn.Parameter(torch.zeros(config.hidden_size))

    def value_output_weights(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The value and output weights handed to `project_values` and `project_output`, made once per forward.

        None here: those call the `v_proj` / `o_proj` modules (so wrappers such as LoRA apply). EigenViT builds its
        weights from Θ, ψ.
        """
        return None

    def project_values(self, hidden_states: torch.Tensor, weights) -> torch.Tensor:
        """Values with merged heads, (batch, tokens, heads * head_dim): the V of ``λ (V_0 − V)``."""
        return self.v_proj(hidden_states)

    def project_output(
        self, attn_output: torch.Tensor, values: torch.Tensor, first_layer_values: torch.Tensor | None, weights
    ) -> torch.Tensor:
        """The output projection of ``A V + λ (V_0 − V)`` (merged heads)."""
        return neutreno_projection(self.o_proj, attn_output, values, first_layer_values, self.neutreno_lambda)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states = (
            key_states
            if self.config.symmetric_attention
            else self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        )
        weights = self.value_output_weights()
        values = self.project_values(hidden_states, weights)
        value_states = values.view(hidden_shape).transpose(1, 2)

        if self.config.attention_kernel == "linear":
            attention_interface: Callable = linear_attention_forward
        else:
            attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
                self.config._attn_implementation, eager_attention_forward
            )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        attn_output = self.project_output(attn_output.reshape(*input_shape, -1), values, first_layer_values, weights)

        if self.config.featscale:
            mean = attn_output.mean(dim=1, keepdim=True)
            attn_output = attn_output + self.featscale_low * mean + self.featscale_high * (attn_output - mean)
        return attn_output, attn_weights, values


class NeuTRENOViTMLP(nn.Module):
    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__()
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


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

    `attention` lets other models (EigenViT) reuse the block with another attention module.
    """

    def __init__(self, config: NeuTRENOViTConfig, layer_idx: int, attention: nn.Module | None = None):
        super().__init__()
        self.attention = attention if attention is not None else NeuTRENOViTAttention(config, layer_idx)
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = NeuTRENOViTMLP(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        rate = config.drop_path_rate * layer_idx / max(config.num_hidden_layers - 1, 1)
        self.drop_path = NeuTRENOViTDropPath(rate) if rate > 0 else nn.Identity()

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        attn_output, _, values = self.attention(
            self.layernorm_before(hidden_states), attention_mask, first_layer_values, **kwargs
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


class NeuTRENOViTPreTrainedModel(PreTrainedModel):
    config: NeuTRENOViTConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["NeuTRENOViTEmbeddings", "NeuTRENOViTLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    _can_record_outputs = {"hidden_states": NeuTRENOViTLayer, "attentions": NeuTRENOViTAttention}
    _auto_classes = {
        "AutoModel": "NeuTRENOViTModel",
        "AutoModelForImageClassification": "NeuTRENOViTForImageClassification",
    }

    def __init__(self, config: NeuTRENOViTConfig, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        add_auto_map(config, self, self._auto_classes)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        std = self.config.initializer_range
        if isinstance(module, NeuTRENOViTEmbeddings):
            init.trunc_normal_(module.position_embeddings, mean=0.0, std=std)
            init.trunc_normal_(module.cls_token, mean=0.0, std=std)
            if module.distillation_token is not None:
                init.trunc_normal_(module.distillation_token, mean=0.0, std=std)
        elif isinstance(module, NeuTRENOViTAttention) and module.config.featscale:
            init.zeros_(module.featscale_low)  # FeatScale starts as the identity
            init.zeros_(module.featscale_high)


class NeuTRENOViTModel(NeuTRENOViTPreTrainedModel):
    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__(config)
        config.validate()  # the config may have been edited after construction
        self.embeddings = NeuTRENOViTEmbeddings(config)
        self.layers = nn.ModuleList(self._make_layers(config))
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def _make_layers(self, config: NeuTRENOViTConfig) -> list[nn.Module]:
        return [NeuTRENOViTLayer(config, i) for i in range(config.num_hidden_layers)]

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings.patch_embeddings

    def pool(self, sequence_output: torch.Tensor) -> torch.Tensor:
        """The image representation: the CLS token, or the mean of the patch tokens (`config.pooling`)."""
        if self.config.pooling == "mean":
            return sequence_output[:, self.config.num_prefix_tokens :].mean(dim=1)
        return sequence_output[:, 0]

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
        if pixel_values is None:
            raise ValueError("`pixel_values` is required.")
        if pixel_values.ndim != 4:
            height, width = self.config.image_size_2d
            raise ValueError(
                "`pixel_values` must have shape (batch, num_channels, height, width), here "
                f"(batch, {self.config.num_channels}, {height}, {width}); got {tuple(pixel_values.shape)}."
            )
        expected_dtype = self.embeddings.patch_embeddings.projection.weight.dtype
        pixel_values = pixel_values.to(expected_dtype)
        hidden_states = self.embeddings(pixel_values, interpolate_pos_encoding=bool(interpolate_pos_encoding))
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        first_layer_values = None
        for layer in self.layers:
            hidden_states, values = layer(hidden_states, attention_mask, first_layer_values, **kwargs)
            if first_layer_values is None:
                first_layer_values = values
        sequence_output = self.layernorm(hidden_states)
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=self.pool(sequence_output))


class NeuTRENOViTForImageClassification(NeuTRENOViTPreTrainedModel):
    _base_model_class = NeuTRENOViTModel

    def __init__(self, config: NeuTRENOViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = self._base_model_class(config)
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


__all__ = [
    "NeuTRENOViTForImageClassification",
    "NeuTRENOViTModel",
    "NeuTRENOViTPreTrainedModel",
]
