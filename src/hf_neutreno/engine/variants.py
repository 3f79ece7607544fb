"""The variant registry: every attention variant the package trains, compares or measures, by its one name.

    from hf_neutreno.engine.variants import VARIANTS, build_variant
    VARIANTS["value-residual"].method          # 'value_residual', the `apply_value_path` rule
    build_variant(model, "neutreno-learnable", coefficient=0.0)   # a learnable λ per layer, from 0

A variant is one of:

- ``softmax``: the model as it is (λ = 0), the baseline every other variant is compared with;
- ``neutreno``: NeuTRENO (Nguyen, Nguyen, Baraniuk, NeurIPS 2023), ``U_ℓ = A_ℓ V_ℓ + λ (V_0 − V_ℓ)``, built into
  this package's models (``config.neutreno_lambda``) and put on any other transformers model by `apply_value_path`;
- ``neutreno-learnable``, ``value-residual``, ``value-residual-learnable``, ``value-residual-gate``: the value paths
  of `apply_value_path` (ResFormer's value residual mixes ``(1 − α) V_ℓ + α V_0``; ``-learnable``: one trainable
  coefficient per layer; ``-gate``: α = sigmoid(W x + b) per token and key/value head, x-transformers' learned mix);
- ``twicing``: twicing attention (Abdullaev & Nguyen, ICLR 2025), ``(2A − A²) V = A V + A (V − A V)``, a second
  attention call per layer that needs no V_0, also by `apply_value_path`;
- ``xsa``, ``xsa-learnable``: exclusive self-attention (Zhai, 2026), each token's output without its component
  along its own value; ``value-embedding``, ``value-embedding-learnable``, ``value-embedding-gate``: a token-embedding
  table per layer added to the values (modded-nanogpt, nanochat; causal language models only);
- ``vit-minus``, ``vit-plus``: the eigen-parameterised ViT⁻ and ViT⁺ (Dovonon, Bronstein, Kusner),
  ``W_V W_proj = V diag(∓ψ²) Vᵀ``, which only an image preset of this package can build (a different
  parameterisation, not a rule on loaded weights).

The coefficient defaults are `apply_value_path`'s (`hf_neutreno.value_path.DEFAULT_COEFFICIENTS`) for a transformers
model, and the preset's own λ for this package's presets. A learnable coefficient on a *pretrained* model starts at
its variant's `pretrained_start` (0, the pretrained function; 0.01 for the gate, whose sigmoid cannot start at 0), so
that fine-tuning measures what the remedy adds rather than the damage of switching it on.
"""

import dataclasses
from typing import TYPE_CHECKING

from ..models.value_path_defaults import DEFAULT_COEFFICIENTS, LEARNABLE_STARTS

if TYPE_CHECKING:
    import torch

