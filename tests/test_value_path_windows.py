"""Sliding-window layers (Mistral, Gemma 2, GPT-OSS, Qwen2 with `use_sliding_window`) under every value path: each
finds a token's rows wherever a window's KV cache keeps them (row r is token `first_row_token` + r), V_0's in layer 0's
own window. Against the decoder written out with the window from the raw weights, forward and backward; and through
cached generation, where a layer's KV cache hands over its window and the new rows, or, static, its buffer, partly
empty until the window fills, then rolled; on models mixing full and windowed layers too. (test_cache_contract.py holds
the whole cache contract on a windowed Mistral.)"""

import copy

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma4ForCausalLM,
    Gemma4TextConfig,
    GptOssConfig,
    GptOssForCausalLM,
    Llama4ForCausalLM,
    Llama4TextConfig,
    Qwen2Config,
    Qwen2ForCausalLM,
    StaticCache,
)

from hf_neutreno import apply_value_path
from hf_neutreno.value_path import coefficient_parameters
from test_cache_contract import METHODS as CASES
from test_cache_contract import adapt
from test_value_path import reference_decoder_logits
from test_value_path_gate import _sharpen, gated_reference
from test_value_path_twicing import twicing_reference
from test_value_path_value_embedding import reference as value_embedding_reference
from test_value_path_xsa import decoder_reference, exclusive
from tiny_models import (
    CACHE_FIELD,
    DECODER,
    assert_backward_matches,
    assert_cached_generation_equals_the_full_forward,
    tiny_inputs,
    tiny_model,
    train_without_dropout,
    written_out_decoder,
)

# The tiny Llama's sizes, with the head size that Gemma's and GPT-OSS's configs set apart (Gemma 2's default is 256).
WINDOWED = dict(DECODER, head_dim=8)


def adapted(plain, case):
    """A copy of `plain` adapted as the cache contract's `case` (its gates' weights drawn: α depends on the token)."""
    return adapt(copy.deepcopy(plain), case)


def windowed_reference(model, input_ids, case, window):
    """The adapted `model` written out with the window, from its own weights (a learnable coefficient's, a gate's and
    a table's gradients are compared too): NeuTRENO's term and the value residual on layers 1 and 2, twicing and XSA on
    every layer, value embeddings on nanochat's."""
    method, coefficient, learnable = CASES[case]
    if method == "xsa":
        if not learnable:
            return decoder_reference(model, input_ids, range(3), coefficient, window=window)
        strengths = coefficient_parameters(model)  # one per layer

        def attended(index, probs, v, out):
            return exclusive(out, v, strengths[index])

        return written_out_decoder(model, input_ids, attended=attended, window=window)
    if method == "twicing":
        return twicing_reference(model, input_ids, range(3), coefficient, window=window)
    if method == "value_embedding":
        return value_embedding_reference(model, input_ids, model.config.value_path["layers"], window=window)
    if learnable == "gate":
        return gated_reference(model, input_ids, window=window)
    coefficients = coefficient_parameters(model) if learnable else (coefficient, coefficient)
    return reference_decoder_logits(model, input_ids, method, dict(zip((1, 2), coefficients)), window=window)


def test_the_written_out_reference_has_mistrals_window():
    plain = tiny_model("mistral-window")
    _sharpen(plain)
    input_ids, window = tiny_inputs("llama")["input_ids"], plain.config.sliding_window  # 9 tokens, a window of 3
    with torch.no_grad():
        expected = written_out_decoder(plain, input_ids, window=window)
        torch.testing.assert_close(expected, plain(input_ids).logits)
        assert (expected - written_out_decoder(plain, input_ids)).abs().max() > 1e-2  # the window matters here


