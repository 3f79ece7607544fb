"""`apply_value_path(model, "value_embedding")`: value embeddings (modded-nanogpt's speedrun, nanochat), each adapted
layer's values plus ``g E_ℓ[token]``, against GPT-2 and a grouped-query Llama written out by hand from the raw
weights, forward and backward, with a fixed, a learnable and nanochat's gated strength; through cached generation, a
load without the package, a resized vocabulary, and the refusals of models that are not causal language models.
(`test_cache_contract.py` holds the cache property on every causal model and strength.)"""

import copy

import pytest
import torch
import torch.nn.functional as F

from fresh_process import load_fresh
from hf_neutreno import apply_value_path, learned_coefficients, remove_value_path
from hf_neutreno.engine.variants import VARIANTS, default_coefficient
from test_value_path_gate import _sharpen
from tiny_models import (
    assert_backward_matches,
    assert_cached_generation_equals_the_full_forward,
    assert_checkpointing_keeps_the_gradients,
    tiny_inputs,
    tiny_model,
    train_without_dropout,
    written_out_decoder,
)


def attention_modules(model):
    return [m for m in model.modules() if hasattr(m, "value_path_layer")]


def reference(model, input_ids, layers, window=None):
    """The values of each layer in `layers` plus g E[token] from the raw tables and gates: g the configured strength,
    a layer's learnable scalar, or 2 g₀ σ(W h[..., :12]) per token and key/value head of the layer's input h (each
    query seeing `window` keys, where given)."""
    settings = model.config.value_path
    modules = attention_modules(model)

    def values(index, h, v):
        if index not in layers:
            return v
        module = modules[index]
        batch, kv_heads, length, head_dim = v.shape
        table = module.value_path_embedding.weight[input_ids].view(batch, length, kv_heads, head_dim)
        if settings["learnable"] == "gate":
            gate = torch.sigmoid(F.linear(h[..., :12], module.value_path_gate.weight))  # (batch, tokens, kv heads)
            added = 2 * settings["coefficient"] * gate[..., None] * table
        elif settings["learnable"]:
            added = module.value_path_coefficient.value * table
        else:
            added = settings["coefficient"] * table
        return v + added.transpose(1, 2)

    return written_out_decoder(model, input_ids, values=values, window=window)


def _adapted(name, **settings):
    plain = tiny_model(name)
    _sharpen(plain)
    model = apply_value_path(copy.deepcopy(plain), "value_embedding", **settings)
    torch.manual_seed(5)
    for module in attention_modules(model):  # a gate that depends on the token
        if hasattr(module, "value_path_gate"):
            torch.nn.init.normal_(module.value_path_gate.weight, std=0.5)
        if hasattr(module, "value_path_coefficient"):
            torch.nn.init.uniform_(module.value_path_coefficient.value, 0.3, 1.2)
    return plain, model


def _compare_backward(model, copied, output, expected):
    assert_backward_matches(model, copied, output, expected)
    tables = [p.grad for key, p in model.named_parameters() if "value_path_embedding" in key]
    assert tables and all(g is not None and g.abs().max() > 0 for g in tables)  # the tables train


CASES = [
    pytest.param({}, (0, 2), id="fixed-default-layers"),
    pytest.param({"coefficient": 0.7, "layers": [1, 2]}, (1, 2), id="fixed-0.7"),
    pytest.param({"learnable": True, "layers": [0, 1, 2]}, (0, 1, 2), id="learnable"),
    pytest.param({"coefficient": 1.5, "learnable": "gate"}, (0, 2), id="gate-nanochat"),
]


@pytest.mark.parametrize("settings, layers", CASES)
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_value_embeddings_equal_the_hand_written_reference_forward_and_backward(name, settings, layers):
    """GPT-2 (fused c_attn) and a Llama with 4 query heads on 2 key/value heads (tables the width of 2 KV heads)."""
    plain, model = _adapted(name, **settings)
    model = model.double()
    copied = copy.deepcopy(train_without_dropout(model))
    input_ids = tiny_inputs(name)["input_ids"]
    output, expected = model(input_ids).logits, reference(copied, input_ids, layers)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)
    with torch.no_grad():
        assert (expected - plain.double()(input_ids).logits).abs().max() > 1e-2  # the embeddings matter here
    _compare_backward(model, copied, output, expected)


def test_nanochats_layers_tables_and_gate_by_default():
    model = apply_value_path(tiny_model("llama", num_hidden_layers=4), "value_embedding", 1.5, learnable="gate")
    assert model.config.value_path["layers"] == [1, 3]  # every other layer, ending with the last
    modules = attention_modules(model)
    assert [hasattr(m, "value_path_embedding") for m in modules] == [False, True, False, True]
    table, gate = modules[1].value_path_embedding, modules[1].value_path_gate
    assert table.weight.shape == (50, 2 * 8)  # vocabulary × (2 key/value heads of 8)
    bound = (3 / 32) ** 0.5  # nanochat's uniform ±√3/√hidden
    assert table.weight.abs().max() <= bound and table.weight.abs().max() > bound / 2
    assert gate.weight.shape == (2, 12) and gate.bias is None and torch.all(gate.weight == 0)  # g starts at g₀


