"""The NeuTRENO GPT against independent references: plain eager math of the paper's rule, transformers' GPT-2,
torch's transformer layer and adaptive log-softmax, and hand-written perplexity loops."""

import json
import math
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from torch.nn import functional as F
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from examples_loader import load_example
from fresh_process import make_local_hub_cache, run_fresh
from hf_neutreno import NeuTRENOGPTAdaptiveLogSoftmax, NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, NeuTRENOGPTModel
from hf_neutreno.convert import gpt2_to_neutreno
from hf_neutreno.data.lm_eval import block_eval, blocks, evaluate_lm, sliding_window_eval, sliding_windows
from hf_neutreno.data.text import group_into_blocks, load_wikitext, token_stream, train_word_tokenizer
from tiny_models import (
    NEUTRENO_LAYER_CASES,
    TINY_NEUTRENO_GPT,
    assert_checkpointing_keeps_the_gradients,
    assert_config_edits_are_checked,
    assert_the_term_changes_the_output,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = TINY_NEUTRENO_GPT
VOCAB = TINY["vocab_size"]
# The paper's architecture at toy size, and GPT-2's.
PAPER = dict(norm_position="post", position_embedding_type="sinusoidal", scale_embeddings=True, lm_head_bias=True)
GPT2_LIKE = dict(
    norm_position="pre",
    position_embedding_type="learned",
    scale_embeddings=False,
    attention_bias=True,
    lm_head_bias=False,
    hidden_act="gelu_new",
)
FP32_TOL = 1e-5  # fp32 accumulation-order noise between fused and eager kernels


def tiny_model(**overrides) -> NeuTRENOGPTForCausalLM:
    torch.manual_seed(0)
    model = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**{**TINY, **PAPER, **overrides})).eval()
    with torch.no_grad():  # biases start at 0: randomise them so the reference checks that they are used
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(std=0.1)
    model.set_attn_implementation("eager")
    return model


