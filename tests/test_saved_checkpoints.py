"""Checkpoints users already hold keep loading and computing the same outputs.

`tests/fixtures/saved_checkpoints/` holds tiny models written by `save_pretrained` of an earlier version of the package
(with that version's code files beside the weights; tests/fixtures/make_saved_checkpoints.py says how), and the
outputs that version computed. Parameter names, the checkpoint layout and the config fields must keep them loading:
with the installed package, with their own code (`trust_remote_code`, no package), and after a re-save with today's
code.
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForImageClassification, AutoModelForSemanticSegmentation

from fresh_process import run_fresh
from hf_neutreno import (
    EigenViTForImageClassification,
    NeuTRENOGPTForCausalLM,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
)

ROOT = Path(__file__).parent / "fixtures" / "saved_checkpoints"
# folder: (package class, Auto class)
CHECKPOINTS = {
    "neutreno-vit": (NeuTRENOViTForImageClassification, AutoModelForImageClassification),
    "neutreno-vit-ablations": (NeuTRENOViTForImageClassification, AutoModelForImageClassification),
    "neutreno-segmenter": (NeuTRENOViTForSemanticSegmentation, AutoModelForSemanticSegmentation),
    "eigen-vit": (EigenViTForImageClassification, AutoModelForImageClassification),
    "neutreno-gpt": (NeuTRENOGPTForCausalLM, AutoModelForCausalLM),
    "neutreno-gpt-adaptive": (NeuTRENOGPTForCausalLM, AutoModelForCausalLM),
}
TOL = 1e-5  # fp32 kernel-order noise; the weights and the function are the same


def outputs(model, expected: dict) -> dict:
    with torch.no_grad():
        if "input_ids" in expected:
            ids = expected["input_ids"]
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6,
                                       do_sample=False)
            return {"logits": model(ids).logits, "generated": generated}
        return {"logits": model(expected["pixel_values"]).logits}


def assert_same(got: dict, expected: dict) -> None:
    torch.testing.assert_close(got["logits"], expected["logits"], atol=TOL, rtol=0)
    if "generated" in expected:
        assert torch.equal(got["generated"], expected["generated"])


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_checkpoint_saved_by_an_earlier_version_loads_with_the_package(name):
    model_class, _ = CHECKPOINTS[name]
    model, info = model_class.from_pretrained(ROOT / name, output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    expected = load_file(ROOT / name / "expected.safetensors")
    assert_same(outputs(model.eval(), expected), expected)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_checkpoint_resaved_by_this_version_keeps_its_config_fields_and_outputs(name, tmp_path):
    model_class, _ = CHECKPOINTS[name]
    model_class.from_pretrained(ROOT / name).save_pretrained(tmp_path)
    old = json.loads((ROOT / name / "config.json").read_text())
    new = json.loads((tmp_path / "config.json").read_text())
    ignored = {"transformers_version"}
    assert {k: v for k, v in new.items() if k not in ignored} == {k: v for k, v in old.items() if k not in ignored}
    expected = load_file(ROOT / name / "expected.safetensors")
    assert_same(outputs(model_class.from_pretrained(tmp_path).eval(), expected), expected)


def test_saved_checkpoints_load_without_the_package_with_old_and_new_code(tmp_path):
    """A user without the package: each folder with its own (earlier) code, and re-saved with today's code."""
    folders = {}
    for name, (model_class, _) in CHECKPOINTS.items():
        folders[f"{name} (its code)"] = ROOT / name
        model_class.from_pretrained(ROOT / name).save_pretrained(tmp_path / name)
        folders[f"{name} (today's code)"] = tmp_path / name
    auto = {name: auto_class.__name__ for name, (_, auto_class) in CHECKPOINTS.items()}
    jobs = {label: (str(folder), auto[label.split(" ")[0]]) for label, folder in folders.items()}
    out = run_fresh(f"""
        import json, torch, transformers
        from safetensors.torch import load_file
        jobs, root = {json.dumps(jobs)}, "{ROOT}"
        report = {{}}
        for label, (folder, auto) in jobs.items():
            model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            expected = load_file(root + "/" + label.split(" ")[0] + "/expected.safetensors")
            with torch.no_grad():
                if "input_ids" in expected:
                    ids = expected["input_ids"]
                    logits = model(ids).logits
                    generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                               min_new_tokens=6, do_sample=False)
                    same_tokens = bool(torch.equal(generated, expected["generated"]))
                else:
                    logits, same_tokens = model(expected["pixel_values"]).logits, True
            report[label] = [(logits - expected["logits"]).abs().max().item(), same_tokens]
        print(json.dumps(report))
    """, tmp_path)
    report = json.loads(out.strip().splitlines()[-1])
    assert set(report) == set(folders)
    for label, (diff, same_tokens) in report.items():
        assert diff <= TOL and same_tokens, (label, diff, same_tokens)
