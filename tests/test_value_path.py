"""`apply_value_path`: NeuTRENO and the value residual on native transformers models, against references written
apart (plain per-head attention from the raw weights, this package's NeuTRENO GPT and ViT), through caches, padding,
gradient checkpointing, training, saving and loading without the package, and its refusals."""

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    BloomConfig,
    BloomModel,
    DiffLlamaConfig,
    DiffLlamaForCausalLM,
    DPTConfig,
    DPTModel,
    GitConfig,
    GitForCausalLM,
    HubertConfig,
    HubertModel,
    LlamaForCausalLM,
    ResNetConfig,
    ResNetModel,
    Sam2VisionConfig,
    Sam2VisionModel,
    SamVisionConfig,
    SamVisionModel,
    SiglipVisionConfig,
    SiglipVisionModel,
    StableLmConfig,
    StableLmForCausalLM,
    T5Config,
    T5EncoderModel,
    T5Model,
    Trainer,
    Wav2Vec2Config,
    Wav2Vec2Model,
)

import hf_neutreno
from cli_process import run_torchrun
from fresh_process import run_fresh
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTModel, apply_value_path, remove_value_path
from hf_neutreno.convert import gpt2_to_neutreno, vit_to_neutreno
from hf_neutreno.engine.variants import VARIANTS
from hf_neutreno.value_path import (
    MARKER,
    OLD_MARKER,
    coefficient_parameters,
    is_value_path_model,
    learned_coefficients,
    value_path_class,
    value_path_parameters,
)
from test_value_path_architectures import tiny_architecture
from tiny_models import (
    ARCHITECTURES,
    CACHE_FIELD,
    CAUSAL,
    DECODER,
    TINY_VIT,
    VOCAB,
    assert_cached_generation_equals_the_full_forward,
    count_rebuilds,
    fused_attention_in,
    output_of,
    tiny_inputs,
    tiny_model,
    training_args,
    written_out_decoder,
)

METHODS = ("neutreno", "value_residual")
# a wav2vec 2.0-style speech encoder (HuBERT, wav2vec 2.0) of two 4-times-downsampling convolutions
TINY_AUDIO = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    conv_dim=(8, 8),
    conv_stride=(4, 4),
    conv_kernel=(8, 8),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
)
TESTS = Path(__file__).resolve().parent


def _inputs(name: str) -> dict:
    return tiny_inputs(name, padding="right" if name == "bert" else "left")