def token_ids(batch: int = 2, length: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------------------------
# The model against independent references
# --------------------------------------------------------------------------------------------------------------


def reference_logits(model: NeuTRENOGPTForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """NeuTRENO's rule in a causal LM, written out with plain tensor math, one head at a time, from the raw weights.

    For layer ℓ ≥ 1 in the NeuTRENO set, head h: U = softmax(Q Kᵀ/√d + causal mask) V + λ (V_0 − V), added before
    the output projection; layer 0 runs plain attention and provides V_0. LayerNorm before ("pre") or after
    ("post") each residual sum; sinusoidal positions [sin(p ω_i) | cos(p ω_i)], ω_i = 10000^(−2i/d).
    """
    cfg = model.config
    p = model.state_dict()
    n_heads, d = cfg.num_attention_heads, cfg.hidden_size
    d_head = d // n_heads
    length = ids.shape[1]
    act = {"relu": torch.relu, "gelu_new": lambda t: F.gelu(t, approximate="tanh")}[cfg.hidden_act]

    def ln(t, name):
        return F.layer_norm(t, (d,), p[name + ".weight"], p[name + ".bias"], cfg.layer_norm_eps)

    def lin(t, name):
        out = t @ p[name + ".weight"].T
        return out + p[name + ".bias"] if name + ".bias" in p else out

    h = p["model.embed_tokens.weight"][ids] * (math.sqrt(d) if cfg.scale_embeddings else 1.0)
    if cfg.position_embedding_type == "learned":
        h = h + p["model.embed_positions.weight"][:length]
    else:
        pe = torch.zeros(length, d)
        for i in range(d // 2):
            for pos in range(length):
                pe[pos, i] = math.sin(pos * 10000 ** (-2 * i / d))
                pe[pos, d // 2 + i] = math.cos(pos * 10000 ** (-2 * i / d))
        h = h + pe
    future = torch.ones(length, length).triu(1).bool()
    layers = cfg.neutreno_layers if cfg.neutreno_layers is not None else range(1, cfg.num_hidden_layers)
    pre = cfg.norm_position == "pre"
    v0 = None
    for i in range(cfg.num_hidden_layers):
        name = f"model.layers.{i}."
        x = ln(h, name + "self_attn_layer_norm") if pre else h
        q, k, v = lin(x, f"{name}self_attn.qkv_proj").chunk(3, dim=-1)  # rows: queries, keys, values
        heads = []
        for j in range(n_heads):
            sl = slice(j * d_head, (j + 1) * d_head)
            scores = (q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(d_head)).masked_fill(future, -math.inf)
            u = torch.softmax(scores, dim=-1) @ v[..., sl]
            if i in layers and cfg.neutreno_lambda:
                u = u + cfg.neutreno_lambda * (v0[..., sl] - v[..., sl])
            heads.append(u)
        if i == 0:
            v0 = v
        h = h + lin(torch.cat(heads, dim=-1), name + "self_attn.o_proj")
        if not pre:
            h = ln(h, name + "self_attn_layer_norm")
        x = ln(h, name + "mlp_layer_norm") if pre else h
        h = h + lin(act(lin(x, name + "mlp.fc1")), name + "mlp.fc2")
        if not pre:
            h = ln(h, name + "mlp_layer_norm")
    if pre:
        h = ln(h, "model.norm")
    return lin(h, "lm_head")


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param(dict(neutreno_lambda=0.4), id="paper-all-layers"),
        *NEUTRENO_LAYER_CASES,
        pytest.param(dict(neutreno_lambda=0.4, **GPT2_LIKE), id="gpt2-like"),
        pytest.param(dict(neutreno_lambda=0.0), id="lambda-0"),
    ],
)
def test_neutreno_gpt_equals_eager_reference(overrides):
    model = tiny_model(**overrides)
    ids = token_ids()
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference_logits(model, ids), atol=FP32_TOL, rtol=0)


def test_the_term_changes_the_output():
    """Guards the reference test against a λ that is never applied."""
    assert_the_term_changes_the_output(tiny_model(neutreno_lambda=0.0), tiny_model(neutreno_lambda=0.4), token_ids())


def test_lambda_zero_is_a_plain_post_ln_transformer():
    """λ = 0 of the paper's architecture equals torch's own post-LN `nn.TransformerEncoderLayer` stack (causal)."""
    model = tiny_model(neutreno_lambda=0.0, attention_bias=True)
    cfg = model.config
    torch_layers = []
    for layer in model.model.layers:
        ref = nn.TransformerEncoderLayer(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.intermediate_size,
            dropout=0.0,
            activation="relu",
            layer_norm_eps=cfg.layer_norm_eps,
            batch_first=True,
            norm_first=False,
        ).eval()
        attn = layer.self_attn
        with torch.no_grad():
            ref.self_attn.in_proj_weight.copy_(attn.qkv_proj.weight)  # both: q, then k, then v
            ref.self_attn.in_proj_bias.copy_(attn.qkv_proj.bias)
            ref.self_attn.out_proj.load_state_dict(attn.o_proj.state_dict())
            ref.linear1.load_state_dict(layer.mlp.fc1.state_dict())
            ref.linear2.load_state_dict(layer.mlp.fc2.state_dict())
            ref.norm1.load_state_dict(layer.self_attn_layer_norm.state_dict())
            ref.norm2.load_state_dict(layer.mlp_layer_norm.state_dict())
        torch_layers.append(ref)
    ids = token_ids()
    with torch.no_grad():
        h = model.model.embed_tokens(ids) + model.model.embed_positions(torch.arange(ids.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        for ref in torch_layers:
            h = ref(h, src_mask=mask, is_causal=True)
        expected = model.lm_head(h)
        torch.testing.assert_close(model(ids).logits, expected, atol=FP32_TOL, rtol=0)


def _tiny_gpt2(**overrides) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=3, n_head=4, bos_token_id=1, eos_token_id=1, **overrides
    )
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(std=0.1)
    return model


def test_gpt2_to_neutreno_at_lambda_zero_equals_gpt2(tmp_path):
    gpt2 = _tiny_gpt2()
    gpt2.save_pretrained(tmp_path / "gpt2")
    ids = token_ids(3, 20)
    with torch.no_grad():
        expected = gpt2(ids).logits
        for source in (gpt2, tmp_path / "gpt2"):
            converted = gpt2_to_neutreno(source, neutreno_lambda=0.0).eval()
            assert converted.lm_head.weight is converted.model.embed_tokens.weight  # tied like GPT-2
            assert (converted(ids).logits - expected).abs().max().item() <= FP32_TOL
        neutreno = gpt2_to_neutreno(gpt2, neutreno_lambda=0.4).eval()
        assert (neutreno(ids).logits - expected).abs().max() > 1e-3  # the adaptation then adds the term


@pytest.mark.parametrize(
    "field, value",
    [
        ("scale_attn_by_inverse_layer_idx", True),
        ("reorder_and_upcast_attn", True),
        ("scale_attn_weights", False),
        ("add_cross_attention", True),
    ],
)
def test_gpt2_to_neutreno_rejects_what_it_cannot_represent(field, value):
    with pytest.raises(ValueError, match=field):
        gpt2_to_neutreno(_tiny_gpt2(**{field: value}))


def _backends_agree(neutreno_lambda: float, backends: tuple[str, ...]) -> None:
    model = tiny_model(neutreno_lambda=neutreno_lambda)
    ids = token_ids(3, 16)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding in one row
    logits = {}
    with torch.no_grad():  # flex attention on CPU has no backward
        for impl in ("eager", *backends):
            model.set_attn_implementation(impl)
            logits[impl] = (model(ids).logits, model(ids, attention_mask=mask).logits[mask.bool()])
    for impl in backends:
        for got, expected in zip(logits[impl], logits["eager"]):
            assert (got - expected).abs().max().item() <= FP32_TOL, impl


@pytest.mark.parametrize("neutreno_lambda", [0.0, 0.4])
def test_eager_and_sdpa_agree(neutreno_lambda):
    _backends_agree(neutreno_lambda, ("sdpa",))


@pytest.mark.slow  # flex attention compiles its kernel first: most of a minute on a CPU
@pytest.mark.parametrize("neutreno_lambda", [0.0, 0.4])
def test_eager_and_flex_agree(neutreno_lambda):
    _backends_agree(neutreno_lambda, ("flex_attention",))


def test_output_attentions_and_hidden_states():
    model = tiny_model()
    ids = token_ids()
    with torch.no_grad():
        out = model(ids, output_attentions=True, output_hidden_states=True)
        as_tuple = model(ids, return_dict=False)
    assert len(out.attentions) == 4 and out.attentions[0].shape == (2, 4, 12, 12)
    assert torch.all(out.attentions[1].triu(1) == 0)  # causal
    assert len(out.hidden_states) == 5  # embeddings + every block
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], out.logits)


