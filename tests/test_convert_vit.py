"""`vit_to_neutreno`: native ViT/DeiT checkpoints become NeuTRENO models with every weight carried over; and back,
`neutreno_to_vit`: NeuTRENO ViTs without the NeuTRENO term (and EigenViTs) become native models.

References are transformers' own ViT / DeiT classes loaded with the same weights. Tolerances: 1e-6 where both sides
run the same operations, 1e-5 against the NeuTRENO model (other kernels may order sums differently).
"""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import (
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    DeiTModel,
    ViTConfig,
    ViTForImageClassification,
    ViTModel,
)
from transformers.testing_utils import CaptureLogger

from fresh_process import run_fresh
from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
    NeuTRENOViTModel,
    convert,
)
from hf_neutreno.convert import neutreno_to_vit, vit_to_neutreno
from tiny_models import TINY_VIT

SHAPE = dict(TINY_VIT, num_labels=5)


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


# --- NeuTRENO ViT -> native ViT / DeiT ----------------------------------------------------------------------------

WITHOUT_TERM = {"λ = 0": dict(neutreno_lambda=0.0), "no NeuTRENO layers": dict(neutreno_lambda=0.6, neutreno_layers=[])}


def neutreno_model(model_class=NeuTRENOViTForImageClassification, **overrides):
    """Random weights, LayerNorms and biases included, so that a weight left behind or misplaced shows."""
    torch.manual_seed(0)
    model = model_class(NeuTRENOViTConfig(**SHAPE, **overrides)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layernorm" in name or name.endswith("bias"):
                param.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.1)
    return model


def native_with_copied_weights(model):
    """The reference: transformers' own ViT / DeiT of the same config, loaded with the NeuTRENO model's weights."""
    fields = dict(SHAPE, layer_norm_eps=model.config.layer_norm_eps)  # the only default that differs (1e-12 there)
    if model.config.use_distillation_token:
        native = DeiTForImageClassification(DeiTConfig(**fields))
        native.load_state_dict({k.replace("vit.", "deit.", 1): v for k, v in model.state_dict().items()})
    else:
        native = ViTForImageClassification(ViTConfig(**fields))
        native.load_state_dict(model.state_dict())
    return native.eval()


@pytest.mark.parametrize("family", ["vit", "deit"])
@pytest.mark.parametrize("case", WITHOUT_TERM)
def test_neutreno_vit_without_the_term_converts_to_the_native_model_with_equal_logits(family, case):
    model = neutreno_model(**WITHOUT_TERM[case], use_distillation_token=family == "deit")
    converted = neutreno_to_vit(model)
    expected_class = DeiTForImageClassification if family == "deit" else ViTForImageClassification
    assert type(converted) is expected_class and not converted.training
    assert converted.config.id2label == model.config.id2label
    assert converted.config.layer_norm_eps == model.config.layer_norm_eps
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        logits = converted(x).logits
        torch.testing.assert_close(logits, native_with_copied_weights(model)(x).logits, atol=1e-6, rtol=0)
        torch.testing.assert_close(logits, model(x).logits, atol=1e-5, rtol=0)
        # and back: the round trip gives the same weights and logits
        back = vit_to_neutreno(
            converted, neutreno_lambda=model.config.neutreno_lambda, neutreno_layers=model.config.neutreno_layers
        )
        assert back.state_dict().keys() == model.state_dict().keys()
        for name, weight in model.state_dict().items():
            torch.testing.assert_close(back.state_dict()[name], weight, atol=0, rtol=0, msg=name)
        torch.testing.assert_close(back(x).logits, model(x).logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", ["vit", "deit"])
def test_backbone_converts_with_an_identity_pooler(family):
    model = neutreno_model(NeuTRENOViTModel, neutreno_lambda=0.0, use_distillation_token=family == "deit")
    converted = neutreno_to_vit(model)
    assert type(converted) is (DeiTModel if family == "deit" else ViTModel)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected, got = model(x), converted(x)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.pooler_output, expected.last_hidden_state[:, 0], atol=1e-6, rtol=0)