def _sharpen(model) -> None:
    """Query/key weights larger than the 0.02 init, so attention is far from uniform."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("q_proj.weight", "k_proj.weight", "c_attn.weight", "query.weight")):
                parameter.normal_(0, 0.5)


# --- the unmodified model at λ = 0 / α = 0 ----------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_zero_coefficient_is_exactly_the_unmodified_model(name, implementation):
    model = tiny_model(name, implementation)
    inputs = _inputs(name)
    with torch.no_grad():
        plain = output_of(model, inputs)
        for method in METHODS:
            for learnable in (False, True):
                apply_value_path(model, method, 0.0, learnable=learnable)
                assert model.config._attn_implementation == f"value_path-{implementation}"
                assert torch.equal(output_of(model, inputs), plain), (method, learnable)
                apply_value_path_at_03 = remove_value_path(apply_value_path(remove_value_path(model), method, 0.3))
                assert torch.equal(output_of(apply_value_path_at_03, inputs), plain)  # removed: plain again


# --- against implementations written apart ----------------------------------------------------------------------


def test_gpt2_neutreno_equals_the_packages_neutreno_gpt():
    gpt2 = tiny_model("gpt2")
    _sharpen(gpt2)
    inputs = tiny_inputs("gpt2", padding="right")
    converted = gpt2_to_neutreno(gpt2, neutreno_lambda=0.3).eval()
    adapted = apply_value_path(gpt2, "neutreno", 0.3)
    with torch.no_grad():
        expected, actual = converted(**inputs).logits, adapted(**inputs).logits
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(actual[real], expected[real], rtol=0, atol=1e-5)
    assert (expected - remove_value_path(adapted)(**inputs).logits).abs().max() > 1e-2  # the term matters here


@pytest.mark.parametrize("name", ["vit", "deit"])
def test_vit_neutreno_equals_the_packages_neutreno_vit(name):
    vit = tiny_model(name)
    _sharpen(vit)
    pixels = tiny_inputs(name)
    converted = vit_to_neutreno(vit, neutreno_lambda=0.6).eval()
    adapted = apply_value_path(vit, "neutreno", 0.6)
    with torch.no_grad():
        torch.testing.assert_close(adapted(**pixels).logits, converted(**pixels).logits, rtol=0, atol=1e-5)


def reference_decoder_logits(
    model, input_ids, method: str, coefficients: dict[int, float], inputs_embeds=None, window=None
):
    """The decoder written out per head (`written_out_decoder`), the value path as the papers write it (on
    `inputs_embeds` instead of the token embeddings, where given; each query seeing `window` keys, where given)."""
    first = {}

    def values(index, h, v):
        first.setdefault("values", v)  # layer 0's
        c = coefficients.get(index, 0.0)
        return (1 - c) * v + c * first["values"] if method == "value_residual" else v

    def attended(index, probs, v, out):
        if method != "neutreno":
            return out
        v0 = first["values"].repeat_interleave(v.shape[1] // first["values"].shape[1], 1)
        return out + coefficients.get(index, 0.0) * (v0 - v)

    return written_out_decoder(model, input_ids, values, attended, inputs_embeds=inputs_embeds, window=window)


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_grouped_query_decoders_equal_a_per_head_reference(name, method, learnable):
    model = tiny_model(name)
    _sharpen(model)
    input_ids = tiny_inputs(name)["input_ids"]
    apply_value_path(model, method, 0.3, learnable=learnable)
    coefficients = {1: 0.3, 2: 0.3}
    if learnable:  # one scalar per layer, each its own
        with torch.no_grad():
            _set_coefficients(model, [0.15, 0.7])
        coefficients = {1: 0.15, 2: 0.7}
    with torch.no_grad():
        expected = reference_decoder_logits(model, input_ids, method, coefficients)
        torch.testing.assert_close(model(input_ids).logits, expected, rtol=0, atol=1e-5)
        plain = reference_decoder_logits(model, input_ids, method, {})
    assert (expected - plain).abs().max() > 1e-2


def _set_coefficients(model, values) -> None:
    """Set the learnable coefficients, in increasing layer order."""
    with torch.no_grad():
        for parameter, value in zip(coefficient_parameters(model), values, strict=True):
            parameter.fill_(value)


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_grouped_query_decoder_gradients_equal_the_per_head_reference(name, method, learnable, monkeypatch):
    """The backward pass, where the adapter rebuilds what the backend saved (the output without the NeuTRENO term,
    the mixed values of a learnable α) instead of keeping it: every parameter's gradient, the coefficients' too,
    against autograd through the reference written apart."""
    model = tiny_model(name).train()
    _sharpen(model)
    apply_value_path(model, method, 0.3, learnable=learnable)
    reference = copy.deepcopy(model)
    input_ids = tiny_inputs(name)["input_ids"]
    if learnable:
        coefficients = dict(zip((1, 2), coefficient_parameters(reference)))
    else:
        coefficients = {1: 0.3, 2: 0.3}
    rebuilt = count_rebuilds(monkeypatch, "hf_neutreno.models.neutreno_term")
    logits = model(input_ids).logits
    logits.square().mean().backward()
    reference_decoder_logits(reference, input_ids, method, coefficients).square().mean().backward()
    # a fixed α keeps nothing twice; SDPA's math path (torch 2.6 takes it for grouped-query attention on a CPU) keeps
    # its inputs, not its output, so it has no copy to rebuild
    assert rebuilt or (method == "value_residual" and not learnable) or not fused_attention_in(logits)
    expected = _grads(reference)
    assert (
        _grads(model).keys() == expected.keys() and any(".value_path_coefficient." in k for k in expected) == learnable
    )
    for key, grad in _grads(model).items():
        torch.testing.assert_close(grad, expected[key], rtol=1e-4, atol=1e-6, msg=key)


@pytest.mark.parametrize("learnable", [False, True])
def test_vit_gradients_equal_the_packages_neutreno_vit(learnable, monkeypatch):
    """The same for a ViT, whose SDPA output the adapter rebuilds, against the package's own NeuTRENO ViT (its term
    recomputed in its output projection): the gradient reaching the pixels passes back through every layer."""
    vit = tiny_model("vit").train()
    _sharpen(vit)
    converted = vit_to_neutreno(vit, neutreno_lambda=0.6).train()
    adapted = apply_value_path(vit, "neutreno", 0.6, learnable=learnable)
    rebuilt = count_rebuilds(monkeypatch, "hf_neutreno.models.neutreno_term")
    grads = []
    for model in (adapted, converted):
        pixels = tiny_inputs("vit")["pixel_values"].requires_grad_()
        model(pixel_values=pixels).logits.square().sum().backward()
        grads.append(pixels.grad)
    assert rebuilt
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    assert grads[0].abs().max() > 1e-4


@pytest.mark.parametrize("method", METHODS)
def test_layers_choose_where_the_rule_applies(method):
    model = tiny_model("llama")
    _sharpen(model)
    input_ids = tiny_inputs("llama")["input_ids"]
    apply_value_path(model, method, 0.8, layers=[2])
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids).logits, reference_decoder_logits(model, input_ids, method, {2: 0.8}), rtol=0, atol=1e-5
        )


# --- caches, padding, gradient checkpointing, several models ------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", CAUSAL)
def test_cached_generation_equals_uncached(name, method):
    model = apply_value_path(tiny_model(name, pad_token_id=0), method, 0.5)
    _sharpen(model)
    inputs = tiny_inputs(name, length=6, padding="left")
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    uncached = model.generate(**inputs, use_cache=False, **settings)
    caches = {"dynamic": model.generate(**inputs, **settings)}
    if name != "gpt2":  # GPT-2 has no static cache
        caches["static"] = model.generate(**inputs, cache_implementation="static", **settings)
    for kind, cached in caches.items():
        assert torch.equal(cached.sequences, uncached.sequences), kind
        for step, (a, b) in enumerate(zip(cached.scores, uncached.scores)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=f"{kind} cache, step {step}")


@pytest.mark.parametrize("name", CAUSAL)
def test_an_adapted_model_uses_no_deprecated_name(name, monkeypatch):
    """transformers 5.24 renamed the KV cache `past_key_values` -> `cache` and warns (once per process, so the test
    watches every call) where the old name is read or passed; an adapted forward and generation use neither."""
    import logging

    warned = []
    monkeypatch.setattr(logging.Logger, "warning_once", lambda self, message, *a, **k: warned.append(message))
    model = apply_value_path(tiny_model(name, pad_token_id=0), "value_residual", 0.5)
    inputs = tiny_inputs(name, length=6)
    model(**inputs, labels=inputs["input_ids"])
    model.generate(**inputs, max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert not [message for message in warned if "deprecated" in message], warned


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "bert"])
def test_padded_batch_equals_each_sequence_alone(name, method):
    model = apply_value_path(tiny_model(name), method, 0.5)
    _sharpen(model)
    inputs = _inputs(name)
    mask = inputs["attention_mask"]
    if name in CAUSAL:  # left padding: positions count real tokens only
        inputs["position_ids"] = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        batched = output_of(model, inputs)
        for row in range(mask.shape[0]):
            real = mask[row].bool()
            alone = output_of(model, {"input_ids": inputs["input_ids"][row : row + 1, real]})
            torch.testing.assert_close(batched[row, real], alone[0], rtol=0, atol=1e-5)


def _loss(model, name, inputs):
    if name in CAUSAL:
        return model(**inputs, labels=inputs["input_ids"]).loss
    if name in ("vit", "deit"):
        return model(**inputs, labels=torch.tensor([0, 1, 2])).loss
    return model(**inputs).last_hidden_state.square().mean()


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "method, learnable",
    [("neutreno", False), ("neutreno", True), ("value_residual", False), ("value_residual", True), ("xsa", False)],
)
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_an_output_projection_input_changed_in_place_gives_an_error_or_the_right_gradients(name, method, learnable):
    """Activation patching edits a layer's tensors in place, which autograd allows where nothing saved them, as with a
    frozen output projection's input. Where the adapter rebuilds the backend's saved output from that input, the
    rebuild would read the edited tensor: that must be an error, never gradients other than those of the same step
    with the backend keeping its own copies (an identity `saved_tensors_hooks` context, which leaves saved tensors
    alone)."""
    model = tiny_model(name).train()
    _sharpen(model)
    apply_value_path(model, method, 0.3, learnable=learnable)
    projections = [layer.attn.c_proj if name == "gpt2" else layer.self_attn.o_proj for layer in _layers(model)]
    for projection in projections:
        projection.requires_grad_(False)

    def patch(module, args):
        args[0].mul_(1.5)

    for projection in projections[1:]:  # layer 0's input is the backend's own output, which autograd guards itself
        projection.register_forward_pre_hook(patch)
    input_ids = tiny_inputs(name)["input_ids"]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        model(input_ids).logits.square().mean().backward()
    expected = _grads(model)
    model.zero_grad()
    try:
        model(input_ids).logits.square().mean().backward()
    except RuntimeError as error:
        assert "modified in place" in str(error) or "modified by an inplace operation" in str(error)
        return
    for key, grad in _grads(model).items():
        torch.testing.assert_close(grad, expected[key], rtol=1e-5, atol=1e-7, msg=key)


@pytest.mark.parametrize(
    "function, grouped", [("the learnable λ", False), ("the learnable λ", True), ("the learnable α", False)]
)
def test_the_learnable_coefficients_pass_gradcheck_twice_with_the_rebuild(function, grouped):
    """A learnable λ (grouped-query shapes too) and α, plain autograd with the saved tensors the rebuild swaps (λ: the
    backend's output, which a tanh keeps here, and V_0 − V, which λ's product keeps; α: the mix an eager attention
    keeps), against finite differences, to the first and second order, in float64."""
    from types import SimpleNamespace

    from hf_neutreno.models.neutreno_term import attention_with_neutreno_term
    from hf_neutreno.models.value_path_methods import value_residual

    generator = torch.Generator().manual_seed(0)

    def tensor(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=generator, requires_grad=True)

    coefficient, swapped = torch.tensor(0.7, dtype=torch.float64, requires_grad=True), []
    if function == "the learnable λ":
        # the backend's output (batch, queries, heads, d); V_0 and V as a model hands them
        values = (2, 2, 3, 4) if grouped else (2, 3, 16)  # (batch, kv heads, tokens, d) under GQA, else merged

        def apply(scores, first, value, alpha):
            output = torch.tanh(scores)  # keeps its output for its backward pass, as SDPA does
            with mock.patch("hf_neutreno.models.neutreno_term.rebuild_saved", _counting(swapped)):
                return attention_with_neutreno_term(lambda: (output,), first, value, alpha)[0]

        inputs = (tensor(2, 3, 4, 4), tensor(*values), tensor(*values), coefficient)
    else:  # V_ℓ and V_0 (batch, heads, tokens, d), mixed before an eager attention, which keeps the mix it reads
        query = tensor(2, 2, 3, 4)

        def attention(values):
            weights = torch.softmax(query.detach() @ values.transpose(-1, -2), dim=-1)
            return ((weights @ values).transpose(1, 2),)

        def apply(value, first, alpha):
            context = SimpleNamespace(
                past=0, mixed_rows={}, gate_rows={}, first_rows={}, cache=None, recompute_saved=True
            )
            with mock.patch("hf_neutreno.models.value_path_methods.rebuild_saved", _counting(swapped)):
                return value_residual(attention, context, 1, query, value, first, alpha)[0]

        inputs = (tensor(2, 2, 3, 4), tensor(2, 2, 3, 4), coefficient)
    assert torch.autograd.gradcheck(apply, inputs)
    assert torch.autograd.gradgradcheck(apply, inputs)
    assert swapped and all(swapped), "a saved tensor was not rebuilt"


def _counting(swapped: list):
    """`rebuild_saved` that records how many saved tensors each call swapped."""
    from hf_neutreno.models.neutreno_term import rebuild_saved

    def counted(*arguments):
        swapped.append(rebuild_saved(*arguments))
        return swapped[-1]

    return counted


def _layers(model):
    return model.transformer.h if hasattr(model, "transformer") else model.model.layers


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert", "vit"])
def test_gradient_checkpointing_gives_the_same_gradients(name, method):
    """The recompute reads the V_0 of its own forward pass, also when another forward of the same model and a forward
    of another adapted model (the other method) run between a forward and its backward. Bitwise for the value
    residual; NeuTRENO without checkpointing rebuilds the backend's output from the output with the term (rounding),
    so there the gradients agree to float32 rounding, far below what a wrong V_0 would change."""
    reference = apply_value_path(tiny_model(name), method, 0.3, learnable=True).train()
    checkpointed = copy.deepcopy(reference)
    checkpointed.activation_checkpointing_enable()  # transformers' default: use_reentrant=False
    other = apply_value_path(tiny_model(name, seed=1), "value_residual" if method == "neutreno" else "neutreno").train()
    first, second = _inputs(name), tiny_inputs(name, seed=7)

    _loss(reference, name, first).backward()
    expected = _grads(reference)
    loss = _loss(checkpointed, name, first)
    _loss(checkpointed, name, second)  # a second forward, never backpropagated
    _loss(other, name, second).backward()  # another adapted model in between
    loss.backward()
    actual = _grads(checkpointed)
    assert actual.keys() == expected.keys() and any(".value_path_coefficient." in k for k in actual)
    for key in expected:
        if method == "value_residual":
            assert torch.equal(actual[key], expected[key]), key
        else:
            torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-7, msg=key)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_a_training_step_walks_the_module_tree_no_more_than_the_unadapted_model(name, method):
    """The adapter's work per forward pass is per adapted layer: walking every module at each call is host time that
    grows with the model and sets the step time of small models on a GPU. The count of `named_modules` calls (each
    module visited is one) in a training step equals the unadapted model's."""

    def visits(model) -> int:
        count = 0
        original = torch.nn.Module.named_modules

        def counted(self, *args, **kwargs):
            nonlocal count
            count += 1
            return original(self, *args, **kwargs)

        with mock.patch.object(torch.nn.Module, "named_modules", counted):
            output_of(model, _inputs(name)).float().square().mean().backward()
        return count

    plain = tiny_model(name).train()
    assert visits(apply_value_path(tiny_model(name), method, 0.3).train()) == visits(plain)


