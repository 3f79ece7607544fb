"""Which eigenvalue dominates one attention layer: the analysis behind Table 1 of Dovonon, Bronstein, Kusner.

With tokens as rows, head h of a layer updates ``X ← X + A_h X H_h`` with ``H_h = W_V^h W_O^h``. In vec form that is
``I + H_hᵀ ⊗ A_h``, whose eigenvalues are ``1 + λ_j^H λ_i^A``. If the dominating one (largest modulus) pairs with the
eigenvalue 1 of the row-stochastic A (its constant eigenvector), repeating the layer smooths the tokens towards their
mean; if it pairs with A's smallest eigenvalue, the layer sharpens (no over-smoothing).
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

CATEGORIES = ("smoothing", "sharpening", "other", "tie")
SMOOTHING, SHARPENING, OTHER, TIE = range(4)


@dataclass
class SpectralDominance:
    """Result of `spectral_dominance`; one case per (layer, input, head).

    categories: (layers, inputs, heads) integers indexing `CATEGORIES`.
    dominant: (layers, inputs, heads) complex, the dominating candidate ``1 + λ_j^H λ_i^A``.
    layers: the 0-based layer index of each row. notes: what the analysed map leaves out for this model.
    """

    categories: torch.Tensor
    dominant: torch.Tensor
    layers: list[int]
    notes: list[str] = field(default_factory=list)

    def share(self, category: str, layer: int | None = None) -> float:
        """Fraction of cases (of one layer, or all) whose dominating eigenvalue falls in `category`."""
        if category not in CATEGORIES:
            raise ValueError(f"`category` must be one of {list(CATEGORIES)}, got {category!r}.")
        cases = self.categories if layer is None else self.categories[self.layers.index(layer)]
        return (cases == CATEGORIES.index(category)).double().mean().item()

    @property
    def smoothing_share(self) -> float:
        return self.share("smoothing")

    @property
    def sharpening_share(self) -> float:
        return self.share("sharpening")

    def to_dict(self) -> dict:
        per_layer = {layer: {c: self.share(c, layer) for c in CATEGORIES} for layer in self.layers}
        return {
            "cases": self.categories.numel(),
            "overall": {c: self.share(c) for c in CATEGORIES},
            "per_layer": per_layer,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        n_layers, n_inputs, n_heads = self.categories.shape
        lines = [
            "Dominating eigenvalue 1 + λ^H λ^A of I + H_hᵀ ⊗ A_h, partner of λ^H in A's spectrum "
            f"({n_layers} layers × {n_inputs} inputs × {n_heads} heads = {self.categories.numel()} cases)",
            f"{'layer':>6} " + " ".join(f"{c:>10}" for c in CATEGORIES),
        ]
        rows = [(str(layer), layer) for layer in self.layers] + [("all", None)]
        for name, layer in rows:
            lines.append(f"{name:>6} " + " ".join(f"{100 * self.share(c, layer):9.2f}%" for c in CATEGORIES))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _layers(model: nn.Module) -> nn.ModuleList:
    prefix = getattr(model, "base_model_prefix", "")
    base = getattr(model, prefix) if prefix and hasattr(model, prefix) else model
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError(
            f"{type(model).__name__} is not supported: `spectral_dominance` takes this package's ViTs "
            "(NeuTRENO ViT, EigenViT) and transformers' ViT/DeiT models (a backbone with `.layers`)."
        )
    return layers


def head_factors(attention: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_V^h, W_O^h) of every head: (heads, hidden, head_dim) and (heads, head_dim, hidden), H_h = W_V^h W_O^h.

    For `nn.Linear` projections W_V^h = v_proj.weight[h-slice]ᵀ and W_O^h = o_proj.weight[:, h-slice]ᵀ; for an
    eigen-parameterised head W_V^h = V_h and W_O^h = diag(Λ_h) V_hᵀ.
    """
    if hasattr(attention, "eigenbasis") and hasattr(attention, "eigenvalues"):
        basis = attention.eigenbasis()
        return basis, attention.eigenvalues().unsqueeze(-1) * basis.transpose(1, 2)
    if not (hasattr(attention, "v_proj") and hasattr(attention, "o_proj")):
        raise ValueError(f"{type(attention).__name__} has neither `v_proj`/`o_proj` nor an eigen-parameterisation.")
    heads, head_dim = attention.config.num_attention_heads, attention.head_dim
    hidden = attention.o_proj.weight.shape[0]
    value = attention.v_proj.weight.view(heads, head_dim, -1).transpose(1, 2)
    output = attention.o_proj.weight.view(hidden, heads, head_dim).permute(1, 2, 0)
    return value, output


def _eigvals(matrices: torch.Tensor) -> torch.Tensor:
    """Batched eigenvalues with numpy's LAPACK: independent small problems, where MKL's multi-threaded `geev` (behind
    `torch.linalg.eigvals` on CPU) slowed down 100-fold on a busy 2-core machine."""
    return torch.from_numpy(np.linalg.eigvals(matrices.detach().cpu().numpy()))


