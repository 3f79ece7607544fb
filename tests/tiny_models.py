"""Tiny native transformers models (hidden 32, 3 layers, 4 heads, no dropout) and inputs for them, shared by tests.

`tiny_model("llama")` is a LlamaForCausalLM with grouped-query attention (4 query heads, 2 key/value heads), as is
Qwen2 (with q/k/v biases); GPT-2 has a fused `c_attn`; BERT, ViT and DeiT are bidirectional encoders.
`base=True` gives the headless model (LlamaModel, GPT2Model, ViTModel, ...).

Also the tiny shapes of the package's own models (`TINY_VIT` serves the NeuTRENO ViT and EigenViT too, whose field
names are the native ViT's; `TINY_NEUTRENO_GPT`), and the checks every model's tests share: the guard of the
reference tests (`assert_the_term_changes_the_output`) and `assert_checkpointing_keeps_the_gradients`.
"""

import importlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    BertConfig,
    BertModel,
    DeiTConfig,
    DeiTForImageClassification,
    DeiTModel,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
    MistralConfig,
    MistralForCausalLM,
    MistralModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2Model,
    TrainingArguments,
    ViTConfig,
    ViTForImageClassification,
    ViTModel,
)
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

# The KV cache's argument and output field: `cache` from transformers 5.24, `past_key_values` in 5.23
from hf_neutreno.models.modeling_neutreno_gpt import CACHE_FIELD as CACHE_FIELD

ARCHITECTURES = ("llama", "qwen2", "gpt2", "bert", "vit", "deit")
CAUSAL = ("llama", "qwen2", "gpt2")
VOCAB = 50
TEXT = dict(vocab_size=VOCAB, num_hidden_layers=3, num_attention_heads=4, bos_token_id=1, eos_token_id=2)
DECODER = dict(hidden_size=32, intermediate_size=64, num_key_value_heads=2, **TEXT)
TINY_VIT = dict(
    hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, image_size=16, patch_size=4
)
FASHION_VIT = dict(TINY_VIT, image_size=28, patch_size=7, num_labels=10)  # Fashion-MNIST: 28 × 28 pixels, 10 classes
# A micro ViT (hidden 16, 2 heads, 8 × 8 images) for tests that need a model to load, not its outputs.
MICRO_VIT = dict(hidden_size=16, num_attention_heads=2, intermediate_size=16, image_size=8, patch_size=4)
# Multi-head latent attention (DeepSeek V3: values of their own head size) at a tiny size; with SPARSE_INDEXER, DeepSeek
# V3.2's sparse attention, whose indexer keeps 4 keys for each query
TINY_MLA = {
    **dict(num_key_value_heads=4, moe_intermediate_size=16, n_routed_experts=2, num_experts_per_tok=1),
    **dict(n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16, n_group=1, topk_group=1),
    **dict(qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8),
}
SPARSE_INDEXER = dict(index_topk=4, index_n_heads=2, index_head_dim=8)
# The NeuTRENO GPT (its own field names): hidden 32, 4 layers, 4 heads, no dropout.
TINY_NEUTRENO_GPT = {
    **dict(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64),
    **dict(max_position_embeddings=64, pad_token_id=0),
    **dict.fromkeys(("embedding_dropout", "hidden_dropout", "activation_dropout", "output_dropout"), 0.0),
}
# The NeuTRENO term in some layers only, and a large λ in one: cases of every NeuTRENO model's reference test.
NEUTRENO_LAYER_CASES = [
    pytest.param(dict(neutreno_lambda=0.3, neutreno_layers=[2, 3]), id="layers-2-3"),
    pytest.param(dict(neutreno_lambda=1.5, neutreno_layers=[1]), id="layer-1-large-lambda"),
]
NO_DROPOUT = {
    "gpt2": dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "bert": dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "vit": dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "deit": dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
}

