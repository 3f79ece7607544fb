"""`vit_to_neutreno`: native ViT/DeiT checkpoints become NeuTRENO models with every weight carried over."""

import pytest
import torch
from transformers import (
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
)

from hf_neutreno import NeuTRENOViTForImageClassification
from hf_neutreno.convert import vit_to_neutreno

SHAPE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, image_size=16,
             patch_size=4, num_labels=5)


@pytest.fixture(params=["vit", "deit"])
def native(request):
    torch.manual_seed(0)
    if request.param == "vit":
        return ViTForImageClassification(ViTConfig(**SHAPE)).eval()
    return DeiTForImageClassification(DeiTConfig(**SHAPE)).eval()


def test_saved_native_checkpoint_converts_with_equal_logits_at_lambda_zero(native, tmp_path):
    native.save_pretrained(tmp_path / "native")
    converted = vit_to_neutreno(tmp_path / "native", neutreno_lambda=0.0)
    assert isinstance(converted, NeuTRENOViTForImageClassification)
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        assert (converted(x).logits - native(x).logits).abs().max().item() <= 1e-5
        # the NeuTRENO adaptation: same weights, the term switched on, so the function changes
        adapted = vit_to_neutreno(native, neutreno_lambda=0.6)
        assert (adapted(x).logits - native(x).logits).abs().max().item() > 1e-3
    assert adapted.config.neutreno_lambda == 0.6 and adapted.config.id2label == native.config.id2label
    assert adapted.config.layer_norm_eps == native.config.layer_norm_eps


def test_conversion_errors_are_clear(native):
    with pytest.raises(ValueError, match="symmetric_attention"):
        vit_to_neutreno(native, symmetric_attention=True)
    with pytest.raises(ValueError, match="hidden_size|do not fit"):
        vit_to_neutreno(native, intermediate_size=96)
    teacher = DeiTForImageClassificationWithTeacher(DeiTConfig(**SHAPE))
    with pytest.raises(ValueError, match="DeiTForImageClassificationWithTeacher"):
        vit_to_neutreno(teacher)
    with pytest.raises(TypeError, match="checkpoint path"):
        vit_to_neutreno(42)
