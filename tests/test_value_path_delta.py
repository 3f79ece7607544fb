"""The delta-only save of a value path (`save_value_path` / `load_value_path`): only the value path's settings and
parameters are written, and put back onto the base model in another process give the adapted model's logits; a base
whose weights differ, and folders and models that are not what the functions take, are refused before anything
changes."""

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import LlamaForCausalLM, LlamaModel

from fresh_process import run_fresh
from hf_neutreno import apply_value_path, learned_coefficients, load_value_path, remove_value_path, save_value_path
from hf_neutreno.value_path import is_value_path_model, value_path_parameters
from hf_neutreno.value_path_delta import CONFIG_NAME, WEIGHTS_NAME
from tiny_models import tiny_inputs, tiny_model, tiny_vlm

CASES = {  # folder -> apply_value_path's arguments
    "neutreno-learnable": dict(method="neutreno", coefficient=0.3, learnable=True, layers=[2, 1]),
    "residual-gate": dict(method="value_residual", coefficient=0.4, learnable="gate"),
    "xsa-learnable": dict(method="xsa", learnable=True),  # from 0, in every layer
    "value-embedding-gate": dict(method="value_embedding", coefficient=1.5, learnable="gate"),  # tables and gates
}


def _trained(base_folder, settings):
    """The base loaded from its folder, adapted and its value path moved off its start (as training would)."""
    model = apply_value_path(LlamaForCausalLM.from_pretrained(base_folder), **settings)
    with torch.no_grad():
        for parameter in value_path_parameters(model).values():
            parameter.add_(torch.randn_like(parameter) * 0.2)
    return model


_FRESH = """
import json, torch
from transformers import LlamaForCausalLM
from hf_neutreno import learned_coefficients, load_value_path
saved = torch.load("expected.pt")
results = {}
for name in saved["cases"]:
    by_name = load_value_path(None, name)  # the base from the recorded name, in one call
    onto = load_value_path(LlamaForCausalLM.from_pretrained("base"), name)  # onto a base the user loaded
    with torch.no_grad():
        results[name] = {
            "by_name": torch.equal(by_name(**saved["inputs"]).logits, saved["logits"][name]),
            "onto": torch.equal(onto(**saved["inputs"]).logits, saved["logits"][name]),
            "coefficients": learned_coefficients(onto),
        }
print(json.dumps(results))
"""


def test_a_saved_value_path_reloads_onto_the_base_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    tiny_model("llama").save_pretrained(tmp_path / "base")
    inputs = tiny_inputs("llama")
    logits, coefficients = {}, {}
    for name, settings in CASES.items():
        model = _trained(tmp_path / "base", settings).eval()
        with torch.no_grad():
            logits[name] = model(**inputs).logits
        coefficients[name] = learned_coefficients(model)
        save_value_path(model, tmp_path / name)
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])
        assert load_file(tmp_path / name / WEIGHTS_NAME).keys() == value_path_parameters(model).keys()
        config = json.loads((tmp_path / name / CONFIG_NAME).read_text())
        assert config["base_model_name_or_path"] == str(tmp_path / "base")  # where from_pretrained loaded it
        assert config["base_model_class"] == "LlamaForCausalLM" and config["value_path"] == model.config.value_path
    plain = LlamaForCausalLM.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        assert all((logits[name] - plain(**inputs).logits).abs().max() > 1e-3 for name in CASES)  # they do something
    torch.save({"cases": list(CASES), "inputs": inputs, "logits": logits}, tmp_path / "expected.pt")
    results = json.loads(run_fresh(_FRESH, tmp_path, block_package=False).splitlines()[-1])
    for name in CASES:
        assert results[name]["by_name"] and results[name]["onto"], results
        assert results[name]["coefficients"] == coefficients[name]  # in layer order; None for the gates


def test_a_base_whose_weights_differ_is_refused_naming_them_and_left_as_it_was(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path / "base")
    save_value_path(_trained(tmp_path / "base", CASES["neutreno-learnable"]), tmp_path / "delta")
    changed = LlamaForCausalLM.from_pretrained(tmp_path / "base")
    with torch.no_grad():
        changed.model.layers[1].mlp.up_proj.weight[0, 0] += 1e-3
    with pytest.raises(ValueError, match=r"differ: model\.layers\.1\.mlp\.up_proj\.weight\)"):
        load_value_path(changed, tmp_path / "delta")
    assert not is_value_path_model(changed)
    with pytest.raises(ValueError, match="differ: "):  # another dtype is another base too
        load_value_path(tmp_path / "base", tmp_path / "delta", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="holds a value path for LlamaForCausalLM, but `base` is LlamaModel"):
        load_value_path(LlamaModel.from_pretrained(tmp_path / "base"), tmp_path / "delta")
    loaded = load_value_path(LlamaForCausalLM.from_pretrained(tmp_path / "base"), tmp_path / "delta")
    assert is_value_path_model(loaded)


