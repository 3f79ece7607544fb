"""Eigen-parameterised vision transformer, ViT⁻ / ViT⁺ ("Setting the Record Straight on Transformer Oversmoothing",
Dovonon, Bronstein, Kusner): the first open implementation.

With tokens as rows, one attention head updates ``X ← X + A X H_h`` with ``H_h = W_V^h W_O^h``. Its spectrum decides
whether the layer smooths or sharpens. Here each head's H_h is a symmetric eigendecomposition with learnable Θ, ψ:

    V_h = QR(Θ_h).Q            Θ_h ∈ R^{hidden × head_dim}, orthonormal columns
    Λ_h = −ψ_h²  or  +ψ_h²      ("negative": ViT⁻, sharpening; "positive": ViT⁺, smoothing), optionally clipped
    W_V^h = V_h,  W_O^h = diag(Λ_h) V_hᵀ,   so  H_h = V_h diag(Λ_h) V_hᵀ

Everything else (embeddings, blocks, MLP, pooling, queries and keys, the NeuTRENO term) is the NeuTRENO ViT's, whose
modules this file uses as they are. Every forward makes the value and output weights of all layers from Θ, ψ with one
batched QR (`EigenViTModel.eigen_weights`). `to_neutreno_vit()` exports the same function as a NeuTRENO ViT whose
`v_proj` / `o_proj` hold them.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_eigen_vit import EigenViTConfig
from .configuration_neutreno_vit import NeuTRENOViTConfig
from .modeling_neutreno_vit import (
    NeuTRENOViTAttention,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTLayer,
    NeuTRENOViTModel,
    NeuTRENOViTPreTrainedModel,
    NeuTRENOViTSelfAttention,
)


def orthonormal_basis(theta: torch.Tensor) -> torch.Tensor:
    """Q of the QR decomposition ``Θ = Q R`` whose R has a nonnegative diagonal, batched over leading dimensions.

    That QR is unique (for full-rank Θ) and smooth in Θ, so V does not depend on the library's Householder sign
    convention. H = V diag(Λ) Vᵀ never does, but the values ``X V`` that the NeuTRENO term reuses would. QR runs in
    float32 for half-precision Θ (LAPACK / cuSOLVER have no half QR).
    """
    exact = theta.dtype in (torch.float32, torch.float64)
    q, r = torch.linalg.qr(theta if exact else theta.float())
    # ±1 by the sign of R's diagonal (never 0, so Q stays orthonormal even where R is singular); no gradient here
    diagonal = r.diagonal(dim1=-2, dim2=-1).detach()
    signs = torch.ones_like(diagonal).copysign(diagonal)
    return (q * signs.unsqueeze(-2)).to(theta.dtype)


def eigenvalues(psi: torch.Tensor, config: EigenViTConfig) -> torch.Tensor:
    """Λ = ``±ψ²`` (the sign from `config.spectrum_sign`), clipped to `config.eigenvalue_range` when set. The two
    fields are read here at every forward, so the rule across them is checked here too (`validate_spectrum`)."""
    config.validate_spectrum()
    values = psi.square() if config.spectrum_sign == "positive" else psi.square().neg()
    if config.eigenvalue_range is not None:
        values = values.clamp(*config.eigenvalue_range)
    return values


def value_and_output_weights(
    theta: torch.Tensor, psi: torch.Tensor, config: EigenViTConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """The value and output weights in `nn.Linear`'s (out, in) shape from Θ (..., heads, hidden, head_dim) and ψ
    (..., heads, head_dim), batched over the leading dimensions: (..., heads·head_dim, hidden) and
    (..., hidden, heads·head_dim)."""
    basis = orthonormal_basis(theta)
    # QR's Q is column-major, so the transpose is contiguous and this reshape a view. The output weight stays the
    # transpose of a contiguous tensor: BLAS takes either layout in one call, and a copy would cost a kernel per step.
    value_weight = basis.transpose(-1, -2).flatten(-3, -2)
    output_weight = (value_weight * eigenvalues(psi, config).flatten(-2, -1).unsqueeze(-1)).transpose(-1, -2)
    return value_weight, output_weight


class EigenViTAttention(NeuTRENOViTSelfAttention):
    """Self-attention whose value and output projections are ``V_h`` and ``diag(Λ_h) V_hᵀ`` per head.

    Queries, keys, the attention backends and the NeuTRENO term are the NeuTRENO ViT's ([`NeuTRENOViTSelfAttention`]);
    the value and output weights are made from Θ, ψ once per forward. Parameters: `q_proj`, `k_proj`, `theta` (heads,
    hidden, head_dim), `psi` (heads, head_dim) and `output_bias` (hidden). There is no value bias: A is row-stochastic,
    so a value bias would only add the same row to every token, which `output_bias` already represents. The output
    bias shifts every token by the same vector and leaves the linear map ``X ↦ A X H_h`` (whose spectrum is
    constrained) untouched. `spectrum_sign` and `eigenvalue_range` are read from the config at each forward.
    """

    def __init__(self, config: EigenViTConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.num_heads = config.num_attention_heads
        self.theta = nn.Parameter(torch.empty(self.num_heads, config.hidden_size, self.head_dim))
        self.psi = nn.Parameter(torch.empty(self.num_heads, self.head_dim))
        self.output_bias = nn.Parameter(torch.zeros(config.hidden_size))

    def eigenvalues(self) -> torch.Tensor:
        """Λ, (heads, head_dim): ``±ψ²``, clipped to `eigenvalue_range` when set."""
        return eigenvalues(self.psi, self.config)

    def eigenbasis(self) -> torch.Tensor:
        """V, (heads, hidden, head_dim) with orthonormal columns: one batched QR of Θ over all heads."""
        return orthonormal_basis(self.theta)

    def value_output_product(self) -> torch.Tensor:
        """H_h = W_V^h W_O^h = V_h diag(Λ_h) V_hᵀ, (heads, hidden, hidden): the map each head applies to ``A X``."""
        basis = self.eigenbasis()
        return (basis * self.eigenvalues().unsqueeze(1)) @ basis.transpose(1, 2)

    def value_and_output_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The merged value and output weights in `nn.Linear`'s (out, in) shape, (heads·head_dim, hidden) and
        (hidden, heads·head_dim): row h·head_dim + k of the first is column k of V_h, the second is its transpose
        with each column scaled by Λ_hk. (The model makes those of all its layers at once: `eigen_weights`.)"""
        return value_and_output_weights(self.theta, self.psi, self.config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        eigen_weights: tuple[torch.Tensor, torch.Tensor] | None = None,
        recompute_saved: bool = True,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """`eigen_weights`: this layer's (value, output) weights, which the model makes for all layers at once;
        without them the layer makes its own. `recompute_saved`: see `neutreno_attention`."""
        value_weight, output_weight = eigen_weights if eigen_weights is not None else self.value_and_output_weights()
        values = nn.functional.linear(hidden_states, value_weight)
        attn_output, attn_weights = self.attend(
            hidden_states, values, attention_mask, first_layer_values, recompute_saved, **kwargs
        )
        attn_output = nn.functional.linear(attn_output, output_weight, self.output_bias)
        return attn_output, attn_weights, values

    def extra_repr(self) -> str:
        clip = self.config.eigenvalue_range
        clip = "" if clip is None else f", eigenvalue_range={list(clip)}"
        sign = "-" if self.config.spectrum_sign == "negative" else "+"
        return f"heads={self.num_heads}, head_dim={self.head_dim}, sign={sign}{clip}"


# Config fields that only EigenViT has: what `to_neutreno_vit` leaves out.
_EIGEN_FIELDS = EigenViTConfig.__dataclass_fields__.keys() - NeuTRENOViTConfig.__dataclass_fields__.keys()


class EigenViTPreTrainedModel(NeuTRENOViTPreTrainedModel):
    """The NeuTRENO ViT's base class for `EigenViTConfig` (as `EigenViTConfig` extends `NeuTRENOViTConfig`): its
    blocks, embeddings and checks before saving, plus the initialisation of Θ and ψ and the export to the NeuTRENO
    ViT. Weight decay (`hf_neutreno.examples.weight_decay`) exempts the NeuTRENO ViT's position embeddings and
    tokens (`_no_weight_decay`, inherited) and the tensors of ndim <= 1; Θ and ψ (ndim 3 and 2) are decayed like any
    weight matrix, a choice: the poster publishes no code or recipe that says otherwise."""

    config: EigenViTConfig
    _can_record_outputs = {"hidden_states": NeuTRENOViTLayer, "attentions": [EigenViTAttention, NeuTRENOViTAttention]}
    _auto_classes = {
        "AutoModel": "EigenViTModel",
        "AutoModelForImageClassification": "EigenViTForImageClassification",
    }

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """As the NeuTRENO ViT, and Θ_h: a uniformly random orthonormal frame (the Q of a Gaussian matrix), so
        V_h = Θ_h and R = I at the start; ψ: sqrt(`eigenvalue_init`), so every Λ starts at ±`eigenvalue_init`; output
        bias: 0."""
        super()._init_weights(module)
        if isinstance(module, EigenViTAttention):
            if not getattr(module.theta, "_is_hf_initialized", False):
                gaussian = torch.randn(module.theta.shape, device=module.theta.device, dtype=torch.float32)
                init.copy_(module.theta, orthonormal_basis(gaussian))
            init.constant_(module.psi, math.sqrt(self.config.eigenvalue_init))
            init.zeros_(module.output_bias)

    @torch.no_grad()
    def to_neutreno_vit(self) -> NeuTRENOViTModel | NeuTRENOViTForImageClassification:
        """The same function as a NeuTRENO ViT (`NeuTRENOViTModel` / `NeuTRENOViTForImageClassification`): inference
        without the per-forward QR, and a checkpoint any NeuTRENO ViT tooling reads.

        Each eigen layer's `v_proj` gets V (bias 0) and `o_proj` diag(Λ) Vᵀ (bias `output_bias`), merged over heads;
        every other weight, the config (minus the eigen fields) and the NeuTRENO λ and layers are carried over. The
        export no longer constrains the spectrum if it is trained further.
        """
        fields = self.config.to_dict()
        for name in (*_EIGEN_FIELDS, "model_type", "auto_map", "architectures", "transformers_version"):
            fields.pop(name, None)
        config = NeuTRENOViTConfig(**fields)
        config._attn_implementation = self.config._attn_implementation
        state = self.state_dict()
        for name, module in self.named_modules():
            if isinstance(module, EigenViTAttention):
                value_weight, output_weight = module.value_and_output_weights()
                del state[f"{name}.theta"], state[f"{name}.psi"]
                state[f"{name}.v_proj.weight"] = value_weight
                if config.qkv_bias:
                    state[f"{name}.v_proj.bias"] = value_weight.new_zeros(value_weight.shape[0])
                state[f"{name}.o_proj.weight"] = output_weight
                state[f"{name}.o_proj.bias"] = state.pop(f"{name}.output_bias")
        if isinstance(self, EigenViTForImageClassification):
            model = NeuTRENOViTForImageClassification(config)
        else:
            model = NeuTRENOViTModel(config)
        model.load_state_dict(state)
        weight = next(self.parameters())
        return model.to(device=weight.device, dtype=weight.dtype).train(self.training)


class EigenViTModel(EigenViTPreTrainedModel, NeuTRENOViTModel):
    """The NeuTRENO ViT backbone whose blocks in `config.eigen_layers` (default: all) use `EigenViTAttention`; the
    other blocks use the standard `v_proj` / `o_proj` attention. Everything else is [`NeuTRENOViTModel`]'s."""

    def layer_attention(self, config: EigenViTConfig, layer_idx: int) -> nn.Module | None:
        return EigenViTAttention(config, layer_idx) if config.is_eigen_layer(layer_idx) else None

    def layer_kwargs(self, kwargs: dict) -> list[dict]:
        """Each eigen block's call also gets its (value, output) weights, from one batched QR over all of them. Under
        activation checkpointing each block makes its own inside its checkpointed call instead: a recompute must not
        share one graph with the other blocks (with `use_reentrant=True`, each block's backward pass would free it)."""
        if self.training and any(getattr(layer, "gradient_checkpointing", False) for layer in self.layers):
            return [kwargs] * len(self.layers)
        weights = iter(self.eigen_weights())
        return [
            kwargs | {"eigen_weights": next(weights)} if isinstance(layer.attention, EigenViTAttention) else kwargs
            for layer in self.layers
        ]

    def eigen_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(value, output) weights of every eigen layer, in layer order, from one batched QR over all of them.

        Made at every forward, with or without gradients, and never kept: a kept copy would go stale after an edit
        that bypasses the version counter (`p.data.copy_`, as EMA and weight averaging do). For inference without
        the QR, export the model (`to_neutreno_vit`), whose weights hold the result.
        """
        attentions = [layer.attention for layer in self.layers if isinstance(layer.attention, EigenViTAttention)]
        if not attentions:
            return []
        theta = torch.stack([attention.theta for attention in attentions])
        psi = torch.stack([attention.psi for attention in attentions])
        # unbind, not indexing: one kernel for the gradients of all layers in the backward pass, not one per layer
        return list(zip(*(w.unbind() for w in value_and_output_weights(theta, psi, self.config))))


class EigenViTForImageClassification(EigenViTPreTrainedModel, NeuTRENOViTForImageClassification):
    """EigenViT with a linear head on the pooled representation (CLS token or mean of patches): the NeuTRENO ViT's
    head on [`EigenViTModel`]."""

    backbone_class = EigenViTModel


__all__ = [
    "EigenViTAttention",
    "orthonormal_basis",
    "EigenViTForImageClassification",
    "EigenViTModel",
    "EigenViTPreTrainedModel",
]


def __getattr__(name: str):
    # A checkpoint saved with a value path names ``ValuePath<Class>`` of this file in its `auto_map`: built on use.
    from .value_path import sibling_attribute

    return sibling_attribute(name, globals())
