"""LoRA (peft) on the attention projections of the queries and values: it trains, saves an adapter, and reloads on a
fresh base model with identical outputs. One parametrization per model; a new model adds one `LoraCase`."""

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoModelForImageClassification

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.data.text import load_wikitext, token_stream, train_word_tokenizer
from hf_neutreno.value_path import PEFT_MODULES, apply_value_path, learned_coefficients
from tiny_models import FASHION_VIT, fashion_mnist, tiny_inputs, tiny_model, train_language_model


@dataclass
class LoraCase:
    name: str
    build: Callable[[], torch.nn.Module]  # a small randomly initialised model
    batch: Callable[[Path], dict[str, torch.Tensor]]  # one batch of real data, with labels
    auto_class: type  # reloads the saved base model
    output: str  # the output compared after reloading
    targets: tuple[str, ...]  # the attention projections LoRA adapts: the queries' and the values'


def vit_model() -> NeuTRENOViTForImageClassification:
    return NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**FASHION_VIT, neutreno_lambda=0.6))


def vit_batch(data_dir: Path) -> dict[str, torch.Tensor]:
    return fashion_mnist(data_dir, "test", 32)[:]


GPT_VOCAB = 2000  # the 2,000 most frequent WikiText-2 words (rarer ones are <unk>)


def gpt_model() -> NeuTRENOGPTForCausalLM:
    width = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64)
    return NeuTRENOGPTForCausalLM(
        NeuTRENOGPTConfig(vocab_size=GPT_VOCAB, max_position_embeddings=64, neutreno_lambda=0.4, **width)
    )


def gpt_batch(data_dir: Path) -> dict[str, torch.Tensor]:
    validation = load_wikitext(data_dir / "wikitext-2-v1")["validation"].select(range(200))
    tokenizer = train_word_tokenizer(validation, max_vocab_size=GPT_VOCAB)
    input_ids = token_stream(validation, tokenizer)[: 8 * 32].view(8, 32)
    return {"input_ids": input_ids, "labels": input_ids}


CASES = [
    LoraCase("neutreno_vit", vit_model, vit_batch, AutoModelForImageClassification, "logits", ("q_proj", "v_proj")),
    # the GPT's queries, keys and values come from one fused projection, as GPT-2's `c_attn`
    LoraCase("neutreno_gpt", gpt_model, gpt_batch, AutoModelForCausalLM, "logits", ("qkv_proj",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_lora_on_q_and_v_trains_saves_and_reloads(case, data_dir, tmp_path):
    torch.manual_seed(0)
    base = case.build().eval()  # eval: no dropout, so the comparison below is exact
    base.save_pretrained(tmp_path / "base")
    batch = case.batch(data_dir)

    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=list(case.targets))
    model = get_peft_model(base, lora)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    wrapped = {name.rsplit(".", 1)[0] for name in trainable}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable), sorted(trainable)
    # Every attention layer's target projections got an adapter, and nothing else did.
    layers = base.config.num_hidden_layers
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in wrapped} == set(case.targets)
    assert len(wrapped) == 2 * len(case.targets) * layers  # (lora_A, lora_B) × targets × layers
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    losses = []
    for _ in range(15):  # a few steps on one real batch: the adapter alone must fit it better
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses  # (the classifier head is frozen and random: a modest drop)
    for name, p in model.named_parameters():
        changed = not torch.equal(before[name], p.detach())
        assert changed == (name in trainable) or (".lora_A." in name and not changed), name  # base frozen

    model.save_pretrained(tmp_path / "adapter")
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert saved and all("lora_" in key for key in saved)  # the adapter only, not the base weights

    model.eval()
    with torch.no_grad():
        expected = getattr(model(**batch), case.output)
    fresh = case.auto_class.from_pretrained(tmp_path / "base")
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(getattr(reloaded(**batch), case.output), expected)
        # Merged into the base weights, LoRA is a plain model with the same outputs (fp32 rounding of W + BA).
        merged = reloaded.merge_and_unload()
        torch.testing.assert_close(getattr(merged(**batch), case.output), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["neutreno", "value_residual", "xsa", "value_embedding"])