BASELINE = "softmax"  # what every other variant is compared with, seed by seed
# A learnable coefficient on a pretrained model starts here: the remedy switched on computes the pretrained function.
PRETRAINED_LEARNABLE_START = 0.0


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of a comparison.

    `method` is the `apply_value_path` rule (None: the model as built; its coefficient is λ for "neutreno", α for
    "value_residual"), `learnable` whether the coefficient trains, and `description` the text shown for it, with
    `{coefficient}` filled in."""

    name: str
    description: str
    method: str | None = None
    learnable: bool | str = False  # True: a scalar per layer; "gate": per token and head (`apply_value_path`)
    preset_only: bool = False  # a parameterisation only this package's presets build (ViT⁻)
    pretrained_start: float = PRETRAINED_LEARNABLE_START  # a learnable coefficient's start on a pretrained model

    def describe(self, coefficient: float | None) -> str:
        return self.description.format(coefficient=coefficient if coefficient is not None else 0.0)


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("softmax", "softmax, λ=0"),
        Variant("neutreno", "NeuTRENO, λ={coefficient:g}", "neutreno"),
        Variant("neutreno-learnable", "NeuTRENO, learnable λ from {coefficient:g}", "neutreno", True),
        Variant("value-residual", "value residual, α={coefficient:g}", "value_residual"),
        Variant("value-residual-learnable", "value residual, learnable α from {coefficient:g}", "value_residual", True),
        # x-transformers' learned mix: a sigmoid gate, which can start near α = 0 but not at it
        Variant(
            "value-residual-gate",
            "value residual, α gated per token and head, from {coefficient:g}",
            "value_residual",
            "gate",
            pretrained_start=0.01,
        ),
        Variant("twicing", "twicing attention, A V + {coefficient:g} A (V − A V)", "twicing"),
        Variant("xsa", "exclusive self-attention, s={coefficient:g}", "xsa"),
        Variant("xsa-learnable", "exclusive self-attention, learnable s from {coefficient:g}", "xsa", True),
        Variant("value-embedding", "value embeddings, g={coefficient:g}", "value_embedding"),
        Variant(
            "value-embedding-learnable", "value embeddings, learnable g from {coefficient:g}", "value_embedding", True
        ),
        # nanochat's gate, 2 g₀ σ(W x[..., :12]), starts at g₀ > 0
        Variant(
            "value-embedding-gate",
            "value embeddings, g gated per token and head, from {coefficient:g}",
            "value_embedding",
            "gate",
            pretrained_start=0.01,
        ),
        Variant("vit-minus", "ViT⁻, Λ=−ψ²", preset_only=True),  # the poster's eigen-parameterised ViT
        Variant("vit-plus", "ViT⁺, Λ=+ψ²", preset_only=True),
    )
}
# `compare`'s variants when none are given. A preset, or a model trained from scratch, has no function to keep: NeuTRENO
# at its λ against softmax. A pretrained model has one: the learnable remedies start at it (0), so that what they
# learn, not the shock of switching them on, is what the table measures.
PRESET_VARIANTS = ("softmax", "neutreno")
PRETRAINED_VARIANTS = ("softmax", "neutreno-learnable", "value-residual-learnable")


def default_variants(pretrained: bool) -> tuple[str, ...]:
    return PRETRAINED_VARIANTS if pretrained else PRESET_VARIANTS


VALUE_PATH_VARIANTS = tuple(name for name, variant in VARIANTS.items() if variant.method is not None)
ANY_MODEL_VARIANTS = tuple(name for name, variant in VARIANTS.items() if not variant.preset_only)


def default_coefficient(variant: str, *, pretrained: bool = False, preset_lambda: float | None = None) -> float | None:
    """The coefficient `variant` uses when none is given: a preset's own λ for NeuTRENO on this package's presets,
    the variant's `pretrained_start` for a learnable coefficient on a pretrained model, else `apply_value_path`'s."""
    entry = VARIANTS[variant]
    if entry.method is None:
        return None
    if pretrained and entry.learnable:
        return entry.pretrained_start
    if entry.method == "neutreno" and preset_lambda is not None:
        return preset_lambda
    if entry.learnable is True and entry.method in LEARNABLE_STARTS:
        return LEARNABLE_STARTS[entry.method]
    return DEFAULT_COEFFICIENTS[entry.method]


def build_variant(
    model: "torch.nn.Module", variant: str, coefficient: float | None = None, layers: list[int] | None = None
) -> "torch.nn.Module":
    """`model` as `variant`: returned as it is for ``softmax``, adapted in place with `apply_value_path` for a value
    path (`coefficient` None: `apply_value_path`'s default; `layers` None: its default layers). ViT⁻ is built by the
    presets, not from a model."""
    entry = VARIANTS[variant]
    if entry.preset_only:
        raise ValueError(f"Variant {variant!r} is a parameterisation of this package's presets, not a value path.")
    if entry.method is None:
        if layers is not None:
            raise ValueError(f"Variant {variant!r} has no value path to put on layers {layers}.")
        return model
    from ..models.value_path import apply_value_path  # torch: imported here so that the registry's names need none

    return apply_value_path(model, entry.method, coefficient, learnable=entry.learnable, layers=layers)


def check_variant_names(names, allowed=tuple(VARIANTS), flag: str = "--variants") -> list[str]:
    """The distinct names of `names`, or `ValueError` naming `flag`, the unknown names and the allowed ones."""
    names = list(dict.fromkeys(names))
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise ValueError(f"{flag}: choose from {list(allowed)}" + (f"; unknown: {unknown}." if unknown else "."))
    return names


__all__ = [
    "ANY_MODEL_VARIANTS",
    "BASELINE",
    "PRETRAINED_LEARNABLE_START",
    "VALUE_PATH_VARIANTS",
    "VARIANTS",
    "Variant",
    "build_variant",
    "PRESET_VARIANTS",
    "PRETRAINED_VARIANTS",
    "check_variant_names",
    "default_coefficient",
    "default_variants",
]
