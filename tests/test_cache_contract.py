"""The cache contract of every causal model and value path: a cache is an optimisation, never another answer.

For each causal value-path method on a GPT-2, a grouped-query Llama and Qwen2, and for the NeuTRENO GPT: the last
logits of the full forward equal a prefill followed by a step of 1 or of k tokens, with the cache the model made itself,
with gradients on or off in each call, on a left-padded batch; a step after the cache's rows are reordered, selected or
repeated (as decoding strategies do), or cropped, equals the full forward of those rows; greedy `generate` equals the
argmax of full forwards, beam search equals beam search without a cache, and prompt-lookup decoding equals greedy.
"""

import copy
import itertools

import pytest
import torch
from transformers import DynamicCache

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, apply_value_path
from tiny_models import CAUSAL, TINY_NEUTRENO_GPT, tiny_inputs, tiny_model

ATOL = 1e-5  # float32
# (method, coefficient, learnable): each causal value path, its coefficient away from 0 so that it acts
METHODS = {
    "neutreno": ("neutreno", 0.5, False),
    "neutreno-learnable": ("neutreno", 0.5, True),
    "value-residual": ("value_residual", 0.5, False),
    "value-residual-learnable": ("value_residual", 0.3, True),
    "value-residual-gate": ("value_residual", 0.5, "gate"),
    "twicing": ("twicing", 0.5, False),
    "xsa": ("xsa", 0.7, False),
    "xsa-learnable": ("xsa", 0.4, True),
    "value-embedding": ("value_embedding", 0.8, False),
    "value-embedding-learnable": ("value_embedding", 0.6, True),
    "value-embedding-gate": ("value_embedding", 1.5, "gate"),
}


def adapted(architecture: str, method: str):
    return adapt(tiny_model(architecture), method).eval()


def adapt(model, method: str):
    """`model` adapted with `METHODS[method]` (in place)."""
    name, coefficient, learnable = METHODS[method]
    model = apply_value_path(model, name, coefficient, learnable=learnable)
    if learnable == "gate":  # a gate that depends on the token, so that a row mixed with another's gate shows
        torch.manual_seed(3)
        for module in model.modules():
            gate = getattr(module, "value_path_gate", None)
            if gate is not None:
                torch.nn.init.normal_(gate.weight, std=0.5)
    return model


def neutreno_gpt():
    torch.manual_seed(0)
    config = NeuTRENOGPTConfig(**{**TINY_NEUTRENO_GPT, "vocab_size": 50}, neutreno_lambda=0.5)
    return NeuTRENOGPTForCausalLM(config).eval()


CASES = [pytest.param(a, m, id=f"{a}-{m}") for a, m in itertools.product(CAUSAL, METHODS)]
CASES.append(pytest.param("neutreno_gpt", None, id="neutreno-gpt"))
# A model with sliding-window layers: its cache hands over a window of rows, not every token.
CASES += [pytest.param("mistral-window", m, id=f"mistral-window-{m}") for m in METHODS]


def build(architecture, method):
    return neutreno_gpt() if architecture == "neutreno_gpt" else adapted(architecture, method)


def last_logits(model, ids, mask, grad: bool, **kwargs):
    with torch.set_grad_enabled(grad):
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, **kwargs)
    return out.logits[:, -1].detach(), out.past_key_values


@pytest.mark.parametrize("architecture, method", CASES)
@pytest.mark.parametrize("step", [1, 3], ids=["step-1", "step-3"])
def test_prefill_and_step_with_the_models_own_cache_equal_the_full_forward(architecture, method, step):
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=3, length=9, padding="left")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits[:, -1]
    for prefill_grad, step_grad in itertools.product((False, True), repeat=2):
        _, cache = last_logits(model, ids[:, :-step], mask[:, :-step], prefill_grad)  # the cache the model made
        stepped, _ = last_logits(model, ids[:, -step:], mask, step_grad, past_key_values=cache)
        torch.testing.assert_close(
            stepped, full, rtol=0, atol=ATOL, msg=f"prefill grad {prefill_grad}, step grad {step_grad}"
        )


