"""Configuration of the eigen-parameterised vision transformer (ViT⁻ / ViT⁺, Dovonon, Bronstein, Kusner)."""

import math
from typing import Literal

from huggingface_hub.dataclasses import strict, validated_field

from .configuration_neutreno_vit import NeuTRENOViTConfig
from .neutreno_common import check_layer_indices, neutreno_lambda_field
from .presets import EIGEN_VIT_PRESETS


def _eigenvalue_range_rule(value) -> None:
    if value is None:
        return
    bounds = list(value)
    if len(bounds) != 2 or not all(math.isfinite(b) for b in bounds) or not bounds[0] < bounds[1]:
        raise ValueError(
            f"`eigenvalue_range` must be a list [low, high] of two finite floats with low < high, got {bounds!r}."
        )


def _eigenvalue_init_rule(value) -> None:
    if not 0 < value < math.inf:  # also false for NaN
        raise ValueError(f"`eigenvalue_init` must be a finite float > 0 (|Λ| at initialisation), got {value!r}.")


@strict
class EigenViTConfig(NeuTRENOViTConfig):
    r"""
    Configuration of [`EigenViTModel`] and [`EigenViTForImageClassification`]: the NeuTRENO ViT's fields (same
    embeddings and blocks) plus the eigen-parameterisation of each head's value-output product
    ``H_h = W_V^h W_O^h = V_h diag(Λ_h) V_hᵀ`` with ``V_h = QR(Θ_h).Q`` and ``Λ_h = ±ψ_h²``.

    Eigen fields:
        spectrum_sign (`str`, defaults to `"negative"`): `"negative"` (ViT⁻, Λ = −ψ², the layer sharpens) or
            `"positive"` (ViT⁺, Λ = +ψ², the layer smooths).
        eigenvalue_range (`list[float]`, *optional*): ``[low, high]`` that Λ is clipped to, e.g. ``[-1, 0]``, the
            theorem's sufficient range for "negative". It must lie on the sign's side of 0 (``high <= 0`` for
            "negative", ``low >= 0`` for "positive") and have ``low < high``. Clipped eigenvalues get no gradient.
        eigen_layers (`list[int]`, *optional*): 0-based layers that are reparameterised (default: all); the others
            use the standard `v_proj` / `o_proj` attention.
        eigenvalue_init (`float`, defaults to 0.1): |Λ| at initialisation, the same for every eigenvalue
            (ψ = sqrt(eigenvalue_init)). 0.1 is about the gain of the attention branch of a standard-initialised
            ViT-Ti (initializer_range² × hidden_size ≈ 0.08). Must lie inside `eigenvalue_range` when that is set.
        neutreno_lambda (`float`, defaults to 0): the NeuTRENO term ``λ (V_0 − V)`` can be combined; off by default.

    A built model reads `spectrum_sign` and `eigenvalue_range` (with the NeuTRENO ViT's settings) at each forward,
    so editing them on `model.config` takes effect at once; `eigenvalue_init` only sets the initial weights. The rule
    across the three (the range on the sign's side, the initial value inside it) is checked where they are read, at
    each forward, so that both may be edited one after the other; a model whose fields break it refuses to run.

    Presets: `vit-tiny` (the poster's ViT-Ti for CIFAR: 32×32 images, patch 4), `vit-tiny-224` (patch 16, 224 px),
    and the NeuTRENO ViT's `deit-tiny`, `deit-small`, `deit-base`.
    """

    model_type = "eigen_vit"
    architecture_fields = (*NeuTRENOViTConfig.architecture_fields, "eigen_layers")
    layer_list_fields = {**NeuTRENOViTConfig.layer_list_fields, "eigen_layers": 0}
    presets = EIGEN_VIT_PRESETS

    neutreno_lambda: float | int = neutreno_lambda_field(0.0)
    spectrum_sign: Literal["negative", "positive"] = "negative"
    eigenvalue_range: list[float | int] | tuple[float | int, ...] | None = validated_field(
        _eigenvalue_range_rule, default=None
    )
    eigen_layers: list[int] | None = None
    eigenvalue_init: float | int = validated_field(_eigenvalue_init_rule, default=0.1)

    def __post_init__(self, **kwargs):
        if isinstance(self.eigenvalue_range, tuple):
            self.eigenvalue_range = list(self.eigenvalue_range)  # JSON round trips give lists
        super().__post_init__(**kwargs)

    def validate_eigen_parameterisation(self) -> None:
        check_layer_indices("eigen_layers", self.eigen_layers, self.num_hidden_layers)
        ablations = [name for name in ("symmetric_attention", "featscale") if getattr(self, name)]
        ablations += ["attention_kernel"] if self.attention_kernel != "softmax" else []
        if ablations:
            raise ValueError(
                f"EigenViT does not take the NeuTRENO ViT's attention ablations: set {ablations} to their defaults "
                "(symmetric_attention=False, featscale=False, attention_kernel='softmax'), or use NeuTRENOViTConfig."
            )

    def validate_spectrum(self) -> None:
        """`eigenvalue_range` on `spectrum_sign`'s side of 0, `eigenvalue_init` inside it. Run by `validate()`, and by
        the models wherever they read the two fields (at every forward; plain Python on two floats), since they are
        edited one at a time on a built model: each assignment alone cannot be held to the rule, and a model run with
        a range against its sign would smooth where it should sharpen, or have its eigenvalues clipped to 0."""
        if self.eigenvalue_range is None:
            return
        low, high = self.eigenvalue_range
        if (self.spectrum_sign == "negative" and high > 0) or (self.spectrum_sign == "positive" and low < 0):
            side = "high <= 0" if self.spectrum_sign == "negative" else "low >= 0"
            raise ValueError(
                f"`eigenvalue_range` crosses 0 against the sign: it must have {side} for "
                f"spectrum_sign={self.spectrum_sign!r}, got {list(self.eigenvalue_range)!r} (to change the sign, set "
                "`eigenvalue_range` to None or to a range on the new side as well)."
            )
        signed_init = self.eigenvalue_init if self.spectrum_sign == "positive" else -self.eigenvalue_init
        if not low <= signed_init <= high:
            raise ValueError(
                f"`eigenvalue_init` ({self.eigenvalue_init}) puts the initial eigenvalues at {signed_init}, outside "
                f"`eigenvalue_range` {list(self.eigenvalue_range)} (spectrum_sign={self.spectrum_sign!r}); choose "
                "|Λ| inside the range."
            )

    def is_eigen_layer(self, layer_idx: int) -> bool:
        return self.eigen_layers is None or layer_idx in self.eigen_layers


__all__ = ["EigenViTConfig"]