def test_reentrant_gradient_checkpointing_is_refused():
    model = apply_value_path(tiny_model("llama"), "neutreno").train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    inputs = tiny_inputs("llama")
    with pytest.raises(RuntimeError, match="use_reentrant=True"):
        model(**inputs, labels=inputs["input_ids"])


def test_two_adapted_models_do_not_change_each_other_or_a_plain_one():
    plain = tiny_model("llama")
    a = apply_value_path(tiny_model("llama"), "neutreno", 0.3)
    b = apply_value_path(tiny_model("llama"), "value_residual", 0.6, learnable=True)
    inputs = tiny_inputs("llama")
    with torch.no_grad():
        alone = {name: output_of(m, inputs) for name, m in (("plain", plain), ("a", a), ("b", b))}
        both = {name: output_of(m, inputs) for name, m in (("b", b), ("plain", plain), ("a", a))}
    for name in alone:
        assert torch.equal(alone[name], both[name]), name
    assert plain.config._attn_implementation == "sdpa" and type(plain) is LlamaForCausalLM
    with torch.no_grad():
        assert torch.equal(output_of(plain, inputs), output_of(remove_value_path(a), inputs))


def test_remove_value_path_restores_class_config_and_parameters(tmp_path):
    model = tiny_model("llama", attn_implementation="eager")
    names = [name for name, _ in model.named_parameters()]
    apply_value_path(model, "value_residual", learnable=True)
    assert type(model).__name__ == "ValuePathLlamaForCausalLM" and isinstance(model, LlamaForCausalLM)
    assert model.config.value_path == {
        "method": "value_residual",
        "coefficient": 0.5,
        "learnable": True,
        "layers": [1, 2],
    }
    assert learned_coefficients(model) == [0.5, 0.5]
    model.save_pretrained(tmp_path)  # writes auto_map into the config in memory too
    assert model.config.auto_map == {
        "AutoModelForCausalLM": "value_path.ValuePathLlamaForCausalLM",
        "AutoModel": "value_path.ValuePathLlamaModel",  # the adapted backbone
    }
    remove_value_path(model)
    assert type(model) is LlamaForCausalLM and not is_value_path_model(model)
    assert not getattr(model.config, "auto_map", None)
    assert model.config._attn_implementation == "eager" and not hasattr(model.config, "value_path")
    assert [name for name, _ in model.named_parameters()] == names
    assert all(not module._forward_pre_hooks for module in model.modules())
    assert not any(hasattr(module, "value_path_layer") for module in model.modules())


def test_nothing_is_registered_until_a_model_is_adapted(tmp_path):
    code = """
import sys
import textwrap
sys.path.insert(0, %r)
from transformers import AttentionInterface, AttentionMaskInterface
import hf_neutreno, hf_neutreno.value_path, hf_neutreno.diagnostics.probe
from tiny_models import tiny_model
before = [name for name in AttentionInterface() if "value_path" in name or "probe" in name]
hf_neutreno.apply_value_path(tiny_model("llama"), "neutreno")
after = sorted(name for name in AttentionInterface() if "value_path" in name)
masks = sorted(name for name in AttentionMaskInterface() if "value_path" in name)
print(before, after, masks)
""" % str(TESTS)
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent / "src")}
    process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.split("\n")[-2] == "[] ['value_path-sdpa'] ['value_path-sdpa']"


def test_the_config_is_the_one_source_of_truth():
    model = apply_value_path(tiny_model("llama"), "neutreno", 0.3)
    model.config.value_path["coefficient"] = 0.9  # not silently ignored: refused at the next forward
    with pytest.raises(ValueError, match="config.value_path changed"):
        model(**tiny_inputs("llama"))


def test_switching_the_backend_of_an_adapted_model_is_refused():
    model = apply_value_path(tiny_model("llama"), "neutreno", 0.3)
    model.set_attn_implementation("eager")  # transformers' own call cannot be stopped, but the forward refuses
    with pytest.raises(ValueError, match="set to 'eager' after the model was adapted"):
        model(**tiny_inputs("llama"))


def test_hidden_states_and_attentions_are_still_returned():
    model = apply_value_path(tiny_model("llama", attn_implementation="eager", base=True), "neutreno")
    outputs = model(**tiny_inputs("llama"), output_hidden_states=True, output_attentions=True)
    assert len(outputs.hidden_states) == 4 and len(outputs.attentions) == 3


# --- training, saving, loading ------------------------------------------------------------------------------------