def _attention_maps(model: nn.Module, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Eager attention maps of every layer, in eval mode; the model's backend and mode are restored afterwards."""
    config = model.config
    if getattr(config, "attention_kernel", "softmax") != "softmax":
        raise ValueError("`spectral_dominance` needs softmax attention maps; `attention_kernel='linear'` has none.")
    backend, was_training = config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    try:
        with torch.no_grad():
            outputs = model(pixel_values=pixel_values, output_attentions=True)
    finally:
        model.set_attn_implementation(backend)
        model.train(was_training)
    if not outputs.attentions:
        raise ValueError(f"{type(model).__name__} returned no attention maps with `output_attentions=True`.")
    return outputs.attentions


@torch.no_grad()
def spectral_dominance(model: nn.Module, pixel_values: torch.Tensor, tol: float = 1e-9) -> SpectralDominance:
    r"""Classify, per (layer, input, head), which eigenvalue of ``I + H_hᵀ ⊗ A_h`` dominates (Table 1 of the poster).

    Works for `NeuTRENOViT*`, `EigenViT*` and transformers' `ViT*`/`DeiT*` models (classifier or backbone).
    Convention: tokens are rows, one head maps ``X ↦ X + A_h X H_h`` with ``H_h = W_V^h W_O^h`` (see `head_factors`).

    For each case:

    - λ^H: the eigenvalues of the head_dim × head_dim matrix ``W_O^h W_V^h``. These are exactly the nonzero
      eigenvalues of the rank-head_dim matrix H_h (AB and BA share their nonzero spectrum), so H's hidden − head_dim
      structural zeros, whose candidates are exactly 1, are left out without any numerical thresholding.
    - λ^A: the eigenvalues of the head's eager attention map A_h (eval mode, no dropout) for that input.
    - candidates ``1 + λ_j^H λ_i^A`` for all i, j; the dominating modulus is M = max |candidate|.

    Complex eigenvalues (A and, for unconstrained models, H are not symmetric) are used as they are: moduli of complex
    candidates are compared; nothing is projected to the real line. A's eigenvalues are named by their real part:
    the *largest* is the one with the largest real part (the Perron root, = 1 for a row-stochastic A, with the
    constant eigenvector); the *smallest* are those whose real part is within `tol` of the minimum (so both members of
    a complex-conjugate pair count). The *partners* are the i with ``max_j |1 + λ_j^H λ_i^A| >= M (1 − tol)``. A case is

    - "smoothing" if the only partner is the largest eigenvalue,
    - "sharpening" if every partner is a smallest one,
    - "other" if every partner is neither (only possible with complex eigenvalues: for real ones |1 + λ^H λ^A| is
      convex in λ^A, so its maximum sits at an end of A's spectrum),
    - "tie" if the partners fall into more than one of these groups.

    Ties among the λ^H (e.g. all of a head's Λ equal at initialisation) never matter: only A's partner is classified.
    Each head is its own case (the poster's single-H formulation counts (layer, input) cases); everything runs in
    float64 (eigenvalues on the CPU), with all inputs in one forward pass, so pass a few dozen images at a time.
    The analysed map is the attention path only, as in the poster: biases (a constant row added to every token),
    LayerNorm, the MLP and, where present, NeuTRENO's ``λ (V_0 − V)`` term and FeatScale are outside it; `notes`
    lists those that apply.

    Args:
        model: the ViT (its attention backend is switched to eager for the call and restored).
        pixel_values: (inputs, channels, height, width), already processed for the model.
        tol: relative tolerance for ties in modulus, and absolute tolerance on the real parts of A's eigenvalues
            (which lie in the unit disk) for the "smallest" ones.
    """
    layers = _layers(model)
    attentions = _attention_maps(model, pixel_values)
    if len(attentions) != len(layers):
        raise ValueError(f"Got {len(attentions)} attention maps for {len(layers)} layers.")
    notes, categories, dominant = [], [], []
    for index, (layer, attn_map) in enumerate(zip(layers, attentions)):
        attention = layer.attention
        if getattr(attention, "neutreno_lambda", 0.0):
            notes.append(f"layer {index} adds NeuTRENO's λ (V_0 − V) term, which the analysed map leaves out")
        if getattr(attention.config, "featscale", False):
            notes.append(f"layer {index} applies FeatScale after H, which the analysed map leaves out")
        value, output = head_factors(attention)
        category, modulus = _classify(_eigvals(output.double() @ value.double()), _eigvals(attn_map.double()), tol)
        categories.append(category)
        dominant.append(modulus)
    return SpectralDominance(torch.stack(categories), torch.stack(dominant), list(range(len(layers))), notes)


def _classify(eig_h: torch.Tensor, eig_a: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's cases: each (input, head)'s category and dominating candidate, from the eigenvalues of its heads'
    ``W_O^h W_V^h`` (heads, head_dim) and of its attention maps (inputs, heads, tokens), as `spectral_dominance`
    defines them."""
    candidates = 1 + eig_h[None, :, None, :] * eig_a[..., None]  # (inputs, heads, tokens, head_dim)
    modulus = candidates.abs()
    best_per_partner = modulus.amax(dim=-1)  # (inputs, heads, tokens)
    best = best_per_partner.amax(dim=-1, keepdim=True)
    partners = best_per_partner >= best * (1 - tol)

    real = eig_a.real
    largest = nn.functional.one_hot(real.argmax(dim=-1), real.shape[-1]).bool()
    smallest = (real <= real.amin(dim=-1, keepdim=True) + tol) & ~largest
    groups = torch.stack(
        [(partners & largest).any(-1), (partners & smallest).any(-1), (partners & ~largest & ~smallest).any(-1)],
        dim=-1,
    )  # (inputs, heads, 3): smoothing, sharpening, other
    category = torch.where(groups.sum(-1) > 1, TIE, groups.int().argmax(-1))
    flat = modulus.flatten(-2).argmax(-1, keepdim=True)
    return category, candidates.flatten(-2).gather(-1, flat).squeeze(-1)


__all__ = ["CATEGORIES", "SpectralDominance", "head_factors", "spectral_dominance"]
