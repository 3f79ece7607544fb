"""`apply_value_path(model, "twicing")`: twicing attention (Abdullaev & Nguyen, ICLR 2025), ``A V + A (V − A V)``
with the layer's own attention matrix, against GPT-2 and Llama written out by hand from the raw weights, forward and
backward; through cached generation (dynamic and static caches) and a load without the package."""

import copy

import pytest
import torch

from fresh_process import load_fresh
from hf_neutreno import apply_value_path
from test_value_path_gate import _sharpen
from tiny_models import (
    assert_cached_generation_equals_the_full_forward,
    tiny_inputs,
    tiny_model,
    train_without_dropout,
    written_out_decoder,
)


def twicing_reference(model, input_ids, layers, weight=1.0, window=None) -> torch.Tensor:
    """GPT-2 or Llama written out from the raw weights (`written_out_decoder`): A V, plus `weight` · A (V − A V) in
    the twicing layers (each query seeing `window` keys, where given)."""

    def attended(index, probs, v, out):
        return out + weight * (probs @ (v - out)) if index in layers else out

    return written_out_decoder(model, input_ids, attended=attended, window=window)


REFERENCES = {"llama": twicing_reference, "gpt2": twicing_reference}


def _model(name, **settings):
    plain = tiny_model(name)
    _sharpen(plain)
    return plain, apply_value_path(copy.deepcopy(plain), "twicing", **settings)


@pytest.mark.parametrize("settings, layers", [({}, (0, 1, 2)), ({"layers": [1, 2], "coefficient": 0.5}, (1, 2))])
@pytest.mark.parametrize("name", REFERENCES)
def test_twicing_equals_the_hand_written_reference_forward_and_backward(name, settings, layers):
    plain, model = _model(name, **settings)
    reference = copy.deepcopy(train_without_dropout(model))
    input_ids = tiny_inputs(name)["input_ids"]
    weight = settings.get("coefficient", 1.0)
    output, expected = model(input_ids).logits, REFERENCES[name](reference, input_ids, layers, weight)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-5)
    with torch.no_grad():
        assert (expected - REFERENCES[name](reference, input_ids, ())).abs().max() > 1e-2  # twicing matters here
    output.square().mean().backward()
    expected.square().mean().backward()
    references = dict(reference.named_parameters())
    for key, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        scale = max(1.0, references[key].grad.abs().max().item())
        torch.testing.assert_close(parameter.grad, references[key].grad, rtol=1e-4, atol=2e-6 * scale, msg=key)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", REFERENCES)
def test_under_attention_dropout_both_products_use_the_same_dropped_matrix(name, implementation):
    """Training with attention dropout: ``A_d V + A_d (V − A_d V)`` with one dropped matrix A_d per layer, as the
    authors' code computes it, not a second mask in the second call. The reference draws each layer's mask from the
    same random state, as the backends do on a CPU (one dropout over the (batch, heads, queries, keys) weights)."""
    probability = 0.5
    dropout = {"llama": {"attention_dropout": probability}, "gpt2": {"attn_pdrop": probability}}[name]
    model = apply_value_path(tiny_model(name, attn_implementation=implementation, **dropout), "twicing").train()
    _sharpen(model)
    input_ids = tiny_inputs(name)["input_ids"]

    def attended(index, probs, v, out):
        dropped = torch.nn.functional.dropout(probs, probability, training=True)
        once = dropped @ v
        return once + dropped @ (v - once)

    torch.manual_seed(5)
    output = model(input_ids).logits
    torch.manual_seed(5)
    expected = written_out_decoder(model, input_ids, attended=attended)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-5)
    torch.manual_seed(5)
    undropped = written_out_decoder(model, input_ids, attended=lambda index, probs, v, out: out + probs @ (v - out))
    assert (expected - undropped).abs().max() > 1e-2  # the masks matter here
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    grads = torch.autograd.grad(output.square().mean(), parameters, allow_unused=True)
    expected_grads = torch.autograd.grad(expected.square().mean(), parameters, allow_unused=True)
    for grad, expected_grad in zip(grads, expected_grads):
        if expected_grad is not None:  # float32 rounding of two products scaled by 1 / (1 − p): measured up to 2e-5
            scale = max(1.0, expected_grad.abs().max().item())
            torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.slow  # compiling takes ~30 s on a CPU
