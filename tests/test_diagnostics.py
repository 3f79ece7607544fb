"""`measure_oversmoothing` on real models: the paper's Fig. 6 on CIFAR-10, native transformers models with padded
batches, attention metrics against an independent computation, and clear errors."""

import io
import warnings

import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from torch import nn
from transformers import (
    ConvNextConfig,
    ConvNextModel,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    DiffLlamaConfig,
    DiffLlamaForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2Model,
    GptOssConfig,
    GptOssForCausalLM,
    ResNetConfig,
    ResNetModel,
    T5Config,
    T5EncoderModel,
    ViTImageProcessorPil,
)

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTModel, apply_value_path
from hf_neutreno.diagnostics import ATTENTION_METRICS, DEFAULT_METRICS, METRICS, attention_maps, measure_oversmoothing
from hf_neutreno.diagnostics.metrics import hidden_state_metrics
from hf_neutreno.diagnostics.probe import OBSERVER_ATTRIBUTE, ProbeUnavailable, attention_probe
from tiny_models import SPARSE_INDEXER, TINY_MLA, TINY_VIT, tiny_inputs, tiny_model


def cifar10_images(data_dir, count: int) -> list[Image.Image]:
    """The first `count` CIFAR-10 test images (the local copy is shuffled, so these are a random sample)."""
    table = pq.read_table(data_dir / "cifar10" / "test-00000-of-00001.parquet", columns=["img"]).slice(0, count)
    return [Image.open(io.BytesIO(row["bytes"])).convert("RGB") for row in table.column("img").to_pylist()]


def test_fig6_neutreno_lowers_last_layer_token_similarity_at_random_init(data_dir):
    # NeuTRENO Fig. 6: randomly initialised 12-layer DeiT-tiny, same weights with λ = 0.6 and λ = 0. At 32 px with
    # 4 px patches (65 tokens) to fit CI time; the gap is large (≈ 0.3 vs ≈ 0.7 over several seeds).
    config = NeuTRENOViTConfig.from_preset("deit-tiny", image_size=32, patch_size=4)
    neutreno = NeuTRENOViTModel(config)
    baseline = NeuTRENOViTModel(
        NeuTRENOViTConfig.from_preset("deit-tiny", image_size=32, patch_size=4, neutreno_lambda=0.0)
    )
    baseline.load_state_dict(neutreno.state_dict())
    processor = ViTImageProcessorPil(size={"height": 32, "width": 32})
    pixels = processor(cifar10_images(data_dir, 32), return_tensors="pt")["pixel_values"]
    batches = [{"pixel_values": pixels[:16]}, {"pixel_values": pixels[16:]}]

    with_neutreno = measure_oversmoothing(neutreno, batches, metrics=["cosine_similarity"], progress=False)
    without = measure_oversmoothing(baseline, batches, metrics=["cosine_similarity"], progress=False)
    ours, theirs = with_neutreno.per_layer("cosine_similarity"), without.per_layer("cosine_similarity")
    print(f"\nFig. 6 last-layer cosine: NeuTRENO {ours[-1]:.3f}, λ=0 {theirs[-1]:.3f}")
    assert len(ours) == 13 and with_neutreno.num_samples == 32
    # Layer 0 provides V_0, so the embeddings and block 1 are identical: the same weights were compared.
    assert ours[:2] == pytest.approx(theirs[:2], abs=1e-5)
    assert ours[-1] < theirs[-1] - 0.1
    assert theirs[-1] > theirs[1]  # the plain model over-smooths with depth