@pytest.mark.parametrize("architecture, method", CASES)
def test_two_steps_after_a_prefill_equal_the_full_forward(architecture, method):
    """A cache stepped twice by hand, the first step with gradients: each step's rows stay right for the next."""
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=3, length=9, padding="left")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits[:, -1]
    _, cache = last_logits(model, ids[:, :5], mask[:, :5], False)
    _, cache = last_logits(model, ids[:, 5:7], mask[:, :7], True, past_key_values=cache)
    stepped, _ = last_logits(model, ids[:, 7:], mask, False, past_key_values=cache)
    torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL)


@pytest.mark.parametrize("architecture, method", CASES)
def test_greedy_generate_equals_the_argmax_of_full_forwards(architecture, method):
    """Each step's scores are the full forward's logits at that position, and its token their argmax (where the top
    two logits are further apart than the tolerance: a tie may go either way)."""
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=3, length=6, padding="left")
    settings = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    generated = model.generate(**inputs, **settings)
    mask = torch.cat([inputs["attention_mask"], torch.ones(3, 5, dtype=torch.long)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as `generate` numbers a left-padded row
    with torch.no_grad():
        full = model(input_ids=generated.sequences, attention_mask=mask, position_ids=positions).logits
    eos = model.generation_config.eos_token_id
    eos = torch.tensor([eos] if isinstance(eos, int) else list(eos or []), dtype=torch.long)
    for step, scores in enumerate(generated.scores):
        logits = full[:, 5 + step]
        alive = ~torch.isin(generated.sequences[:, 6 : 6 + step], eos).any(
            -1
        )  # a finished row gets padding, not its argmax
        torch.testing.assert_close(scores[alive], logits[alive], rtol=0, atol=ATOL, msg=f"step {step}")
        top = logits.topk(2, dim=-1).values
        clear = alive & (top[:, 0] - top[:, 1] > 2 * ATOL)
        token = generated.sequences[:, 6 + step]
        assert torch.equal(token[clear], logits.argmax(-1)[clear]), f"step {step}"


# A cache's batch operations: the argument, and which rows of the batch the cache holds after it.
REARRANGEMENTS = {
    "reorder_cache": (torch.tensor([2, 2, 0]), [2, 2, 0]),  # beam search, at every step
    "batch_select_indices": (torch.tensor([0, 2]), [0, 2]),
    "batch_repeat_interleave": (2, [0, 0, 1, 1, 2, 2]),
}


@pytest.mark.parametrize("operation", REARRANGEMENTS)
@pytest.mark.parametrize("architecture, method", CASES)
def test_a_cache_whose_rows_are_rearranged_keeps_each_rows_value_path(architecture, method, operation):
    """What the value path keeps beside the cache (twicing's A V of the earlier tokens; the rows a prefill with
    gradients left unmixed, with their gates and token ids) follows the cache's rows when a decoding strategy
    rearranges them, so that a step after it equals the full forward of the rearranged rows."""
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=3, length=9, padding="left")
    argument, rows = REARRANGEMENTS[operation]
    ids, mask = inputs["input_ids"][rows], inputs["attention_mask"][rows]
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask).logits[:, -1]
    for prefill_grad in (False, True):
        _, cache = last_logits(model, inputs["input_ids"][:, :-1], inputs["attention_mask"][:, :-1], prefill_grad)
        getattr(cache, operation)(argument)
        stepped, _ = last_logits(model, ids[:, -1:], mask, False, past_key_values=cache)
        torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL, msg=f"prefill grad {prefill_grad}")


@pytest.mark.parametrize("architecture, method", CASES)
def test_beam_search_equals_beam_search_without_a_cache(architecture, method):
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=2, length=6, padding="left")
    settings = dict(max_new_tokens=5, num_beams=3, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(**inputs, **settings), model.generate(**inputs, use_cache=False, **settings))


def test_a_copied_cache_is_rearranged_apart_from_the_original():
    """`copy.deepcopy` of a cache (as assisted decoding makes) copies what the value path keeps beside it: reordering
    the copy leaves the original's rows, and each steps to the full forward of its own rows."""
    model = build("llama", "twicing")  # which keeps A V of the earlier tokens beside the cache
    inputs = tiny_inputs("llama", batch=3, length=9, padding="left")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    _, cache = last_logits(model, ids[:, :-1], mask[:, :-1], False)
    copied = copy.deepcopy(cache)
    copied.reorder_cache(torch.tensor([2, 0, 1]))
    for held, rows in ((cache, [0, 1, 2]), (copied, [2, 0, 1])):
        with torch.no_grad():
            full = model(input_ids=ids[rows], attention_mask=mask[rows]).logits[:, -1]
        stepped, _ = last_logits(model, ids[rows, -1:], mask[rows], False, past_key_values=held)
        torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL)