# name -> (config class, model class with a head, base model class, config fields)
_MODELS = {
    "llama": (LlamaConfig, LlamaForCausalLM, LlamaModel, DECODER),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, Qwen2Model, DECODER),
    # every layer a sliding window of 3 tokens, shorter than the inputs
    "mistral-window": (MistralConfig, MistralForCausalLM, MistralModel, dict(DECODER, sliding_window=3)),
    "gpt2": (GPT2Config, GPT2LMHeadModel, GPT2Model, dict(n_embd=32, **TEXT)),
    "bert": (BertConfig, BertModel, BertModel, dict(hidden_size=32, intermediate_size=64, **TEXT)),
    "vit": (ViTConfig, ViTForImageClassification, ViTModel, dict(num_labels=3, **TINY_VIT)),
    "deit": (DeiTConfig, DeiTForImageClassification, DeiTModel, dict(num_labels=3, **TINY_VIT)),
}


def labelled(id2label: dict[int, str]) -> dict:
    """The config fields `id2label` and `label2id` of the class names `id2label`."""
    return dict(id2label=id2label, label2id={name: index for index, name in id2label.items()})


def training_args(output_dir, **settings) -> TrainingArguments:
    """TrainingArguments of a test's short run on the CPU, writing no checkpoint (unless `settings` say so), no
    report and no progress bar; `settings` are the run's own."""
    quiet = dict(save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True)
    return TrainingArguments(output_dir=str(output_dir), **{**quiet, **settings})