def _text_batch(vocab: int = 50):
    input_ids = torch.randint(3, vocab, (3, 9))
    attention_mask = torch.ones(3, 9, dtype=torch.long)
    attention_mask[1, 6:] = 0
    attention_mask[2, 3:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _native_model(name: str):
    """A tiny native transformers base model, and a batch for it (padded text for text models)."""
    model = tiny_model(name, base=True)
    return model, {"pixel_values": torch.randn(3, 3, 16, 16)} if name == "vit" else _text_batch()


@pytest.mark.parametrize("name", ["vit", "bert", "gpt2", "llama"])
def test_native_models_give_every_metric_on_every_layer(name):
    model, batch = _native_model(name)
    model.train()
    implementation = model.config._attn_implementation
    report = measure_oversmoothing(model, [batch, batch], metrics=METRICS, progress=False)
    assert report.metrics == list(METRICS) and report.num_samples == 6
    for metric in METRICS:
        expected = {"attention_map_similarity": [2, 3]}.get(
            metric, [1, 2, 3] if metric in ATTENTION_METRICS else [0, 1, 2, 3]
        )
        assert report.layer_indices(metric) == expected, metric
        assert all(value == value for value in report.per_layer(metric)), metric  # no NaN
        assert report.counts[metric] == [6] * len(expected)
    assert model.training and model.config._attn_implementation == implementation  # both restored


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_padding_is_excluded(name):
    # A padded batch gives the same report as the sequences measured one by one without padding: padded tokens
    # enter no metric (BERT masks them; GPT-2 is causal with right padding, so real tokens never see them).
    model, batch = _native_model(name)
    padded = measure_oversmoothing(model, [batch], metrics=METRICS, progress=False)
    lengths = batch["attention_mask"].sum(1).tolist()
    singles = [
        {"input_ids": batch["input_ids"][i : i + 1, :n], "attention_mask": batch["attention_mask"][i : i + 1, :n]}
        for i, n in enumerate(lengths)
    ]
    one_by_one = measure_oversmoothing(model, singles, metrics=METRICS, progress=False)
    for metric in METRICS:
        assert padded.per_layer(metric) == pytest.approx(one_by_one.per_layer(metric), rel=1e-4, abs=1e-5), metric


def _reference_attention_metrics(per_layer_qkv, maps, token_mask, scaling, causal):
    """J(u), ∇J alignment and map similarity from the definitions, per sample, averaged over samples.

    `per_layer_qkv[ℓ]` are the (batch, heads, tokens, head_dim) tensors computed in the test from the layer's own
    weights; `maps[ℓ]` the attention probabilities the model returns with eager attention (`output_attentions`).
    """
    j_values, alignment_values, similarity_values = [], [], []
    for layer, (q, k, v) in enumerate(per_layer_qkv):
        j_samples, a_samples, s_samples = [], [], []
        for b in range(q.shape[0]):
            n = int(token_mask[b].sum())
            allowed = torch.ones(n, n, dtype=torch.bool)
            if causal:
                allowed = allowed.tril()
            a = maps[layer][b, :, :n, :n].double()
            vb = v[b, :, :n].double()
            diff = vb[:, :, None, :] - vb[:, None, :, :]  # (heads, i, j, d): v_i − v_j
            j_samples.append(0.5 / n * (a * diff.square().sum(-1)).sum())
            kernel_sym = torch.exp(k[b, :, :n].double() @ k[b, :, :n].double().mT * scaling) * allowed
            kernel_asym = torch.exp(q[b, :, :n].double() @ k[b, :, :n].double().mT * scaling) * allowed
            g_sym = (diff * kernel_sym[..., None]).sum(2)
            g_asym = (diff * kernel_asym[..., None]).sum(2)
            cos = (g_sym * g_asym).sum(-1) / (g_sym.norm(dim=-1) * g_asym.norm(dim=-1))
            a_samples.append(cos[:, 1:].mean() if causal else cos.mean())  # causal: token 0 has zero estimates
            if layer > 0:
                previous = maps[layer - 1][b, :, :n].flatten().double()
                current = maps[layer][b, :, :n].flatten().double()
                s_samples.append(previous @ current / (previous.norm() * current.norm()))
        j_values.append(float(torch.stack(j_samples).mean()))
        alignment_values.append(float(torch.stack(a_samples).mean()))
        if s_samples:
            similarity_values.append(float(torch.stack(s_samples).mean()))
    return {
        "functional_j": j_values,
        "gradient_alignment": alignment_values,
        "attention_map_similarity": similarity_values,
    }


def _sharpen(model: nn.Module) -> None:
    """Larger query/key weights than the 0.02 init, so attention is far from uniform and the metrics informative."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("q_proj.weight", "k_proj.weight", "c_attn.weight")):
                parameter.normal_(0, 0.5)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.view(*x.shape[:2], heads, -1).transpose(1, 2)


def test_attention_metrics_of_neutreno_vit_equal_independent_computation():
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT, attn_implementation="eager"))
    _sharpen(model)
    batch = {"pixel_values": torch.randn(2, 3, 16, 16)}
    report = measure_oversmoothing(model, [batch], metrics=list(ATTENTION_METRICS), progress=False)
    with torch.no_grad():
        outputs = model(**batch, output_hidden_states=True, output_attentions=True)
        per_layer_qkv = []
        for layer, block in enumerate(model.layers):
            x = block.layernorm_before(outputs.hidden_states[layer])
            attention = block.attention
            per_layer_qkv.append([_heads(p(x), 4) for p in (attention.q_proj, attention.k_proj, attention.v_proj)])
    expected = _reference_attention_metrics(per_layer_qkv, outputs.attentions, torch.ones(2, 17), 8**-0.5, False)
    for metric, values in expected.items():
        assert report.per_layer(metric) == pytest.approx(values, rel=1e-4), metric
    assert min(report.per_layer("gradient_alignment")) < 0.999  # sharpened attention: not trivially aligned


def test_attention_metrics_of_gpt2_equal_independent_computation():
    # Causal, fused `c_attn` projection, right padding.
    model = GPT2Model(
        GPT2Config(
            vocab_size=50, n_embd=32, n_layer=3, n_head=4, bos_token_id=1, eos_token_id=2, attn_implementation="eager"
        )
    )
    _sharpen(model)
    batch = _text_batch()
    report = measure_oversmoothing(model, [batch], metrics=list(ATTENTION_METRICS), progress=False)
    model.eval()  # GPT-2 has dropout 0.1; `measure_oversmoothing` runs in eval mode
    with torch.no_grad():
        outputs = model(**batch, output_hidden_states=True, output_attentions=True)
        per_layer_qkv = []
        for layer, block in enumerate(model.h):
            q, k, v = block.attn.c_attn(block.ln_1(outputs.hidden_states[layer])).split(32, dim=2)
            per_layer_qkv.append([_heads(t, 4) for t in (q, k, v)])
    expected = _reference_attention_metrics(per_layer_qkv, outputs.attentions, batch["attention_mask"], 8**-0.5, True)
    for metric, values in expected.items():
        assert report.per_layer(metric) == pytest.approx(values, rel=1e-4), metric


def test_symmetric_neutreno_attention_aligns_the_gradient_estimates_exactly():
    # Sym-DeiT (W_Q = W_K): the symmetric and asymmetric estimates are the same vector (Table 4's upper bound).
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT, symmetric_attention=True))
    _sharpen(model)
    report = measure_oversmoothing(
        model, [{"pixel_values": torch.randn(2, 3, 16, 16)}], metrics=["gradient_alignment"], progress=False
    )
    assert report.per_layer("gradient_alignment") == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)


def test_results_do_not_depend_on_batching_and_repeat_exactly():
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT))
    pixels = torch.randn(4, 3, 16, 16)
    whole = measure_oversmoothing(model, [{"pixel_values": pixels}], metrics=METRICS, progress=False)
    again = measure_oversmoothing(model, [{"pixel_values": pixels}], metrics=METRICS, progress=False)
    split = measure_oversmoothing(
        model, [{"pixel_values": pixels[:1]}, {"pixel_values": pixels[1:]}], metrics=METRICS, progress=False
    )
    assert whole.values == again.values
    for metric in METRICS:
        assert whole.per_layer(metric) == pytest.approx(split.per_layer(metric), rel=1e-5), metric


def test_default_metrics_leave_out_only_the_effective_rank():
    # The effective rank costs about one forward pass on CPU, so it is measured when asked for by name.
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT))
    batch = {"pixel_values": torch.randn(2, 3, 16, 16)}
    default = measure_oversmoothing(model, [batch], progress=False)
    assert default.metrics == list(DEFAULT_METRICS) == [m for m in METRICS if m != "effective_rank"]
    named = measure_oversmoothing(model, [batch], metrics=["cosine_similarity", "effective_rank"], progress=False)
    assert named.metrics == ["cosine_similarity", "effective_rank"]
    assert named.per_layer("cosine_similarity") == default.per_layer("cosine_similarity")


def test_layers_select_hidden_states_and_attention_blocks():
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT))
    report = measure_oversmoothing(model, [{"pixel_values": torch.randn(2, 3, 16, 16)}], layers=[0, -1], progress=False)
    assert report.layer_indices("cosine_similarity") == [0, 3]
    assert report.layer_indices("functional_j") == [3]
    assert report.layer_indices("attention_map_similarity") == [3]


class _LogitsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x):
        return self.linear(x)


def test_clear_errors():
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT))
    batch = {"pixel_values": torch.randn(2, 3, 16, 16)}
    with pytest.raises(ValueError, match="cannot return hidden states"):
        measure_oversmoothing(_LogitsOnly(), [{"x": torch.randn(2, 4)}], progress=False)
    with pytest.raises(ValueError, match="no samples"):
        measure_oversmoothing(model, [], progress=False)
    with pytest.raises(ValueError, match="Unknown metric.*'cosine_similarity'"):
        measure_oversmoothing(model, [batch], metrics=["token_similarity"], progress=False)
    with pytest.raises(ValueError, match="`layers` contains 9.*0..3"):
        measure_oversmoothing(model, [batch], layers=[9], progress=False)
    with pytest.raises(ValueError, match="dict of tensors"):
        measure_oversmoothing(model, [(torch.randn(2, 3, 16, 16),)], progress=False)
    with pytest.raises(ValueError, match=r"`attention_mask` must be \(batch, tokens\)"):
        measure_oversmoothing(model, [{**batch, "attention_mask": torch.ones(2, 5)}], progress=False)


def test_linear_attention_has_no_attention_metrics():
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY_VIT, attention_kernel="linear"))
    batch = {"pixel_values": torch.randn(2, 3, 16, 16)}
    with pytest.raises(ValueError, match="functional_j.*never called"):
        measure_oversmoothing(model, [batch], metrics=["functional_j"], progress=False)
    with pytest.warns(UserWarning, match="Only the hidden-state metrics"):
        report = measure_oversmoothing(model, [batch], progress=False)
    assert report.metrics == ["cosine_similarity", "hfc_lfc_ratio", "rank_one_distance"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # hidden-state metrics only: nothing to warn about
        measure_oversmoothing(model, [batch], metrics=["cosine_similarity"], progress=False)


# --- models adapted with a value path, and models without tokens ---------------------------------------------------


@pytest.mark.parametrize("method", ["neutreno", "value_residual", "twicing", "xsa"])
def test_a_value_path_model_is_measured_with_its_value_path(method):
    """The hidden-state metrics are the adapted model's, and the attention metrics use the values its attention
    averages: (1 − α) V_ℓ + α V_0 for the value residual, V_ℓ for NeuTRENO, twicing and XSA (whose rules act on the
    attention output). Twicing's second attention call applies the same matrix again and is not a layer of its own
    (it was counted as one, and the attention metrics were refused)."""
    model = GPT2Model(GPT2Config(vocab_size=50, n_embd=32, n_layer=3, n_head=4, attn_implementation="eager"))
    _sharpen(model)
    plain = measure_oversmoothing(model, [_text_batch()], metrics=METRICS, progress=False)
    apply_value_path(model, method, 0.7)
    batch = _text_batch()
    report = measure_oversmoothing(model, [batch], metrics=METRICS, progress=False)
    assert model.config._attn_implementation == "value_path-eager" and type(model).__name__ == "ValuePathGPT2Model"

    model.eval()
    with torch.no_grad():
        outputs = model(**batch, output_hidden_states=True, output_attentions=True)
        per_layer_qkv = []
        for block, hidden in zip(model.h, outputs.hidden_states):
            q, k, v = (_heads(t, 4) for t in block.attn.c_attn(block.ln_1(hidden)).split(32, dim=2))
            per_layer_qkv.append([q, k, v])
    if method == "value_residual":
        first = per_layer_qkv[0][2]
        for qkv in per_layer_qkv[1:]:
            qkv[2] = 0.3 * qkv[2] + 0.7 * first
    expected = _reference_attention_metrics(per_layer_qkv, outputs.attentions, batch["attention_mask"], 8**-0.5, True)
    for metric, values in expected.items():
        assert report.per_layer(metric) == pytest.approx(values, rel=1e-4), metric
    for index, hidden in enumerate(outputs.hidden_states):
        cosine = hidden_state_metrics(hidden, batch["attention_mask"], ["cosine_similarity"])["cosine_similarity"]
        assert report.per_layer("cosine_similarity")[index] == pytest.approx(float(cosine.double().mean()), rel=1e-5)
    assert report.per_layer("cosine_similarity")[-1] != pytest.approx(plain.per_layer("cosine_similarity")[-1])


@pytest.mark.parametrize("kind", ["resnet", "convnext"])
def test_models_whose_hidden_states_are_not_tokens_get_a_clear_error(kind):
    if kind == "resnet":
        model = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]))
    else:
        model = ConvNextModel(ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2))
    with pytest.raises(ValueError, match=r"returns hidden states of shape \(2, 8, \d+, \d+\), not \(batch, tokens, "):
        measure_oversmoothing(model, [{"pixel_values": torch.randn(2, 3, 32, 32)}], progress=False)


def test_the_probe_keeps_the_models_own_backend_and_leaves_nothing_behind():
    model = tiny_model("llama", attn_implementation="eager", base=True)
    calls = []
    with attention_probe(model, calls.append):
        assert model.config._attn_implementation == "hf_neutreno_probe-eager"
        with pytest.raises(ProbeUnavailable, match="nested"):
            with attention_probe(model, calls.append):
                pass
        with torch.no_grad():
            model(**_text_batch())
    assert len(calls) == 3 and calls[0].attention_mask.dtype == torch.float32  # eager's additive mask
    assert model.config._attn_implementation == "eager"
    assert not any(hasattr(module, OBSERVER_ATTRIBUTE) for module in model.modules())


# --- attention scores beyond softmax(q kᵀ · scaling + mask) ----------------------------------------------------------

_DECODER = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, head_dim=8
)
SCORED = {  # name -> (model with eager attention, what its scores carry)
    "gemma2-softcap": lambda: Gemma2ForCausalLM(
        Gemma2Config(
            **_DECODER, num_key_value_heads=2, attn_logit_softcapping=2.0, sliding_window=4, query_pre_attn_scalar=8
        )
    ),
    "gpt-oss-sinks": lambda: GptOssForCausalLM(
        GptOssConfig(**_DECODER, num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1, sliding_window=4)
    ),
    "t5-position-bias": lambda: T5EncoderModel(
        T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    ),
}


@pytest.mark.parametrize("name", SCORED)
def test_maps_and_metrics_follow_soft_capping_sinks_and_position_bias(name):
    """The maps every attention metric reads, against the probabilities the model itself returns with eager attention
    (`output_attentions`): soft-capped scores (Gemma 2), attention sinks that take probability from every row
    (gpt-oss) and T5's relative position bias, on a batch with left padding."""
    torch.manual_seed(0)
    model = SCORED[name]().eval()
    model.config._attn_implementation = "eager"
    with torch.no_grad():  # larger weights: the cap, the sinks and the bias all matter
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(8)
            elif parameter.dim() == 1 and parameter.shape[0] == 4:  # gpt-oss: one sink logit per head
                parameter.normal_(0, 2)
    input_ids = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=True).attentions
    for sample, keep in ((0, slice(None)), (1, slice(3, None))):
        maps = attention_maps(model, {"input_ids": input_ids, "attention_mask": attention_mask}, sample=sample)
        for layer, probabilities in enumerate(expected, start=1):
            torch.testing.assert_close(maps[layer], probabilities[sample][:, keep, keep], rtol=1e-5, atol=1e-6)
    plain = attention_maps(model, {"input_ids": input_ids[:1]})
    report = measure_oversmoothing(
        model, [{"input_ids": input_ids[:1]}], metrics=["attention_map_similarity"], progress=False
    )
    first, second = (plain[layer].flatten().double() for layer in (1, 2))
    cosine = float(first @ second / (first.norm() * second.norm()))
    assert report.per_layer("attention_map_similarity") == pytest.approx([cosine], rel=1e-5)
    if name == "gpt-oss-sinks":
        assert plain[1].sum(-1).min() < 0.9  # the sinks took probability