@pytest.mark.parametrize("architecture, method", CASES)
def test_a_step_after_a_cropped_cache_equals_the_full_forward(architecture, method):
    """Assisted and prompt-lookup decoding crop the cache back to the accepted tokens: a step after it equals the full
    forward, whatever the value path kept of the cropped tokens. A model with sliding-window layers gets a cache that
    records its past, as assisted decoding gives it (a window's layer refuses a crop otherwise); its layers then hand
    over their last rows only."""
    model = build(architecture, method)
    inputs = tiny_inputs("llama", batch=3, length=9, padding="left")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        full = model(input_ids=ids[:, :7], attention_mask=mask[:, :7]).logits[:, -1]
    for prefill_grad in (False, True):
        given = {}
        if getattr(model.config, "sliding_window", None) is not None:
            given["past_key_values"] = DynamicCache(config=model.config)
            given["past_key_values"].activate_past_recording()
        _, cache = last_logits(model, ids, mask, prefill_grad, **given)
        cache.crop(-3)
        stepped, _ = last_logits(model, ids[:, 6:7], mask[:, :7], False, past_key_values=cache)
        torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL, msg=f"prefill grad {prefill_grad}")


@pytest.mark.parametrize("architecture, method", CASES)
def test_prompt_lookup_decoding_equals_greedy_decoding(architecture, method):
    """Prompt-lookup decoding proposes tokens from the prompt and crops the cache where the model disagrees."""
    model = build(architecture, method)
    ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids, **settings), model.generate(ids, prompt_lookup_num_tokens=3, **settings))


@pytest.mark.parametrize("architecture", CAUSAL)
def test_twicing_refuses_a_cache_rebuilt_from_another_caches_tensors(architecture):
    """Twicing's second product needs A V at every cached key, kept beside the cache that the model filled. A new
    cache filled with that cache's keys and values carries none of it: refused, naming the way out, rather than the
    earlier tokens' A V taken as 0 (0.07 off the full forward). The cache itself continues as the full forward."""
    from transformers import DynamicCache

    model = adapted(architecture, "twicing")
    ids = tiny_inputs("llama", batch=1, length=10)["input_ids"]
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        cache = DynamicCache(config=model.config)
        model(ids[:, :-1], past_key_values=cache)
        rebuilt = DynamicCache(config=model.config)
        for index, layer in enumerate(cache.layers):
            rebuilt.update(layer.keys.clone(), layer.values.clone(), index)
        with pytest.raises(RuntimeError, match="twicing needs A V of the 9 cached tokens"):
            model(ids[:, -1:], past_key_values=rebuilt)
        stepped = model(ids[:, -1:], past_key_values=cache).logits[:, -1]
    torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    "method, missing",
    [
        ("value-residual-gate", "the gate's α"),
        ("value-embedding", "the token ids"),
        ("value-embedding-gate", "the token ids"),
    ],
)
def test_rows_not_mixed_yet_need_what_was_kept_beside_their_cache(method, missing):
    """A prefill with gradients mixes nothing into the cache: the gate's α and the token ids of its rows wait beside
    the cache that the model filled, for the next call to mix them in place. A new cache filled with that cache's
    keys and values carries none of it: refused, naming what is missing, rather than mixed without it. The cache
    itself continues as the full forward."""
    from transformers import DynamicCache

    model = adapted("llama", method)
    ids = tiny_inputs("llama", batch=1, length=10)["input_ids"]
    with torch.no_grad():
        full = model(ids).logits[:, -1]
    cache = DynamicCache(config=model.config)
    model(ids[:, :-1], past_key_values=cache)  # with gradients
    rebuilt = DynamicCache(config=model.config)
    for index, layer in enumerate(cache.layers):
        rebuilt.update(layer.keys.detach().clone(), layer.values.detach().clone(), index)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match=f"needs {missing} of cached tokens 0 to 8, whose rows it has not mixed"):
            model(ids[:, -1:], past_key_values=rebuilt)
        stepped = model(ids[:, -1:], past_key_values=cache).logits[:, -1]
    torch.testing.assert_close(stepped, full, rtol=0, atol=ATOL)
