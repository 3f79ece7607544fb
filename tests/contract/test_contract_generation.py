"""The generation contract, written here: transformers 5.24.0's sdist does not ship upstream's GenerationTesterMixin
(tests/generation/test_utils.py; upstream/generation/test_utils.py is a stub, see refresh.py). These are the
properties its core tests check, for the NeuTRENO GPT and every adapted causal LM:

- greedy decoding gives the same tokens with the KV cache as without;
- a cache stepped by hand, one token per call, gives the logits of the full forward (upstream: continuing from a
  returned cache);
- a left-padded row generates what it generates alone (upstream: left-padding compatibility);
- a static cache gives the dynamic cache's tokens;
- sampling and beam search return every requested sequence, each starting with its prompt.

The NeuTRENO term and the value path are token-wise along the cache (V_0 of the current tokens) or mix the cached
values: each of these is where a cache bug would show. Fast tier: the NeuTRENO GPT and one method per adapted class
(as test_contract_value_path.py); slow tier: every other method.
"""

import pytest
import torch
from contract_common import RUN_SLOW
from test_contract_neutreno_gpt import FIELDS as GPT_FIELDS
from test_contract_value_path import ARCHITECTURES, FAST, METHODS, STACKS

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
from hf_neutreno.models.modeling_neutreno_gpt import CACHE_FIELD
from hf_neutreno.value_path import value_path_class

# Text prompts: not LLaVA's, whose generation with images is held in tests/test_value_path_stack.py
CAUSAL = [base for base in ARCHITECTURES if value_path_class(base).can_generate() and base not in STACKS]
NEW_TOKENS = 5
GREEDY = dict(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0)

# id of the case -> {test function: "BUG: ..."} (strict xfails)
BUGS = {}


def neutreno_gpt():
    return NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**GPT_FIELDS))


def adapted(base, method):
    def build():
        _, config_class, fields, _ = ARCHITECTURES[base]
        config = config_class(**fields)
        config.value_path = dict(METHODS[method])
        return value_path_class(base)(config)

    return build


def cases():
    found = [pytest.param(neutreno_gpt, id="NeuTRENOGPTForCausalLM")]
    for base in CAUSAL:
        for method in METHODS:
            fast = method in FAST[base]
            if fast or RUN_SLOW:  # as test_contract_value_path.py: the slow tier's cases exist only with RUN_SLOW=1
                marks = [] if fast else [pytest.mark.slow]
                found.append(pytest.param(adapted(base, method), id=f"ValuePath{base.__name__}-{method}", marks=marks))
    return found


@pytest.fixture(params=cases())
def model(request):
    torch.manual_seed(0)
    model = request.param().eval()
    bug = BUGS.get(request.node.callspec.id, {}).get(request.node.originalname)
    if bug is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=bug))
    return model


def prompt(batch=2, length=6, seed=1):
    return torch.randint(3, 99, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_greedy_with_cache_matches_without(model):
    input_ids = prompt()
    cached = model.generate(input_ids, use_cache=True, **GREEDY)
    uncached = model.generate(input_ids, use_cache=False, **GREEDY)
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)


def test_hand_stepped_cache_matches_the_full_forward(model):
    input_ids = prompt(length=9)
    with torch.no_grad():
        full = model(input_ids).logits
        outputs = model(input_ids[:, :5], use_cache=True)
        steps = [outputs.logits[:, -1]]
        for position in range(5, 9):
            cache = getattr(outputs, CACHE_FIELD)
            outputs = model(input_ids[:, position : position + 1], **{CACHE_FIELD: cache}, use_cache=True)
            steps.append(outputs.logits[:, -1])
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 4:], rtol=1e-4, atol=1e-5)


def test_left_padded_row_generates_what_it_generates_alone(model):
    input_ids = prompt()
    longer = torch.cat([prompt(batch=1, length=3, seed=2)[0], input_ids[1]])  # row 1: 3 more real tokens, no padding
    padded = torch.stack([torch.cat([torch.zeros(3, dtype=torch.long), input_ids[0]]), longer])
    mask = torch.ones_like(padded)
    mask[0, :3] = 0
    batch = model.generate(padded, attention_mask=mask, **GREEDY)
    alone = model.generate(input_ids[:1], **GREEDY)
    torch.testing.assert_close(batch[0, 3:], alone[0], rtol=0, atol=0)


def test_static_cache_matches_the_dynamic_cache(model):
    input_ids = prompt()
    dynamic = model.generate(input_ids, **GREEDY)
    static = model.generate(input_ids, cache_implementation="static", **GREEDY)
    torch.testing.assert_close(static, dynamic, rtol=0, atol=0)


def test_sampling_and_beam_search_return_every_sequence(model):
    input_ids = prompt()
    torch.manual_seed(0)
    sampled = model.generate(input_ids, do_sample=True, top_k=10, num_return_sequences=2, **_length())
    beams = model.generate(input_ids, num_beams=2, num_return_sequences=2, **_length())
    for output in (sampled, beams):
        assert output.shape == (4, input_ids.shape[1] + NEW_TOKENS)
        torch.testing.assert_close(output[::2, : input_ids.shape[1]], input_ids, rtol=0, atol=0)


def _length():
    return dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0)


@pytest.mark.slow
def test_the_slow_tier_has_every_method():
    assert len(cases()) == 1 + len(CAUSAL) * len(METHODS)
