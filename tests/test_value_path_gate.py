"""`apply_value_path(model, "value_residual", α, learnable="gate")`: the value residual with α = sigmoid(W x + b) per
token and key/value head (x-transformers' learned mix), against GPT-2 and Llama written out by hand from the raw
weights, forward and backward; from its start (exactly the fixed-α model), through cached generation, saving and
loading without the package."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from fresh_process import load_fresh
from hf_neutreno import apply_value_path, remove_value_path
from tiny_models import (
    assert_cached_generation_equals_the_full_forward,
    tiny_inputs,
    tiny_model,
    train_without_dropout,
    written_out_decoder,
)

ALPHA = 0.3


def _gated(name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(plain model, the same weights with a gate whose W and b are random, so that α differs per token and head)."""
    plain = tiny_model(name)
    _sharpen(plain)
    model = apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA, learnable="gate")
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for gate in _gates(model):
            gate.weight.copy_(torch.randn(gate.weight.shape, generator=generator) * 0.5)
            gate.bias.copy_(torch.randn(gate.bias.shape, generator=generator))
    return plain, model


def _gates(model) -> list[torch.nn.Linear]:
    return [module.value_path_gate for module in model.modules() if hasattr(module, "value_path_gate")]


def _sharpen(model) -> None:
    """Larger weights than the tiny default, so that attention is far from uniform and the rule matters."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2 and "embed" not in name and "wte" not in name and "wpe" not in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def _alpha(gate, h: torch.Tensor) -> torch.Tensor:
    """The gate's α written out: sigmoid(h Wᵀ + b), (batch, tokens, kv heads) -> (batch, kv heads, tokens, 1)."""
    return torch.sigmoid(h @ gate.weight.T + gate.bias).transpose(1, 2).unsqueeze(-1)


def gated_reference(model, input_ids, window=None) -> torch.Tensor:
    """GPT-2 or Llama written out from the raw weights (`written_out_decoder`), the gated value residual in layers
    1 and 2 (each query seeing `window` keys, where given)."""
    gates, first = _gates(model), {}

    def values(index, h, v):
        if index == 0:
            first["values"] = v
            return v
        alpha = _alpha(gates[index - 1], h)
        return (1 - alpha) * v + alpha * first["values"]

    return written_out_decoder(model, input_ids, values, window=window)


REFERENCES = {"llama": gated_reference, "gpt2": gated_reference}


@pytest.mark.parametrize("name", REFERENCES)
def test_the_gate_starts_as_the_fixed_alpha_model(name):
    plain = tiny_model(name)
    _sharpen(plain)
    gated = apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA, learnable="gate")
    fixed = apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA)
    input_ids = tiny_inputs(name)["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(gated(input_ids).logits, fixed(input_ids).logits, rtol=0, atol=1e-6)
        assert (gated(input_ids).logits - plain(input_ids).logits).abs().max() > 1e-3


@pytest.mark.parametrize("name", REFERENCES)
def test_the_gate_equals_the_hand_written_reference_forward_and_backward(name):
    _, model = _gated(name)
    reference = copy.deepcopy(train_without_dropout(model))
    input_ids = tiny_inputs(name)["input_ids"]
    output = model(input_ids).logits
    expected = REFERENCES[name](reference, input_ids)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-5)
    output.square().mean().backward()
    expected.square().mean().backward()
    gradients = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    references = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
    assert gradients.keys() == references.keys() and any(".value_path_gate." in n for n in gradients)
    for key, grad in gradients.items():  # float32 rounding, relative to the largest entry (up to ~10 here)
        scale = max(1.0, references[key].abs().max().item())
        torch.testing.assert_close(grad, references[key], rtol=1e-4, atol=2e-6 * scale, msg=key)


@pytest.mark.parametrize("name", REFERENCES)
def test_gated_cached_generation_equals_the_full_forward(name):
    """Each new token's α comes from its own input; the cache holds the past tokens' values mixed with theirs."""
    _, model = _gated(name)
    model.config.pad_token_id = 0
    assert_cached_generation_equals_the_full_forward(model, tiny_inputs(name, length=6), atol=1e-5)