@pytest.mark.parametrize("case", CASES)
def test_sliding_window_layers_equal_the_reference_and_cache_their_window(case):
    """A Mistral whose every layer has a window of 3, shorter than its input; the forward and every gradient in
    float64, then cached generation for a prompt beyond the window and one within it (a static cache's buffer not yet
    full). Before, NeuTRENO was refused here; it took V_0 and V at the cache's length, past a window's rows."""
    plain = tiny_model("mistral-window")
    _sharpen(plain)
    input_ids, window = tiny_inputs("llama")["input_ids"], plain.config.sliding_window
    model = adapted(plain, case).double()
    reference = copy.deepcopy(train_without_dropout(model))
    output = model(input_ids).logits
    expected = windowed_reference(reference, input_ids, case, window)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)
    with torch.no_grad():  # the method matters here
        assert (expected - plain.double()(input_ids).logits).abs().max() > 1e-2
    assert_backward_matches(model, reference, output, expected)
    if CASES[case][2] is True:
        assert all(parameter.grad.abs() > 0 for parameter in coefficient_parameters(model))
    model = model.float().eval()
    model.config.pad_token_id = 0
    for length in (6, 2):
        assert_cached_generation_equals_the_full_forward(model, tiny_inputs("llama", length=length), atol=5e-5)


# Full-attention and sliding-window layers in one model (each layer's cache hands over its own rows: V_0 and a later
# layer's values come in different numbers of rows), and GPT-OSS's attention sinks.
HYBRID = {
    "gemma2": lambda: Gemma2ForCausalLM(Gemma2Config(**WINDOWED, sliding_window=3, query_pre_attn_scalar=8)),
    "gpt-oss": lambda: GptOssForCausalLM(
        GptOssConfig(**WINDOWED, sliding_window=3, num_local_experts=2, num_experts_per_tok=1)
    ),
    "qwen2": lambda: Qwen2ForCausalLM(
        Qwen2Config(**WINDOWED, use_sliding_window=True, sliding_window=3, max_window_layers=1)
    ),
    "gemma4": lambda: gemma4(num_kv_shared_layers=0),  # per-layer inputs; no KV sharing
    "llama4": lambda: Llama4ForCausalLM(  # chunked attention: its cache keeps a window as a sliding one does
        Llama4TextConfig(
            **{**WINDOWED, "num_hidden_layers": 4},
            intermediate_size_mlp=64,
            attention_chunk_size=3,
            num_local_experts=2,
            interleave_moe_layer_step=2,
        )
    ),
}


def gemma4(num_kv_shared_layers: int):
    """A tiny Gemma 4 text model: windowed and full layers in turn, the last `num_kv_shared_layers` of its 4 reusing
    earlier layers' keys and values."""
    config = Gemma4TextConfig(
        **{**WINDOWED, "num_hidden_layers": 4},
        global_head_dim=8,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=num_kv_shared_layers,
        hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=WINDOWED["vocab_size"],
    )
    return Gemma4ForCausalLM(config)