def test_trainer_fine_tunes_an_adapted_llama_and_its_coefficients(tmp_path):
    model = apply_value_path(tiny_model("llama"), "neutreno", learnable=True).train()
    torch.manual_seed(0)
    pattern = torch.arange(3, 19).repeat(2)  # a sequence the model can learn to continue
    rows = [{"input_ids": pattern.roll(-i)[:16], "labels": pattern.roll(-i)[:16]} for i in range(16)]
    args = training_args(
        tmp_path, max_steps=30, per_device_train_batch_size=8, learning_rate=1e-2, logging_steps=1, seed=0
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.5 * losses[0], losses
    assert not torch.equal(torch.tensor(learned_coefficients(model)), torch.full((2,), 0.4))  # trained too


def test_a_renamed_model_types_checkpoint_resumes_through_from_pretrained(tmp_path):
    """docs/value-path.md: an adapted model saves its weights in its base class's layout, which transformers renames on
    loading (ViT's, here). transformers 5.24's `Trainer` resumes by `load_state_dict` without those renames, for the
    native class as for the adapted one; the documented route loads the checkpoint with `from_pretrained` first, then
    resumes the optimizer, scheduler and step: every weight is the checkpoint's and training continues from it."""
    from safetensors.torch import load_file

    rows = [{"pixel_values": torch.randn(3, 16, 16), "labels": torch.tensor(i % 3)} for i in range(8)]
    args = training_args(
        tmp_path, max_steps=2, per_device_train_batch_size=4, learning_rate=1e-2, save_strategy="steps", save_steps=1
    )
    Trainer(model=apply_value_path(tiny_model("vit"), "neutreno").train(), args=args, train_dataset=rows).train()
    checkpoint = tmp_path / "checkpoint-1"
    assert "vit.layers.0.attention.q_proj.weight" not in load_file(checkpoint / "model.safetensors")  # renamed
    from transformers import AutoModelForImageClassification

    model = AutoModelForImageClassification.from_pretrained(checkpoint, trust_remote_code=True)
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = Trainer(model=model.train(), args=args, train_dataset=rows)
    trainer._load_from_checkpoint(str(checkpoint))  # what `train(resume_from_checkpoint=...)` does first
    assert is_value_path_model(model) and all(torch.equal(t, expected[n]) for n, t in model.state_dict().items())
    trainer.train(resume_from_checkpoint=str(checkpoint))
    assert trainer.state.global_step == 2


_FRESH_LOAD = """
import json, sys, torch, transformers
from transformers import AutoModelForCausalLM, AutoModelForImageClassification
results = {}
for name in ["llama-neutreno", "llama-residual-learnable", "gpt2-neutreno-learnable", "vit-residual"]:
    auto = AutoModelForImageClassification if name.startswith("vit") else AutoModelForCausalLM
    saved = torch.load(f"{name}/expected.pt")
    adapted = auto.from_pretrained(name, trust_remote_code=True).eval()
    plain = auto.from_pretrained(name).eval()  # no trust_remote_code
    with torch.no_grad():
        results[name] = {
            "class": type(adapted).__name__, "module": type(adapted).__module__,
            "attn": adapted.config._attn_implementation,
            "equal": torch.equal(adapted(**saved["inputs"]).logits, saved["adapted"]),
            # the reader of the file that travelled with the checkpoint
            "coefficients": sys.modules[type(adapted).__module__].learned_coefficients(adapted) or [],
            "plain_class": type(plain).__name__,
            "plain_equal": torch.equal(plain(**saved["inputs"]).logits, saved["plain"]),
        }
    if auto is AutoModelForCausalLM:
        results[name]["generated"] = adapted.generate(**saved["inputs"], max_new_tokens=3, do_sample=False,
                                                      pad_token_id=0).shape[1]
print(json.dumps(results))
"""


def test_saved_models_load_adapted_without_the_package(tmp_path):
    """Fixed and learnable, three architectures: `trust_remote_code=True` gives the same logits bit for bit in a
    process where hf_neutreno cannot be imported; without it, transformers builds the plain model."""
    cases = {
        "llama-neutreno": ("llama", dict(method="neutreno", coefficient=0.3)),
        "llama-residual-learnable": ("llama", dict(method="value_residual", learnable=True)),
        "gpt2-neutreno-learnable": ("gpt2", dict(method="neutreno", learnable=True)),
        "vit-residual": ("vit", dict(method="value_residual", coefficient=0.7)),
    }
    for folder, (name, settings) in cases.items():
        model = tiny_model(name, pad_token_id=0) if name in CAUSAL else tiny_model(name)
        _sharpen(model)
        inputs = tiny_inputs(name, padding="left" if name in CAUSAL else None)
        with torch.no_grad():
            plain = output_of(model, inputs)
            apply_value_path(model, **settings)
            if settings.get("learnable"):
                _set_coefficients(model, [0.11, 0.22])
            adapted = output_of(model, inputs)
        model.save_pretrained(tmp_path / folder)
        torch.save({"inputs": inputs, "adapted": adapted, "plain": plain}, tmp_path / folder / "expected.pt")
        assert json.loads((tmp_path / folder / "config.json").read_text())["value_path"] == model.config.value_path
    results = json.loads(run_fresh(_FRESH_LOAD, tmp_path).splitlines()[-1])
    for folder, (name, settings) in cases.items():
        result = results[folder]
        assert result["class"].startswith("ValuePath") and "hf_neutreno" not in result["module"], result
        assert result["attn"] == "value_path-sdpa" and result["equal"], result
        assert result["coefficients"] == (pytest.approx([0.11, 0.22]) if settings.get("learnable") else [])
        assert result["plain_class"] == result["class"].removeprefix("ValuePath") and result["plain_equal"], result
        if name in CAUSAL:
            assert result["generated"] == 12


@pytest.mark.slow  # compiling takes ~30 s on a CPU
@pytest.mark.parametrize("method", [*METHODS, "xsa"])  # XSA: an autograd Function with a second output
def test_torch_compile_fullgraph_gives_the_same_gradients(method, fresh_compiler):
    model = apply_value_path(tiny_model("llama"), method, 0.5, learnable=True).train()
    compiled = torch.compile(copy.deepcopy(model), fullgraph=True)
    inputs = tiny_inputs("llama")
    _loss(model, "llama", inputs).backward()
    _loss(compiled, "llama", inputs).backward()
    for (name, expected), actual in zip(model.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(actual.grad, expected.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow  # two processes
def test_ddp_gradients_equal_one_process(tmp_path):
    """2 ranks (gloo) × half a batch under DistributedDataParallel: the all-reduced gradients, learnable coefficients
    included, equal one process's gradients of the whole batch."""
    process = run_torchrun(TESTS / "value_path_ddp_worker.py", tmp_path / "ddp.pt")
    assert process.returncode == 0, process.stderr[-4000:]
    from value_path_ddp_worker import adapted_model, batch

    model = adapted_model()
    inputs = batch()
    model(**inputs, labels=inputs["input_ids"]).loss.backward()
    distributed = torch.load(tmp_path / "ddp.pt")
    assert distributed.keys() == {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(distributed[name], parameter.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_missing_learnable_coefficients_start_at_the_coefficient(tmp_path):
    """A checkpoint without the coefficients (a plain one) loaded into the adapted class: they start at the
    configured value, not at whatever memory from_pretrained allocated."""
    tiny_model("llama").save_pretrained(tmp_path / "plain")
    config = tiny_model("llama").config
    config.value_path = {"method": "value_residual", "coefficient": 0.25, "learnable": True, "layers": [1, 2]}
    model = value_path_class(LlamaForCausalLM).from_pretrained(tmp_path / "plain", config=config)
    assert learned_coefficients(model) == [0.25, 0.25]


def test_a_checkpoint_of_the_earlier_layout_loads_its_coefficients_onto_the_layers(tmp_path):
    """Earlier checkpoints kept the learnable coefficients as one vector `value_path_coefficients` on the outermost
    model (entry i: the i-th smallest adapted layer). Written by hand in that layout, it loads with each entry on its
    layer, with nothing reported missing or unexpected, through `from_pretrained` and through `load_state_dict`."""
    from safetensors.torch import load_file, save_file

    inputs = tiny_inputs("llama")
    model = apply_value_path(tiny_model("llama"), "neutreno", learnable=True, layers=[2, 1])
    _sharpen(model)
    _set_coefficients(model, [0.15, 0.7])
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    new = sorted(k for k in weights if k.endswith(".value_path_coefficient.value"))
    assert new == [f"model.layers.{i}.self_attn.value_path_coefficient.value" for i in (1, 2)]
    old = {k: v for k, v in weights.items() if k not in new} | {"value_path_coefficients": torch.tensor([0.15, 0.7])}
    save_file(old, tmp_path / "model.safetensors", {"format": "pt"})

    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True, output_loading_info=True)
    assert learned_coefficients(loaded) == pytest.approx([0.15, 0.7])
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    resumed = apply_value_path(tiny_model("llama"), "neutreno", learnable=True)
    resumed.load_state_dict(old)  # strict: every key has its place
    assert learned_coefficients(resumed) == pytest.approx([0.15, 0.7])
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).logits, expected)
        assert torch.equal(resumed(**inputs).logits, expected)


def test_loaded_plain_from_an_adapted_checkpoint_is_not_adapted_again_silently(tmp_path):
    apply_value_path(tiny_model("llama"), "neutreno").save_pretrained(tmp_path / "adapted")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "adapted")  # without trust_remote_code
    assert type(plain) is LlamaForCausalLM and plain.config.value_path["method"] == "neutreno"
    with pytest.raises(ValueError, match="without `trust_remote_code=True`"):
        apply_value_path(plain, "neutreno")


def _load_report(load) -> str:
    """What transformers logs while `load()` runs (its load report among it)."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as hf_logging

    with CaptureLogger(hf_logging.get_logger("transformers.modeling_utils")) as captured:
        load()
    return captured.out


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_every_load_that_drops_a_fixed_value_path_says_so_at_load_time(name, tmp_path):
    """A fixed coefficient leaves nothing in the weights, so the plain class loaded such a checkpoint without a word.
    Every adapted checkpoint now carries an empty entry whose name says what to do (`MARKER`: transformers' report
    shows only the key), which the plain class reports as an UNEXPECTED key (a concrete class even with
    trust_remote_code, an Auto class without it); the adapted classes load it, and checkpoints saved before it, or with
    its earlier name, load adapted without a report."""
    model = apply_value_path(tiny_model(name), "neutreno", 0.4)
    model.save_pretrained(tmp_path / "adapted")
    plain_class = type(model)._value_path_base
    for load in (
        lambda: plain_class.from_pretrained(tmp_path / "adapted", trust_remote_code=True),
        lambda: AutoModelForCausalLM.from_pretrained(tmp_path / "adapted"),
    ):
        report = _load_report(load)
        assert f"{MARKER} | UNEXPECTED" in report and "trust_remote_code" in MARKER, report
    for auto_class in (AutoModelForCausalLM, AutoModel):
        report = _load_report(lambda: auto_class.from_pretrained(tmp_path / "adapted", trust_remote_code=True))
        assert MARKER not in report, report  # (a backbone reports the head it leaves, as natively)

    # A checkpoint with the marker's earlier name loads adapted, quietly.
    from safetensors.torch import load_file, save_file

    weights = tmp_path / "adapted" / "model.safetensors"
    state = load_file(weights)
    state[OLD_MARKER] = state.pop(MARKER)
    save_file(state, weights, metadata={"format": "pt"})
    report = _load_report(lambda: AutoModelForCausalLM.from_pretrained(tmp_path / "adapted", trust_remote_code=True))
    assert "value_path_applied" not in report, report
    # A checkpoint saved before the marker existed: the same folder without it.
    del state[OLD_MARKER]
    save_file(state, weights, metadata={"format": "pt"})
    loaded = []
    report = _load_report(
        lambda: loaded.append(AutoModelForCausalLM.from_pretrained(tmp_path / "adapted", trust_remote_code=True))
    )
    assert "value_path_applied" not in report and is_value_path_model(loaded[0]), report
    inputs = tiny_inputs(name)
    with torch.no_grad():
        torch.testing.assert_close(loaded[0](**inputs).logits, model(**inputs).logits)
    assert MARKER not in remove_value_path(model).state_dict()


# --- refusals --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, coefficient, message",
    [
        ("neutreno", float("nan"), "must be a finite number"),
        ("neutreno", float("inf"), "must be a finite number"),
        ("value_residual", float("nan"), "must be a finite number"),
        ("value_residual", -float("inf"), "must be a finite number"),
        ("neutreno", True, "must be a finite number"),
        ("neutreno", "0.4", "must be a finite number"),
        ("neutreno", -0.1, "must be >= 0"),
        ("value_residual", 1.5, r"must be in \[0, 1\]"),
        (
            "twice",
            0.4,
            r"`method` must be one of \['neutreno', 'value_residual', 'twicing', 'xsa', 'value_embedding'\]",
        ),
    ],
)
def test_bad_coefficient_or_method(method, coefficient, message):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=message):
        apply_value_path(model, method, coefficient)
    assert type(model) is LlamaForCausalLM and not hasattr(model.config, "value_path")  # nothing changed


@pytest.mark.parametrize("layers", [[0], [3], [], [1, 1], [1.0], "1", [-1]])
def test_bad_layers(layers):
    with pytest.raises(ValueError, match=r"`layers` must"):
        apply_value_path(tiny_model("llama"), "neutreno", layers=layers)


def test_learnable_must_be_a_bool_or_gate():
    with pytest.raises(ValueError, match="`learnable` must be True, False or 'gate'"):
        apply_value_path(tiny_model("llama"), "neutreno", learnable="yes")


def test_adapting_twice_or_mixing_methods_is_refused():
    model = apply_value_path(tiny_model("llama"), "neutreno")
    for method in METHODS:
        with pytest.raises(ValueError, match="already adapted.*remove_value_path"):
            apply_value_path(model, method)
    with pytest.raises(ValueError, match="not adapted with apply_value_path"):
        remove_value_path(remove_value_path(model))


# The class whose forward calls the attention interface in each family, read from transformers' model files.
INTERFACE_CLASSES = {
    "llama": "LlamaAttention",
    "qwen2": "Qwen2Attention",
    "gpt2": "GPT2Attention",
    "bert": "BertSelfAttention",
    "vit": "ViTAttention",
    "deit": "DeiTAttention",
}


@pytest.mark.parametrize("name", list(INTERFACE_CLASSES))
def test_attention_modules_are_found_by_the_structure_the_model_declares(name, monkeypatch):
    """The self-attention modules come from the classes the model declares in `_can_record_outputs`, not from source
    text: with no source readable, each layer's module that calls the interface is still found, and adapting works."""
    from hf_neutreno.models import value_path

    def unreadable(_):
        raise OSError("no source")

    monkeypatch.setattr(value_path.inspect, "getsource", unreadable)
    model = tiny_model(name)
    layers = value_path.self_attention_layers(model)
    assert [type(module).__name__ for module in layers] == [INTERFACE_CLASSES[name]] * model.config.num_hidden_layers
    assert is_value_path_model(apply_value_path(model, "neutreno"))


def test_a_declared_wrapper_gives_the_module_inside_it_that_calls_the_interface(monkeypatch):
    """T5 declares `T5LayerSelfAttention`, which holds the layer norm, the dropout and `T5Attention`, the module that
    calls the interface: that one is found, without source text."""
    from hf_neutreno.models import value_path

    monkeypatch.setattr(value_path.inspect, "getsource", lambda _: "")
    value_path._reads_interface.cache_clear()  # what the source told, per class, is kept for the process
    try:
        model = T5EncoderModel(T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=50))
        assert "T5LayerSelfAttention" in {c.__name__ for c in value_path._declared_attention_classes(model)}
        found = value_path.interface_attention_modules(model)
        assert value_path._reads_interface(type(found[0][1])) is None  # no source: found by structure
    finally:
        value_path._reads_interface.cache_clear()
    assert [(path, type(module).__name__) for path, module in found] == [
        (f"encoder.block.{i}.layer.0.SelfAttention", "T5Attention") for i in range(2)
    ]


