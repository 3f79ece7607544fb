"""Eigen-parameterised vision transformer, ViT⁻ / ViT⁺ ("Setting the Record Straight on Transformer Oversmoothing",
Dovonon, Bronstein, Kusner): the first open implementation.

With tokens as rows, one attention head updates ``X ← X + A X H_h`` with ``H_h = W_V^h W_O^h``. Its spectrum decides
whether the layer smooths or sharpens. Here each head's H_h is a symmetric eigendecomposition with learnable Θ, ψ:

    V_h = QR(Θ_h).Q            Θ_h ∈ R^{hidden × head_dim}, orthonormal columns
    Λ_h = −ψ_h²  or  +ψ_h²      ("negative": ViT⁻, sharpening; "positive": ViT⁺, smoothing), optionally clipped
    W_V^h = V_h,  W_O^h = diag(Λ_h) V_hᵀ,   so  H_h = V_h diag(Λ_h) V_hᵀ

Everything else (embeddings, blocks, MLP, heads, the NeuTRENO term) is the NeuTRENO ViT's, reused as it is. Each
forward makes the value and output weights from Θ, ψ (one batched QR per layer) and stores nothing; for inference
without the QR, `to_neutreno_vit()` exports the same function as a NeuTRENO ViT whose `v_proj` / `o_proj` hold them.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""


import math

import torch
from torch import nn

from transformers import initialization as init

from .configuration_eigen_vit import EigenViTConfig
from .configuration_neutreno_vit import NeuTRENOViTConfig
from .modeling_neutreno_vit import (
    NeuTRENOViTAttention,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTLayer,
    NeuTRENOViTModel,
    NeuTRENOViTPreTrainedModel,
)
from .neutreno_common import neutreno_linear


def orthonormal_basis(theta: torch.Tensor) -> torch.Tensor:
    """Q of the QR decomposition ``Θ = Q R`` whose R has a nonnegative diagonal, batched over leading dimensions.

    That QR is unique (for full-rank Θ) and smooth in Θ, so V does not depend on the library's Householder sign
    convention. H = V diag(Λ) Vᵀ never does, but the values ``X V`` that the NeuTRENO term reuses would. QR runs in
    float32 for half-precision Θ (LAPACK / cuSOLVER have no half QR).
    """
    exact = theta.dtype in (torch.float32, torch.float64)
    q, r = torch.linalg.qr(theta if exact else theta.float())
    signs = torch.where(r.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(q.dtype)
    return (q * signs.unsqueeze(-2)).to(theta.dtype)


class EigenViTAttention(NeuTRENOViTAttention):
    """Self-attention whose value and output projections are ``V_h`` and ``diag(Λ_h) V_hᵀ`` per head.

    Queries, keys, the attention backends and the NeuTRENO term are the NeuTRENO ViT attention's; only the value and
    output weights differ, made by `value_output_weights` once per forward. Parameters: `theta` (heads, hidden,
    head_dim), `psi` (heads, head_dim) and `output_bias` (hidden). There is no value bias: A is row-stochastic, so a
    value bias would only add the same row to every token, which `output_bias` already represents. The output bias
    shifts every token by the same vector and leaves the linear map ``X ↦ A X H_h`` (whose spectrum is constrained)
    untouched.
    """

    def __init__(self, config: EigenViTConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        del self.v_proj, self.o_proj  # replaced by the eigen-parameterisation below
        self.num_heads = config.num_attention_heads
        self.theta = nn.Parameter(torch.empty(self.num_heads, config.hidden_size, self.head_dim))
        self.psi = nn.Parameter(torch.empty(self.num_heads, self.head_dim))
        self.output_bias = nn.Parameter(torch.zeros(config.hidden_size))
        self.sign = -1.0 if config.spectrum_sign == "negative" else 1.0
        self.eigenvalue_range = None if config.eigenvalue_range is None else tuple(config.eigenvalue_range)

    def eigenvalues(self) -> torch.Tensor:
        """Λ, (heads, head_dim): ``±ψ²``, clipped to `eigenvalue_range` when set."""
        eigenvalues = self.sign * self.psi.square()
        if self.eigenvalue_range is not None:
            eigenvalues = eigenvalues.clamp(*self.eigenvalue_range)
        return eigenvalues

    def eigenbasis(self) -> torch.Tensor:
        """V, (heads, hidden, head_dim) with orthonormal columns: one batched QR of Θ over all heads."""
        return orthonormal_basis(self.theta)

    def value_output_product(self) -> torch.Tensor:
        """H_h = W_V^h W_O^h = V_h diag(Λ_h) V_hᵀ, (heads, hidden, hidden): the map each head applies to ``A X``."""
        basis = self.eigenbasis()
        return (basis * self.eigenvalues().unsqueeze(1)) @ basis.transpose(1, 2)

    def value_output_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The merged value and output weights in `nn.Linear` layout, (heads·head_dim, hidden) and
        (hidden, heads·head_dim): row h·head_dim + k of the first is column k of V_h, the second is its transpose
        with each column scaled by Λ_hk."""
        value_weight = self.eigenbasis().transpose(1, 2).reshape(-1, self.theta.shape[1])  # QR's Q is column-major:
        # this is a view. Both weights are contiguous like `nn.Linear`'s, so the matmuls take the native model's path.
        return value_weight, (value_weight * self.eigenvalues().reshape(-1, 1)).t().contiguous()

    def project_values(self, hidden_states: torch.Tensor, weights) -> torch.Tensor:
        return nn.functional.linear(hidden_states, weights[0])

    def project_output(
        self, attn_output: torch.Tensor, values: torch.Tensor, first_layer_values: torch.Tensor | None, weights
    ) -> torch.Tensor:
        return neutreno_linear(
            weights[1], self.output_bias, attn_output, values, first_layer_values, self.neutreno_lambda
        )

    def extra_repr(self) -> str:
        clip = "" if self.eigenvalue_range is None else f", eigenvalue_range={list(self.eigenvalue_range)}"
        return f"heads={self.num_heads}, head_dim={self.head_dim}, sign={'-' if self.sign < 0 else '+'}{clip}"


