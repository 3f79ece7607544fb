"""`spectral_dominance`: the poster's Table 1 analysis, checked against a brute-force Kronecker computation.

The brute force builds the full ``I + H_hᵀ ⊗ A_h`` (hidden·tokens square) with numpy for a tiny native ViT and
classifies every case with plain loops, independently of the vectorised code. Tolerances: eigenvalues of
non-symmetric float64 matrices agree to ~1e-12 here; 1e-6 leaves room for their conditioning.
"""

import numpy as np
import pytest
import torch
from transformers import DeiTConfig, DeiTForImageClassification, ViTConfig, ViTForImageClassification, ViTModel

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)
from hf_neutreno.diagnostics import spectral_dominance
from hf_neutreno.diagnostics.spectral import CATEGORIES


@pytest.fixture(scope="module")
def cifar_pixels(data_dir) -> torch.Tensor:
    """Eight real CIFAR-10 test images, processed as the models expect (32×32, normalised)."""
    from transformers import ViTImageProcessorPil

    from hf_neutreno.data.loading import get_split, image_and_label_columns, load_image_dataset

    dataset = load_image_dataset(data_dir / "cifar10")
    image_col, _ = image_and_label_columns(dataset)
    images = list(get_split(dataset, "test").select(range(8))[image_col])
    processor = ViTImageProcessorPil(size={"height": 32, "width": 32})
    return processor(images, return_tensors="pt")["pixel_values"]


def tiny_native_vit(seed: int = 0) -> ViTForImageClassification:
    """A native ViT whose heads have mixed-sign, complex H spectra and sharp attention, so all categories occur."""
    torch.manual_seed(seed)
    shape = dict(hidden_size=8, num_hidden_layers=3, num_attention_heads=2, intermediate_size=16, image_size=8)
    config = ViTConfig(**shape, patch_size=4, initializer_range=0.5)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():
        for layer in model.vit.layers:
            attention = layer.attention
            noise = 0.3 * torch.randn_like(attention.o_proj.weight)
            attention.o_proj.weight.copy_(-0.3 * attention.v_proj.weight.T + noise)
    return model


def brute_force_case(H: np.ndarray, A: np.ndarray, head_dim: int, tol: float = 1e-9) -> str:
    """The documented rule, with loops: nonzero λ^H, all λ^A, partners of the largest |1 + λ^H λ^A|."""
    eig_h = np.linalg.eigvals(H)
    eig_h = eig_h[np.argsort(-np.abs(eig_h))[:head_dim]]  # H has rank head_dim: drop its numerical zeros
    eig_a = np.linalg.eigvals(A)
    best = [max(abs(1 + lh * la) for lh in eig_h) for la in eig_a]
    top = max(best)
    partners = [i for i, b in enumerate(best) if b >= top * (1 - tol)]
    largest = int(np.argmax(eig_a.real))
    groups = set()
    for i in partners:
        if i == largest:
            groups.add("smoothing")
        elif eig_a[i].real <= eig_a.real.min() + tol:
            groups.add("sharpening")
        else:
            groups.add("other")
    return groups.pop() if len(groups) == 1 else "tie"