def test_bad_inputs_are_refused_before_anything_is_written(tmp_path):
    plain = tiny_model("llama")
    with pytest.raises(ValueError, match="LlamaForCausalLM is not one"):
        save_value_path(plain, tmp_path / "nothing")
    adapted = apply_value_path(tiny_model("llama"), "neutreno", learnable=True)
    peft_model = get_peft_model(adapted, LoraConfig(target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="a PeftModel saves with its own save_pretrained"):
        save_value_path(peft_model, tmp_path / "nothing")
    with pytest.raises(ValueError, match="`base_model_name_or_path` must be a string"):
        save_value_path(apply_value_path(tiny_model("llama"), "neutreno"), tmp_path / "nothing", 3)
    assert not (tmp_path / "nothing").exists()

    plain.save_pretrained(tmp_path / "whole")  # a model folder, not a value path
    for folder in (tmp_path / "whole", tmp_path / "absent"):
        with pytest.raises(ValueError, match=f"is not a value path saved by save_value_path: it has no {CONFIG_NAME}"):
            load_value_path(tiny_model("llama"), folder)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / CONFIG_NAME).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="is not the config of a value path saved by save_value_path"):
        load_value_path(tiny_model("llama"), tmp_path / "other")
    save_value_path(apply_value_path(tiny_model("llama"), "neutreno"), tmp_path / "fixed")  # built: no base name
    with pytest.raises(ValueError, match="records no `base_model_name_or_path`"):
        load_value_path(None, tmp_path / "fixed")
    with pytest.raises(ValueError, match="is already adapted"):
        load_value_path(apply_value_path(tiny_model("llama"), "neutreno"), tmp_path / "fixed")


def test_a_coefficient_that_is_not_finite_is_refused_on_saving_and_on_loading(tmp_path):
    """As save_pretrained and from_pretrained refuse them: a NaN coefficient gives NaN outputs. Nothing is written,
    and a file holding one (written by other means) does not adapt the base."""
    from safetensors.torch import save_file

    model = apply_value_path(tiny_model("llama"), "neutreno", 0.3, learnable=True)
    name = next(iter(value_path_parameters(model)))
    with torch.no_grad():
        value_path_parameters(model)[name].fill_(float("nan"))
    with pytest.raises(ValueError, match="not finite"):
        save_value_path(model, tmp_path / "nan")
    assert not (tmp_path / "nan").exists()
    with torch.no_grad():
        value_path_parameters(model)[name].fill_(0.3)
    save_value_path(model, tmp_path / "saved")
    weights = load_file(tmp_path / "saved" / WEIGHTS_NAME)
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, tmp_path / "saved" / WEIGHTS_NAME, {"format": "pt"})
    base = tiny_model("llama")
    with pytest.raises(ValueError, match="not finite"):
        load_value_path(base, tmp_path / "saved")
    assert not is_value_path_model(base)


def test_a_sub_model_saved_through_its_parent_loads_plain_and_says_so_and_its_delta_restores_it(tmp_path):
    """docs/value-path.md: a VLM's language model adapted alone; the VLM's own save holds no value path, so it reloads
    plain with the marker and coefficients UNEXPECTED under the sub-model's prefix. The value path saved beside it at
    the same time (`save_value_path`, whose digests are of the weights as trained) and loaded onto the reloaded VLM's
    language model gives the adapted logits back; with a fixed coefficient, adapting it again does too."""
    from transformers import LlavaForConditionalGeneration

    from hf_neutreno.value_path import MARKER

    input_ids = tiny_inputs("llama")["input_ids"]
    for learnable in (True, False):
        vlm = tiny_vlm()
        folder, delta = tmp_path / f"vlm-{learnable}", tmp_path / f"delta-{learnable}"
        with torch.no_grad():
            plain = vlm.eval()(input_ids=input_ids).logits
            apply_value_path(vlm.model.language_model, "value_residual", 0.5, learnable=learnable)
            for parameter in vlm.parameters():  # trained: the language model's weights and the coefficients
                parameter.add_(torch.randn_like(parameter) * 0.01)
            trained = vlm(input_ids=input_ids).logits
            remove_value_path(vlm.model.language_model)
            without = vlm(input_ids=input_ids).logits
            apply_value_path(vlm.model.language_model, "value_residual", 0.5, learnable=learnable)
            if learnable:
                for parameter in value_path_parameters(vlm.model.language_model).values():
                    parameter.add_(0.1)
                trained = vlm(input_ids=input_ids).logits
        assert not torch.allclose(trained, without) and not torch.allclose(without, plain)
        vlm.save_pretrained(folder)
        save_value_path(vlm.model.language_model, delta)

        reloaded, info = LlavaForConditionalGeneration.from_pretrained(folder, output_loading_info=True)
        with torch.no_grad():
            assert torch.equal(reloaded.eval()(input_ids=input_ids).logits, without)  # plain, as the docs say
            assert f"model.language_model.{MARKER}" in info["unexpected_keys"]
            coefficients = {f"model.language_model.{name}" for name in value_path_parameters(vlm.model.language_model)}
            assert coefficients <= set(info["unexpected_keys"]) and (learnable or not coefficients)
            load_value_path(reloaded.model.language_model, delta)
            assert torch.equal(reloaded(input_ids=input_ids).logits, trained)
            if not learnable:
                again = LlavaForConditionalGeneration.from_pretrained(folder).eval()
                apply_value_path(again.model.language_model, "value_residual", 0.5)
                assert torch.equal(again(input_ids=input_ids).logits, trained)