def test_layers_that_reuse_another_layers_keys_and_values_are_refused():
    """Gemma 4's KV-shared layers attend over an earlier layer's keys and values, and run on the last tokens alone in
    generation (`logits_to_keep`): every method was refused there for its sliding windows, except XSA, which took
    another token's value as the query's own (0.07 off the full forward). Refused for every method when adapting;
    a model that drops a causal layer's queries anyway is stopped at that layer, not answered otherwise."""
    from unittest import mock

    for method in CASES:
        with pytest.raises(ValueError, match=r"layers \[2, 3\] reuse an earlier layer's keys and values"):
            adapt(gemma4(num_kv_shared_layers=2), method)
    model = gemma4(num_kv_shared_layers=2).eval()
    with mock.patch.object(Gemma4TextConfig, "kv_sharing_modes", property(lambda config: None)):
        adapt(model, "xsa")
    inputs = tiny_inputs("llama", length=6)
    with torch.no_grad():
        model(**inputs)  # every layer on every token
        with pytest.raises(RuntimeError, match=r"layer 2\) runs on 1 of this call's 6 tokens"):
            model(**inputs, logits_to_keep=1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", HYBRID)
def test_models_mixing_full_and_windowed_layers_cache_like_the_full_forward(name, case):
    torch.manual_seed(0)
    model = adapted(HYBRID[name]().eval(), case)
    assert "full_attention" in model.config.layer_types and len(set(model.config.layer_types)) == 2
    model.config.pad_token_id = 0
    for length in (6, 2):
        assert_cached_generation_equals_the_full_forward(model, tiny_inputs("llama", length=length), atol=5e-5)


def test_twicing_keeps_a_v_only_as_far_back_as_a_windows_cache_keeps_its_rows():
    """A V beside a sliding-window layer's dynamic cache covers the rows that cache keeps (the window's last tokens),
    not every generated token: memory bounded by the window, as the cache's own."""
    model = apply_value_path(tiny_model("mistral-window").eval(), "twicing", 0.7)
    model.config.pad_token_id = 0
    window = model.config.sliding_window
    generated = model.generate(
        **tiny_inputs("llama", length=6),
        max_new_tokens=12,
        do_sample=False,
        use_cache=True,
        return_dict_in_generate=True,
    )
    kept = getattr(generated, CACHE_FIELD).__dict__["_value_path_kept"]
    assert set(kept["twicing_history"]) == {0, 1, 2}
    for layer, history in kept["twicing_history"].items():
        assert history.shape[-2] == window - 1 == getattr(generated, CACHE_FIELD).layers[layer].values.shape[-2]
        assert kept["twicing_offset"][layer] == generated.sequences.shape[1] - 1 - (window - 1)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("case", ["value-residual", "value-residual-gate", "value-embedding-gate"])
def test_a_windows_new_rows_are_mixed_in_its_cache_in_place(case, cache):
    """The value residual and value embeddings mix each new token's values into a window's cache as it comes, as
    into a full cache (O(d) per token and layer, not the window's rows again): after generation every cached token's
    rows hold the mix and nothing waits beside the cache. A static window's cache copies a prompt longer than the
    window (it does not hand back what it stores): those rows are mixed by the next step, in place."""
    model = adapted(tiny_model("mistral-window").eval(), case)
    model.config.pad_token_id = 0
    inputs = tiny_inputs("llama", length=6)
    generated = model.generate(
        **inputs, max_new_tokens=5, do_sample=False, cache_implementation=cache, return_dict_in_generate=True
    )
    kept, cached = getattr(generated, CACHE_FIELD).__dict__["_value_path_kept"], generated.sequences.shape[1] - 1
    assert kept["mixed_rows"] == {1: cached, 2: cached} or kept["mixed_rows"] == dict.fromkeys((0, 2), cached)
    assert not kept["gate_rows"] and not kept["first_rows"] and not kept["token_rows"]


@pytest.mark.parametrize(
    "case", ["value-residual", "value-residual-learnable", "value-residual-gate", "value-embedding-gate"]
)
@pytest.mark.parametrize("name", ["gemma2", "gpt-oss"])
@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_calls_with_gradients_keep_v0_that_layer_0s_window_drops(name, case, kind):
    """Layer 0 has a window of 3 and layer 1 full attention: a call with gradients does not mix its rows into the
    cache, and by the time a later call mixes them, layer 0's cache no longer holds their V_0. It is kept beside the
    cache meanwhile (value embeddings keep the token ids), copied where layer 0's rows are a static cache's buffer,
    which the next tokens overwrite in place: a cache stepped by hand with gradients on and off gives the full
    forward's logits."""
    torch.manual_seed(0)
    model = adapted(HYBRID[name]().eval(), case)
    assert model.config.layer_types[:2] == ["sliding_attention", "full_attention"]
    input_ids = tiny_inputs("llama", length=10)["input_ids"]
    with torch.no_grad():
        full = model(input_ids).logits
    cache = StaticCache(config=model.config, max_cache_len=10) if kind == "static" else None
    begin = 0
    # a prompt within the window (layer 0's static rows are its buffer), steps that fill and roll it, then more tokens
    for end, grad in ((2, True), (3, True), (4, True), (6, False), (7, True), (10, True)):
        with torch.set_grad_enabled(grad):
            output = model(input_ids[:, begin:end], use_cache=True, **{CACHE_FIELD: cache})
        torch.testing.assert_close(output.logits.detach(), full[:, begin:end], atol=5e-5, rtol=0)
        cache, begin = getattr(output, CACHE_FIELD), end
