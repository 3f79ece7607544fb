"""`apply_value_path` beyond the reference architectures (Llama, Qwen2, GPT-2, BERT, ViT, DeiT): one tiny model each
of architectures whose attention differs in the ways that have mattered to a value path (query/key norms, partial
rotary embeddings, parallel residuals, scaled queries, logit scaling, mixture-of-experts blocks, values copied after
the cache update, values of their own head size, layer scale, relative position bias, an encoder's sliding windows),
held to the properties every value path has:

- at coefficient 0 the adapted model is the native model, exactly;
- the rule changes the output at its default coefficient;
- the gradients with the memory-saving rebuild equal those with the backend keeping its own saved tensors;
- causal models: a KV cache stepped token by token gives the full forward's logits.

The references of each method's rule are in the method's own tests; these hold the adapter's plumbing across
architectures. Each model is in eval mode without dropout or other randomness, with weights larger than their
initialisation so that attention is far from uniform.
"""

import copy
import functools
import gc
import re

import pytest
import torch
from transformers import (
    BeitConfig,
    BeitModel,
    CLIPVisionConfig,
    CLIPVisionModel,
    CohereConfig,
    CohereForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    Dinov2Config,
    Dinov2Model,
    FalconH1Config,
    FalconH1ForCausalLM,
    GemmaConfig,
    GemmaForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    JetMoeConfig,
    JetMoeForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    ModernBertConfig,
    ModernBertModel,
    NemotronHConfig,
    NemotronHForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
    Qwen3Config,
    Qwen3ForCausalLM,
    Starcoder2Config,
    Starcoder2ForCausalLM,
)

from hf_neutreno import apply_value_path
from hf_neutreno.models import value_path as value_path_module
from hf_neutreno.models.value_path import GATE, value_path_parameters
from tiny_models import CACHE_FIELD, SPARSE_INDEXER, TINY_MLA, VOCAB, retained_bytes

DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=16)
CAUSAL = {  # name -> the tiny model
    "olmo2": lambda: Olmo2ForCausalLM(Olmo2Config(**DECODER, num_key_value_heads=2)),  # query/key norms
    "phi": lambda: PhiForCausalLM(PhiConfig(**DECODER, partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0)),
    "gpt_neox": lambda: GPTNeoXForCausalLM(GPTNeoXConfig(**DECODER, use_parallel_residual=True, rotary_pct=0.5)),
    "opt": lambda: OPTForCausalLM(  # queries scaled before the backend
        OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=3, num_attention_heads=4, dropout=0.0)
    ),
    "cohere": lambda: CohereForCausalLM(CohereConfig(**DECODER, num_key_value_heads=2, use_qk_norm=True)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**DECODER, num_key_value_heads=2, head_dim=8)),
    "gemma": lambda: GemmaForCausalLM(GemmaConfig(**DECODER, num_key_value_heads=1, head_dim=8)),
    "starcoder2": lambda: Starcoder2ForCausalLM(
        Starcoder2Config(**DECODER, num_key_value_heads=2, sliding_window=None, residual_dropout=0.0)
    ),
    "mixtral": lambda: MixtralForCausalLM(
        MixtralConfig(**DECODER, num_key_value_heads=2, num_local_experts=2, sliding_window=None)
    ),
    "deepseek_v3": lambda: DeepseekV3ForCausalLM(  # multi-head latent attention: values of their own head size
        DeepseekV3Config(**DECODER, **TINY_MLA)
    ),
    "qwen3_5": lambda: Qwen3_5ForCausalLM(  # hybrid: a Gated DeltaNet layer before each self-attention layer
        Qwen3_5TextConfig(
            **{**DECODER, "num_hidden_layers": 4},
            layer_types=["linear_attention", "full_attention"] * 2,
            **dict(num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4),
            **dict(linear_key_head_dim=8, linear_value_head_dim=8),
        )
    ),
    "jetmoe": lambda: JetMoeForCausalLM(  # its values are repeated per expert after the cache update
        JetMoeConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=3,
            num_key_value_heads=2,
            kv_channels=8,
            num_local_experts=2,
        )
    ),
}
ENCODERS = {
    "dinov2": lambda: Dinov2Model(Dinov2Config(**VISION, patch_size=4)),  # layer scale
    "clip_vision": lambda: CLIPVisionModel(CLIPVisionConfig(**VISION, patch_size=4)),
    "beit": lambda: BeitModel(  # relative position bias
        BeitConfig(**VISION, patch_size=4, use_relative_position_bias=True, use_mask_token=False)
    ),
    "modernbert": lambda: ModernBertModel(  # sliding-window layers without a KV cache (refused before)
        ModernBertConfig(
            **DECODER,
            pad_token_id=0,
            global_attn_every_n_layers=2,
            local_attention=4,
            embedding_dropout=0.0,
            attention_dropout=0.0,
            mlp_dropout=0.0,
        )
    ),
}
HYBRIDS = {  # name -> a tiny hybrid whose KV cache holds another kind of layer beside the values
    "nemotron_h": lambda: NemotronHForCausalLM(  # a state-space layer, and an MLP layer (its cache: nothing)
        NemotronHConfig(
            **{**DECODER, "num_hidden_layers": 4},
            num_key_value_heads=2,
            layers_block_type=["mamba", "attention", "mlp", "attention"],
            **dict(mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=8, n_groups=1),
        )
    ),
    "falcon_h1": lambda: FalconH1ForCausalLM(  # attention beside a state-space mixer in each layer: one cache layer
        FalconH1Config(
            **DECODER,
            num_key_value_heads=2,
            mamba_d_ssm=32,
            mamba_n_heads=4,
            mamba_d_head=8,
            mamba_d_state=8,
            mamba_n_groups=1,
        )
    ),
}
METHODS = ("neutreno", "value_residual", "twicing", "xsa")