def test_gradient_reaches_layer_zero_values_from_later_layers():
    """V_0 is not detached: with λ > 0 later layers' loss flows into layer 0's value projection."""

    def v_proj_grad(neutreno_lambda: float) -> torch.Tensor:
        model = tiny_model(neutreno_lambda=neutreno_lambda).train()
        with torch.no_grad():  # cut layer 0's own path to the output: only V_0 can carry a gradient to its values
            model.model.layers[0].self_attn.o_proj.weight.zero_()
        model(token_ids()).logits.sum().backward()
        return model.model.layers[0].self_attn.qkv_proj.weight.grad.chunk(3)[2]  # the values' rows

    assert v_proj_grad(0.4).abs().sum() > 0
    assert v_proj_grad(0.0).abs().sum() == 0


def test_gradient_checkpointing_gives_the_same_gradients():
    ids = token_ids()
    assert_checkpointing_keeps_the_gradients(lambda: tiny_model(neutreno_lambda=0.4).train(), ids, labels=ids)


# --------------------------------------------------------------------------------------------------------------
# Generation: the cache, left padding, decoding modes
# --------------------------------------------------------------------------------------------------------------


# transformers 5.24 renamed the cache `past_key_values` -> `cache` (argument and output field); the model takes both.
OUTPUT_CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


@pytest.mark.parametrize("cache_argument", ["cache", "past_key_values"])
@pytest.mark.parametrize(
    "overrides", [dict(), GPT2_LIKE, dict(adaptive_softmax_cutoffs=[20, 50])], ids=["paper", "gpt2-like", "adaptive"]
)
def test_cached_token_by_token_decoding_equals_one_full_forward(overrides, cache_argument):
    model = tiny_model(neutreno_lambda=0.4, **overrides)
    ids = token_ids(2, 14)
    with torch.no_grad():
        full = model(ids).logits
        cache = DynamicCache(config=model.config)
        out = model(ids[:, :5], use_cache=True, **{cache_argument: cache})
        steps = [out.logits]
        for t in range(5, ids.shape[1]):
            cache = getattr(out, OUTPUT_CACHE_FIELD)
            out = model(ids[:, t : t + 1], attention_mask=torch.ones(2, t + 1), **{cache_argument: cache})
            steps.append(out.logits)
    assert getattr(out, OUTPUT_CACHE_FIELD).get_seq_length() == ids.shape[1]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= FP32_TOL


def test_the_cache_under_both_names_at_once_is_refused():
    model = tiny_model()
    ids = token_ids(1, 4)
    for forward in (model, model.model):
        with pytest.raises(ValueError, match="Both `past_key_values` and `cache` are set"):
            forward(ids, cache=DynamicCache(config=model.config), past_key_values=DynamicCache(config=model.config))