def train_language_model(model, inputs: dict, steps: int, learning_rate: float = 5e-2) -> None:
    """`steps` AdamW steps of a causal LM (or a PEFT model of one) on `inputs`, its own tokens as labels, over the
    parameters that require gradients."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    for _ in range(steps):
        model(**inputs, labels=inputs["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def fashion_mnist(data_dir, split: str, count: int):
    """The first `count` real Fashion-MNIST images of `split` as `FASHION_VIT` takes them: `pixel_values` (28 × 28,
    the image example's transform) and `labels`."""
    from datasets import load_dataset
    from transformers import ViTImageProcessorPil

    from hf_neutreno.data.image_transforms import image_transform

    data = load_dataset("parquet", data_dir=str(Path(data_dir) / "fashion_mnist"), split=split).select(range(count))
    data.set_transform(image_transform(ViTImageProcessorPil(size={"height": 28, "width": 28}), "image", "label"))
    return data


def tiny_model(name: str, attn_implementation: str = "sdpa", base: bool = False, seed: int = 0, **overrides):
    """A freshly initialised tiny model in eval mode (the same weights for the same `seed`)."""
    config_class, head_class, base_class, fields = _MODELS[name]
    fields = {**fields, **NO_DROPOUT.get(name, {}), **overrides}
    config = config_class(**fields, attn_implementation=attn_implementation)
    torch.manual_seed(seed)
    return (base_class if base else head_class)(config).eval()


IMAGE_TOKEN = VOCAB + 10  # a tiny VLM's image placeholder, outside the text's token ids


def tiny_vlm(seed: int = 0, text_config=None):
    """A tiny LLaVA in eval mode: the tiny Llama (or `text_config`) as its language model, a 2-layer CLIP vision
    tower on 16 px images (16 patches, so 16 image tokens per image)."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    text = text_config or LlamaConfig(**{**DECODER, "vocab_size": IMAGE_TOKEN + 1})
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=16, patch_size=4
    )
    torch.manual_seed(seed)
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=IMAGE_TOKEN)
    return LlavaForConditionalGeneration(config).eval()


def tiny_vlm_inputs(batch: int = 2, seed: int = 1) -> dict:
    """One 16 px image per row, its 16 placeholder tokens first, then 6 text tokens."""
    generator = torch.Generator().manual_seed(seed)
    text = torch.randint(3, VOCAB, (batch, 6), generator=generator)
    input_ids = torch.cat([torch.full((batch, 16), IMAGE_TOKEN), text], dim=1)
    return {"input_ids": input_ids, "pixel_values": torch.randn(batch, 3, 16, 16, generator=generator)}


def tiny_inputs(name: str, batch: int = 3, length: int = 9, padding: str | None = None, seed: int = 1) -> dict:
    """Pixels for the vision models; token ids (from 3, above the special tokens) for the text models, with rows
    padded by 2 and 5 tokens on the `padding` side ("left" or "right") when asked."""
    generator = torch.Generator().manual_seed(seed)
    if name in ("vit", "deit"):
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=generator)}
    input_ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    for row, pad in zip(range(1, batch), (2, 5)):
        if padding == "left":
            attention_mask[row, :pad] = 0
        elif padding == "right":
            attention_mask[row, length - pad :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def retained_bytes(model, inputs: dict) -> int:
    """Bytes allocated and not freed by a training forward pass (the graph, its saved tensors, the loss), from the
    profiler's record of every CPU allocation and free: exact and the same on every CPU."""
    from experiments.benchmarks import common

    kept = []
    retained = sum(common.cpu_allocations(lambda: kept.append(model(**inputs).loss)))
    kept.clear()
    return retained


def output_of(model, inputs: dict) -> torch.Tensor:
    """The logits of a model with a head, else its last hidden state."""
    outputs = model(**inputs)
    logits = getattr(outputs, "logits", None)
    return logits if logits is not None else outputs.last_hidden_state


def assert_the_term_changes_the_output(plain, neutreno, inputs: torch.Tensor) -> None:
    """Guards a model's reference tests against a λ that is never applied: the model without the term (λ = 0) and
    the same model with it (the same weights) must give different logits on `inputs`."""
    with torch.no_grad():
        difference = (plain(inputs).logits - neutreno(inputs).logits).abs().max()
    assert difference > 1e-3


def assert_cached_generation_equals_the_full_forward(model, inputs: dict, atol: float) -> None:
    """Greedy generation of 8 tokens with a dynamic cache, and with a static one (GPT-2 has none): the scores of each
    step are the logits at that position of the full forward of the generated sequence, without a cache."""
    settings = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    caches = {"dynamic": model.generate(**inputs, **settings)}
    if model.config.model_type != "gpt2":
        caches["static"] = model.generate(**inputs, cache_implementation="static", **settings)
    for kind, cached in caches.items():
        with torch.no_grad():
            full = model(cached.sequences).logits  # every position, no cache
        for step, scores in enumerate(cached.scores):
            position = inputs["input_ids"].shape[1] - 1 + step
            torch.testing.assert_close(scores, full[:, position], rtol=0, atol=atol, msg=f"{kind}, step {step}")


def assert_config_edits_are_checked(config, model_class, listed: str, valid: list, appended) -> None:
    """A negative λ is refused where it is written; an in-place edit of the list field `listed` (set to `valid`,
    then `appended` added) passes no check, but building a `model_class` from the config runs them all."""
    from huggingface_hub.errors import StrictDataclassError

    with pytest.raises(StrictDataclassError, match="neutreno_lambda"):
        config.neutreno_lambda = -1.0  # refused where it is written
    setattr(config, listed, valid)
    getattr(config, listed).append(appended)  # an in-place edit passes no check: building a model runs them all
    with pytest.raises(StrictDataclassError, match=listed):
        model_class(config)


def train_without_dropout(model):
    """`model` in train mode with every dropout off: the references written out from the raw weights have none."""
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def assert_checkpointing_keeps_the_gradients(make_model, *args, use_reentrant: bool = False, **kwargs):
    """The gradients of the loss of `make_model()(*args, **kwargs)` are the same with activation checkpointing
    (`use_reentrant` as given; transformers' default is False) as without; `make_model` must build the same model
    (same weights, train mode) at every call. Returns the checkpointed model, for checks of its own."""

    def gradients(model) -> dict[str, torch.Tensor]:
        model(*args, **kwargs).loss.backward()
        return {name: param.grad for name, param in model.named_parameters() if param.grad is not None}

    plain, checkpointed = make_model(), make_model()
    checkpointed.activation_checkpointing_enable({"use_reentrant": use_reentrant})
    expected, grads = gradients(plain), gradients(checkpointed)
    assert grads.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(grads[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)
    return checkpointed


def local_deit_tiny(folder) -> Path:
    """A ViT classifier of DeiT-tiny's shape with DeiT's image processor, saved to `folder`: what a documented command
    loads from `facebook/deit-tiny-patch16-224` (random weights: no Hub here)."""
    from transformers import ViTImageProcessorPil
    from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    deit_tiny = dict(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768)
    config = ViTConfig(**deit_tiny, image_size=224, patch_size=16, num_labels=1000)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessorPil(
        size={"height": 224, "width": 224}, image_mean=IMAGENET_DEFAULT_MEAN, image_std=IMAGENET_DEFAULT_STD
    ).save_pretrained(folder)
    return folder


def local_qwen2(folder) -> Path:
    """A tiny Qwen2 causal LM saved to `folder`, standing in for a Hub checkpoint such as `Qwen/Qwen2.5-0.5B`."""
    tiny_model("qwen2").save_pretrained(folder)
    return folder


# --- saved tiny models with their tokenizer or image processor, and local datasets for them ------------------------

WORDS = "the a cat dog sat ran on under mat log good bad fine awful great poor".split()


def tiny_sentences(count: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) for _ in range(count)]


def tiny_tokenizer():
    """A word-level tokenizer of `WORDS` (with `<pad>`, `<eos>`, `<unk>` and a `<mask>`), as this package trains."""
    from hf_neutreno.data.text import train_word_tokenizer

    tokenizer = train_word_tokenizer([" ".join(WORDS)])
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    return tokenizer


def save_tiny_llama(folder, sliding_window: int | None = None) -> Path:
    """A tiny Llama causal LM (grouped-query attention) saved with its tokenizer: a user's own model folder. With
    `sliding_window`, a Mistral (the Llama with that window in every layer)."""
    tokenizer = tiny_tokenizer()
    special = dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    fields = {**DECODER, "vocab_size": len(tokenizer), **special, "max_position_embeddings": 64}
    torch.manual_seed(0)
    if sliding_window is None:
        LlamaForCausalLM(LlamaConfig(**fields)).save_pretrained(folder)
    else:
        MistralForCausalLM(MistralConfig(**fields, sliding_window=sliding_window)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def save_tiny_bert_classifier(folder, num_labels: int = 2) -> Path:
    """A tiny BERT with a sequence-classification head, saved with its tokenizer."""
    from transformers import BertForSequenceClassification

    tokenizer = tiny_tokenizer()
    fields = {**_MODELS["bert"][3], **NO_DROPOUT["bert"], "vocab_size": len(tokenizer)}
    config = BertConfig(
        **fields, num_labels=num_labels, pad_token_id=tokenizer.pad_token_id, max_position_embeddings=64
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def save_tiny_vit_classifier(folder) -> Path:
    """A tiny ViT classifier (1000 labels, as an ImageNet checkpoint) saved with its image processor."""
    from transformers import ViTImageProcessorPil

    torch.manual_seed(0)
    ViTForImageClassification(ViTConfig(**TINY_VIT, num_labels=1000)).save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 16, "width": 16}).save_pretrained(folder)
    return Path(folder)


def write_text_dataset(folder, train: int = 160, test: int = 40) -> Path:
    """A local text dataset: `train.jsonl` and `test.jsonl` with a `text` column."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = tiny_sentences(train + test)
    for split, part in (("train", lines[:train]), ("test", lines[train:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    return folder


def write_text_classification_dataset(folder, train: int = 160, test: int = 40, rows=None) -> Path:
    """A local text-classification dataset: `train.csv` and `test.csv` with `sentence` and a string `label`
    ("pos" when the sentence says good or great). `rows` replaces the rows: {split: [(sentence, label), ...]}."""
    import csv

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = tiny_sentences(train + test)
    labelled = [(t, "pos" if ("good" in t or "great" in t) else "neg") for t in lines]
    rows = rows or {"train": labelled[:train], "test": labelled[train:]}
    for split, part in rows.items():
        with open(folder / f"{split}.csv", "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["sentence", "label"])
            writer.writerows(part)
    return folder


def write_image_folder(folder, train: int = 8, test: int = 4) -> Path:
    """A local image folder, `train/<colour>/*.png` and `test/<colour>/*.png`: noise tinted red, green or blue."""
    import numpy as np
    from PIL import Image

    for split, count in (("train", train), ("test", test)):
        for channel, label in enumerate(("red", "green", "blue")):
            path = Path(folder) / split / label
            path.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = np.random.RandomState(i + 100 * channel).randint(0, 80, (20, 20, 3)).astype(np.uint8)
                pixels[..., channel] += 150
                Image.fromarray(pixels).save(path / f"{i}.png")
    return Path(folder)


# --- the tiny decoders written out by hand from their raw weights: the references of the value-path tests ----------


def written_out_decoder(
    model, input_ids, values=None, attended=None, inputs_embeds=None, window: int | None = None
) -> torch.Tensor:
    """Logits of a tiny Llama/Qwen2/Mistral or GPT-2 causal LM with its attention written out per head from the raw
    q/k/v/o weights (grouped-query heads repeated by hand, causal, no padding); norms, MLPs and RoPE are the model's
    own. `inputs_embeds` (Llama/Qwen2): the first layer's input instead of the token embeddings of `input_ids`.
    `window`: each query sees only the keys less than `window` positions before it (Mistral's sliding window).

    Two places for a rule, per layer `index`: `values(index, h, v)` returns the values attended over (h the layer's
    attention input, v (batch, kv heads, tokens, d)); `attended(index, probs, v, out)` returns the attention output
    from the probabilities, the values per query head and `probs @ v`."""
    gpt2 = hasattr(model, "transformer")
    base, config = (model.transformer, model.config) if gpt2 else (model.model, model.config)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = config.hidden_size // heads
    batch, length = input_ids.shape
    positions = torch.arange(length)[None]
    x = base.wte(input_ids) + base.wpe(positions) if gpt2 else base.embed_tokens(input_ids)
    x = x if inputs_embeds is None else inputs_embeds
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    if window is not None:
        causal &= ~torch.ones(length, length, dtype=torch.bool).tril(-window)
    for index, layer in enumerate(base.h if gpt2 else base.layers):
        h = layer.ln_1(x) if gpt2 else layer.input_layernorm(x)

        def split(t, count):
            return t.view(batch, length, count, head_dim).transpose(1, 2)

        if gpt2:
            q, k, v = (
                split(t, heads)
                for t in (h @ layer.attn.c_attn.weight + layer.attn.c_attn.bias).split(config.hidden_size, dim=-1)
            )
        else:
            attention = layer.self_attn
            q, k, v = (
                split(F.linear(h, p.weight, p.bias), n)
                for p, n in ((attention.q_proj, heads), (attention.k_proj, kv_heads), (attention.v_proj, kv_heads))
            )
            q, k = apply_rotary_pos_emb(q, k, *base.rotary_emb(x, positions))
        if values is not None:
            v = values(index, h, v)
        group = heads // kv_heads
        scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(head_dim)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        v = v.repeat_interleave(group, 1)
        out = probs @ v
        if attended is not None:
            out = attended(index, probs, v, out)
        out = out.transpose(1, 2).reshape(batch, length, -1)
        if gpt2:
            x = x + out @ layer.attn.c_proj.weight + layer.attn.c_proj.bias
            x = x + layer.mlp(layer.ln_2(x))
        else:
            x = x + F.linear(out, attention.o_proj.weight)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head((base.ln_f if gpt2 else base.norm)(x))


def assert_backward_matches(model, reference, output, expected) -> None:
    """The gradients of ``mean(output²)`` on `model` equal those of ``mean(expected²)`` on `reference` (its copy, run
    through a written-out forward), parameter by parameter, to float64 rounding."""
    output.square().mean().backward()
    expected.square().mean().backward()
    references = dict(reference.named_parameters())
    for key, parameter in model.named_parameters():
        if parameter.grad is None or key not in references:
            continue
        scale = max(1.0, references[key].grad.abs().max().item())
        torch.testing.assert_close(parameter.grad, references[key].grad, rtol=1e-8, atol=1e-10 * scale, msg=key)


def count_rebuilds(monkeypatch, module: str) -> list:
    """A list that grows by one for every saved tensor the NeuTRENO term of `module` (the adapter's
    `hf_neutreno.models.neutreno_term`) rebuilds in a backward pass instead of keeping it."""
    module = importlib.import_module(module)
    rebuilt, unpack = [], module._rebuilt

    def counting(rebuild):
        rebuilt.append(1)
        return unpack(rebuild)

    monkeypatch.setattr(module, "_rebuilt", counting)
    return rebuilt


def fused_attention_in(output: torch.Tensor) -> bool:
    """Whether the graph behind `output` runs a fused SDPA kernel (flash or memory-efficient), which saves its output
    for the backward pass: the copy a value path rebuilds. Read before the backward pass frees the graph."""
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        if type(node).__name__.startswith("ScaledDotProduct"):
            return True
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False