def test_converted_models_load_without_the_package_or_remote_code(tmp_path):
    classifier = neutreno_model(neutreno_lambda=0.0)
    classifier.config.id2label = {i: f"class-{i}" for i in range(5)}
    backbone = neutreno_model(NeuTRENOViTModel, neutreno_lambda=0.0)
    neutreno_to_vit(classifier).save_pretrained(tmp_path / "classifier")
    neutreno_to_vit(backbone).save_pretrained(tmp_path / "backbone")
    assert not list(tmp_path.glob("*/*.py"))  # no code travels: the native classes read these
    x = torch.randn(2, 3, 16, 16)
    torch.save(x, tmp_path / "pixels.pt")
    out = run_fresh(
        """
        import torch
        from transformers import AutoModel, AutoModelForImageClassification
        pixels = torch.load("pixels.pt")
        classifier = AutoModelForImageClassification.from_pretrained("classifier").eval()
        backbone = AutoModel.from_pretrained("backbone").eval()
        with torch.no_grad():
            torch.save(classifier(pixels).logits, "logits.pt")
            torch.save(backbone(pixels).pooler_output, "pooled.pt")
        print(type(classifier).__module__, type(backbone).__name__, classifier.config.id2label[4])
        """,
        tmp_path,
    )
    assert out.split() == ["transformers.models.vit.modeling_vit", "ViTModel", "class-4"]
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "logits.pt"), classifier(x).logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.load(tmp_path / "pooled.pt"), backbone(x).pooler_output, atol=1e-5, rtol=0)


def test_eigen_vit_without_the_term_converts_to_the_native_vit():
    model = EigenViTForImageClassification(EigenViTConfig(**SHAPE, eigen_layers=[0, 2], spectrum_sign="positive"))
    with torch.no_grad():
        for attention in model.modules():
            if hasattr(attention, "psi"):
                attention.psi.normal_()
                attention.output_bias.normal_()
    model.eval()
    converted = neutreno_to_vit(model)
    assert type(converted) is ViTForImageClassification
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(converted(x).logits, model(x).logits, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="neutreno_lambda"):
        neutreno_to_vit(EigenViTForImageClassification(EigenViTConfig(**SHAPE, neutreno_lambda=0.3)))


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(neutreno_lambda=0.6), "neutreno_lambda"),
        (dict(neutreno_lambda=0.6, neutreno_layers=[2]), "neutreno_lambda"),
        (dict(neutreno_lambda=0.0, symmetric_attention=True), "symmetric_attention"),
        (dict(neutreno_lambda=0.0, featscale=True), "featscale"),
        (dict(neutreno_lambda=0.0, attention_kernel="linear"), "attention_kernel"),
        (dict(neutreno_lambda=0.0, pooling="mean"), "pooling"),
    ],
)
def test_models_the_native_vit_cannot_compute_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"`{field}=.*only `{field}="):
        neutreno_to_vit(neutreno_model(**overrides))


def test_other_models_are_refused_and_stochastic_depth_is_dropped_with_a_warning():
    with pytest.raises(ValueError, match="NeuTRENOViTForImageClassification"):
        neutreno_to_vit(ViTForImageClassification(ViTConfig(**SHAPE)))
    model = neutreno_model(neutreno_lambda=0.0, drop_path_rate=0.1)
    with CaptureLogger(convert.logger) as captured:
        converted = neutreno_to_vit(model)
    assert "drop_path_rate=0.1" in captured.out
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(converted(x).logits, model(x).logits, atol=1e-5, rtol=0)


# --- ViT / DeiT / NeuTRENO classifier -> NeuTRENO Segmenter (task="semantic-segmentation") ----------------------

SEGMENTATION = dict(num_labels=6, decoder_num_layers=3, decoder_hidden_size=24, decoder_num_attention_heads=3)


