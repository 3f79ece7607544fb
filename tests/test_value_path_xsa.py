"""`apply_value_path(model, "xsa")`: exclusive self-attention (Zhai, arXiv 2603.09078, 2026), each token's attention
output per head without ``s`` times its component along the token's own value, against GPT-2, a grouped-query Llama
and ViT written out by hand from the raw weights, forward and backward; through cached generation and a load without
the package. (`test_cache_contract.py` holds the cache property on every causal model, learnable strength included.)"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from fresh_process import load_fresh
from hf_neutreno import apply_value_path, learned_coefficients
from hf_neutreno.engine.variants import VARIANTS, default_coefficient
from test_value_path_gate import _sharpen
from tiny_models import (
    assert_backward_matches,
    assert_cached_generation_equals_the_full_forward,
    tiny_inputs,
    tiny_model,
    train_without_dropout,
    written_out_decoder,
)


def exclusive(out: torch.Tensor, v: torch.Tensor, strength: float) -> torch.Tensor:
    """``y − s (y·v̂) v̂`` per query head and token, v the token's own value (per query head, (batch, heads, t, d))."""
    unit = v / v.norm(dim=-1, keepdim=True)
    return out - strength * (out * unit).sum(-1, keepdim=True) * unit


def decoder_reference(model, input_ids, layers, strength, window=None):
    def attended(index, probs, v, out):
        return exclusive(out, v, strength) if index in layers else out

    return written_out_decoder(model, input_ids, attended=attended, window=window)


def vit_reference(model, pixel_values, layers, strength):
    """A transformers ViT classifier written out from its raw weights, attention per head by hand."""
    vit, config = model.vit, model.config
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    x = vit.embeddings(pixel_values)
    batch, length, _ = x.shape
    for index, layer in enumerate(vit.layers):
        h = layer.layernorm_before(x)
        attention = layer.attention
        q, k, v = (
            F.linear(h, p.weight, p.bias).view(batch, length, heads, head_dim).transpose(1, 2)
            for p in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        out = (q @ k.transpose(-1, -2) / math.sqrt(head_dim)).softmax(-1) @ v
        if index in layers:
            out = exclusive(out, v, strength)
        x = x + attention.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
        x = x + layer.mlp(layer.layernorm_after(x))
    return model.classifier(vit.layernorm(x)[:, 0])


def _decoder(name, **settings):
    plain = tiny_model(name)
    _sharpen(plain)
    return plain, apply_value_path(copy.deepcopy(plain), "xsa", **settings)


@pytest.mark.parametrize("settings, layers", [({}, (0, 1, 2)), ({"layers": [1, 2], "coefficient": 0.5}, (1, 2))])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_xsa_equals_the_hand_written_reference_forward_and_backward(name, settings, layers):
    """GPT-2 and a Llama with 4 query heads on 2 key/value heads (each query head takes its KV head's own value)."""
    plain, model = _decoder(name, **settings)
    # in float64: full XSA in layer 0 cancels the first token's output (it attends to itself alone) down to rounding,
    # which float32 would amplify differently in two correct implementations
    model = model.double()
    reference = copy.deepcopy(train_without_dropout(model))
    input_ids = tiny_inputs(name)["input_ids"]
    strength = settings.get("coefficient", 1.0)
    output, expected = model(input_ids).logits, decoder_reference(reference, input_ids, layers, strength)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)
    with torch.no_grad():
        assert (expected - decoder_reference(reference, input_ids, (), 0.0)).abs().max() > 1e-2  # XSA matters here
    assert_backward_matches(model, reference, output, expected)


def test_xsa_on_vit_equals_the_hand_written_reference_forward_and_backward():
    model = apply_value_path(tiny_model("vit"), "xsa", 0.8).double()
    reference = copy.deepcopy(train_without_dropout(model))
    pixels = tiny_inputs("vit")["pixel_values"].double()
    output, expected = model(pixel_values=pixels).logits, vit_reference(reference, pixels, (0, 1, 2), 0.8)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)
    with torch.no_grad():
        assert (expected - vit_reference(reference, pixels, (), 0.0)).abs().max() > 1e-3
    assert_backward_matches(model, reference, output, expected)