def test_models_a_value_path_cannot_reach_are_refused_by_name():
    with pytest.raises(ValueError, match="BloomModel's attention does not go through transformers' attention"):
        apply_value_path(BloomModel(BloomConfig(hidden_size=32, n_layer=2, n_head=4, vocab_size=50)), "neutreno")
    resnet = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]))
    with pytest.raises(ValueError, match="ResNetModel's attention does not go through"):
        apply_value_path(resnet, "neutreno")
    with pytest.raises(ValueError, match="a transformers PreTrainedModel, got Linear"):
        apply_value_path(torch.nn.Linear(2, 2), "neutreno")
    t5 = T5Model(T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=50))
    with pytest.raises(ValueError, match="T5Model is an encoder-decoder"):
        apply_value_path(t5, "neutreno")


def test_attention_that_drops_its_keyword_arguments_is_refused_before_the_model_changes():
    """SigLIP's attention calls the interface without the keyword arguments it is given, so the forward pass's
    context never reaches it: it adapted, then failed at its first forward (and saved as an adapted model that could
    not run). Now refused when adapting, the model left as it was. The same for a module on the way down that drops
    them: StableLM's decoder layer before its attention, HuBERT's model before its encoder, DPT's encoder in the loop
    over its layers (these were refused only at their first forward, with the model already changed)."""
    siglip = SiglipVisionModel(
        SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            image_size=16,
            patch_size=4,
        )
    )
    stablelm = StableLmForCausalLM(StableLmConfig(**{k: v for k, v in DECODER.items() if k != "num_key_value_heads"}))
    hubert = HubertModel(HubertConfig(**TINY_AUDIO))
    dpt = DPTModel(
        DPTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32)
    )
    refusals = {
        r"DPTViTEncoder calls `self.layer` \(or its entries\) without the keyword": dpt,
        "SiglipAttention calls the attention interface without the keyword": siglip,
        r"StableLmDecoderLayer calls `self.self_attn` \(or its entries\) without": stablelm,
        r"HubertModel calls `self.encoder` \(or its entries\) without": hubert,
    }
    for message, model in refusals.items():
        with pytest.raises(ValueError, match=message):
            apply_value_path(model, "neutreno")
        assert model.config._attn_implementation == "sdpa" and not hasattr(model.config, "value_path")
        assert not is_value_path_model(model)


