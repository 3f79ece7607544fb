"""Eigen-parameterised vision transformer, ViT⁻ / ViT⁺ ("Setting the Record Straight on Transformer Oversmoothing",
Dovonon, Bronstein, Kusner): the first open implementation.

With tokens as rows, one attention head updates ``X ← X + A X H_h`` with ``H_h = W_V^h W_O^h``. Its spectrum decides
whether the layer smooths or sharpens. Here each head's H_h is a symmetric eigendecomposition with learnable Θ, ψ:

    V_h = QR(Θ_h).Q            Θ_h ∈ R^{hidden × head_dim}, orthonormal columns
    Λ_h = −ψ_h²  or  +ψ_h²      ("negative": ViT⁻, sharpening; "positive": ViT⁺, smoothing), optionally clipped
    W_V^h = V_h,  W_O^h = diag(Λ_h) V_hᵀ,   so  H_h = V_h diag(Λ_h) V_hᵀ

Everything else (embeddings, blocks, MLP, heads, the NeuTRENO term) is the NeuTRENO ViT's, reused as it is.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and siblings.
"""


import math

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from transformers import initialization as init
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .configuration_eigen_vit import EigenViTConfig
from .neutreno_common import neutreno_residual
from .modeling_neutreno_vit import (
    NeuTRENOViTAttention,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTLayer,
    NeuTRENOViTModel,
    NeuTRENOViTPreTrainedModel,
)

# Fused optimizers (`AdamW(fused=True)`) update parameters without bumping `tensor._version`, so the eval-mode cache
# also keys on a global count of optimizer steps.
_optimizer_steps = 0


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


register_optimizer_step_post_hook(_count_optimizer_step)


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

    Queries, keys, the attention backends and the NeuTRENO term are the NeuTRENO ViT attention's; only
    `project_values` / `project_output` change. Parameters: `theta` (heads, hidden, head_dim), `psi`
    (heads, head_dim) and `output_bias` (hidden). There is no value bias: A is row-stochastic, so a value bias would
    only add the same row to every token, which `output_bias` already represents. The output bias shifts every token
    by the same vector and leaves the linear map ``X ↦ A X H_h`` (whose spectrum is constrained) untouched.

    The eigenbasis (one batched QR over heads) is recomputed on every training-mode forward and on every forward
    that may need gradients for Θ, ψ. Other eval-mode forwards (under `torch.no_grad` / `inference_mode`, or with Θ, ψ
    frozen) reuse a cached one until Θ or ψ change: the cache keys on the parameters' identity, storage, `_version`
    (optimizer steps and `load_state_dict` are in-place) and the global optimizer-step count, and `train()`/`eval()`
    clear it. In-place edits through `param.data` are invisible to it: call `clear_eigenbasis_cache()` after those.
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
        self._eigenbasis_cache: tuple[tuple, tuple[torch.Tensor, torch.Tensor]] | None = None
        self._projections: tuple[torch.Tensor, torch.Tensor] | None = None

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

    def _compute_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Merged value and output weights in `nn.Linear` layout: (heads·head_dim, hidden), (hidden, heads·head_dim)."""
        basis = self.eigenbasis()
        columns = basis.transpose(0, 1).reshape(basis.shape[1], -1)  # [V_1 | V_2 | ...], (hidden, heads·head_dim)
        # Both contiguous in `nn.Linear` layout: QR returns column-major factors, and a transposed weight would send
        # every matmul down a different (on some CPUs slower) GEMM path than the native model's.
        return columns.t().contiguous(), (columns * self.eigenvalues().reshape(1, -1)).contiguous()

    def projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The value and output weights, from the eval-mode cache when no gradient can flow to Θ, ψ."""
        needs_grad = torch.is_grad_enabled() and (self.theta.requires_grad or self.psi.requires_grad)
        if self.training or needs_grad or torch.compiler.is_compiling():
            return self._compute_projections()
        key = (_optimizer_steps,) + tuple(
            (id(p), p.data_ptr(), p._version, p.dtype, p.device) for p in (self.theta, self.psi)
        )
        if self._eigenbasis_cache is None or self._eigenbasis_cache[0] != key:
            # Ordinary tensors even inside `inference_mode`, so a later grad-enabled forward can still use them.
            with torch.inference_mode(False), torch.no_grad():
                value_weight, output_weight = self._compute_projections()
            self._eigenbasis_cache = (key, (value_weight, output_weight))
        return self._eigenbasis_cache[1]

    def clear_eigenbasis_cache(self) -> None:
        self._eigenbasis_cache = None

    def train(self, mode: bool = True):
        self.clear_eigenbasis_cache()
        return super().train(mode)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        first_layer_values: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        # One QR per forward, shared by `project_values` and `project_output`.
        self._projections = self.projections()
        try:
            return super().forward(hidden_states, attention_mask, first_layer_values, **kwargs)
        finally:
            self._projections = None

    def project_values(self, hidden_states: torch.Tensor) -> torch.Tensor:
        value_weight, _ = self._projections if self._projections is not None else self.projections()
        return nn.functional.linear(hidden_states, value_weight)

    def project_output(
        self, attn_output: torch.Tensor, values: torch.Tensor, first_layer_values: torch.Tensor | None
    ) -> torch.Tensor:
        _, output_weight = self._projections if self._projections is not None else self.projections()
        attn_output = neutreno_residual(attn_output, values, first_layer_values, self.neutreno_lambda)
        return nn.functional.linear(attn_output, output_weight, self.output_bias)

    def extra_repr(self) -> str:
        clip = "" if self.eigenvalue_range is None else f", eigenvalue_range={list(self.eigenvalue_range)}"
        return f"heads={self.num_heads}, head_dim={self.head_dim}, sign={'-' if self.sign < 0 else '+'}{clip}"


class EigenViTPreTrainedModel(NeuTRENOViTPreTrainedModel):
    config: EigenViTConfig
    _auto_classes = {
        "AutoModel": "EigenViTModel",
        "AutoModelForImageClassification": "EigenViTForImageClassification",
    }

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

    def _make_layers(self, config: EigenViTConfig) -> list[nn.Module]:
        return [
            NeuTRENOViTLayer(config, i, attention=EigenViTAttention(config, i) if config.is_eigen_layer(i) else None)
            for i in range(config.num_hidden_layers)
        ]


class EigenViTForImageClassification(EigenViTPreTrainedModel, NeuTRENOViTForImageClassification):
    """EigenViT with a linear head on the pooled representation (CLS token or mean of patches)."""

    _base_model_class = EigenViTModel


__all__ = [
    "EigenViTAttention",
    "orthonormal_basis",
    "EigenViTForImageClassification",
    "EigenViTModel",
    "EigenViTPreTrainedModel",
]