def tiny_architecture(name: str) -> torch.nn.Module:
    """The tiny model `name` of `CAUSAL`, `ENCODERS` or `HYBRIDS`, in eval mode, its projections scaled up."""
    torch.manual_seed(0)
    model = {**CAUSAL, **ENCODERS, **HYBRIDS}[name]().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2 and max(parameter.shape) <= 128:  # projections, not embedding tables
                parameter.mul_(4)
    return model


def _inputs(name: str) -> dict:
    generator = torch.Generator().manual_seed(1)
    if name in ENCODERS and name != "modernbert":
        return {"pixel_values": torch.randn(2, 3, 16, 16, generator=generator)}
    return {"input_ids": torch.randint(3, VOCAB, (2, 9), generator=generator)}


def _output(model, inputs: dict) -> torch.Tensor:
    outputs = model(**inputs)
    return outputs.logits if hasattr(outputs, "logits") else outputs.last_hidden_state


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", [*CAUSAL, *ENCODERS])
def test_the_adapter_keeps_the_native_model_at_zero_and_its_gradients_through_the_rebuild(name, method):
    native, inputs = tiny_architecture(name), _inputs(name)
    with torch.no_grad():
        expected = _output(native, inputs)
        unchanged = _output(apply_value_path(copy.deepcopy(native), method, coefficient=0.0), inputs)
        model = apply_value_path(copy.deepcopy(native), method)
        changed = _output(model, inputs)
    assert torch.equal(unchanged, expected)
    assert (changed - expected).abs().max() > 1e-3

    model.train()  # no dropout in these configurations: the two passes see the same function
    gradients = []
    for keep_saved in (False, True):
        model.zero_grad(set_to_none=True)
        if keep_saved:  # the backend keeps its own saved tensors: nothing is rebuilt
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = _output(model, inputs).square().mean()
        else:
            loss = _output(model, inputs).square().mean()
        loss.backward()
        gradients.append({key: p.grad.clone() for key, p in model.named_parameters() if p.grad is not None})
    rebuilt, kept = gradients
    scale = max(grad.abs().max() for grad in kept.values())
    assert rebuilt.keys() == kept.keys()
    for key, grad in kept.items():
        torch.testing.assert_close(rebuilt[key], grad, rtol=0, atol=1e-5 * scale, msg=key)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("method", [*METHODS, "value_embedding"])