def test_a_gate_on_a_model_with_heads_per_stage_is_refused_by_name_before_the_model_changes():
    """SAM 2's vision encoder (Hiera) has a number of heads per stage and no `num_attention_heads`: a gate or value
    embeddings, which size their key/value heads by it, failed with an AttributeError from inside transformers'
    config after the layers' coefficients were set. Now a ValueError naming the field, the model left as it was;
    the methods that need no head count adapt it."""
    config = Sam2VisionConfig()
    config.backbone_config.image_size = [64, 64]
    model = Sam2VisionModel(config).eval()
    with pytest.raises(ValueError, match="Sam2VisionConfig has no single `num_attention_heads`"):
        apply_value_path(model, "value_residual", learnable="gate")
    assert not is_value_path_model(model) and not hasattr(model.config, "value_path")
    pixels = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    native = model(pixel_values=pixels).last_hidden_state
    adapted = apply_value_path(model, "xsa")
    assert not torch.allclose(adapted(pixel_values=pixels).last_hidden_state, native)


@pytest.mark.parametrize("method", ["neutreno", "value_residual", "xsa"])
def test_layer_drop_is_refused_at_the_first_training_forward_where_the_method_needs_v0(method):
    """wav2vec 2.0 skips each layer in training with probability `config.layerdrop` (0.1 by default): where it skips
    layer 0, the later layers of NeuTRENO or the value residual have no V_0, and the step raised, at random (in one
    step of ten, as often as layer 0 is skipped). Now the first training forward refuses, naming the field;
    inference, a method that needs no V_0, and the same model with LayerDrop set to 0 run."""
    config = Wav2Vec2Config(**dict(TINY_AUDIO, num_hidden_layers=3), layerdrop=0.1)
    model = apply_value_path(Wav2Vec2Model(config), method)
    audio = torch.randn(2, 800, generator=torch.Generator().manual_seed(0))
    model.eval()
    model(audio)
    model.train()
    if method == "xsa":
        model(audio).last_hidden_state.sum().backward()
        return
    with pytest.raises(ValueError, match=r"LayerDrop is on \(config.layerdrop = 0.1\)"):
        model(audio)
    model.config.layerdrop = 0.0
    for _ in range(8):  # every step has layer 0 now
        model(audio).last_hidden_state.sum().backward()


def test_attention_outside_the_interface_is_refused_even_where_its_file_imports_it():
    """SAM's vision attention computes softmax attention itself, in a file that imports the interface for its mask
    decoder: it was taken as attention the value path reaches, so adapting it did nothing, silently (the output at
    NeuTRENO's default λ was the native one). GIT's text decoder bypasses the interface beside a vision encoder that
    goes through it: a value path on the whole model would act on the vision encoder alone. Both are refused now."""
    sam = SamVisionModel(
        SamVisionConfig(
            hidden_size=32,
            output_channels=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=32,
            patch_size=8,
            mlp_dim=64,
            global_attn_indexes=[1],
            window_size=2,
        )
    )
    with pytest.raises(ValueError, match="SamVisionModel's attention does not go through transformers' attention"):
        apply_value_path(sam, "neutreno")
    git = GitForCausalLM(
        GitConfig(
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            vocab_size=VOCAB,
            bos_token_id=1,
            eos_token_id=2,
        )
    )
    with pytest.raises(ValueError, match=r"self-attention in git.encoder.layer that does not go through"):
        apply_value_path(git, "neutreno")
    assert not hasattr(git.config, "value_path") and not is_value_path_model(git)


def test_flash_attention_and_this_packages_neutreno_models_are_refused():
    model = tiny_model("llama")
    model.config._attn_implementation_internal = "flash_attention_2"  # as a GPU model would have it
    with pytest.raises(ValueError, match="flash_attention_2.*cannot be wrapped"):
        apply_value_path(model, "neutreno")

    neutreno_vit = NeuTRENOViTModel(NeuTRENOViTConfig(**dict(TINY_VIT, num_hidden_layers=2), neutreno_lambda=0.6))
    with pytest.raises(ValueError, match=r"its own NeuTRENO term on \(config.neutreno_lambda = 0.6\)"):
        apply_value_path(neutreno_vit, "value_residual")


@pytest.mark.parametrize("method", ["neutreno", "value_residual", "twicing", "xsa", "value_embedding"])
def test_a_layer_that_calls_attention_twice_is_refused_when_adapting_and_at_its_first_forward(method, monkeypatch):
    """Differential attention calls the interface twice per layer, on two halves of V: layer 0 would leave the second
    half as V_0, and each rule would act on both outputs, which the layer then subtracts. Refused, with a clear
    error, rather than a silently different model: when adapting, where the attention's forward makes both calls
    unconditionally (DiffLlama's), and else at the first forward that makes two (a vision attention that calls it
    once per image); activation checkpointing's recomputation of a layer is not a second call
    (test_gradient_checkpointing_gives_the_same_gradients)."""
    from hf_neutreno.models import value_path

    model = DiffLlamaForCausalLM(DiffLlamaConfig(**DECODER))
    with pytest.raises(ValueError, match=r"DiffLlamaAttention calls the attention interface twice \(differential"):
        apply_value_path(model, method)
    assert not is_value_path_model(model)
    monkeypatch.setattr(value_path, "_interface_calls", lambda kind: ([], 1, False))  # as if the source showed one
    model = apply_value_path(model, method)
    with pytest.raises(ValueError, match="called the attention interface twice in one forward pass"):
        model(tiny_inputs("llama")["input_ids"])