def test_a_sparse_selection_of_keys_gives_no_maps_and_says_why():
    """DeepSeek V3.2's sparse attention attends to the keys its indexer selects (`indices`): maps recomputed over
    every key would be wrong, so there are none, and the report says why."""
    model = DeepseekV32ForCausalLM(
        DeepseekV32Config(
            **{key: value for key, value in _DECODER.items() if key != "head_dim"},
            **{**TINY_MLA, "first_k_dense_replace": 2},
            **SPARSE_INDEXER,
        )
    ).eval()
    batch = {"input_ids": torch.randint(3, 60, (1, 9))}
    with pytest.raises(ValueError, match=r"DeepseekV32Attention's attention scores take \['indices'\]"):
        attention_maps(model, batch)
    with pytest.raises(ValueError, match=r"functional_j.*\['indices'\]"):
        measure_oversmoothing(model, [batch], metrics=["functional_j"], progress=False)


def test_maps_are_refused_where_a_layer_calls_attention_twice_or_the_sample_is_out_of_range():
    """DiffLlama's differential attention calls the interface twice per layer: `attention_maps` numbered each call
    as a layer, so "layer 2" was layer 1's second map, and a 2-layer model had maps 1-4, without a word
    (`measure_oversmoothing` already refused it). A `sample` beyond the batch raised an IndexError."""
    model = DiffLlamaForCausalLM(DiffLlamaConfig(**_DECODER)).eval()
    batch = {"input_ids": torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(0))}
    with pytest.raises(ValueError, match="DiffLlamaAttention called the attention interface more than once"):
        attention_maps(model, batch)
    with pytest.raises(ValueError, match="`sample` 2 is out of range: the attention ran on a batch of 2"):
        attention_maps(tiny_model("llama"), batch, sample=2)


@pytest.mark.parametrize("adapted", [False, True])
def test_a_flex_attention_model_is_measured_through_sdpa(adapted):
    """Flex attention hands its backend a block mask, not a tensor the maps can be recomputed with (the probe raised
    an AttributeError on it): it is measured through SDPA, as flash attention is, and its backend is restored."""
    model = tiny_model("llama", attn_implementation="flex_attention")
    if adapted:
        apply_value_path(model, "value_residual", 0.5)
    implementation = model.config._attn_implementation
    inputs = tiny_inputs("llama", padding="left")
    reference = tiny_model("llama", attn_implementation="eager")
    if adapted:
        apply_value_path(reference, "value_residual", 0.5)
    with torch.no_grad():
        expected = reference(**inputs, output_attentions=True).attentions
    keep = inputs["attention_mask"][1].bool()
    maps = attention_maps(model, inputs, sample=1)
    for layer, probabilities in enumerate(expected, start=1):
        torch.testing.assert_close(maps[layer], probabilities[1][:, keep][:, :, keep], rtol=1e-5, atol=1e-6)
    assert model.config._attn_implementation == implementation