@pytest.mark.parametrize(
    "mode",
    [dict(do_sample=False), dict(do_sample=False, num_beams=3), dict(do_sample=True, top_k=10)],
    ids=["greedy", "beam", "sample"],
)
def test_generate_with_and_without_cache_gives_the_same_tokens(mode):
    model = tiny_model(neutreno_lambda=0.4, adaptive_softmax_cutoffs=[20, 50])
    prompt = token_ids(2, 6)
    outputs = []
    for use_cache in (True, False):
        torch.manual_seed(3)  # the same draws for sampling
        outputs.append(model.generate(prompt, max_new_tokens=6, min_new_tokens=6, use_cache=use_cache, **mode))
    assert outputs[0].shape == (2, 12)
    assert torch.equal(outputs[0], outputs[1])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_left_padded_batch_equals_each_sequence_alone(impl):
    model = tiny_model(neutreno_lambda=0.4, **GPT2_LIKE)  # learned positions: wrong positions would show at once
    model.set_attn_implementation(impl)
    sequences = [token_ids(1, 9, seed=1)[0], token_ids(1, 4, seed=2)[0], token_ids(1, 7, seed=3)[0]]
    width = max(len(s) for s in sequences)
    batch = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, s in enumerate(sequences):
        batch[i, width - len(s) :], mask[i, width - len(s) :] = s, 1
    with torch.no_grad():
        batched = model(batch, attention_mask=mask).logits
        generated = model.generate(batch, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        for i, s in enumerate(sequences):
            alone = model(s[None]).logits[0]
            assert (batched[i, width - len(s) :] - alone).abs().max().item() <= FP32_TOL
            alone_generated = model.generate(s[None], max_new_tokens=6, min_new_tokens=6, do_sample=False)
            assert torch.equal(generated[i, width:], alone_generated[0, len(s) :])


# --------------------------------------------------------------------------------------------------------------
# Adaptive softmax
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_adaptive_softmax_equals_torch_adaptive_log_softmax(bias):
    """Ours = torch's `AdaptiveLogSoftmaxWithLoss` (div_value 1) with identity tail projections and copied weights."""
    hidden, vocab, cutoffs = 16, 60, [10, 25, 40]
    torch.manual_seed(0)
    ours = NeuTRENOGPTAdaptiveLogSoftmax(hidden, vocab, cutoffs, bias=bias)
    ref = nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, cutoffs, div_value=1.0, head_bias=bias)
    with torch.no_grad():
        ours.weight.normal_()
        ours.cluster_weight.normal_()
        if bias:  # torch's tails have no bias: ours is zero there, random in the head
            ours.bias.zero_()
            ours.bias[: cutoffs[0]].normal_()
            ours.cluster_bias.normal_()
            ref.head.bias.copy_(torch.cat([ours.bias[: cutoffs[0]], ours.cluster_bias]))
        ref.head.weight.copy_(torch.cat([ours.weight[: cutoffs[0]], ours.cluster_weight]))
        for i, (start, end) in enumerate(zip(cutoffs, cutoffs[1:] + [vocab])):
            ref.tail[i][0].weight.copy_(torch.eye(hidden))
            ref.tail[i][1].weight.copy_(ours.weight[start:end])
    x = torch.randn(50, hidden, requires_grad=True)
    target = torch.cat([torch.tensor([0, 12, 30, 59]), torch.randint(0, vocab, (46,))])  # every cluster
    torch.testing.assert_close(ours(x), ref.log_prob(x), atol=1e-5, rtol=0)
    nll = ours.nll(x, target)
    expected = ref(x, target).output
    torch.testing.assert_close(-nll, expected, atol=1e-5, rtol=0)
    (grad,) = torch.autograd.grad(nll.sum(), x)
    (expected_grad,) = torch.autograd.grad(-expected.sum(), x)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)


def test_adaptive_loss_equals_cross_entropy_of_the_returned_log_probs():
    model = tiny_model(neutreno_lambda=0.4, adaptive_softmax_cutoffs=[20, 50])
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as the paper
    ids = token_ids(3, 16)
    labels = ids.clone()
    labels[0, :4] = -100
    with torch.no_grad():
        log_probs = model(ids).logits
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3, 16), atol=1e-5)  # a distribution
        out = model(ids, labels=labels)
        assert out.logits is None  # no (tokens × vocab) matrix when training
        expected = F.cross_entropy(log_probs[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100)
        torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=0)
        scored = (labels[:, 1:] != -100).sum()
        summed = model(ids, labels=labels, num_items_in_batch=torch.tensor(7)).loss  # Trainer's gradient accumulation
        torch.testing.assert_close(summed, expected * scored / 7, atol=1e-4, rtol=0)