@pytest.mark.parametrize("name", CAUSAL)
def test_a_cache_stepped_token_by_token_gives_the_full_forward(name, method, attention):
    """In float64: the two orders of summation agree to rounding, which float32 amplifies where a rule cancels. XSA
    leaves nothing of a token whose attended values are all its own (the inputs' first two tokens repeat one id), so
    its output there is rounding alone, which OLMo 2's norm after attention scales up (0.02 apart in float32's logits
    through the eager backend, 3e-16 in float64). Qwen3.5's Gated DeltaNet layers compute partly in float32 even in
    a float64 model, so there the native model's own stepped cache is about 2e-7 off its full forward: the adapted
    model is held to ten times the native model's own difference, or 1e-12."""
    model = _double(tiny_architecture(name), attention)
    input_ids = _inputs(name)["input_ids"]
    if name == "jetmoe" and method == "value_embedding":  # its attention gets each key/value head once per expert
        with pytest.raises(ValueError, match="value-embedding table is 16 wide, but its values have 4 key/value"):
            apply_value_path(model, method)(input_ids)
        gated = apply_value_path(tiny_architecture(name), "value_residual", learnable="gate")
        with pytest.raises(ValueError, match="gate gives α for 2 key/value heads .* values of 4 heads"):
            gated(input_ids)
        return
    full, steps = _stepped(apply_value_path(model, method), input_ids)
    torch.testing.assert_close(steps, full, rtol=0, atol=max(1e-12, 10 * _native_step_difference(name, attention)))


def _double(model, attention: str):
    model.set_attn_implementation(attention)
    if hasattr(model, "set_experts_implementation"):  # grouped matrix products take no float64
        model.set_experts_implementation("eager")
    return model.double()


