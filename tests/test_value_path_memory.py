"""What a training forward pass leaves for its backward pass, with a value path and without: every method keeps what
the unmodified model keeps, plus (…, 1) tensors (a ratio or a gate per token and head), not a second (batch, tokens,
hidden) tensor per layer. Counted from the profiler's record of every CPU allocation and free during the forward pass,
which is exact and the same on every CPU. Twicing keeps its second attention call's tensors by design (its memory is
reported in docs/benchmarks.md, not held); a learnable or gated value embedding keeps its looked-up rows for g's
gradient, as nanochat's and modded-nanogpt's do (docs/value-path.md, Cost), and is held to exactly that."""

import pytest
import torch

from hf_neutreno import apply_value_path
from tiny_models import TINY_MLA, VOCAB, retained_bytes, tiny_inputs, tiny_model

# wide heads (64), so that a (…, 1) tensor is 1/64 of a full one and a full one stands out
SHAPES = {
    "gpt2": dict(n_embd=128, n_head=2, n_inner=256),
    "vit": dict(hidden_size=128, num_attention_heads=2, intermediate_size=256),
}
HELD = [
    ("neutreno", False),
    ("neutreno", True),
    ("value_residual", False),
    ("value_residual", True),
    ("value_residual", "gate"),
    ("xsa", False),
    ("xsa", True),
    ("value_embedding", False),
]


def _setup(name: str, attention: str = "sdpa"):
    inputs = tiny_inputs(name, batch=4, length=16)
    if name == "gpt2":
        inputs["labels"] = inputs["input_ids"]
        tokens = 16
    else:
        inputs["labels"] = torch.zeros(4, dtype=torch.long)
        tokens = 17  # 16 patches and the class token
    full = 4 * tokens * 128 * 4  # one float32 (batch, tokens, hidden) tensor
    native = retained_bytes(tiny_model(name, attention, **SHAPES[name]).train(), inputs)
    return inputs, full, native


def _extra_per_layer(name, method, learnable, inputs, full, native, attention="sdpa") -> float:
    model = apply_value_path(tiny_model(name, attention, **SHAPES[name]), method=method, learnable=learnable).train()
    layers = len(model.config.value_path["layers"])
    return (retained_bytes(model, inputs) - native) / full / layers


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", SHAPES)
def test_every_value_path_keeps_what_the_model_keeps_for_its_backward_pass(name, attention):
    """Also with eager attention, whose product copies V and keeps the copy (a rule that kept V's view kept the value
    projection's output too: 1.5 tensors per layer more with a learnable α or λ on ViT) and whose output GPT-2's
    returns as a transposed view (XSA's result, laid out so, was kept beside the copy the output projection reads)."""
    inputs, full, native = _setup(name, attention)
    for method, learnable in HELD:
        if method == "value_embedding" and name != "gpt2":
            continue
        extra = _extra_per_layer(name, method, learnable, inputs, full, native, attention)
        assert extra <= 1 / 8, f"{method}, learnable={learnable}: {extra:.3f} (batch, tokens, hidden) tensors per layer"


def test_a_learnable_or_gated_value_embedding_keeps_its_looked_up_rows_and_nothing_more():
    inputs, full, native = _setup("gpt2")
    for learnable in (True, "gate"):
        extra = _extra_per_layer("gpt2", "value_embedding", learnable, inputs, full, native)
        assert 1 - 1 / 8 <= extra <= 1 + 1 / 8, f"learnable={learnable}: {extra:.3f} per adapted layer"


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("method, learnable", [("value_residual", True), ("neutreno", True), ("xsa", False)])
def test_multi_head_latent_attention_keeps_its_values_not_their_joint_projection(method, learnable, attention):
    """DeepSeek V3's values are a split view of one projection's output, a key part and V per head (here twice V's
    size). Eager attention, and SDPA's math path (on a CPU, values of another head size than the queries'), copy V
    and keep the copy, so that output is freed; a rule that kept the view kept the whole of it (three value-sized
    tensors more per layer with a learnable α, V_0's counted once)."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    fields = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)
    # keys of 12 per head (8 without position, 4 rotated) and values of 8, as DeepSeek V3's 192 and 128
    config = DeepseekV3Config(**fields, **{**TINY_MLA, "qk_nope_head_dim": 8}, attn_implementation=attention)
    input_ids = tiny_inputs("llama", batch=4, length=16)["input_ids"]
    inputs = {"input_ids": input_ids, "labels": input_ids}
    torch.manual_seed(0)
    native = DeepseekV3ForCausalLM(config).train()
    values = 4 * 16 * config.num_attention_heads * config.v_head_dim * 4  # one float32 (batch, heads, tokens, d) V
    adapted = apply_value_path(DeepseekV3ForCausalLM(config), method, learnable=learnable).train()
    layers = len(adapted.config.value_path["layers"])
    extra = (retained_bytes(adapted, inputs) - retained_bytes(native, inputs)) / values / layers
    ratios = 2 / config.v_head_dim if method == "xsa" else 0  # XSA's two (…, 1) tensors per head
    assert extra <= ratios + 1 / 8, f"{extra:.3f} value-sized tensors per layer"
