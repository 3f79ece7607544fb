"""The example scripts' model flags (λ, NeuTRENO layers, drop path) set a checkpoint's fields only where given: a
saved NeuTRENO model is evaluated or continued as it was saved, and the registry's defaults apply only to a model
built from a preset or converted from a native ViT/DeiT/GPT-2."""

import torch
from transformers import HfArgumentParser, ViTImageProcessor

from examples_loader import load_example
from hf_neutreno import (
    NeuTRENOGPTConfig,
    NeuTRENOGPTForCausalLM,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)
from hf_neutreno.engine.model_factories import segmenter
from tiny_models import TINY_NEUTRENO_GPT, TINY_VIT, tiny_model

image = load_example("run_image_classification")
segmentation = load_example("run_semantic_segmentation")
lm = load_example("run_clm_wikitext103")
LABELS = ["a", "b", "c"]


def _saved_classifier(folder) -> NeuTRENOViTForImageClassification:
    """A saved softmax baseline (λ = 0) with fields unlike every flag's default."""
    torch.manual_seed(0)
    config = NeuTRENOViTConfig(
        **TINY_VIT,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
        neutreno_lambda=0.0,
        neutreno_layers=[2],
        drop_path_rate=0.1,
    )
    model = NeuTRENOViTForImageClassification(config).eval()
    model.save_pretrained(folder)
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(folder)
    return model


def _parse(module, flags: list[str]):
    return HfArgumentParser(module.ModelArguments).parse_args_into_dataclasses(flags)[0]


def test_an_image_checkpoint_is_evaluated_as_saved_unless_a_flag_is_given(tmp_path):
    saved = _saved_classifier(tmp_path)
    model, _ = image.build_model(_parse(image, ["--model_name_or_path", str(tmp_path)]), LABELS)
    config = model.config
    assert (config.neutreno_lambda, config.neutreno_layers, config.drop_path_rate) == (0.0, [2], 0.1)
    pixels = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(pixels).logits, saved(pixels).logits, rtol=0, atol=0)

    flags = ["--neutreno_lambda", "0.3", "--neutreno_layers", "1", "2", "--drop_path_rate", "0.05"]
    model, _ = image.build_model(_parse(image, ["--model_name_or_path", str(tmp_path), *flags]), LABELS)
    config = model.config
    assert (config.neutreno_lambda, config.neutreno_layers, config.drop_path_rate) == (0.3, [1, 2], 0.05)


def test_an_image_model_built_from_a_preset_or_converted_gets_the_registrys_defaults(tmp_path):
    overrides = "num_hidden_layers=2,hidden_size=32,num_attention_heads=4,intermediate_size=64"
    flags = ["--model_name_or_path", "vit-tiny", "--image_size", "16", "--patch_size", "4"]
    model, _ = image.build_model(_parse(image, [*flags, "--config_overrides", overrides]), LABELS)
    assert (model.config.neutreno_lambda, model.config.drop_path_rate) == (0.6, 0.0)  # NeuTRENO paper's ViT λ
    assert model.config.neutreno_layers is None  # every layer but the first

    tiny_model("vit").save_pretrained(tmp_path / "vit")
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path / "vit")
    model, _ = image.build_model(_parse(image, ["--model_name_or_path", str(tmp_path / "vit")]), LABELS)
    assert (model.config.neutreno_lambda, model.config.drop_path_rate) == (0.6, 0.0)


def test_a_segmenter_is_continued_with_its_own_lambdas(tmp_path):
    names = ["bg", "x", "y"]
    torch.manual_seed(0)
    segmenter("segmenter-micro", names, **TINY_VIT, neutreno_lambda=0.0, decoder_neutreno_lambda=0.3).save_pretrained(
        tmp_path
    )
    args = _parse(segmentation, ["--model_name_or_path", str(tmp_path)])
    model, _ = segmentation.build_model(args, dict(enumerate(names)), 16)
    assert (model.config.neutreno_lambda, model.config.decoder_neutreno_lambda) == (0.0, 0.3)

    args = _parse(segmentation, ["--model_name_or_path", str(tmp_path), "--neutreno_lambda", "0.5"])
    model, _ = segmentation.build_model(args, dict(enumerate(names)), 16)
    assert (model.config.neutreno_lambda, model.config.decoder_neutreno_lambda) == (0.5, 0.3)

    args = _parse(segmentation, ["--config_overrides", "num_hidden_layers=2,hidden_size=32,num_attention_heads=4"])
    model, _ = segmentation.build_model(args, dict(enumerate(names)), 16)  # from scratch: the paper's λ = 0.6
    assert model.config.neutreno_lambda == 0.6 and model.decoder.config.neutreno_lambda == 0.6


def test_a_neutreno_gpt_is_continued_with_its_own_lambda_and_layers(tmp_path):
    NeuTRENOGPTForCausalLM(
        NeuTRENOGPTConfig(**TINY_NEUTRENO_GPT, neutreno_lambda=0.0, neutreno_layers=[1, 2])
    ).save_pretrained(tmp_path / "neutreno")
    model = lm.build_model(_parse(lm, ["--model_name_or_path", str(tmp_path / "neutreno")]), None, None)
    assert (model.config.neutreno_lambda, model.config.neutreno_layers) == (0.0, [1, 2])
    args = _parse(lm, ["--model_name_or_path", str(tmp_path / "neutreno"), "--neutreno_lambda", "0.2"])
    assert lm.build_model(args, None, None).config.neutreno_lambda == 0.2

    tiny_model("gpt2").save_pretrained(tmp_path / "gpt2")  # a converted GPT-2: the paper's LM λ = 0.4
    model = lm.build_model(_parse(lm, ["--model_name_or_path", str(tmp_path / "gpt2")]), None, None)
    assert model.config.neutreno_lambda == 0.4


def test_the_help_says_where_the_defaults_apply():
    for module, default in ((image, 0.6), (lm, 0.4), (segmentation, 0.6)):
        fields = module.ModelArguments.__dataclass_fields__
        assert fields["neutreno_lambda"].default is None
        help_text = fields["neutreno_lambda"].metadata["help"]
        assert f"Default: {default}" in help_text and "preset" in help_text and "checkpoint's own" in help_text