def _stepped(model, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of one forward over `input_ids`, and those of a prefill of 5 tokens and one token per step after."""
    with torch.no_grad():
        full = model(input_ids).logits
        prefill = model(input_ids[:, :5], use_cache=True)
        cache, steps = getattr(prefill, CACHE_FIELD), [prefill.logits]
        for position in range(5, input_ids.shape[1]):
            step = model(input_ids[:, position : position + 1], **{CACHE_FIELD: cache}, use_cache=True)
            cache = getattr(step, CACHE_FIELD)
            steps.append(step.logits)
    return full, torch.cat(steps, dim=1)


@functools.cache  # per worker process: the same tiny model for every method
def _native_step_difference(name: str, attention: str) -> float:
    full, steps = _stepped(_double(tiny_architecture(name), attention), _inputs(name)["input_ids"])
    return (steps - full).abs().max().item()


@pytest.mark.parametrize("method", ["neutreno", "value_residual"])
def test_a_hybrid_takes_v0_from_its_first_self_attention_layer_and_leaves_its_other_layers(method, monkeypatch):
    """Qwen3.5 here has linear-attention layers 0 and 2 and self-attention layers 1 and 3: the value path's layers are
    the self-attention ones, V_0 is model layer 1's values, and the rule acts in layer 3 alone. Against eager math
    around the native model's own eager attention: V_0 kept from its first call, then NeuTRENO's λ (V_0 − V) added to
    the second call's output (each query head takes its key/value head's term), or the value residual's mix
    (1 − α) V + α V_0 handed to it in place of V."""
    from transformers.models.qwen3_5 import modeling_qwen3_5

    native = tiny_architecture("qwen3_5")
    native.set_attn_implementation("eager")
    adapted = apply_value_path(copy.deepcopy(native), method, coefficient=0.3)
    input_ids = _inputs("qwen3_5")["input_ids"]
    with torch.no_grad():
        output, plain = adapted(input_ids).logits, native(input_ids).logits

    eager, calls = modeling_qwen3_5.eager_attention_forward, []

    def reference(module, query, key, value, *args, **kwargs):
        calls.append((module.layer_idx, value))
        first = calls[0][1]
        if len(calls) == 1:
            return eager(module, query, key, value, *args, **kwargs)
        if method == "value_residual":
            return eager(module, query, key, 0.7 * value + 0.3 * first, *args, **kwargs)
        attended, weights = eager(module, query, key, value, *args, **kwargs)
        term = (first - value).repeat_interleave(query.shape[1] // value.shape[1], dim=1).transpose(1, 2)
        return attended + 0.3 * term, weights

    monkeypatch.setattr(modeling_qwen3_5, "eager_attention_forward", reference)
    with torch.no_grad():
        expected = native(input_ids).logits
    assert [layer for layer, _ in calls] == [1, 3]
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
    assert (output - plain).abs().max() > 1e-2


@pytest.mark.parametrize("name", ["qwen3_5", *HYBRIDS])
def test_a_hybrids_cache_keeps_the_value_residuals_mix_of_its_self_attention_layers(name):
    """A hybrid's KV cache holds linear-attention or state-space states (Qwen3.5's, Nemotron-H's, beside the values
    in Falcon-H1's layers) or nothing (Nemotron-H's MLP layers) beside the self-attention layers' values: the value
    residual still mixes the new rows into the values the cache keeps, in place (O(d) per new token, not the whole
    cache again). So the cache of the second self-attention layer holds (1 − α) V + α V_0, the native model's values,
    whose layers up to it the adapted model runs unchanged."""
    native = tiny_architecture(name)
    adapted = apply_value_path(copy.deepcopy(native), "value_residual", coefficient=0.3)
    first, second = (module.layer_idx for module in value_path_module.self_attention_layers(adapted)[:2])
    input_ids = _inputs(name)["input_ids"]
    caches = []
    with torch.no_grad():
        for model in (native, adapted):  # a prefill, then a step with the cache it made
            cache = getattr(model(input_ids[:, :5], use_cache=True), CACHE_FIELD)
            caches.append(getattr(model(input_ids[:, 5:6], **{CACHE_FIELD: cache}, use_cache=True), CACHE_FIELD))
    kept, mixed = (cache.layers for cache in caches)
    torch.testing.assert_close(mixed[first].values, kept[first].values, rtol=0, atol=0)
    torch.testing.assert_close(mixed[second].values, torch.lerp(kept[second].values, kept[first].values, 0.3))


def test_a_layer_that_runs_another_layers_attention_module_is_refused():
    """A layer without a self-attention module of its own is left as it is (a hybrid's linear-attention layer), but
    not one that runs the attention module of another layer: that module would run at two depths in one forward."""
    model = tiny_architecture("qwen3")
    model.model.layers[2].self_attn = model.model.layers[1].self_attn
    with pytest.raises(ValueError, match=r"layers whose attention another layer shares, .*: \[2\]"):
        apply_value_path(model, "neutreno")


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_sparse_attention_that_builds_its_mask_by_the_backends_name_is_refused(attention, monkeypatch):
    """DeepSeek V3.2's attention (as GLM-5's and Mistral Large 4's) builds its indexer's top-k mask only where
    `config._attn_implementation` is "eager" or "sdpa", and else hands the indices to the kernel. Under a value path's
    name ("value_path-sdpa") the backend got them and ignored them: every query attended to every key, so at
    coefficient 0 the adapted model was another model. Refused when adapting, for every method, naming the class;
    with the refusal bypassed, the outputs at coefficient 0 differ from the native model's."""
    torch.manual_seed(0)
    native = DeepseekV32ForCausalLM(  # the indexer keeps 4 of the 9 keys of each query
        DeepseekV32Config(**DECODER, **TINY_MLA, **SPARSE_INDEXER)
    ).eval()
    native.set_attn_implementation(attention)
    for method in (*METHODS, "value_embedding"):
        with pytest.raises(ValueError, match=f"DeepseekV32Attention takes another path .*'value_path-{attention}'"):
            apply_value_path(copy.deepcopy(native), method)
    monkeypatch.setattr(value_path_module, "_branch_names", lambda kind: frozenset())
    bypassed = apply_value_path(copy.deepcopy(native), "neutreno", coefficient=0.0)
    inputs = _inputs("deepseek_v3")
    with torch.no_grad():
        assert (bypassed(**inputs).logits - native(**inputs).logits).abs().max() > 1e-3


def test_gpt2s_upcast_attention_is_refused_with_eager_and_adapts_with_sdpa():
    """GPT-2 with `reorder_and_upcast_attn=True` computes its attention in float32 with its own code where the
    implementation is "eager", outside the interface. Under the value path's name it ran plain eager attention instead
    (in bfloat16, 0.0005 off the native logits at λ = 0). Refused with eager, naming the field; with sdpa, which GPT-2
    runs without the upcast natively too, it adapts and is the native model at λ = 0."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=VOCAB, reorder_and_upcast_attn=True)
    native = GPT2LMHeadModel(config).eval().to(torch.bfloat16)
    input_ids = _inputs("gpt2")["input_ids"]
    native.set_attn_implementation("eager")
    with pytest.raises(
        ValueError, match=r"GPT2Attention with config.reorder_and_upcast_attn=True .* Adapt it with sdpa"
    ):
        apply_value_path(copy.deepcopy(native), "neutreno")
    native.set_attn_implementation("sdpa")
    adapted = apply_value_path(copy.deepcopy(native), "neutreno", coefficient=0.0)
    with torch.no_grad():
        assert torch.equal(adapted(input_ids).logits, native(input_ids).logits)


@pytest.mark.slow  # every model class of the installed transformers, built on the meta device: about a minute
def test_every_transformers_model_is_adapted_or_refused_by_name():
    """`check_adaptable` (which `compare --model` runs on a meta-device model before it trains anything) gives every
    architecture of the installed transformers either a pass or a `ValueError`, for every method and kind of
    coefficient: never another exception from inside a model or config (SAM 2's vision encoder raised transformers'
    AttributeError for a gate), also with each of its stacks named (`stack=`) where it has several. Each class is
    built from its default config, shrunk where the config allows."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from hf_neutreno.models.value_path import check_adaptable

    shrink = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=99)
    checked = adapted = stacked = 0
    for model_type, config_class in sorted(CONFIG_MAPPING.items()):
        model = _default_model(config_class, shrink, "meta")
        if model is None:
            continue
        checked += 1
        try:
            check_adaptable(model, "neutreno")
            stacks = [None]
        except ValueError as error:  # several stacks: each is named in the error, and each is tried
            named = re.search(r"stacks of layers \(([^)]*)\)", str(error))
            stacks = [None, *named.group(1).split(", ")] if named else [None]
        stacked += len(stacks) > 1
        for method in METHODS + ("value_embedding",):
            for learnable in (False, True, "gate"):
                for stack in stacks:
                    try:
                        check_adaptable(model, method, learnable, stack=stack)
                        adapted += 1
                    except ValueError:
                        pass
                    except Exception as error:
                        where = f"{model_type}, {method}, learnable={learnable}, stack={stack}"
                        raise AssertionError(f"{where}: {error!r}") from error
    assert checked > 200 and adapted > 500 and stacked > 10, (checked, adapted, stacked)