# Config fields that only EigenViT has: what `to_neutreno_vit` leaves out.
_EIGEN_FIELDS = EigenViTConfig.__dataclass_fields__.keys() - NeuTRENOViTConfig.__dataclass_fields__.keys()


class EigenViTPreTrainedModel(NeuTRENOViTPreTrainedModel):
    config: EigenViTConfig
    _auto_classes = {
        "AutoModel": "EigenViTModel",
        "AutoModelForImageClassification": "EigenViTForImageClassification",
    }
    _neutreno_vit_class: type[NeuTRENOViTPreTrainedModel]  # what `to_neutreno_vit` returns

    @torch.no_grad()
    def to_neutreno_vit(self) -> NeuTRENOViTPreTrainedModel:
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
                value_weight, output_weight = module.value_output_weights()
                del state[f"{name}.theta"], state[f"{name}.psi"]
                state[f"{name}.v_proj.weight"] = value_weight
                if config.qkv_bias:
                    state[f"{name}.v_proj.bias"] = value_weight.new_zeros(value_weight.shape[0])
                state[f"{name}.o_proj.weight"] = output_weight
                state[f"{name}.o_proj.bias"] = state.pop(f"{name}.output_bias")
        model = self._neutreno_vit_class(config)
        model.load_state_dict(state)
        weight = next(self.parameters())
        return model.to(device=weight.device, dtype=weight.dtype).train(self.training)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Θ_h: a uniformly random orthonormal frame (the Q of a Gaussian matrix), so V_h = Θ_h and R = I at the start;
        ψ: sqrt(`eigenvalue_init`), so every Λ starts at ±`eigenvalue_init`; output bias: 0."""
        super()._init_weights(module)
        if isinstance(module, EigenViTAttention):
            if not getattr(module.theta, "_is_hf_initialized", False):
                gaussian = torch.randn(module.theta.shape, device=module.theta.device, dtype=torch.float32)
                init.copy_(module.theta, orthonormal_basis(gaussian))
            init.constant_(module.psi, math.sqrt(self.config.eigenvalue_init))
            init.zeros_(module.output_bias)


class EigenViTModel(EigenViTPreTrainedModel, NeuTRENOViTModel):
    """The NeuTRENO ViT backbone whose layers in `config.eigen_layers` (default: all) use `EigenViTAttention`."""

    _neutreno_vit_class = NeuTRENOViTModel

    def _make_layers(self, config: EigenViTConfig) -> list[nn.Module]:
        return [
            NeuTRENOViTLayer(config, i, attention=EigenViTAttention(config, i) if config.is_eigen_layer(i) else None)
            for i in range(config.num_hidden_layers)
        ]


class EigenViTForImageClassification(EigenViTPreTrainedModel, NeuTRENOViTForImageClassification):
    """EigenViT with a linear head on the pooled representation (CLS token or mean of patches)."""

    _base_model_class = EigenViTModel
    _neutreno_vit_class = NeuTRENOViTForImageClassification


__all__ = [
    "EigenViTAttention",
    "orthonormal_basis",
    "EigenViTForImageClassification",
    "EigenViTModel",
    "EigenViTPreTrainedModel",
]