def test_learnable_strength_starts_at_zero_the_models_own_function_and_learns():
    plain, model = _decoder("llama", learnable=True)
    assert model.config.value_path["coefficient"] == 0.0 and learned_coefficients(model) == [0.0, 0.0, 0.0]
    input_ids = tiny_inputs("llama")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, plain(input_ids).logits, rtol=0, atol=1e-6)
    model(input_ids).logits.square().mean().backward()
    gradients = [p.grad for name, p in model.named_parameters() if "value_path_coefficient" in name]
    assert len(gradients) == 3 and all(g is not None and g.abs() > 0 for g in gradients)  # through the clamp at 0
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "value_path_coefficient" in name:
                parameter.fill_(1.7)
    assert learned_coefficients(model) == [1.0, 1.0, 1.0]  # used as the share removed: in [0, 1]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_xsa_cached_generation_equals_the_full_forward(name):
    """A query's own value is the row of its position in the cache: a step needs nothing kept beside it."""
    _, model = _decoder(name, coefficient=0.9)
    model.config.pad_token_id = 0
    # float32 rounding at the sharpened weights' logits of ~5: measured up to 1.2e-5, as twicing's
    assert_cached_generation_equals_the_full_forward(model, tiny_inputs(name, length=6), atol=5e-5)


def test_an_xsa_model_saves_and_loads_without_the_package(tmp_path):
    _, model = _decoder("llama", learnable=True)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "value_path_coefficient" in name:
                parameter.fill_(0.6)
    report = "[type(model).__name__, model.config.value_path]"
    difference, (name, settings) = load_fresh(model, tiny_inputs("llama"), tmp_path / "xsa", report)
    assert name == "ValuePathLlamaForCausalLM" and settings["method"] == "xsa" and difference == 0


def test_xsa_settings_are_checked_and_compare_names_its_variants():
    with pytest.raises(ValueError, match=r"s of 'xsa'.*must be in \[0, 1\]"):
        apply_value_path(tiny_model("gpt2"), "xsa", 1.5)
    with pytest.raises(ValueError, match="learnable='gate'"):
        apply_value_path(tiny_model("gpt2"), "xsa", 0.5, learnable="gate")
    assert apply_value_path(tiny_model("gpt2"), "xsa").config.value_path["layers"] == [0, 1, 2]  # no V_0 needed
    assert (VARIANTS["xsa"].method, VARIANTS["xsa-learnable"].learnable) == ("xsa", True)
    assert default_coefficient("xsa") == 1.0 and default_coefficient("xsa-learnable") == 0.0
    assert default_coefficient("xsa-learnable", pretrained=True) == 0.0


@pytest.mark.parametrize("learnable", [False, True])
def test_the_written_out_backward_passes_gradcheck(learnable):
    """The autograd Function's backward against finite differences, grouped-query shapes (2 query heads per value),
    with a zero value among them (v = 0 leaves the output as it is)."""
    from hf_neutreno.models.value_path_methods import Exclusive as _Exclusive

    generator = torch.Generator().manual_seed(0)
    grouped = torch.randn(2, 3, 2, 2, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    own = torch.randn(2, 3, 2, 1, 4, dtype=torch.float64, generator=generator)
    own[0, 0, 0] = 0.0
    own.requires_grad_()
    strength = torch.tensor(0.7, dtype=torch.float64, requires_grad=True) if learnable else 0.7
    assert torch.autograd.gradcheck(lambda y, v: _Exclusive.apply(y, v, strength)[0], (grouped, own))
    if learnable:
        assert torch.autograd.gradcheck(lambda s: _Exclusive.apply(grouped.detach(), own.detach(), s)[0], (strength,))
    result, removed, *_ = _Exclusive.apply(grouped, own, strength)  # then what its backward pass reads
    torch.testing.assert_close(result[0, 0, 0], grouped[0, 0, 0])
    # what was removed per unit of v, from which the backend's saved output is rebuilt: y = z + removed · v (· s)
    scale = 1.0 if learnable else strength
    torch.testing.assert_close(result + scale * removed * own, grouped)


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("learnable", [False, True])
def test_the_written_out_backward_passes_gradgradcheck(learnable, group):
    """Second-order gradients (`create_graph=True`: gradient penalties, Hessian-vector products) against finite
    differences of the first-order ones: the ratios the backward pass reads are outputs, followed back to y and v.
    At v = 0, where the output jumps (the projection has no direction there), they are finite."""
    from hf_neutreno.models.value_path_methods import Exclusive as _Exclusive

    generator = torch.Generator().manual_seed(0)
    grouped = torch.randn(2, 3, 2, group, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    own = torch.randn(2, 3, 2, 1, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    strength = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    if learnable:
        assert torch.autograd.gradgradcheck(lambda y, v, s: _Exclusive.apply(y, v, s)[0], (grouped, own, strength))
    else:
        assert torch.autograd.gradgradcheck(lambda y, v: _Exclusive.apply(y, v, 0.7)[0], (grouped, own))
    with torch.no_grad():
        own[0, 0, 0] = 0.0
    result = _Exclusive.apply(grouped, own, strength if learnable else 0.7)[0]
    first = torch.autograd.grad(result.square().sum(), (grouped, own), create_graph=True)
    second = torch.autograd.grad(sum(g.square().sum() for g in first), (grouped, own))
    assert all(torch.isfinite(g).all() for g in second)