def _default_model(config_class, shrink: dict, device: str, text_config: bool = False):
    """The causal LM (else the base model) of `config_class`'s default config with the fields of `shrink` it has set
    (also on its text config, with `text_config`), built on `device`; None for a config that does not build so, or a
    class that needs more: not the adapter's."""
    from transformers import AutoModel, AutoModelForCausalLM

    try:
        config = config_class()
        levels = [config, config.get_text_config()] if text_config else [config]
        for level in levels:
            for name, value in shrink.items():
                if hasattr(level, name):
                    setattr(level, name, value)
        with torch.device(device):
            try:
                return AutoModelForCausalLM.from_config(config)
            except ValueError:  # no causal LM of this type
                return AutoModel.from_config(config)
    except Exception:
        return None


# Every size field that default configs take, so that most architectures build in a few MB
SMALL = dict(
    **dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=8),
    **dict(intermediate_size=64, vocab_size=99, moe_intermediate_size=16, shared_expert_intermediate_size=16),
    **dict(num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1),
    **dict(kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8),
    # sparse attention's indexer keeps fewer keys than the 9 tokens (2048 by default: every key, as dense attention)
    **dict(index_topk=4, index_n_heads=2, index_head_dim=16, index_block_size=2, index_topk_blocks=1),
    **dict(n_embd=32, n_layer=3, n_head=4, d_model=32, num_layers=3, num_heads=4, ffn_hidden_size=64),
)


