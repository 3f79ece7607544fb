"""NeuTRENO GPT causal language model (Nguyen, Nguyen, Baraniuk, NeurIPS 2023), in the layout of `transformers`' Llama.

Every layer after the first adds ``λ (V_0 − V_ℓ)`` to its attention output, per head and before the output
projection, where V_0 are layer 0's values of the same tokens. The term is token-wise, so under the KV cache only
the current tokens' V_0 is needed, and layer 0 computes it in the same forward pass: no extra cache.

The output layer is a plain `nn.Linear` or, for large word vocabularies, a tied adaptive log-softmax
([`NeuTRENOGPTAdaptiveLogSoftmax`]); both expose `lm_head.weight` of shape (vocab, hidden), tied to the input
embeddings. Names follow Llama (`model.embed_tokens`, `model.layers.N.self_attn.o_proj`, `lm_head`), except that the
queries, keys and values come from one fused projection, `self_attn.qkv_proj` (as GPT-2's `c_attn` and Phi-3's
`qkv_proj`): one matrix product where three would cost three times the kernels. Checkpoints store it as `q_proj`,
`k_proj` and `v_proj`, the layout of earlier versions of this file, so old and new checkpoints load either way:
`from_pretrained` joins them through transformers' checkpoint conversion, registered below, and writes them
apart again on saving; `load_state_dict` joins them in the attention module's own hook.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import Concatenate, WeightConverter
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, slice_logits_to_keep
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_neutreno_gpt import NeuTRENOGPTConfig
from .neutreno_common import (
    NeuTRENOLayerLambda,
    NeuTRENOPreTrainedMixin,
    built_fields,
    check_built_fields,
    eager_attention_forward,
    neutreno_attention,
    values_checkable,
)

# transformers 5.24 renamed the KV cache `past_key_values` -> `cache` (forward arguments, output fields, masks; the
# old name is deprecated until 5.40) and its `generate` passes only the new name. A checkpoint carries this file to
# users of either version: the forwards take `cache` and, through transformers' `deprecate_kwarg`, the old name, and
# the outputs hold the cache under the installed version's field name.
CACHE_FIELD = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
# From 5.24 the old name warns until 5.40, as in transformers' own models; before 5.24 it is the current name (the one
# `generate` passes), so it is renamed without a warning (a version already reached turns the warning off).
accepts_past_key_values = deprecate_kwarg(
    "past_key_values", "5.40.0" if CACHE_FIELD == "cache" else "5.0.0", new_name="cache", raise_if_both_names=True
)


# q/k/v stored apart (every checkpoint's layout) and fused in the model: one conversion, which `from_pretrained`
# applies and `save_pretrained` reverses. Its patterns name the modules, not `.weight`/`.bias`, so that it matches
# the weights of every model and the biases of a model that has them (a bias pattern of its own would match nothing
# where `attention_bias=False`). Registered for this model type only (overwrite: this file may be imported twice, as
# the package's module and as a checkpoint's remote code).
SEPARATE_PROJECTIONS = ("q_proj", "k_proj", "v_proj")
register_checkpoint_conversion_mapping(
    "neutreno_gpt",
    [
        WeightConverter(
            source_patterns=[f"self_attn.{name}" for name in SEPARATE_PROJECTIONS],
            target_patterns="self_attn.qkv_proj",
            operations=[Concatenate(dim=0)],
        )
    ],
    overwrite=True,
)


class NeuTRENOGPTScaledEmbedding(nn.Embedding):
    """Token embeddings times `embed_scale` (√hidden_size in the paper's Transformer-XL code, 1 in GPT-2)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeddings = super().forward(input_ids)
        return embeddings if self.embed_scale == 1.0 else embeddings * self.embed_scale


class NeuTRENOGPTSinusoidalPositionEmbedding(nn.Module):
    """``[sin(p ω), cos(p ω)]`` with ``ω_i = 10000^(−2i/d)`` (Transformer-XL's layout), computed from the position ids.

    No parameters and no buffers: nothing to save, resize or move between devices.
    """

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.embedding_dim = embedding_dim

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        exponent = torch.arange(0, self.embedding_dim, 2, device=position_ids.device, dtype=torch.float32)
        inv_freq = 1.0 / (10000 ** (exponent / self.embedding_dim))
        angles = position_ids.float().unsqueeze(-1) * inv_freq
        return torch.cat((angles.sin(), angles.cos()), dim=-1)

    def extra_repr(self) -> str:
        return f"embedding_dim={self.embedding_dim}"


class NeuTRENOGPTAttention(NeuTRENOLayerLambda, nn.Module):
    """Causal multi-head self-attention with the NeuTRENO term; returns (output, attention maps, this layer's values).

    The values returned are the current tokens' (before the cache is appended), merged over heads: exactly the
    V_0 that later layers need for the same tokens. λ is the layer's `neutreno_lambda`, read from the config at each
    forward.
    """

    def __init__(self, config: NeuTRENOGPTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        self.inner_size = config.num_attention_heads * self.head_dim
        # rows: the queries', then the keys', then the values' projection
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * self.inner_size, bias=config.attention_bias)
        self.o_proj = nn.Linear(self.inner_size, config.hidden_size, bias=config.attention_bias)
        self._register_load_state_dict_pre_hook(_join_separate_projections, with_module=True)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states, key_states, values = self.qkv_proj(hidden_states).split(self.inner_size, dim=-1)
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = values.view(hidden_shape).transpose(1, 2)

        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
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
            values,  # this call's tokens only, as layer 0's V_0: the term is token-wise
            first_layer_values,
            self.neutreno_lambda,
            # The term as plain autograd operations, without the backend's output rebuilt in the backward pass: a
            # language model's training memory is its logits', next to which that copy is about 1 %, and on small
            # shapes the rebuild's host time per layer costs more than its GPU time saves.
            recompute_saved=False,
        )
        attn_output = self.o_proj(attn_output.reshape(*input_shape, -1))
        return attn_output, attn_weights, values