def test_under_torch_compile_attention_dropout_keeps_one_dropped_matrix_per_layer():
    """A compiled graph cannot restore the random state between the two calls, so the layer's twicing runs after a
    graph break (fullgraph=True refuses it). The check: each layer's input to its output projection against
    ``A_d V + A_d (V − A_d V)`` from the dropped matrix the eager backend returns (`output_attentions`)."""
    model = apply_value_path(tiny_model("llama", "eager", attention_dropout=0.5), "twicing").train()
    caught = {}
    for index, layer in enumerate(model.model.layers):
        attention = layer.self_attn
        attention.v_proj.register_forward_hook(lambda m, a, out, i=index: caught.__setitem__(("v", i), out))
        attention.o_proj.register_forward_pre_hook(lambda m, a, i=index: caught.__setitem__(("u", i), a[0]))
    output = torch.compile(model)(tiny_inputs("llama")["input_ids"], output_attentions=True)
    for index, dropped in enumerate(output.attentions):
        batch, heads, length, _ = dropped.shape
        v = caught["v", index].view(batch, length, -1, model.config.head_dim).transpose(1, 2)
        v = v.repeat_interleave(heads // v.shape[1], 1)
        once = dropped @ v
        expected = (once + dropped @ (v - once)).transpose(1, 2).reshape(batch, length, -1)
        torch.testing.assert_close(caught["u", index], expected, rtol=0, atol=1e-5)
        assert (dropped == 0).any()  # dropout acted


@pytest.mark.slow  # two compilations, ~20 s on a CPU
def test_a_fullgraph_compile_after_a_graph_broken_one_in_the_same_process(fresh_compiler):
    """The adapted model's forward hook looked for a KV cache among the positional arguments with a generator
    expression. After a compile that broke its graph (twicing under dropout), torch.compile met that generator's frame
    alone in a later fullgraph compile of another model and refused it ("Attempt to trace generator"). Both compile,
    and the fullgraph one gives the eager gradients."""
    broken = apply_value_path(tiny_model("llama", "eager", attention_dropout=0.5), "twicing").train()
    torch.compile(broken)(tiny_inputs("llama")["input_ids"]).logits.sum().backward()
    model = apply_value_path(tiny_model("llama"), "twicing", 0.5).train()
    compiled = torch.compile(copy.deepcopy(model), fullgraph=True)
    inputs = tiny_inputs("llama")
    for run in (model, compiled):
        run(**inputs).logits.square().mean().backward()
    for (name, expected), actual in zip(model.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(actual.grad, expected.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("name", REFERENCES)
def test_twicing_cached_generation_equals_the_full_forward(name):
    """A V of the earlier tokens is kept beside the cache: each new token's second attention call sees V − A V at
    every key, as the full forward does."""
    _, model = _model(name)
    model.config.pad_token_id = 0
    # float32 rounding of two attention calls per layer at logits of ~5: measured up to 1.2e-5
    assert_cached_generation_equals_the_full_forward(model, tiny_inputs(name, length=6), atol=5e-5)


def test_a_twicing_model_saves_and_loads_without_the_package(tmp_path):
    _, model = _model("llama", layers=[1, 2])
    report = "[type(model).__name__, model.config.value_path]"
    difference, (name, settings) = load_fresh(model, tiny_inputs("llama"), tmp_path / "twicing", report)
    assert name == "ValuePathLlamaForCausalLM" and settings["method"] == "twicing" and difference == 0


def test_twicing_settings_are_checked():
    with pytest.raises(ValueError, match="'twicing' takes no learnable coefficient"):
        apply_value_path(tiny_model("gpt2"), "twicing", learnable=True)
    with pytest.raises(ValueError, match="twicing's weight\\) must be >= 0"):
        apply_value_path(tiny_model("gpt2"), "twicing", -1.0)
    with pytest.raises(ValueError, match="in 0..2, got \\[3\\]"):
        apply_value_path(tiny_model("gpt2"), "twicing", layers=[3])