def _small_causal_lms():
    """(model type, model) of every causal language model of the installed transformers that builds small (`SMALL`'s
    sizes, at most 20M parameters and buffers), seeded alike; the model is None where it does not build."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    for model_type in sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(CONFIG_MAPPING)):
        config_class = CONFIG_MAPPING[model_type]
        probe = _default_model(config_class, SMALL, "meta", text_config=True)
        if probe is None or sum(t.numel() for t in [*probe.parameters(), *probe.buffers()]) > 20_000_000:
            continue
        torch.manual_seed(0)
        yield model_type, _default_model(config_class, SMALL, "cpu", text_config=True)


@pytest.mark.slow  # every causal language model of the installed transformers that builds small: 15 s
def test_every_causal_lm_that_adapts_is_the_native_model_at_coefficient_zero():
    """A wrapper changes the attention implementation's name, which a model may read (DeepSeek V3.2's sparse attention
    built its mask only for "eager" and "sdpa" and silently attended to every key under the value path's name): every
    causal language model of the installed transformers that adapts and builds small gives the native model's
    outputs, bit for bit, at λ = 0, with random weights. A refusal at the first forward (a `ValueError` naming why) is
    allowed, another answer is not. New architectures of a newer transformers are held by this too."""
    input_ids = torch.randint(3, 90, (2, 9), generator=torch.Generator().manual_seed(1))
    compared = 0
    for model_type, model in _small_causal_lms():
        try:
            with torch.no_grad():
                torch.manual_seed(1)  # a model that draws random numbers in its forward draws the same in both
                expected = _output(model.eval(), {"input_ids": input_ids})
            adapted = apply_value_path(copy.deepcopy(model), "neutreno", coefficient=0.0)
        except Exception:  # needs other inputs, or does not adapt (its refusal is the other sweep's)
            continue
        try:
            with torch.no_grad():
                torch.manual_seed(1)
                output = _output(adapted, {"input_ids": input_ids})
        except ValueError:  # refused at the first forward, by name
            continue
        assert torch.equal(output, expected), (model_type, (output - expected).abs().max().item())
        compared += 1
    assert compared > 80, compared


STEPPED_METHODS = (("value_residual", False), ("neutreno", False), ("value_residual", GATE), ("value_embedding", GATE))


@pytest.mark.slow  # every causal language model of the installed transformers that builds small: about a minute
def test_every_causal_lm_that_adapts_steps_its_kv_cache_as_its_full_forward():
    """Generation is where a value path can go wrong without an error: the value residual mixes each new row into the
    cache's own tensor, NeuTRENO finds each token's rows by its position among the cached ones, and the gates keep
    each token's α or g beside the cache until its row is mixed. For every causal language model of the installed
    transformers that adapts and builds small (a new cache layout in a newer transformers included), in float64, a KV
    cache stepped token by token gives the full forward's logits: the value residual and NeuTRENO at their default
    coefficients, and the gated value residual and value embeddings with gate weights moved from their start (where
    every token has the same α), so that each token's differs. Some models compute parts in float32 (EXAONE MoE's
    router, Falcon-H1's state-space scan), which turns float64 rounding into differences up to about 1e-7, in the
    native model's own steps too: the bound is 1e-6 or a hundred times the native model's own difference, against
    differences of order 0.1 that a misplaced row or a gate value read for another token makes. A refusal by name (at
    the first forward, or where the model needs other inputs) is allowed."""
    input_ids = torch.randint(3, 90, (2, 9), generator=torch.Generator().manual_seed(1))
    moved = torch.Generator().manual_seed(2)
    compared = 0
    for model_type, model in _small_causal_lms():
        try:
            if hasattr(model, "set_experts_implementation"):  # grouped matrix products take no float64
                model.set_experts_implementation("eager")
            model = model.double().eval()
            full, steps = _stepped(model, input_ids)
        except Exception:  # needs other inputs, takes no float64 or keeps no KV cache: not the value path's
            continue
        noise = (steps - full).abs().max().item()
        for method, learnable in STEPPED_METHODS:
            try:
                adapted = apply_value_path(copy.deepcopy(model), method, learnable=learnable)
            except ValueError:  # refused by name (the other sweep's)
                continue
            with torch.no_grad():  # gates that differ per token (and tables moved alike)
                for parameter in value_path_parameters(adapted).values():
                    parameter.add_(torch.rand(parameter.shape, generator=moved, dtype=parameter.dtype), alpha=0.3)
            try:
                full, steps = _stepped(adapted, input_ids)
            except ValueError:  # refused at the first forward, by name
                continue
            difference = (steps - full).abs().max().item()
            assert difference <= max(1e-6, 100 * noise), (model_type, method, learnable, difference, noise)
            compared += 1
    assert compared > 300, compared


# Causal LMs where a learnable α keeps more, for reasons docs/value-path.md (Cost) names: the sinks GraniteSWA applies
# to the backend's product hide its saved input from the rebuild; Inkling's key/value heads differ between its layers,
# which the bound for grouped-query attention does not follow
KEEPS_MORE = {"granite_swa", "granitemoe_swa", "inkling_text", "inkling2_text", "inkling2_loop_text"}


@pytest.mark.slow  # every causal language model of the installed transformers that builds small: about a minute
def test_every_causal_lm_keeps_what_it_keeps_for_its_backward_pass_with_a_learnable_value_residual():
    """A learnable α keeps V_ℓ and V_0 for its gradient, and the backend's copy of the mix is rebuilt from them: every
    causal LM of the installed transformers that adapts and builds small keeps, after a training forward pass, what
    the unmodified model keeps (by the profiler's allocations, exact on every CPU), with its own attention
    implementation. Multi-head latent attention (DeepSeek V2/V3 and kin) kept three value-sized tensors more per layer
    where the backend copies V (eager, SDPA's math path) and the rule kept the view of the joint key/value output."""
    input_ids = torch.randint(3, 90, (2, 8), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": input_ids, "labels": input_ids}
    compared = 0
    gc.freeze()  # each record collects garbage first: of this loop's objects, not of the whole test session's
    try:
        for model_type, model in _small_causal_lms():
            if model_type in KEEPS_MORE:
                continue
            try:
                for module in model.train().modules():
                    if isinstance(module, torch.nn.Dropout):
                        module.p = 0.0
                native = retained_bytes(model, inputs)
                adapted = apply_value_path(copy.deepcopy(model), "value_residual", learnable=True).train()
            except Exception:  # needs other inputs, or does not adapt (the other sweeps')
                continue
            try:
                extra = retained_bytes(adapted, inputs) - native
            except ValueError:  # refused at the first forward, by name
                continue
            hidden, layers = model.config.get_text_config().hidden_size, len(adapted.config.value_path["layers"])
            extra /= input_ids.numel() * hidden * 4 * layers  # in (batch, tokens, hidden) float32 tensors per layer
            # grouped-query attention whose backend repeats V keeps that copy beside V: one V per layer, and V_0
            groups = getattr(value_path_module.self_attention_layers(adapted)[0], "num_key_value_groups", 1)
            assert extra <= 1 / 8 + (1.5 / groups if groups > 1 else 0), (model_type, extra, groups)
            compared += 1
    finally:
        gc.unfreeze()
    assert compared > 80, compared
