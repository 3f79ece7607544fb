"""torch.func on every model and value path: per-sample gradients (`vmap(grad(loss))`, as Opacus, influence functions
and TRAK compute them) and `grad` alone run as on the native models, and equal the gradients autograd gives each
sample alone. Under its transforms the value paths' autograd Functions take torch.func's form (an eager step takes
the other, whose calls cost less host time), and the memory-saving rebuild of a backend's saved output stands aside,
since their tensors have no storage."""

import pytest
import torch
from torch.func import functional_call, grad, vmap

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOGPTConfig,
    NeuTRENOGPTForCausalLM,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
    NeuTRENOViTForSemanticSegmentation,
    apply_value_path,
)
from tiny_models import TINY_NEUTRENO_GPT, TINY_VIT, tiny_inputs, tiny_model

# (method, learnable, coefficient): every rule with a custom autograd Function or a rebuild, and the rest
VALUE_PATHS = [
    ("neutreno", False, 0.4),
    ("neutreno", True, 0.4),
    ("value_residual", False, 0.5),
    ("value_residual", True, 0.5),
    ("value_residual", "gate", 0.5),
    ("xsa", False, 1.0),
    ("xsa", True, 0.7),
    ("twicing", False, 1.0),
]


def _per_sample_gradients_equal_autograds(model, key: str, batch: torch.Tensor) -> None:
    """vmap(grad) over the rows of `batch` against autograd on each row alone; and `grad` of the first row."""
    model.train()
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, row):
        return functional_call(model, params, (), {key: row[None]}).logits.square().mean()

    per_sample = vmap(grad(loss), in_dims=(None, 0))(params, batch)
    first = grad(loss)(params, batch[0])
    trainable = dict(model.named_parameters())
    for row in range(batch.shape[0]):
        model.zero_grad()
        loss(trainable, batch[row]).backward()
        for name, parameter in trainable.items():
            expected = torch.zeros_like(parameter) if parameter.grad is None else parameter.grad
            scale = max(1.0, expected.abs().max().item())
            torch.testing.assert_close(per_sample[name][row], expected, rtol=1e-4, atol=1e-6 * scale, msg=name)
            if row == 0:
                torch.testing.assert_close(first[name], expected, rtol=1e-4, atol=1e-6 * scale, msg=name)


@pytest.mark.parametrize("method, learnable, coefficient", VALUE_PATHS)
@pytest.mark.parametrize("name", ["gpt2", "llama", "vit"])
def test_value_paths_give_per_sample_gradients(name, method, learnable, coefficient):
    model = tiny_model(name)
    with torch.no_grad():  # attention far from uniform, so that every rule changes the gradients
        for key, parameter in model.named_parameters():
            if any(part in key for part in ("q_proj.weight", "k_proj.weight", "c_attn.weight", "query.weight")):
                parameter.normal_(0, 0.5)
    apply_value_path(model, method, coefficient, learnable=learnable)
    key = "pixel_values" if name == "vit" else "input_ids"
    _per_sample_gradients_equal_autograds(model, key, tiny_inputs(name)[key])


@pytest.mark.parametrize("learnable", [False, True, "gate"])
def test_value_embeddings_give_per_sample_gradients(learnable):
    model = apply_value_path(tiny_model("gpt2"), "value_embedding", 1.0, learnable=learnable)
    _per_sample_gradients_equal_autograds(model, "input_ids", tiny_inputs("gpt2")["input_ids"])


PIXELS = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(2))
OWN_MODELS = {
    "NeuTRENO ViT": lambda: NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY_VIT, neutreno_lambda=0.6)),
    "EigenViT": lambda: EigenViTForImageClassification(EigenViTConfig(**TINY_VIT)),
    "Segmenter": lambda: NeuTRENOViTForSemanticSegmentation(
        NeuTRENOViTConfig(
            **TINY_VIT, num_labels=4, decoder_num_layers=2, decoder_neutreno_lambda=0.5, decoder_dropout=0.0
        )
    ),
    # its input check reads the token ids, which vmap does not give
    "NeuTRENO GPT": lambda: NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**TINY_NEUTRENO_GPT, neutreno_lambda=0.4)),
}


@pytest.mark.parametrize("name", OWN_MODELS)
def test_the_packages_models_give_per_sample_gradients(name):
    torch.manual_seed(0)
    model = OWN_MODELS[name]()
    model.set_attn_implementation("sdpa")  # the backend whose saved output the term's rebuild would swap
    if name == "NeuTRENO GPT":
        ids = torch.randint(1, TINY_NEUTRENO_GPT["vocab_size"], (3, 9), generator=torch.Generator().manual_seed(2))
        _per_sample_gradients_equal_autograds(model, "input_ids", ids)
    else:
        _per_sample_gradients_equal_autograds(model, "pixel_values", PIXELS)


@pytest.mark.parametrize("method, learnable", [("neutreno", True), ("value_residual", True), ("xsa", True)])
def test_an_eager_training_step_takes_the_functions_eager_form(method, learnable, monkeypatch):
    """Outside torch.func the autograd Functions take their first form: the form torch.func needs binds its
    arguments by signature at every call (about 30 µs on a CPU, host time per layer), so an adapted step makes no
    more such calls than the native model's."""
    import inspect

    calls = []
    signature = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda *args, **kwargs: calls.append(1) or signature(*args, **kwargs))
    counts = []
    for adapted in (False, True):
        model = tiny_model("llama").train()
        if adapted:
            apply_value_path(model, method, 0.5, learnable=learnable)
        calls.clear()
        model(**tiny_inputs("llama")).logits.square().mean().backward()
        counts.append(len(calls))
    assert counts[1] == counts[0]