def test_a_gated_model_saves_and_loads_without_the_package(tmp_path):
    _, model = _gated("llama")
    model.config.pad_token_id = 0
    inputs = tiny_inputs("llama")
    count_gates = 'sum(hasattr(module, "value_path_gate") for module in model.modules())'
    report = f"[type(model).__name__, type(model).__module__, {count_gates}]"
    difference, (name, module, gates) = load_fresh(model, inputs, tmp_path / "gated", report)
    assert name == "ValuePathLlamaForCausalLM" and "hf_neutreno" not in module
    assert difference == 0 and gates == 2
    # with the package: the same, and a checkpoint without the gates starts them at α
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "gated", trust_remote_code=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)


def test_removing_the_gate_restores_the_plain_model():
    plain, model = _gated("gpt2")
    input_ids = tiny_inputs("gpt2")["input_ids"]
    remove_value_path(model)
    assert not _gates(model)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids).logits, plain(input_ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize(
    "method, coefficient",
    [("neutreno", 0.3), ("value_residual", 0.0), ("value_residual", 1.0)],
)
def test_a_gate_is_refused_where_its_sigmoid_cannot_start(method, coefficient):
    with pytest.raises(ValueError, match="learnable='gate'.*strictly inside"):
        apply_value_path(tiny_model("gpt2"), method, coefficient, learnable="gate")
    with pytest.raises(ValueError, match="`learnable` must be True, False or 'gate'"):
        apply_value_path(tiny_model("gpt2"), "value_residual", 0.5, learnable="gates")


def test_a_checkpoint_without_the_gates_starts_them_at_alpha(tmp_path):
    """The gates' weights missing from a checkpoint (the plain model's, with the settings in its config) are
    initialised as apply_value_path does: W = 0, b = logit(α), the fixed-α model."""
    from safetensors.torch import load_file, save_file

    plain = tiny_model("llama")
    _sharpen(plain)
    _, model = _gated("llama")
    model.load_state_dict(plain.state_dict(), strict=False)
    model.save_pretrained(tmp_path / "gated")
    weights = tmp_path / "gated" / "model.safetensors"
    save_file({k: v for k, v in load_file(weights).items() if "value_path_gate" not in k}, weights, {"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "gated", trust_remote_code=True).eval()
    fixed = apply_value_path(plain, "value_residual", ALPHA).eval()
    input_ids = tiny_inputs("llama")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids).logits, fixed(input_ids).logits, rtol=0, atol=1e-6)


def test_lora_trains_the_gates_with_modules_to_save_and_restores_them_on_the_base(tmp_path):
    """PEFT: `modules_to_save=PEFT_MODULES` trains every gate beside the LoRA weights, saves them in the
    adapter, and `PeftModel.from_pretrained` puts them back on a freshly adapted base."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from hf_neutreno.value_path import PEFT_MODULES

    plain = tiny_model("llama")
    base = apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA, learnable="gate")
    config = LoraConfig(target_modules=["q_proj", "v_proj"], modules_to_save=PEFT_MODULES, init_lora_weights=False)
    peft_model = get_peft_model(base, config)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("value_path_gate" in n for n in trainable) and any("lora_" in n for n in trainable)
    input_ids = tiny_inputs("llama")["input_ids"]
    optimizer = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        peft_model(input_ids).logits.square().mean().backward()
        optimizer.step()
    peft_model.eval()
    with torch.no_grad():
        trained = peft_model(input_ids).logits
        start = (
            apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA, learnable="gate").eval()(input_ids).logits
        )
    assert (trained - start).abs().max() > 1e-4
    peft_model.save_pretrained(tmp_path / "adapter")
    fresh = apply_value_path(copy.deepcopy(plain), "value_residual", ALPHA, learnable="gate")
    restored = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(restored(input_ids).logits, trained, rtol=0, atol=1e-6)


def test_a_gate_on_attention_inputs_narrower_than_the_hidden_size_says_so():
    """MobileBERT's attention reads its bottleneck (`true_hidden_size`), not `hidden_size`, which the gate is made for:
    the first forward raised a bare matrix-shape error from inside the gate. Now a ValueError that names the widths
    and what to use instead."""
    from transformers import MobileBertConfig, MobileBertModel

    config = MobileBertConfig(
        vocab_size=99,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        intra_bottleneck_size=32,
        true_hidden_size=32,
        embedding_size=16,
    )
    model = apply_value_path(MobileBertModel(config), "value_residual", learnable="gate")
    with pytest.raises(
        ValueError, match="called with inputs of width 32, but its gate was made for config.hidden_size"
    ):
        model(torch.tensor([[3, 4, 5]]))