def test_spectral_dominance_matches_brute_force_kronecker_spectrum():
    model = tiny_native_vit()
    pixel_values = torch.randn(8, 3, 8, 8)
    result = spectral_dominance(model, pixel_values)

    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model(pixel_values, output_attentions=True).attentions
    heads, head_dim = 2, 4
    seen = set()
    for layer_idx, layer in enumerate(model.vit.layers):
        v_weight = layer.attention.v_proj.weight.detach().double().numpy()
        o_weight = layer.attention.o_proj.weight.detach().double().numpy()
        for h in range(heads):
            hs = slice(h * head_dim, (h + 1) * head_dim)
            H = v_weight[hs].T @ o_weight[:, hs].T  # W_V^h W_O^h, hidden × hidden, rank head_dim
            for b in range(pixel_values.shape[0]):
                A = maps[layer_idx][b, h].double().numpy()
                kron = np.eye(H.shape[0] * A.shape[0]) + np.kron(H.T, A)  # vec(X + A X H) = (I + Hᵀ ⊗ A) vec(X)
                spectrum = np.linalg.eigvals(kron)
                dominant = result.dominant[layer_idx, b, h].item()
                # the reported dominating candidate is an eigenvalue of the full update ...
                assert np.abs(spectrum - dominant).min() < 1e-6
                # ... and the largest one, apart from the eigenvalues 1 that H's zero eigenvalues contribute
                assert np.isclose(np.abs(spectrum).max(), max(1.0, abs(dominant)), atol=1e-6)
                # the whole spectrum is {1 + λ_j^H λ_i^A}
                candidates = (1 + np.outer(np.linalg.eigvals(H), np.linalg.eigvals(A))).ravel()
                assert max(np.abs(candidates - s).min() for s in spectrum) < 1e-6
                expected = brute_force_case(H, A, head_dim)
                assert CATEGORIES[result.categories[layer_idx, b, h]] == expected, (layer_idx, b, h)
                seen.add(expected)
    assert {"smoothing", "sharpening", "other"} <= seen, f"the tiny model must exercise every branch, saw {seen}"


def test_eigen_vit_minus_never_smooths_and_plus_always_smooths_on_cifar10(cifar_pixels):
    for sign, expected in (("negative", 0.0), ("positive", 1.0)):
        # 4 of ViT-Ti's 12 layers keep the test fast; the guarantee is per layer
        config = EigenViTConfig.from_preset("vit-tiny", spectrum_sign=sign, num_hidden_layers=4)
        result = spectral_dominance(EigenViTForImageClassification(config), cifar_pixels)
        print(f"\nEigenViT ({sign}), random init, CIFAR-10 test images:\n{result}")
        assert result.categories.shape == (4, 8, 3)
        assert result.smoothing_share == expected
        assert all(result.share("smoothing", layer) == expected for layer in result.layers)
        if sign == "negative":  # the ViT⁻ partner is A's smallest eigenvalue, or another non-constant one
            assert result.share("sharpening") + result.share("other") == 1.0


def test_random_init_native_vit_figure_on_cifar10(cifar_pixels):
    """Printed, not asserted beyond sanity: the poster reports 100 % smoothing for a random-init ViT-B/16."""
    config = ViTConfig(
        hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768, image_size=32, patch_size=4
    )
    model = ViTForImageClassification(config)
    result = spectral_dominance(model, cifar_pixels)
    print(f"\nNative ViT-Ti (patch 4, 32 px), random init, CIFAR-10 test images:\n{result}")
    assert sum(result.share(c) for c in CATEGORIES) == pytest.approx(1.0)


def test_spectral_dominance_takes_deit_backbones_and_neutreno_and_restores_the_model():
    torch.manual_seed(0)
    pixel_values = torch.randn(2, 3, 16, 16)
    small = dict(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=16, patch_size=8
    )
    deit = DeiTForImageClassification(DeiTConfig(**small))
    assert spectral_dominance(deit, pixel_values).categories.shape == (2, 2, 2)
    backbone = ViTModel(ViTConfig(**small), add_pooling_layer=False)
    backbone.train()
    assert spectral_dominance(backbone, pixel_values).categories.shape == (2, 2, 2)
    assert backbone.training and backbone.config._attn_implementation == "sdpa"

    neutreno = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**small, neutreno_lambda=0.6))
    result = spectral_dominance(neutreno, pixel_values)
    assert any("NeuTRENO" in note for note in result.notes) and "layer 1" in str(result)
    table = str(result).splitlines()
    assert table[1].split() == ["layer", *CATEGORIES] and table[-len(result.notes) - 1].split()[0] == "all"
    assert set(result.to_dict()["overall"]) == set(CATEGORIES)

    linear = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**small, attention_kernel="linear"))
    with pytest.raises(ValueError, match="linear"):
        spectral_dominance(linear, pixel_values)
    with pytest.raises(ValueError, match="category"):
        result.share("blurring")