def _join_separate_projections(module, state_dict, prefix, *args) -> None:
    """`load_state_dict` pre-hook: a state dict with `q_proj`, `k_proj`, `v_proj` (as checkpoints store them, and as
    Trainer's resume reads a checkpoint) gets them joined into `qkv_proj`, in place."""
    for kind in ("weight", "bias"):
        keys = [f"{prefix}{name}.{kind}" for name in SEPARATE_PROJECTIONS]
        if all(key in state_dict for key in keys):
            state_dict[f"{prefix}qkv_proj.{kind}"] = torch.cat([state_dict.pop(key) for key in keys])


class NeuTRENOGPTMLP(nn.Module):
    def __init__(self, config: NeuTRENOGPTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation_fn = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.activation_dropout)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.activation_fn(self.fc1(hidden_states))))


class NeuTRENOGPTDecoderLayer(GradientCheckpointingLayer):
    """Attention and MLP blocks, LayerNorm before (GPT-2) or after (the paper) each residual sum.

    Returns (hidden_states, values): layer 0's values, which the model hands to later layers as V_0 (None from the
    other layers).
    """

    def __init__(self, config: NeuTRENOGPTConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.self_attn = NeuTRENOGPTAttention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = NeuTRENOGPTMLP(config)
        self.mlp_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        residual = hidden_states
        if self.pre_norm:
            hidden_states = self.self_attn_layer_norm(hidden_states)
        attn_output, _, values = self.self_attn(
            hidden_states, attention_mask, first_layer_values, cache=cache, **kwargs
        )
        if first_layer_values is not None:
            values = None  # only layer 0's values (V_0) are used later: free the others before the MLP runs
        hidden_states = residual + self.dropout(attn_output)
        del attn_output  # free it before the MLP (the inference peak): this offsets keeping V_0 through the layers
        if not self.pre_norm:
            hidden_states = self.self_attn_layer_norm(hidden_states)

        residual = hidden_states
        if self.pre_norm:
            hidden_states = self.mlp_layer_norm(hidden_states)
        hidden_states = residual + self.dropout(self.mlp(hidden_states))
        if not self.pre_norm:
            hidden_states = self.mlp_layer_norm(hidden_states)
        return hidden_states, values


class NeuTRENOGPTAdaptiveLogSoftmax(nn.Module):
    """Tied adaptive log-softmax (Grave et al. 2017) for large word vocabularies, as the paper's Transformer-XL code.

    The algorithm of `torch.nn.AdaptiveLogSoftmaxWithLoss` with `div_value=1` and no tail projections, so every
    token's output row is a row of `weight` (vocab, hidden), which can be tied to the input embeddings:

    - the head scores the shortlist ``[0, cutoffs[0])`` and one logit per tail cluster (`cluster_weight`);
    - tail cluster ``i`` covers ``[cutoffs[i], cutoffs[i+1])`` (the last ends at the vocabulary size); a token's
      log-probability is its cluster's head log-probability plus its log-softmax within the cluster.

    `forward` returns exact log-probabilities over the whole vocabulary (what `generate` needs as logits);
    `nll` computes ``−log p(target)`` from the head and, per cluster, only the rows whose target falls in it, so
    training never materialises a (tokens × vocab) matrix.
    """

    def __init__(self, hidden_size: int, vocab_size: int, cutoffs: list[int], bias: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.cutoffs = list(cutoffs)
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs)
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if bias else None
        self.cluster_weight = nn.Parameter(torch.empty(self.n_clusters, hidden_size))
        self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters)) if bias else None

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, cutoffs={self.cutoffs}, bias={self.bias is not None}"

    def _logits(self, hidden_states: torch.Tensor, start: int, end: int) -> torch.Tensor:
        bias = None if self.bias is None else self.bias[start:end]
        return F.linear(hidden_states, self.weight[start:end], bias)

    def head_log_probs(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the shortlist tokens and of each tail cluster, (..., shortlist + clusters), fp32."""
        # One matmul on the concatenated rows: concatenating (hidden × rows) weights is cheaper than concatenating
        # (tokens × rows) scores.
        weight = torch.cat((self.weight[: self.shortlist_size], self.cluster_weight))
        bias = None if self.bias is None else torch.cat((self.bias[: self.shortlist_size], self.cluster_bias))
        return F.linear(hidden_states, weight, bias).float().log_softmax(dim=-1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over the whole vocabulary, (..., vocab_size), fp32."""
        head = self.head_log_probs(hidden_states)
        pieces = [head[..., : self.shortlist_size]]
        bounds = self.cutoffs + [self.vocab_size]
        for i in range(self.n_clusters):
            tail = self._logits(hidden_states, bounds[i], bounds[i + 1]).float().log_softmax(dim=-1)
            pieces.append(tail + head[..., self.shortlist_size + i, None])
        return torch.cat(pieces, dim=-1)

    def nll(self, hidden_states: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``−log p(target)`` per row for hidden states (N, hidden) and targets (N,) in [0, vocab_size), fp32."""
        head = self.head_log_probs(hidden_states)
        head_index = target.clone()  # shortlist targets are their own head column
        tail_log_prob = head.new_zeros(target.shape[0])
        bounds = self.cutoffs + [self.vocab_size]
        for i in range(self.n_clusters):
            start, end = bounds[i], bounds[i + 1]
            rows = ((target >= start) & (target < end)).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            tail = self._logits(hidden_states.index_select(0, rows), start, end).float().log_softmax(dim=-1)
            picked = tail.gather(1, (target.index_select(0, rows) - start).unsqueeze(1)).squeeze(1)
            tail_log_prob = tail_log_prob.index_copy(0, rows, picked)
            head_index = head_index.index_fill(0, rows, self.shortlist_size + i)
        return -(head.gather(1, head_index.unsqueeze(1)).squeeze(1) + tail_log_prob)


def adaptive_causal_lm_loss(
    lm_head: NeuTRENOGPTAdaptiveLogSoftmax,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """`transformers`' `ForCausalLMLoss` (shift, ignore_index, `num_items_in_batch`) for an adaptive head."""
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    hidden_states = hidden_states.reshape(-1, hidden_states.shape[-1])
    targets = shift_labels.reshape(-1).to(hidden_states.device)
    scored = targets != ignore_index
    nll = lm_head.nll(hidden_states[scored], targets[scored])
    if num_items_in_batch is None:
        return nll.mean()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(nll.device)
    return nll.sum() / num_items_in_batch


def check_input_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """Token ids must lie in [0, vocab_size - 1]; the error names them (the embedding's own is "index out of range
    in self"). Checked where `values_checkable`: on the CPU, not under torch.compile or torch.func (elsewhere the
    embedding kernel still stops at a bad id)."""
    if not values_checkable(input_ids) or input_ids.numel() == 0:
        return
    if input_ids.min() < 0 or input_ids.max() >= vocab_size:
        bad = torch.unique(input_ids[(input_ids < 0) | (input_ids >= vocab_size)]).tolist()
        raise ValueError(
            f"`input_ids` hold {bad[:10]}{' ...' if len(bad) > 10 else ''}, outside the vocabulary "
            f"[0, {vocab_size - 1}] (`vocab_size`={vocab_size}). Encode the text with the model's tokenizer."
        )


def check_labels(labels: torch.Tensor, inputs: torch.Tensor, vocab_size: int) -> None:
    """Labels are next-token targets for every input position: (batch, tokens) like `input_ids` (shapes are metadata,
    checked always), ids in the vocabulary or -100 (values, checked where `values_checkable`, as `check_input_ids`)."""
    expected = tuple(inputs.shape[:2])
    if tuple(labels.shape) != expected:
        raise ValueError(
            f"`labels` must have the shape of `input_ids`, (batch, tokens) = {expected}; got {tuple(labels.shape)}. "
            "They are shifted inside the model: pass `labels=input_ids` (or a copy with -100 where no loss is wanted)."
        )
    if not values_checkable(labels) or labels.numel() == 0:
        return
    outside = (labels != -100) & ((labels < 0) | (labels >= vocab_size))
    if outside.any():
        bad = torch.unique(labels[outside]).tolist()
        raise ValueError(
            f"`labels` hold {bad[:10]}{' ...' if len(bad) > 10 else ''}, outside the vocabulary [0, {vocab_size - 1}] "
            f"(`vocab_size`={vocab_size}); only -100 (ignored) may lie outside it."
        )


class NeuTRENOGPTPreTrainedModel(NeuTRENOPreTrainedMixin, PreTrainedModel):
    config: NeuTRENOGPTConfig
    base_model_prefix = "model"
    input_modalities = ("text",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["NeuTRENOGPTDecoderLayer"]
    _skip_keys_device_placement = ["cache", "past_key_values"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {"hidden_states": NeuTRENOGPTDecoderLayer, "attentions": NeuTRENOGPTAttention}
    _auto_classes = {"AutoModel": "NeuTRENOGPTModel", "AutoModelForCausalLM": "NeuTRENOGPTForCausalLM"}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, NeuTRENOGPTAdaptiveLogSoftmax):
            std = self.config.initializer_range
            init.normal_(module.weight, mean=0.0, std=std)
            init.normal_(module.cluster_weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
                init.zeros_(module.cluster_bias)


class NeuTRENOGPTModel(NeuTRENOGPTPreTrainedModel):
    def __init__(self, config: NeuTRENOGPTConfig):
        super().__init__(config)
        config.validate()  # the config may have been edited after construction
        self.built_fields = built_fields(config, config.architecture_fields)
        embed_scale = config.hidden_size**0.5 if config.scale_embeddings else 1.0
        self.embed_tokens = NeuTRENOGPTScaledEmbedding(config.vocab_size, config.hidden_size, embed_scale)
        if config.position_embedding_type == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.embed_positions = NeuTRENOGPTSinusoidalPositionEmbedding(config.hidden_size)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.layers = nn.ModuleList(
            [NeuTRENOGPTDecoderLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)]
        )
        # Post-LN blocks already end normalised; pre-LN stacks end with one LayerNorm (GPT-2's ln_f).
        self.norm = (
            nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            if config.norm_position == "pre"
            else nn.Identity()
        )
        self.gradient_checkpointing = False  # set by `activation_checkpointing_enable`; the forward reads it
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed_tokens = value

    @staticmethod
    def position_ids_from_attention_mask(
        attention_mask: torch.Tensor | None, past_seen_tokens: int, seq_length: int, device: torch.device
    ) -> torch.Tensor:
        """Positions that count only attended tokens, so a left-padded sequence gets the positions it has alone.

        With a 2-D mask covering the cache and the new tokens, as `generate` computes them (cumsum − 1); otherwise
        ``past_seen_tokens + arange(seq_length)``.
        """
        if attention_mask is not None and attention_mask.ndim == 2:
            if attention_mask.shape[-1] == past_seen_tokens + seq_length:
                position_ids = attention_mask.long().cumsum(-1) - 1
                position_ids = position_ids.masked_fill(attention_mask == 0, 1)
                return position_ids[:, -seq_length:].to(device)
        return (torch.arange(seq_length, device=device) + past_seen_tokens).unsqueeze(0)

    def _check_lengths(self, inputs_embeds: torch.Tensor, attention_mask, past_seen_tokens: int) -> None:
        """The cache and the new tokens fit the positions, and a 2-D padding mask covers both."""
        seq_length = inputs_embeds.shape[1]
        if past_seen_tokens + seq_length > self.config.max_position_embeddings:
            raise ValueError(
                f"The sequence has {past_seen_tokens + seq_length} tokens (cache included), more than "
                f"`max_position_embeddings`={self.config.max_position_embeddings} allows. Shorten it (e.g. a sliding "
                "window of the training context), or, with sinusoidal positions, raise `max_position_embeddings`."
            )
        # A prepared 4-D mask is used as given.
        if attention_mask is not None and len(attention_mask.shape) != 4:
            expected = (inputs_embeds.shape[0], past_seen_tokens + seq_length)
            if tuple(attention_mask.shape) != expected:
                raise ValueError(
                    f"`attention_mask` has shape {tuple(attention_mask.shape)}; the inputs need (batch, past + "
                    f"tokens) = {expected} ({past_seen_tokens} cached and {seq_length} new tokens)."
                )

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPast:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch, tokens)`): token ids (or pass `inputs_embeds`, which the
            model takes as already scaled token embeddings).
        attention_mask (`torch.Tensor` of shape `(batch, past + tokens)`, *optional*): 1 for real tokens, 0 for
            padding; without `position_ids`, positions count only the real tokens (left padding is exact).
        position_ids (`torch.LongTensor` of shape `(batch, tokens)`, *optional*): positions of the tokens.
        cache (`Cache`, *optional*): the keys and values of earlier tokens (a `DynamicCache`); also taken as
            `past_key_values`, its name before transformers 5.24.
        """
        check_built_fields(self.config, self.built_fields)
        self.config.validate_neutreno_layers()  # read below; an in-place edit of the list passed no check
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")
        if inputs_embeds is None:
            check_input_ids(input_ids, self.config.vocab_size)
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            cache = None  # the backward replay of a checkpointed layer would write its keys and values a second time

        seq_length = inputs_embeds.shape[1]
        past_seen_tokens = cache.get_seq_length() if cache is not None else 0
        self._check_lengths(inputs_embeds, attention_mask, past_seen_tokens)
        if position_ids is None:
            position_ids = self.position_ids_from_attention_mask(
                attention_mask, past_seen_tokens, seq_length, inputs_embeds.device
            )

        # The cache is the fourth parameter under either of its names (see CACHE_FIELD).
        causal_mask = create_causal_mask(self.config, inputs_embeds, attention_mask, cache, position_ids=position_ids)
        position_embeddings = self.embed_positions(position_ids).to(inputs_embeds.dtype)
        hidden_states = self.dropout(inputs_embeds + position_embeddings)

        first_layer_values = None
        for layer in self.layers:
            hidden_states, values = layer(
                hidden_states,
                causal_mask,
                first_layer_values,
                cache=cache,
                use_cache=use_cache,
                position_ids=position_ids,
                **kwargs,
            )
            if first_layer_values is None:
                first_layer_values = values
        hidden_states = self.norm(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, **{CACHE_FIELD: cache if use_cache else None})


class NeuTRENOGPTForCausalLM(NeuTRENOGPTPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: NeuTRENOGPTConfig):
        super().__init__(config)
        self.model = NeuTRENOGPTModel(config)
        self.output_dropout = nn.Dropout(config.output_dropout)
        if config.adaptive_softmax_cutoffs:
            self.lm_head = NeuTRENOGPTAdaptiveLogSoftmax(
                config.hidden_size, config.vocab_size, config.adaptive_softmax_cutoffs, bias=config.lm_head_bias
            )
        else:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=config.lm_head_bias)
        self.post_init()

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    @property
    def uses_adaptive_softmax(self) -> bool:
        return isinstance(self.lm_head, NeuTRENOGPTAdaptiveLogSoftmax)

    def resize_token_embeddings(self, *args, **kwargs):
        if self.uses_adaptive_softmax:
            raise ValueError(
                "`resize_token_embeddings` cannot resize an adaptive softmax (its clusters are fixed token-id ranges); "
                "build a new model with the new `vocab_size` and `adaptive_softmax_cutoffs` instead."
            )
        return super().resize_token_embeddings(*args, **kwargs)

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        r"""
        labels (`torch.LongTensor` of shape `(batch, tokens)`, *optional*): next-token targets, shifted inside the
            model as in every `transformers` causal LM (`labels = input_ids` works); -100 is ignored.
        logits_to_keep (`int` or `torch.Tensor`, defaults to 0): compute logits only for the last `logits_to_keep`
            positions (0: all), or for the given positions.

        With an adaptive softmax, `logits` are exact log-probabilities over the vocabulary, and when `labels` are
        given the loss is computed from the needed output rows only and `logits` is `None` (the full
        (tokens × vocab) matrix is what the adaptive softmax exists to avoid; call without labels to get it).
        """
        if labels is not None:
            check_labels(labels, input_ids if input_ids is not None else inputs_embeds, self.config.vocab_size)
        outputs: BaseModelOutputWithPast = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = self.output_dropout(outputs.last_hidden_state)

        logits = loss = None
        if labels is not None and self.uses_adaptive_softmax:
            loss = adaptive_causal_lm_loss(self.lm_head, hidden_states, labels, **kwargs)
        else:
            logits = self.lm_head(slice_logits_to_keep(hidden_states, logits_to_keep))
            if labels is not None:
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)

        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = [
    "NeuTRENOGPTAdaptiveLogSoftmax",
    "NeuTRENOGPTForCausalLM",
    "NeuTRENOGPTModel",
    "NeuTRENOGPTPreTrainedModel",
]


def __getattr__(name: str):
    # A checkpoint saved with a value path names ``ValuePath<Class>`` of this file in its `auto_map`: built on use.
    from .value_path import sibling_attribute

    return sibling_attribute(name, globals())
