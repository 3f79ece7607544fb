"""What the example scripts share (hf_neutreno.examples.scripts): what they parse and what the model card names."""

import json
import sys
from dataclasses import dataclass, fields

import pytest

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOViTConfig
from hf_neutreno.examples.scripts import (
    hub_base_model,
    neutreno_lambda_field,
    parse_script_arguments,
    script_parser,
)


@dataclass
class _ModelArguments:
    neutreno_lambda: float = neutreno_lambda_field(NeuTRENOViTConfig)
    model_name_or_path: str = "deit-tiny"


def test_a_json_file_as_the_only_argument_parses_as_its_command_line(tmp_path, monkeypatch):
    settings = {"output_dir": str(tmp_path / "out"), "neutreno_lambda": 0.25, "learning_rate": 0.003}
    path = tmp_path / "args.json"
    path.write_text(json.dumps(settings))
    flags = ["--output-dir", settings["output_dir"], "--neutreno-lambda", "0.25", "--learning-rate", "0.003"]
    expected = script_parser(_ModelArguments).parse_args_into_dataclasses(flags)

    monkeypatch.setattr(sys, "argv", ["run_x.py", str(path)])
    model_args, script_args, training_args = parse_script_arguments(script_parser(_ModelArguments), None)
    assert model_args == expected[0] and script_args == expected[1]
    assert (training_args.output_dir, training_args.learning_rate) == (settings["output_dir"], 0.003)
    with pytest.raises(ValueError, match="not used"):  # a script that takes no JSON file reads it as a stray argument
        parse_script_arguments(script_parser(_ModelArguments), None, json_file=False)
    # an explicit argument list is parsed as given, whatever the process's command line
    model_args, _, _ = parse_script_arguments(script_parser(_ModelArguments), ["--output-dir", str(tmp_path)])
    assert model_args.neutreno_lambda is None  # not given: a checkpoint's own, else the registry's


def test_the_lambda_option_is_unset_by_default_and_its_help_names_each_configs_default():
    @dataclass
    class LanguageModel:
        neutreno_lambda: float | None = neutreno_lambda_field(NeuTRENOGPTConfig, "λ.", "a preset")

    (field,) = fields(LanguageModel)
    assert LanguageModel().neutreno_lambda is None
    assert field.metadata["help"] == "λ. Default: 0.4 (the registry's) for a preset; a NeuTRENO checkpoint's own."


def test_the_card_names_only_a_hub_checkpoint_as_base_model(tmp_path):
    assert hub_base_model("facebook/deit-tiny-patch16-224", ("deit-tiny",)) == "facebook/deit-tiny-patch16-224"
    assert hub_base_model("deit-tiny", ("deit-tiny",)) is None  # a preset: trained from scratch
    assert hub_base_model(str(tmp_path)) is None  # a local folder is nobody's Hub id
    assert hub_base_model(None) is None and hub_base_model("") is None  # no checkpoint at all