def test_lora_trains_saves_and_restores_the_learnable_coefficients(method, tmp_path):
    """`modules_to_save=PEFT_MODULES`: the learnable coefficient of every adapted layer trains beside the LoRA
    weights (the base's own copy stays frozen), is saved in the adapter, and `PeftModel.from_pretrained` onto a
    freshly adapted base restores it exactly, with the same logits."""
    start = 0.3
    base = apply_value_path(tiny_model("llama"), method, start, learnable=True, layers=[1, 2]).eval()
    lora = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], modules_to_save=PEFT_MODULES
    )
    model = get_peft_model(base, lora)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    coefficients = {name for name in trainable if ".value_path_coefficient." in name}
    tables = {name for name in trainable if ".value_path_embedding." in name}  # value embeddings' tables train too
    assert len(tables) == (2 if method == "value_embedding" else 0)
    others = trainable - coefficients - tables
    assert len(coefficients) == 2 and others and all("lora_" in n for n in others)
    assert learned_coefficients(model) == [pytest.approx(start)] * 2

    inputs = tiny_inputs("llama")
    train_language_model(model, inputs, steps=5)
    trained = learned_coefficients(model)
    assert all(abs(value - start) > 1e-3 for value in trained), trained  # each layer's moved
    with model.disable_adapter():  # the base's own coefficients: frozen, still at the start
        assert learned_coefficients(model) == [pytest.approx(start)] * 2
    with torch.no_grad():
        expected = model(**inputs).logits

    model.save_pretrained(tmp_path / "adapter")
    from safetensors.torch import load_file

    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert sorted(k for k in saved if "value_path_coefficient" in k) == [
        f"base_model.model.model.layers.{i}.self_attn.value_path_coefficient.value" for i in (1, 2)
    ]
    assert len([k for k in saved if "value_path_embedding" in k]) == len(tables)
    fresh = apply_value_path(tiny_model("llama"), method, start, learnable=True, layers=[1, 2])
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    assert learned_coefficients(reloaded) == trained
    with torch.no_grad():
        assert torch.equal(reloaded(**inputs).logits, expected)


def test_an_adapter_loaded_onto_a_plain_base_drops_its_value_path_without_a_word(tmp_path):
    """What value-path.md says of `PeftModel.from_pretrained` onto a base not adapted alike (upstream: PEFT records
    the base model, not its value path, and warns of missing adapter keys, not of unexpected ones): the adapter's
    learned coefficients are dropped and nothing is said, so the result is the plain model with LoRA. If PEFT starts
    to say so, this test fails and the page is updated."""
    inputs = tiny_inputs("llama")
    base = apply_value_path(tiny_model("llama"), "neutreno", 0.3, learnable=True, layers=[1, 2])
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=PEFT_MODULES)
    get_peft_model(base, lora).save_pretrained(tmp_path / "adapter")
    plain = tiny_model("llama")
    with torch.no_grad():
        expected = plain(**inputs).logits  # LoRA starts at zero: the plain model's logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = PeftModel.from_pretrained(plain, tmp_path / "adapter").eval()
    assert not [w for w in caught if "value_path" in str(w.message) or "unexpected" in str(w.message).lower()]
    assert learned_coefficients(loaded) is None
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).logits, expected)


@pytest.mark.parametrize(
    "method, learnable", [("neutreno", True), ("value_residual", "gate"), ("value_embedding", False)]
)
def test_a_value_path_module_peft_freezes_is_named_at_the_first_training_forward(method, learnable):
    """Without modules_to_save, PEFT freezes the learnable coefficients, gates and value-embedding tables: they would
    stay at their start (and the tables, random, are left out of the adapter). The first training forward says so,
    once; listed in modules_to_save they train through PEFT's copies, and nothing is said."""
    from transformers.testing_utils import CaptureLogger

    from hf_neutreno.models import value_path

    inputs = tiny_inputs("llama")
    named = {"neutreno": "value_path_coefficient", "value_residual": "value_path_gate"}
    for modules_to_save, expected in ((None, True), (PEFT_MODULES, False)):
        base = apply_value_path(tiny_model("llama"), method, 0.3, learnable=learnable)
        lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=modules_to_save)
        model = get_peft_model(base, lora).train()
        with CaptureLogger(value_path.logger) as captured:
            model(**inputs, labels=inputs["input_ids"]).loss.backward()
            model(**inputs, labels=inputs["input_ids"])
        warned = "do not train (requires_grad=False)" in captured.out
        assert warned == expected, captured.out
        if expected:
            assert captured.out.count("do not train") == 1  # once per model
            assert named.get(method, "value_path_embedding") in captured.out and "modules_to_save" in captured.out
    with CaptureLogger(value_path.logger) as captured:  # evaluation or no gradients: nothing trains, nothing said
        frozen = get_peft_model(apply_value_path(tiny_model("llama"), method, 0.3, learnable=learnable), lora)
        with torch.no_grad():
            frozen.train()(**inputs)
        frozen.eval()(**inputs)
    assert "do not train" not in captured.out
