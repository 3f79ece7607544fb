"""A value path on this package's own models (their NeuTRENO term off; XSA and value embeddings included): it trains,
saves and loads adapted in a fresh process where this package is not installed, as on a transformers model. The
adapted class lives in the model's own file (``modeling_<x>.ValuePath<Class>``), which a checkpoint carries with
`value_path.py` and its siblings beside it."""

import copy
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import hf_neutreno
from hf_neutreno import apply_value_path
from tiny_models import TINY_NEUTRENO_GPT, TINY_VIT

VIT = dict(TINY_VIT, num_labels=3, neutreno_lambda=0.0)
# name -> (config class, model class, fields, Auto class of the saved model, inputs)
MODELS = {
    "neutreno_gpt": (
        hf_neutreno.NeuTRENOGPTConfig,
        hf_neutreno.NeuTRENOGPTForCausalLM,
        dict(TINY_NEUTRENO_GPT, neutreno_lambda=0.0),
        "AutoModelForCausalLM",
        "torch.arange(1, 10)[None]",
    ),
    "neutreno_vit": (
        hf_neutreno.NeuTRENOViTConfig,
        hf_neutreno.NeuTRENOViTForImageClassification,
        VIT,
        "AutoModelForImageClassification",
        "torch.linspace(-1, 1, 2 * 3 * 16 * 16).reshape(2, 3, 16, 16)",
    ),
    "eigen_vit": (
        hf_neutreno.EigenViTConfig,
        hf_neutreno.EigenViTForImageClassification,
        VIT,
        "AutoModelForImageClassification",
        "torch.linspace(-1, 1, 2 * 3 * 16 * 16).reshape(2, 3, 16, 16)",
    ),
}
# (method, learnable): each kind of parameter a value path adds, and none; XSA on every model, value embeddings (their
# tables and nanochat's gate) on the language model
PATHS = [("neutreno", True), ("value_residual", "gate"), ("twicing", False), ("xsa", True)]
LANGUAGE_MODEL_PATHS = {"neutreno_gpt": [("value_embedding", "gate")]}


def _adapted(name: str, method: str, learnable) -> torch.nn.Module:
    config_class, model_class, fields, _, _ = MODELS[name]
    torch.manual_seed(0)
    model = apply_value_path(model_class(config_class(**fields)), method, learnable=learnable)
    with torch.no_grad():  # the coefficients and gates as training leaves them, not at their start
        for parameter in hf_neutreno.value_path.value_path_parameters(model).values():
            parameter.add_(torch.rand_like(parameter) * 0.3)
    return model.eval()


@pytest.mark.parametrize("name", list(MODELS))
def test_a_value_path_on_a_package_model_saves_and_loads_adapted_without_the_package(name, tmp_path):
    _, _, _, auto_class, inputs = MODELS[name]
    folders = {}
    for method, learnable in PATHS + LANGUAGE_MODEL_PATHS.get(name, []):
        model = _adapted(name, method, learnable)
        folder = tmp_path / f"{method}-{learnable}"
        model.save_pretrained(folder)
        with torch.no_grad():
            torch.save(model(eval(inputs)).logits, folder / "expected.pt")
        saved = json.loads((folder / "config.json").read_text())
        assert saved["value_path"] == model.config.value_path
        assert {"value_path.py", "value_path_methods.py", "neutreno_term.py", "value_path_defaults.py"} <= {
            p.name for p in folder.iterdir()
        }
        folders[str(folder)] = type(model).__name__
    script = textwrap.dedent(f"""
        import sys
        sys.modules["hf_neutreno"] = None  # not installed
        import torch, transformers
        for folder, name in {folders!r}.items():
            model = transformers.{auto_class}.from_pretrained(folder, trust_remote_code=True).eval()
            backbone = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True)
            assert type(model).__name__ == name and type(backbone).__name__.startswith("ValuePath"), folder
            assert model.config.value_path["method"] in folder, folder
            with torch.no_grad():
                torch.testing.assert_close(model({inputs}).logits, torch.load(folder + "/expected.pt"))
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_eigen_vit_inherits_its_attention_and_takes_a_value_path_equal_to_its_built_in_term():
    """EigenViT's attention module inherits the NeuTRENO ViT's call of the interface (its own file does not import
    it): found along the class hierarchy. The adapter's NeuTRENO at λ = 0.6 computes what EigenViT's own term does,
    which differs from the same weights without it."""
    torch.manual_seed(0)
    built_in = hf_neutreno.EigenViTForImageClassification(hf_neutreno.EigenViTConfig(**dict(VIT, neutreno_lambda=0.6)))
    plain = hf_neutreno.EigenViTForImageClassification(hf_neutreno.EigenViTConfig(**VIT))
    plain.load_state_dict(built_in.state_dict())
    adapted = apply_value_path(copy.deepcopy(plain), "neutreno", 0.6)
    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = built_in.eval()(pixels).logits
        torch.testing.assert_close(adapted.eval()(pixels).logits, expected, rtol=0, atol=1e-6)
        assert (plain.eval()(pixels).logits - expected).abs().max() > 1e-3


def test_the_kernel_attention_of_the_neutreno_vit_refuses_a_value_path():
    """Kernel attention does not go through transformers' attention interface: a value path would not act on it."""
    model = hf_neutreno.NeuTRENOViTForImageClassification(
        hf_neutreno.NeuTRENOViTConfig(**VIT, attention_kernel="linear")
    )
    with pytest.raises(ValueError, match="computes its own attention"):
        apply_value_path(model, "value_residual", 0.5)