def test_learnable_strength_starts_at_zero_the_models_own_function_and_learns():
    plain = tiny_model("llama")
    model = apply_value_path(copy.deepcopy(plain), "value_embedding", learnable=True)
    assert model.config.value_path["coefficient"] == 0.0 and learned_coefficients(model) == [0.0, 0.0]
    input_ids = tiny_inputs("llama")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, plain(input_ids).logits, rtol=0, atol=0)
    model(input_ids).logits.square().mean().backward()
    gradients = [p.grad for name, p in model.named_parameters() if "value_path_coefficient" in name]
    assert len(gradients) == 2 and all(g is not None and g.abs() > 0 for g in gradients)  # random tables: a gradient


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("learnable", [False, "gate"])
def test_value_embeddings_cached_generation_equals_the_full_forward(name, learnable):
    _, model = _adapted(name, coefficient=0.9, learnable=learnable)
    model.config.pad_token_id = 0
    assert_cached_generation_equals_the_full_forward(model, tiny_inputs(name, length=6), atol=5e-5)


def test_a_value_embedding_model_saves_and_loads_without_the_package(tmp_path):
    _, model = _adapted("llama", coefficient=1.5, learnable="gate")
    report = "[type(model).__name__, model.config.value_path]"
    difference, (name, settings) = load_fresh(model, tiny_inputs("llama"), tmp_path / "ve", report)
    assert name == "ValuePathLlamaForCausalLM" and settings["learnable"] == "gate" and difference == 0


def test_the_tables_follow_a_resized_vocabulary():
    model = apply_value_path(tiny_model("gpt2"), "value_embedding")
    tables = [
        m.value_path_embedding.weight.detach().clone()
        for m in attention_modules(model)
        if hasattr(m, "value_path_embedding")
    ]
    model.resize_token_embeddings(53)
    resized = [m.value_path_embedding.weight for m in attention_modules(model) if hasattr(m, "value_path_embedding")]
    for old, new in zip(tables, resized):
        assert new.shape == (53, old.shape[1]) and torch.equal(new[:50], old) and torch.all(new[50:] == 0)
    model(torch.tensor([[52, 3, 51]]))  # the new tokens look up their (zero) rows


def test_models_that_are_not_causal_language_models_are_refused_before_anything_changes():
    for name in ("vit", "bert"):
        model = tiny_model(name)
        with pytest.raises(ValueError, match="not causal: value embeddings"):
            apply_value_path(model, "value_embedding")
        assert getattr(model.config, "value_path", None) is None and not hasattr(model, "_value_path_hooks")
    model = apply_value_path(tiny_model("llama"), "value_embedding")
    embeds = model.get_input_embeddings()(tiny_inputs("llama")["input_ids"])
    with pytest.raises(ValueError, match="call it with `input_ids`"):
        model(inputs_embeds=embeds)


def test_value_embedding_settings_are_checked_and_compare_names_its_variants():
    with pytest.raises(ValueError, match=r"g of 'value_embedding'.*must be >= 0"):
        apply_value_path(tiny_model("gpt2"), "value_embedding", -0.5)
    with pytest.raises(ValueError, match="starts at `coefficient` g₀ > 0"):
        apply_value_path(tiny_model("gpt2"), "value_embedding", 0.0, learnable="gate")
    assert VARIANTS["value-embedding-gate"].learnable == "gate"
    assert default_coefficient("value-embedding") == 1.0 and default_coefficient("value-embedding-learnable") == 0.0
    assert default_coefficient("value-embedding-gate") == 1.0
    assert default_coefficient("value-embedding-gate", pretrained=True) == 0.01


def test_under_bf16_autocast_the_values_keep_their_dtype_and_the_float32_tables_train():
    plain = tiny_model("llama").train()
    model = apply_value_path(copy.deepcopy(plain), "value_embedding", 1.5, learnable="gate")
    inputs = tiny_inputs("llama")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    seen = {}
    for name, run in (("plain", plain), ("adapted", model)):
        seen[name] = []

        def recording(query, key, value, *args, recorded=seen[name], **kwargs):
            recorded.append(value.dtype)
            return sdpa(query, key, value, *args, **kwargs)

        with torch.autocast("cpu", dtype=torch.bfloat16), pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
            run(**inputs, labels=inputs["input_ids"]).loss.backward()
    # the adapted layers' values too, in the plain model's dtype (bfloat16 with transformers 5.24), not promoted to
    # the tables' float32
    assert seen["adapted"] == seen["plain"] and len(seen["plain"]) == 3
    tables = [p for name, p in model.named_parameters() if "value_path_embedding" in name]
    assert tables and all(p.dtype == torch.float32 and p.grad.abs().max() > 0 for p in tables)


def test_remove_value_path_takes_the_tables_and_gates_away():
    plain = tiny_model("gpt2")
    model = apply_value_path(copy.deepcopy(plain), "value_embedding", 1.5, learnable="gate")
    assert any("value_path_embedding" in name for name, _ in model.named_parameters())
    remove_value_path(model)
    assert not any("value_path" in name for name, _ in model.named_parameters())
    input_ids = tiny_inputs("gpt2")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, plain(input_ids).logits, rtol=0, atol=0)


def test_activation_checkpointing_keeps_every_gradient_the_tables_and_gates_included():
    def make():
        _, model = _adapted("llama", coefficient=1.5, learnable="gate")
        return model.train()

    input_ids = tiny_inputs("llama")["input_ids"]
    checkpointed = assert_checkpointing_keeps_the_gradients(make, input_ids=input_ids, labels=input_ids)
    assert any("value_path_embedding" in name and p.grad is not None for name, p in checkpointed.named_parameters())