def randomised(model):
    """Every weight random (LayerNorms and biases too), so that a weight left behind or misplaced shows."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(mean=0.0, std=0.2)
    return model.eval()


@pytest.mark.parametrize("family", ["vit", "deit", "vit-backbone", "deit-with-teacher"])
def test_segmenter_from_a_native_model_keeps_its_encoder_at_lambda_zero(family, tmp_path):
    """The converted Segmenter's encoder hidden states are those of transformers' ViTModel / DeiTModel with the same
    weights; the decoder is new, of the requested shape."""
    native = {
        "vit": lambda: ViTForImageClassification(ViTConfig(**SHAPE)),
        "deit": lambda: DeiTForImageClassification(DeiTConfig(**SHAPE)),
        "vit-backbone": lambda: ViTModel(ViTConfig(**SHAPE)),
        "deit-with-teacher": lambda: DeiTForImageClassificationWithTeacher(DeiTConfig(**SHAPE)),
    }[family]()
    native = randomised(native)
    native.save_pretrained(tmp_path / "native")
    labels = {i: f"class-{i}" for i in range(6)}
    model = vit_to_neutreno(
        tmp_path / "native",
        neutreno_lambda=0.0,
        task="semantic-segmentation",
        **SEGMENTATION,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    assert isinstance(model, NeuTRENOViTForSemanticSegmentation) and not model.training
    assert model.config.use_distillation_token == family.startswith("deit")
    assert model.config.id2label == labels and model.config.decoder_shape == (24, 3)
    assert len(model.decoder.layers) == 3 and model.decoder.class_embeddings.shape == (1, 6, 24)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = native.base_model(x, output_hidden_states=True)
        ours = model.vit(x, output_hidden_states=True)
        logits = model(x).logits
    assert len(ours.hidden_states) == len(expected.hidden_states) == 4
    for got, want in zip(ours.hidden_states, expected.hidden_states):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
    assert logits.shape == (2, 6, 4, 4)


@pytest.mark.parametrize("family", ["vit", "deit"])
def test_segmenter_at_another_image_size_resamples_positions_as_the_native_interpolation(family):
    """At 24 × 40 (a 16 × 16 source), the converted encoder computes what the native model computes with
    `interpolate_pos_encoding=True`: the grid is resampled once, bicubically, at conversion."""
    native_class, config_class = (ViTModel, ViTConfig) if family == "vit" else (DeiTModel, DeiTConfig)
    native = randomised(native_class(config_class(**SHAPE)))
    model = vit_to_neutreno(
        native, neutreno_lambda=0.0, task="semantic-segmentation", image_size=[24, 40], num_labels=3
    )
    assert model.vit.embeddings.position_embeddings.shape == (1, 6 * 10 + (2 if family == "deit" else 1), 32)
    x = torch.randn(2, 3, 24, 40)
    with torch.no_grad():
        expected = native(x, interpolate_pos_encoding=True).last_hidden_state
        torch.testing.assert_close(model.vit(x).last_hidden_state, expected, atol=1e-5, rtol=0)
        assert model(x).logits.shape == (2, 3, 6, 10)


def test_segmenter_from_a_neutreno_classifier_keeps_its_encoder():
    classifier = neutreno_model(neutreno_lambda=0.6, neutreno_layers=[1], drop_path_rate=0.1)
    model = vit_to_neutreno(
        classifier, neutreno_lambda=0.6, task="semantic-segmentation", num_labels=4, decoder_neutreno_lambda=0.0
    )
    config = model.config
    assert (config.neutreno_layers, config.drop_path_rate, config.num_labels) == ([1], 0.1, 4)
    assert config.decoder_neutreno_lambda == 0.0 and model.decoder.layers[1].attention.neutreno_lambda == 0.0
    for name, weight in classifier.vit.state_dict().items():
        assert torch.equal(model.vit.state_dict()[name], weight), name
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model.vit(x).last_hidden_state, classifier.vit(x).last_hidden_state, atol=0, rtol=0)


def test_segmenter_decoder_is_freshly_initialised_and_the_encoder_is_not():
    native = randomised(ViTForImageClassification(ViTConfig(**SHAPE)))
    torch.manual_seed(0)
    first = vit_to_neutreno(native, task="semantic-segmentation", num_labels=3)
    torch.manual_seed(1)
    second = vit_to_neutreno(native, task="semantic-segmentation", num_labels=3)
    assert torch.equal(first.vit.embeddings.position_embeddings, second.vit.embeddings.position_embeddings)
    assert not torch.equal(first.decoder.class_embeddings, second.decoder.class_embeddings)
    assert first.decoder.proj_patch.std() > 0.05  # Segmenter's N(0, d^-1/2), not zeros
    assert first.config.neutreno_lambda == 0.6 and first.decoder.layers[1].attention.neutreno_lambda == 0.6


def test_segmenter_conversion_errors_are_clear():
    native = ViTForImageClassification(ViTConfig(**SHAPE))
    with pytest.raises(ValueError, match=r"`task` must be one of \['image-classification', 'semantic-segmentation'\]"):
        vit_to_neutreno(native, task="depth-estimation")
    with pytest.raises(ValueError, match=r"`patch_size` \[8, 8\] and `use_distillation_token` must be the source's"):
        vit_to_neutreno(native, task="semantic-segmentation", patch_size=8)
    with pytest.raises(ValueError, match="use_distillation_token"):
        vit_to_neutreno(native, task="semantic-segmentation", use_distillation_token=True)
    with pytest.raises(ValueError, match="do not fit"):
        vit_to_neutreno(native, task="semantic-segmentation", intermediate_size=96)
    with pytest.raises(StrictDataclassError, match="'decoder_type' expected one of"):
        vit_to_neutreno(native, task="semantic-segmentation", decoder_type="deeplab")
    eigen = EigenViTForImageClassification(EigenViTConfig(**SHAPE))
    with pytest.raises(ValueError, match="EigenViTModel"):
        vit_to_neutreno(eigen, task="semantic-segmentation")
