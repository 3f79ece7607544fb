"""Every flag the example scripts parse takes effect or is refused with an error naming it: none is silently
ignored."""

import pytest
from transformers import ViTImageProcessor

from examples_loader import load_example
from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.examples.scripts import parse_config_overrides, script_parser
from tiny_models import TINY_VIT

image = load_example("run_image_classification")
eigen = load_example("run_eigen_vit")


def test_crop_padding_without_augment_is_refused_naming_both_flags(tmp_path):
    parser = script_parser(image.ModelArguments, image.DataArguments)
    _, data_args, _, _ = parser.parse_args_into_dataclasses(["--output-dir", str(tmp_path), "--crop-padding", "4"])
    with pytest.raises(ValueError, match="--crop_padding 4.*--augment"):
        image.check_data_arguments(data_args)
    with pytest.raises(ValueError, match="--crop_padding 4.*--augment"):  # main refuses before loading any data
        image.main(["--output-dir", str(tmp_path), "--crop-padding", "4", "--dataset-name", str(tmp_path / "none")])
    flags = ["--output-dir", str(tmp_path), "--crop-padding", "4", "--augment"]
    image.check_data_arguments(parser.parse_args_into_dataclasses(flags)[1])  # with --augment: accepted


def test_config_overrides_and_sizes_with_an_image_checkpoint_are_refused_as_the_lm_script_does(tmp_path):
    labels = ["a", "b"]
    config = NeuTRENOViTConfig(**TINY_VIT, id2label=dict(enumerate(labels)), label2id={"a": 0, "b": 1})
    NeuTRENOViTForImageClassification(config).save_pretrained(tmp_path)
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path)
    args = image.ModelArguments(model_name_or_path=str(tmp_path), config_overrides="hidden_dropout_prob=0.3")
    with pytest.raises(ValueError, match="`--config_overrides` applies to a preset, not to a checkpoint"):
        image.build_model(args, labels)
    for field in ("image_size", "patch_size"):  # fixed by the checkpoint's embeddings: they were silently ignored
        args = image.ModelArguments(model_name_or_path=str(tmp_path), **{field: 8})
        with pytest.raises(ValueError, match=f"`--{field}` applies to a model trained from scratch"):
            image.build_model(args, labels)
    image.build_model(image.ModelArguments(model_name_or_path=str(tmp_path)), labels)  # without them: loads


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], (32, 8, [0, 3, 5])),
        (["--batch-size", "8"], (8, 8, [0, 3, 5])),
        (["--batch-size", "8", "--spectral-samples", "4", "--severities", "0", "1"], (8, 4, [0, 1])),
    ],
)
def test_quick_fills_in_only_the_flags_not_given(flags, expected):
    args = eigen.parse_args(["--output-dir", "out", "--quick", *flags])
    assert (args.batch_size, args.spectral_samples, args.severities) == expected
    args = eigen.parse_args(["--output-dir", "out", *flags])  # the full run's defaults where not given
    full = {"batch_size": 128, "spectral_samples": 32, "severities": [0, 1, 2, 3, 4, 5]}
    given = dict(zip(("batch_size", "spectral_samples", "severities"), expected))
    for name in ("--batch-size", "--spectral-samples", "--severities"):
        key = name[2:].replace("-", "_")
        assert getattr(args, key) == (given[key] if name in flags else full[key]), key


@pytest.mark.parametrize(
    "word, value",
    [(w, True) for w in ("1", "true", "True", "t", "yes", "Y", "on", "ON")]
    + [(w, False) for w in ("0", "false", "FALSE", "f", "no", "n", "off")],
)
def test_boolean_overrides_take_the_usual_words(word, value):
    assert parse_config_overrides(f"featscale={word}", NeuTRENOViTConfig) == {"featscale": value}


@pytest.mark.parametrize("word", ["enabled", "2", "", "tru"])
def test_other_boolean_words_are_refused_naming_the_field(word):
    with pytest.raises(ValueError, match=f"featscale={word!r} is not a boolean"):
        parse_config_overrides(f"featscale={word}", NeuTRENOViTConfig)


def test_list_values_keep_their_inner_commas():
    text = "adaptive_softmax_cutoffs=[2000,10000],num_hidden_layers=2, hidden_size=64"
    assert parse_config_overrides(text, NeuTRENOGPTConfig) == {
        "adaptive_softmax_cutoffs": [2000, 10000],
        "num_hidden_layers": 2,
        "hidden_size": 64,
    }
    assert parse_config_overrides("neutreno_layers=[1, 2],featscale=on", NeuTRENOViTConfig) == {
        "neutreno_layers": [1, 2],
        "featscale": True,
    }