_MEMORY_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {src!r})
from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
torch.manual_seed(0)
torch.set_num_threads(2)
config = NeuTRENOGPTConfig.from_preset("wikitext103-small", **{overrides})
model = NeuTRENOGPTForCausalLM(config).train()
optimizer = torch.optim.Adam(model.parameters(), lr=2.5e-4)
# Zipf-distributed targets, like words: most fall in the shortlist, some in every tail cluster.
ranks = torch.arange(1, config.vocab_size + 1, dtype=torch.float64)
ids = torch.multinomial(1 / ranks, {batch} * 256, replacement=True).view({batch}, 256)
def rss_mb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024
before = rss_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # Linux: reset the peak-RSS mark (VmHWM) to the current RSS
loss = model(ids, labels=ids).loss
loss.backward()
optimizer.step()
params = sum(p.numel() for p in model.parameters())
print(json.dumps(dict(step_peak_mb=rss_mb("VmHWM") - before, params=params, loss=loss.item())))
"""


@pytest.mark.slow
def test_adaptive_softmax_training_step_memory_is_bounded(tmp_path):
    """The paper's preset with the 267,735-word vocabulary: the peak memory of one training step (forward, backward,
    first Adam step) of 4 × 256 tokens above the resident model is the gradients and Adam's moments plus the
    activations and the head's (tokens × 20,003) scores, less than the full logits alone would add (tokens × vocab ×
    4 B = 1.1 GB; a full softmax needs about 3× that with its log-softmax and gradient: 3.7 GB measured for this
    step, against 1.2 GB here). Linux only: the peak is read from /proc/self/status."""
    import subprocess
    import sys

    batch = 4
    script = tmp_path / "memory.py"
    script.write_text(_MEMORY_SCRIPT.format(src=str(REPO_ROOT / "src"), overrides="{}", batch=batch))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    full_logits_mb = batch * 256 * 267735 * 4 / 2**20
    # The step allocates the gradients and Adam's two moments: 3 × params × 4 B (about 410 MB here).
    state_mb = 3 * result["params"] * 4 / 2**20
    print(
        f"\nadaptive-softmax training step: peak +{result['step_peak_mb']:.0f} MB "
        f"(grads + Adam moments {state_mb:.0f} MB; full logits alone would be {full_logits_mb:.0f} MB)"
    )
    assert math.isfinite(result["loss"])
    assert result["step_peak_mb"] - state_mb < full_logits_mb


# --------------------------------------------------------------------------------------------------------------
# Evaluation protocols
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_tokens, context", [(30, 8), (8, 8), (5, 8), (2, 1)])
def test_sliding_windows_score_every_token_but_the_first_exactly_once(num_tokens, context):
    windows = list(sliding_windows(num_tokens, context))
    first, rest = windows[0], windows[1:]
    assert (first.start, first.end) == (0, min(context, num_tokens - 1))
    assert first.num_scored == first.end  # the first window scores all its positions
    for w in rest:  # every later window is a full training context and scores only its last position
        assert w.end - w.start == context and w.num_scored == 1
    assert [w.start for w in rest] == list(range(1, len(rest) + 1))  # shifted one token at a time
    scored = [t for w in windows for t in w.targets]
    assert scored == list(range(1, num_tokens))
    assert [t for w in blocks(num_tokens, context) for t in w.targets] == list(range(1, num_tokens))


@pytest.mark.parametrize("overrides", [dict(), dict(adaptive_softmax_cutoffs=[20, 50])], ids=["full", "adaptive"])
def test_perplexities_equal_independent_computations(overrides):
    model = tiny_model(neutreno_lambda=0.4, **overrides)
    stream = torch.randint(1, VOCAB, (30,), generator=torch.Generator().manual_seed(5))
    context = 8

    def log_probs(window: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(model(window[None]).logits[0].double(), dim=-1)

    # The paper's protocol at batch 1, written out: the first window scores tokens 1..8, then token t is scored
    # from the window of the 8 tokens before it.
    nll = -log_probs(stream[:context]).gather(1, stream[1 : context + 1, None]).sum()
    for t in range(context + 1, len(stream)):
        nll -= log_probs(stream[t - context : t])[-1, stream[t]]
    # Non-overlapping blocks of 8 inputs, each scoring the next token of every position.
    block_nll = 0.0
    for start in range(0, len(stream) - 1, context):
        window = stream[start : min(start + context, len(stream) - 1)]
        block_nll -= log_probs(window).gather(1, stream[start + 1 : start + 1 + len(window), None]).sum()

    sliding = sliding_window_eval(model, stream, context, batch_size=5)  # windows batched 5 at a time
    blocked = block_eval(model, stream, context, batch_size=2)
    assert sliding.num_tokens == blocked.num_tokens == len(stream) - 1
    assert sliding.nll == pytest.approx(nll.item(), rel=1e-5)
    assert blocked.nll == pytest.approx(block_nll.item(), rel=1e-5)
    assert sliding.perplexity == pytest.approx(math.exp(nll.item() / (len(stream) - 1)), rel=1e-5)
    both = evaluate_lm(model, stream, context)
    assert both["sliding"].nll == pytest.approx(sliding.nll, rel=1e-5)


# --------------------------------------------------------------------------------------------------------------
# WikiText: tokenizer, data, remote code, training
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wikitext2(data_dir):
    dataset = load_wikitext(data_dir / "wikitext-2-v1")
    tokenizer = train_word_tokenizer(dataset["train"])
    return dataset, tokenizer


def test_word_tokenizer_reproduces_the_standard_wikitext_preprocessing(wikitext2, tmp_path):
    """Whitespace words + `<eos>` per line give the published WikiText-2 counts (Merity et al. 2016)."""
    dataset, tokenizer = wikitext2
    assert len(tokenizer) == 33278 + 1  # the published vocabulary (with <eos>, <unk>) + <pad>
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    valid = token_stream(dataset["validation"], tokenizer)
    assert valid.numel() == 217646
    assert (valid == tokenizer.eos_token_id).sum() == len(dataset["validation"])
    line = dataset["validation"][3]["text"]
    assert tokenizer.decode(tokenizer(line)["input_ids"]) == " ".join(line.split() + ["<eos>"])
    blocks_ds = group_into_blocks(dataset["validation"], tokenizer, 64)
    assert len(blocks_ds) == 217646 // 64
    assert torch.equal(torch.tensor(blocks_ds[:3]["input_ids"]).flatten(), valid[:192])  # contiguous
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded(line)["input_ids"] == tokenizer(line)["input_ids"]


@pytest.mark.parametrize("writes_unk", [True, False])
@pytest.mark.parametrize("cap", [4, 6, 9])
def test_a_capped_word_vocabulary_holds_exactly_max_vocab_size_tokens(writes_unk, cap):
    """`max_vocab_size=N`: N tokens, <pad>, <eos> and <unk> among them, the rest the most frequent words. Where the
    corpus writes `<unk>` often (WikiText), it is one of those words; where it never does, it takes the last id.
    Reference: the words counted with a Counter (distinct counts, so the ranking has no ties)."""
    import collections

    counts = {"the": 9, "<unk>": 8, "cat": 7, "sat": 6, "on": 5, "a": 4, "mat": 3, "dog": 2, "ran": 1}
    if not writes_unk:
        counts.pop("<unk>")
    words = [word for word, count in counts.items() for _ in range(count)]
    lines = [" ".join(words[i : i + 5]) for i in range(0, len(words), 5)]
    tokenizer = train_word_tokenizer(lines, max_vocab_size=cap)
    assert len(tokenizer) == cap
    ranked = [word for word, _ in collections.Counter(" ".join(lines).split()).most_common()]
    vocab = tokenizer.get_vocab()
    assert sorted(vocab.values()) == list(range(cap))
    assert (vocab["<pad>"], vocab["<eos>"]) == (0, 1)
    if writes_unk:  # ranked with the words: by frequency, second here
        expected = ["<pad>", "<eos>", *ranked[: cap - 2]]
    else:  # the cap's last place
        expected = ["<pad>", "<eos>", *ranked[: cap - 3], "<unk>"]
    assert sorted(vocab, key=vocab.get) == expected
    assert tokenizer.unk_token_id == vocab["<unk>"]
    assert tokenizer("ran")["input_ids"] == [vocab["<unk>"], vocab["<eos>"]]  # the rarest word, beyond every cap here


_FRESH_LOAD = """
import json, torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
expected = torch.load("expected.pt")
for source in ("{folder}", "{repo_id}"):
    model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=True, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    assert not type(model).__module__.startswith("hf_neutreno"), type(model).__module__
    ids = tokenizer(expected["text"], add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert torch.equal(ids, expected["ids"]), (ids, expected["ids"])
    with torch.no_grad():
        assert (model(ids).logits - expected["logits"]).abs().max() <= 1e-6, source
    generated = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert torch.equal(generated, expected["generated"]), source
    text = tokenizer.decode(generated[0])
    base = AutoModel.from_pretrained(source, trust_remote_code=True)
    assert type(base).__name__ == "NeuTRENOGPTModel"
print("ok", text)
"""


def test_fresh_process_loads_model_and_tokenizer_without_the_package(tmp_path):
    tokenizer = train_word_tokenizer(["the cat sat on the mat .", "a dog ran in the park .", "the end"] * 3)
    model = tiny_model(neutreno_lambda=0.4, vocab_size=len(tokenizer), adaptive_softmax_cutoffs=[4, 9])
    folder = tmp_path / "neutreno-gpt"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert {"modeling_neutreno_gpt.py", "configuration_neutreno_gpt.py", "neutreno_common.py", "tokenizer.json"} <= {
        f.name for f in folder.iterdir()
    }
    text = "the cat ran in the"
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(ids).logits
    generated = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    torch.save(dict(text=text, ids=ids, logits=logits, generated=generated), tmp_path / "expected.pt")
    hf_home = tmp_path / "hf_home"
    make_local_hub_cache(hf_home, "me/neutreno-gpt", folder)
    out = run_fresh(_FRESH_LOAD.format(folder=folder, repo_id="me/neutreno-gpt"), tmp_path, hf_home)
    assert out.startswith("ok the cat ran in the")


@pytest.mark.slow
def test_trainer_on_wikitext2_beats_the_unigram_perplexity(data_dir, tmp_path):
    """The example script (Trainer, warm-up + cosine, clip 0.25, the paper's architecture at toy size with an
    adaptive softmax) on real WikiText-2: validation perplexity ends well below the unigram model's on the same
    tokens (a model that learned nothing about context cannot beat the unigram)."""
    max_vocab, eval_tokens, context = 2000, 4000, 32
    metrics = load_example("run_clm_wikitext103").main(
        [
            "--dataset_name",
            str(data_dir / "wikitext-2-v1"),
            "--output_dir",
            str(tmp_path / "run"),
            "--max_vocab_size",
            str(max_vocab),
            "--config_overrides",
            "num_hidden_layers=2,hidden_size=64,num_attention_heads=4,intermediate_size=256,"
            "embedding_dropout=0,hidden_dropout=0,activation_dropout=0,output_dropout=0",
            "--adaptive_softmax_cutoffs",
            "200",
            "800",
            "--block_size",
            str(context),
            "--max_steps",
            "400",
            "--warmup_steps",
            "20",
            "--learning_rate",
            "5e-3",
            "--per_device_train_batch_size",
            "32",
            "--eval_splits",
            "validation",
            "--max_eval_tokens",
            str(eval_tokens),
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
            "--use_cpu",
            "true",
        ]
    )
    # The unigram model of the same (saved) vocabulary, fitted on the training tokens, on the same scored tokens.
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    dataset = load_wikitext(data_dir / "wikitext-2-v1")
    train_ids = torch.tensor([i for line in tokenizer(list(dataset["train"]["text"]))["input_ids"] for i in line])
    counts = torch.bincount(train_ids, minlength=len(tokenizer)).double() + 1
    scored = token_stream(dataset["validation"], tokenizer, max_tokens=eval_tokens)[1:]
    unigram = math.exp(-(counts / counts.sum()).log()[scored].mean().item())
    for protocol in ("sliding", "blocks"):
        assert metrics[f"validation_{protocol}_tokens"] == eval_tokens - 1
    print(
        f"\nunigram {unigram:.1f}, sliding {metrics['validation_sliding_perplexity']:.1f}, "
        f"blocks {metrics['validation_blocks_perplexity']:.1f}"
    )
    assert metrics["validation_sliding_perplexity"] < 0.75 * unigram
    assert metrics["validation_blocks_perplexity"] < 0.75 * unigram
    saved = tmp_path / "run"
    assert (saved / "tokenizer.json").exists() and (saved / "modeling_neutreno_gpt.py").exists()

    # The CLI reloads the saved model and tokenizer and reports the same perplexities.
    from hf_neutreno.cli import main as cli

    report = tmp_path / "eval.json"
    assert (
        cli(
            [
                "evaluate-lm",
                str(saved),
                "--dataset",
                str(data_dir / "wikitext-2-v1"),
                "--split",
                "validation",
                "--max-tokens",
                str(eval_tokens),
                "--device",
                "cpu",
                "--output",
                str(report),
            ]
        )
        == 0
    )
    results = json.loads(report.read_text())["results"]["validation"]
    for protocol in ("sliding", "blocks"):
        assert results[protocol]["num_tokens"] == eval_tokens - 1
        assert results[protocol]["perplexity"] == pytest.approx(metrics[f"validation_{protocol}_perplexity"], rel=1e-4)


# --------------------------------------------------------------------------------------------------------------
# Configuration: presets and bad input
# --------------------------------------------------------------------------------------------------------------


def test_presets():
    paper = NeuTRENOGPTConfig.from_preset("wikitext103-small")
    shape = (paper.num_hidden_layers, paper.hidden_size, paper.num_attention_heads, paper.intermediate_size)
    assert shape == (16, 128, 8, 2048)
    assert (paper.hidden_act, paper.max_position_embeddings, paper.norm_position) == ("relu", 256, "post")
    assert (paper.position_embedding_type, paper.adaptive_softmax_cutoffs) == ("sinusoidal", [20000, 40000, 200000])
    assert (paper.neutreno_lambda, paper.hidden_dropout, paper.tie_word_embeddings) == (0.4, 0.1, True)
    with torch.device("meta"):
        ours = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig.from_preset("gpt2-small"))
        native = GPT2LMHeadModel(GPT2Config())
    assert ours.num_parameters() == native.num_parameters() == 124439808


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(adaptive_softmax_cutoffs=[50, 20]), "adaptive_softmax_cutoffs"),
        (dict(adaptive_softmax_cutoffs=[20, 97]), "adaptive_softmax_cutoffs"),
        (dict(adaptive_softmax_cutoffs=[]), "adaptive_softmax_cutoffs"),
        (dict(neutreno_lambda=-0.1), "neutreno_lambda"),
        (dict(neutreno_layers=[0, 1]), "neutreno_layers"),
        (dict(neutreno_layers=[4]), "neutreno_layers"),
        (dict(norm_position="sandwich"), "norm_position"),
        (dict(position_embedding_type="rope"), "position_embedding_type"),
        (dict(hidden_act="swishy"), "hidden_act"),
        (dict(num_attention_heads=5), "num_attention_heads"),
        (dict(hidden_dropout=1.0), "hidden_dropout"),
    ],
)
def test_bad_configs_raise_naming_the_field(overrides, field):
    with pytest.raises(StrictDataclassError, match=field):
        NeuTRENOGPTConfig(**{**TINY, **overrides})


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="Unknown preset 'gpt5'.*gpt2-small"):
        NeuTRENOGPTConfig.from_preset("gpt5")
    model = tiny_model(max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(token_ids(1, 17))
    with pytest.raises(ValueError, match="max_position_embeddings"):  # the cache counts too
        out = model(token_ids(1, 10), use_cache=True)
        model(token_ids(1, 7), past_key_values=out.past_key_values)
    assert_config_edits_are_checked(
        NeuTRENOGPTConfig(**TINY), NeuTRENOGPTModel, "adaptive_softmax_cutoffs", [10, 20], 5
    )
    with pytest.raises(ValueError, match="exactly one of"):
        model.model()
    with pytest.raises(ValueError, match="context_length"):
        sliding_window_eval(model, torch.arange(10), 0)
    with pytest.raises(ValueError, match="does not exist"):
        load_wikitext("./no-such-folder")
    with pytest.raises(ValueError, match="block_size"):
        group_into_blocks(None, None, 1)
    with pytest.raises(ValueError, match="max_vocab_size"):
        train_word_tokenizer(["a b"], max_vocab_size=3)


@pytest.mark.parametrize("bias", [True, False])
def test_checkpoints_store_q_k_v_apart_and_every_loader_joins_them(tmp_path, bias):
    """The model fuses the query, key and value projections into `qkv_proj`; a checkpoint keeps them as `q_proj`,
    `k_proj`, `v_proj` (the layout earlier versions wrote and read), and both `from_pretrained` and torch's
    `load_state_dict` (what Trainer's resume calls on the saved file) join them back into the same model."""
    from safetensors.torch import load_file

    model = tiny_model(attention_bias=bias).eval()
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    for i, layer in enumerate(model.model.layers):
        fused = layer.self_attn.qkv_proj
        assert (fused.bias is not None) == bias
        for kind in ("weight", "bias") if bias else ("weight",):
            parts = [saved[f"model.layers.{i}.self_attn.{name}_proj.{kind}"] for name in "qkv"]
            assert torch.equal(torch.cat(parts), getattr(fused, kind))
    assert not any("qkv_proj" in key for key in saved)
    ids = token_ids()
    expected = model(ids).logits
    loaded = NeuTRENOGPTForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert torch.equal(loaded(ids).logits, expected)
    torch.manual_seed(7)
    resumed = NeuTRENOGPTForCausalLM(model.config).eval()  # other weights, the same (eager) attention
    assert not torch.equal(resumed(ids).logits, expected)
    result = resumed.load_state_dict(saved, strict=False)
    assert not result.missing_keys or result.missing_keys == ["lm_head.weight"], result  # tied to the embeddings
    assert not result.unexpected_keys, result
    assert torch.equal(resumed(ids).logits, expected)