@pytest.mark.parametrize("method", ["neutreno", "twicing", "xsa"])
def test_a_layer_shared_across_depths_is_refused_when_adapting_and_the_error_says_so(method):
    """ALBERT runs one layer at every depth, so its one attention module would be called once per depth in a forward
    pass, as differential attention calls it twice. The methods that need no V_0 adapted it and failed at the first
    forward; NeuTRENO was refused for having one layer. Now every method is refused when adapting, by the reason."""
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(
        vocab_size=VOCAB,
        embedding_size=16,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        num_hidden_layers=3,
    )
    model = AlbertModel(config, add_pooling_layer=False)
    with pytest.raises(ValueError, match=r"runs its 1 layer\(s\) at 3 depths"):
        apply_value_path(model, method)
    assert not is_value_path_model(model)
    pruned = tiny_model("llama")  # a layer removed, the config not told: the message says what to set
    pruned.model.layers = torch.nn.ModuleList(list(pruned.model.layers)[:-1])
    with pytest.raises(ValueError, match=r"If layers were removed from it, set config.num_hidden_layers to the 2 left"):
        apply_value_path(pruned, method)
    pruned.config.num_hidden_layers = 2
    assert is_value_path_model(apply_value_path(pruned, method))


def test_classes_from_outside_transformers_adapt_and_save_with_a_warning_that_they_load_plain(tmp_path):
    """A user's subclass: it adapts and saves (Trainer checkpoints go through save_pretrained), with a warning that
    from_pretrained builds the plain model from the folder (this package's own models load adapted:
    test_value_path_presets.py)."""
    from transformers.testing_utils import CaptureLogger

    from hf_neutreno.models import value_path

    class MyLlama(LlamaForCausalLM):
        pass

    model = apply_value_path(MyLlama(tiny_model("llama").config), "neutreno", 0.3, learnable=True)
    assert is_value_path_model(model)
    with CaptureLogger(value_path.logger) as captured:
        model.save_pretrained(tmp_path / "mine")
    assert "MyLlama is not a transformers class" in captured.out and "loads as the plain model" in captured.out
    saved = json.loads((tmp_path / "mine" / "config.json").read_text())
    assert saved["value_path"]["coefficient"] == 0.3 and "auto_map" not in saved


def _package_vit(neutreno_lambda: float) -> NeuTRENOViTModel:
    torch.manual_seed(0)
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT, neutreno_lambda=neutreno_lambda))
    _sharpen(model)
    return model.eval()


def test_packages_own_vit_with_its_term_off_takes_the_value_path_and_equals_its_built_in_neutreno(tmp_path):
    """Two implementations written apart: the adapter's NeuTRENO on the package's ViT at λ = 0 computes what the same
    ViT computes with its own term at λ = 0.6; a live edit that turns the built-in term on is refused at the next
    forward (two rules would act on the values)."""
    pixels = torch.randn(2, 3, 16, 16)
    built_in = _package_vit(0.6)
    adapted = _package_vit(0.0)
    adapted.load_state_dict(built_in.state_dict())
    apply_value_path(adapted, "neutreno", 0.6)
    with torch.no_grad():
        torch.testing.assert_close(
            adapted(pixels).last_hidden_state, built_in(pixels).last_hidden_state, atol=1e-5, rtol=0
        )
    adapted.config.neutreno_lambda = 0.5
    with pytest.raises(ValueError, match="its own NeuTRENO term on"):
        adapted(pixels)
    adapted.config.neutreno_lambda = 0.0


def test_public_api():
    assert {"apply_value_path", "remove_value_path"} <= set(hf_neutreno.__all__)
    assert VARIANTS["softmax"].method is None
    assert (VARIANTS["value-residual-learnable"].method, VARIANTS["value-residual-learnable"].learnable) == (
        "value_residual",
        True,
    )


@pytest.mark.slow  # flex attention compiles its kernel on CPU: ~40 s
@pytest.mark.parametrize("method", METHODS)
def test_flex_attention_backend_is_wrapped_too(method):
    model = tiny_model("llama", attn_implementation="flex_attention")
    reference = apply_value_path(tiny_model("llama"), method, 0.5)  # the same weights on sdpa
    apply_value_path(model, method, 0.5)
    assert model.config._attn_implementation == "value_path-flex_attention"
    inputs = _inputs("llama")
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits[real], reference(**inputs).logits[real], rtol=0, atol=1e-5)


def test_packages_own_gpt_with_its_term_off_equals_its_built_in_neutreno_and_generates_with_a_cache():
    from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM

    width = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64)
    fields = dict(vocab_size=50, num_hidden_layers=3, max_position_embeddings=32, **width)
    torch.manual_seed(0)
    built_in = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**fields, neutreno_lambda=0.4)).eval()
    _sharpen(built_in)
    adapted = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**fields, neutreno_lambda=0.0)).eval()
    adapted.load_state_dict(built_in.state_dict())
    apply_value_path(adapted, "neutreno", 0.4)
    ids = torch.randint(3, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(adapted(ids).logits, built_in(ids).logits, atol=1e-5, rtol=0)
        cached = adapted.generate(ids, max_new_tokens=5, do_sample=False, use_cache=True)
        uncached = adapted.generate(ids, max_new_tokens=5, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)


# --- the coefficients' order and range, numbers of any type, shared configs, pickling --------------------------------


def test_learnable_coefficients_follow_increasing_layer_order_whatever_order_layers_were_given_in():
    """`layers=(2, 1)`: entry 0 of `learned_coefficients` belongs to layer 1. Zeroing it leaves the model adapted
    in layer 2 alone, which the same method with `layers=[2]` and the fixed coefficient computes."""
    inputs = tiny_inputs("llama")
    model = apply_value_path(tiny_model("llama"), "neutreno", 0.3, learnable=True, layers=(2, 1))
    _sharpen(model)
    assert model.config.value_path["layers"] == [1, 2]
    with torch.no_grad():
        _set_coefficients(model, [0.0, 0.3])
        only_layer_2 = apply_value_path(tiny_model("llama"), "neutreno", 0.3, layers=[2])
        _sharpen(only_layer_2)
        torch.testing.assert_close(model(**inputs).logits, only_layer_2(**inputs).logits, rtol=0, atol=1e-6)
        plain = tiny_model("llama")
        _sharpen(plain)
        assert (model(**inputs).logits - plain(**inputs).logits).abs().max() > 1e-3  # layer 2's term is on


@pytest.mark.parametrize("outside, inside", [(3.0, 1.0), (-0.5, 0.0)])
def test_a_learnable_alpha_moved_outside_zero_one_computes_the_nearest_mix_also_after_saving(outside, inside, tmp_path):
    inputs = tiny_inputs("llama")
    base = tiny_model("llama")
    _sharpen(base)
    model = apply_value_path(copy.deepcopy(base), "value_residual", learnable=True)
    reference = apply_value_path(copy.deepcopy(base), "value_residual", inside)
    with torch.no_grad():
        _set_coefficients(model, [outside, outside])
        expected = reference(**inputs).logits
        torch.testing.assert_close(model(**inputs).logits, expected, rtol=0, atol=1e-6)
        model.save_pretrained(tmp_path)
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True)
        torch.testing.assert_close(loaded(**inputs).logits, expected, rtol=0, atol=1e-6)


def test_a_learnable_alpha_pushed_below_zero_still_gets_the_gradient_of_the_mix_at_zero():
    """A pretrained model's learnable α starts at 0; a step can push it below. Its gradient there must be the one of
    the mix at 0 (straight through the clamp), or it would stay below 0, off, for the rest of training."""
    inputs = tiny_inputs("llama")
    base = tiny_model("llama")
    _sharpen(base)
    gradients = {}
    for start in (0.0, -0.25):
        model = apply_value_path(copy.deepcopy(base), "value_residual", 0.0, learnable=True)
        with torch.no_grad():
            _set_coefficients(model, [start, start])
        model(**inputs).logits.square().mean().backward()
        gradients[start] = torch.stack([p.grad for p in coefficient_parameters(model)])
    assert gradients[-0.25].abs().min() > 0
    torch.testing.assert_close(gradients[-0.25], gradients[0.0], rtol=1e-5, atol=0)


def test_coefficients_and_layers_of_any_numeric_type_are_numbers():
    import numpy as np

    inputs = tiny_inputs("gpt2")
    expected = apply_value_path(tiny_model("gpt2"), "neutreno", 0.25, layers=[2])
    for coefficient, layer in [(np.float32(0.25), np.int64(2)), (torch.tensor(0.25), torch.tensor(2))]:
        model = apply_value_path(tiny_model("gpt2"), "neutreno", coefficient, layers=[layer])
        assert model.config.value_path == expected.config.value_path
        assert json.dumps(model.config.value_path)  # plain Python numbers: the config saves
    for bad in ("0.25", True, np.bool_(True), torch.tensor([0.1, 0.2])):
        with pytest.raises(ValueError, match="`coefficient` .* must be a finite number"):
            apply_value_path(tiny_model("gpt2"), "neutreno", bad)
    with pytest.raises(ValueError, match="`layers` must list distinct self-attention layers"):
        apply_value_path(tiny_model("gpt2"), "neutreno", layers=[1.0])
    del inputs


def test_two_models_built_from_one_config_object_are_adapted_independently():
    config = tiny_model("llama").config
    first, second = LlamaForCausalLM(config), LlamaForCausalLM(config)
    apply_value_path(first, "neutreno")
    assert getattr(second.config, "value_path", None) is None
    apply_value_path(second, "value_residual")  # was refused: "loaded without trust_remote_code"
    assert first.config.value_path["method"] == "neutreno" and second.config.value_path["method"] == "value_residual"
    assert all(m.config is first.config for m in first.modules() if hasattr(m, "config"))


def test_a_whole_adapted_model_unpickled_in_a_new_process_runs(tmp_path):
    model = apply_value_path(tiny_model("llama"), "value_residual", learnable=True)
    inputs = tiny_inputs("llama")
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.save({"model": model, "inputs": inputs, "expected": expected}, tmp_path / "whole.pt")
    code = f"""
        import torch
        saved = torch.load({str(tmp_path / "whole.pt")!r}, weights_only=False)
        with torch.no_grad():
            logits = saved["model"](**saved["inputs"]).logits
        assert torch.equal(logits, saved["expected"]), (logits - saved["expected"]).abs().max()
        print("ok")
    """
    env = {k: v for k, v in os.environ.items()} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("name", ["gpt2", "llama", "vit", "deit"])
def test_automodel_loads_the_backbone_of_an_adapted_checkpoint_adapted(name, tmp_path):
    """`auto_map` listed only the saved class's Auto class, so `AutoModel.from_pretrained(folder,
    trust_remote_code=True)` built the plain backbone: it now builds the adapted one, with the trained coefficients,
    whose last hidden state is the saved model's. ViT's and DeiT's checkpoints are renamed on loading by conversions
    that transformers looks up by class name or model type and skipped for custom code: the adapted classes take their
    base's (their backbone loaded every weight as missing, random, before)."""
    model = apply_value_path(tiny_model(name), "value_residual", learnable=True)
    _sharpen(model)
    with torch.no_grad():
        _set_coefficients(model, [0.2, 0.9])
    model.save_pretrained(tmp_path)
    backbone = AutoModel.from_pretrained(tmp_path, trust_remote_code=True)
    assert is_value_path_model(backbone) and learned_coefficients(backbone) == pytest.approx([0.2, 0.9])
    inputs = {k: v for k, v in tiny_inputs(name).items() if k != "labels"}
    with torch.no_grad():
        expected = model(**inputs, output_hidden_states=True).hidden_states[-1]
        plain = remove_value_path(copy.deepcopy(backbone))(**inputs, output_hidden_states=True).hidden_states[-1]
        torch.testing.assert_close(backbone(**inputs, output_hidden_states=True).hidden_states[-1], expected)
    assert (plain - expected).abs().max() > 1e-3


@pytest.mark.parametrize("learnable", [False, "gate"])
@pytest.mark.parametrize("method", ["value_residual", "value_embedding"])
def test_values_are_mixed_in_the_cache_only_where_the_cache_keeps_what_it_returns(method, learnable):
    """Generation mixes the new tokens' values in the KV cache's own tensor. A cache whose `update` hands back a copy
    (as quantised caches hand back a dequantised one) would lose that mix for the next tokens, and so would one of
    transformers' own layers whose cache moves what it stores after the update (an offloading cache copies each
    layer's to the CPU): there the whole mix is made at every token instead, and generation still equals generation
    without a cache."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class CopyingLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            return keys.clone(), values.clone()

    def update_then_move(self, key_states, value_states, *args, **kwargs):
        keys, values = DynamicLayer.update(self, key_states, value_states, *args, **kwargs)
        self.keys, self.values = keys.clone(), values.clone()  # as `Cache.offload` after `update`, on a GPU
        return keys, values

    offloaded = type("DynamicLayer", (DynamicLayer,), {"update": update_then_move})  # judged by its class name
    model = apply_value_path(tiny_model("llama", pad_token_id=0), method, 0.5, learnable=learnable)
    _sharpen(model)
    inputs = tiny_inputs("llama", length=6)
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    uncached = model.generate(**inputs, use_cache=False, **settings)
    for kind, layer_class in {"own": DynamicLayer, "copying": CopyingLayer, "offloaded": offloaded}.items():
        cache = DynamicCache(config=model.config)
        cache.layers = [layer_class() for _ in cache.layers]
        cached = model.generate(**inputs, **{CACHE_FIELD: cache}, **settings)
        assert torch.equal(cached.sequences, uncached.sequences), kind
        for a, b in zip(cached.scores, uncached.scores):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("learnable", [False, True])
def test_a_model_that_copies_its_values_after_the_cache_update_generates_as_without_a_cache(learnable):
    """JetMoe repeats its values per expert after the cache update, so its attention gets a copy of what the cache
    holds: a mix made in that copy was lost before the next token (cached greedy scores off by 0.06). Only a layer
    handed the cache's own tensor mixes in place; this one gets the whole mix at every token."""
    model = apply_value_path(tiny_architecture("jetmoe"), "value_residual", learnable=learnable, layers=[1, 2])
    assert_cached_generation_equals_the_full_forward(model, tiny_inputs("llama", length=6), atol=1e-5)


# --- coefficients as the forward uses them, and never NaN ----------------------------------------------------------


def test_learned_coefficients_report_what_the_forward_uses():
    """A learnable α is used clamped to [0, 1]: an α of 3.0 (a step past the bound) is reported as 1.0, and the
    logits are those of α = 1. (It was reported as 3.0.)"""
    model = apply_value_path(tiny_model("llama"), "value_residual", 0.5, learnable=True)
    _sharpen(model)
    _set_coefficients(model, [3.0, -0.5])
    assert learned_coefficients(model) == [1.0, 0.0]
    fixed = copy.deepcopy(model)
    _set_coefficients(fixed, [1.0, 0.0])
    inputs = tiny_inputs("llama")
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, fixed(**inputs).logits, rtol=0, atol=0)


@pytest.mark.parametrize("learnable", [True, "gate"])
def test_a_coefficient_that_is_not_finite_is_refused_where_it_is_loaded_or_saved(learnable, tmp_path):
    """NaN in a learnable coefficient or gate gave NaN logits without a word: `load_state_dict`, `save_pretrained`
    (before anything is written) and `from_pretrained` refuse it, naming the parameter."""
    model = apply_value_path(tiny_model("gpt2"), "value_residual", 0.5, learnable=learnable)
    name = next(iter(value_path_parameters(model)))
    state = model.state_dict()
    state[name] = torch.full_like(state[name], float("nan"))
    with pytest.raises(ValueError, match=r"not finite.*" + name.replace(".", r"\.")):
        model.load_state_dict(state)
    assert torch.isfinite(model.get_parameter(name)).all()  # nothing was copied
    with torch.no_grad():
        model.get_parameter(name).fill_(float("inf"))
    with pytest.raises(ValueError, match="not finite"):
        model.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved").exists()
    with torch.no_grad():
        model.get_parameter(name).fill_(0.25)
    model.save_pretrained(tmp_path / "saved")
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "saved" / "model.safetensors")
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, tmp_path / "saved" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="not finite"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "saved", trust_remote_code=True)
