"""Kernel-launching operations per training step and per generated token, against each model's native counterpart.

A GPU runs one kernel (at least) per ATen operation that computes something; on small shapes, where each kernel is
short, the host's cost of launching them sets the step time, so the count predicts the GPU's speed gap there. Unlike
a timing, the count is exact and the same on every CPU, so a test can hold it (tests/test_op_counts.py).

What is counted: every ATen operation that reaches a backend kernel during one forward and backward pass (a training
step without the optimizer), or during one forward of a single new token with the KV cache, except the ones that
launch nothing: views and aliases, detaches, allocations of uninitialised memory (`empty*`), and dropout that hands
its input back (outside training, or p = 0).

**Per layer** is the slope over depth, (count at 4 layers − count at 2 layers) / 2: what each layer costs. **Per
step** is the rest, count at 2 layers − 2 × per layer: the embeddings, the head, the loss, the input checks. Both are
reported for each model and as differences to its native counterpart.

    python -m experiments count-ops                         # prints the table
    python -m experiments count-ops --out experiments/benchmarks/results/op_counts.json
"""

import argparse
from collections import Counter
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel, ViTConfig, ViTForImageClassification
from transformers import __version__ as transformers_version
from transformers.cache_utils import DynamicCache

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
    apply_value_path,
)
from hf_neutreno.convert import gpt2_to_neutreno
from hf_neutreno.models.modeling_neutreno_gpt import (
    CACHE_FIELD,
)  # `cache` from transformers 5.24, `past_key_values` before

from .bench_generation import into_linear_layers
from .common import report

# Operations that launch no kernel besides views (`OpOverload.is_view`).
_NO_KERNEL = {"detach", "alias", "_unsafe_view", "empty", "empty_like", "empty_strided", "lift_fresh", "_reshape_alias"}


def _returns_its_input(name: str, args) -> bool:
    """Dropout outside training or with p = 0 hands its input back (seen as one operation without autograd)."""
    return name == "dropout" and (not args[2] or args[1] == 0)


class OperationCounter(TorchDispatchMode):
    """Counts the ATen operations that launch a kernel, by name (`counts`), while the mode is active."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not (func.is_view or name in _NO_KERNEL or _returns_its_input(name, args)):
            self.counts[name] += 1
            self.launched(result)
        return result

    def launched(self, result) -> None:
        """Called with the result of every operation that launched a kernel (a subclass may look at it)."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def counted(
    fn: Callable[[], None], setup: Callable[[], None] = lambda: None, counter_class: type = OperationCounter
) -> OperationCounter:
    """A counter that saw one call of `fn`, after one uncounted call (lazy initialisation); `setup` runs, uncounted,
    before each."""
    setup()
    fn()
    setup()
    with counter_class() as counter:
        fn()
    return counter


def count(fn: Callable[[], None], setup: Callable[[], None] = lambda: None) -> Counter:
    """The kernel-launching operations of one call of `fn`, by name (see `counted`)."""
    return counted(fn, setup).counts


# --- the models, each with its native counterpart, at a given depth ------------------------------------------------

HIDDEN, HEADS, VOCAB, TOKENS, IMAGE, PATCH = 32, 4, 64, 8, 16, 4
DEPTH = 12  # the depth of the totals: per step + 12 × per layer, a 12-layer model's whole step


def _gpt2(layers: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=layers,
        n_embd=HIDDEN,
        n_head=HEADS,
        n_inner=4 * HIDDEN,
        vocab_size=VOCAB,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")


def _vit_fields(layers: int) -> dict:
    return dict(
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN,
        image_size=IMAGE,
        patch_size=PATCH,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def _vit(layers: int) -> ViTForImageClassification:
    torch.manual_seed(0)
    return ViTForImageClassification._from_config(ViTConfig(**_vit_fields(layers)), attn_implementation="sdpa")


def _neutreno_vit(layers: int, neutreno_lambda: float) -> NeuTRENOViTForImageClassification:
    torch.manual_seed(0)
    config = NeuTRENOViTConfig(**_vit_fields(layers), neutreno_lambda=neutreno_lambda, drop_path_rate=0.0)
    return NeuTRENOViTForImageClassification._from_config(config, attn_implementation="sdpa")


def _eigen_vit(layers: int) -> EigenViTForImageClassification:
    torch.manual_seed(0)
    config = EigenViTConfig(**_vit_fields(layers), drop_path_rate=0.0)
    return EigenViTForImageClassification._from_config(config, attn_implementation="sdpa")


def _adapted(native: Callable[[int], torch.nn.Module], method: str, learnable: bool | str, every_layer: bool = False):
    """`method` on the native model, in its default layers (or in every layer: value embeddings' default is every
    other one, which would halve the count's slope over depth)."""

    def build(layers: int):
        return apply_value_path(
            native(layers), method, learnable=learnable, layers=list(range(layers)) if every_layer else None
        )

    return build


def _text_inputs() -> dict:
    ids = torch.randint(1, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "labels": ids}


def _image_inputs() -> dict:
    pixels = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))
    return {"pixel_values": pixels, "labels": torch.tensor([1])}


# name -> (native builder, model builder, inputs); every builder takes the depth.
TRAINING = {
    "NeuTRENO GPT, λ = 0": (_gpt2, lambda n: gpt2_to_neutreno(_gpt2(n), neutreno_lambda=0.0), _text_inputs),
    "NeuTRENO GPT, λ = 0.4": (_gpt2, lambda n: gpt2_to_neutreno(_gpt2(n), neutreno_lambda=0.4), _text_inputs),
    "NeuTRENO ViT, λ = 0": (_vit, lambda n: _neutreno_vit(n, 0.0), _image_inputs),
    "NeuTRENO ViT, λ = 0.6": (_vit, lambda n: _neutreno_vit(n, 0.6), _image_inputs),
    "EigenViT": (_vit, _eigen_vit, _image_inputs),
}
for _name, _native, _inputs in (("GPT-2", _gpt2, _text_inputs), ("ViT", _vit, _image_inputs)):
    for _method, _label in (("neutreno", "NeuTRENO"), ("value_residual", "value residual")):
        for _learnable in (False, True):
            _key = f"{_name} + {_label}{', learnable' if _learnable else ''}"
            TRAINING[_key] = (_native, _adapted(_native, _method, _learnable), _inputs)
    TRAINING[f"{_name} + value residual, gate"] = (_native, _adapted(_native, "value_residual", "gate"), _inputs)
    TRAINING[f"{_name} + twicing"] = (_native, _adapted(_native, "twicing", False), _inputs)
    TRAINING[f"{_name} + XSA"] = (_native, _adapted(_native, "xsa", False), _inputs)
    TRAINING[f"{_name} + XSA, learnable"] = (_native, _adapted(_native, "xsa", True), _inputs)
# Value embeddings (causal language models only), in every layer.
for _learnable, _label in ((False, ""), (True, ", learnable"), ("gate", ", gate")):
    TRAINING[f"GPT-2 + value embeddings{_label}"] = (
        _gpt2,
        _adapted(_gpt2, "value_embedding", _learnable, True),
        _text_inputs,
    )
# Inference: one forward without gradients.
INFERENCE = {
    "NeuTRENO ViT, λ = 0.6": TRAINING["NeuTRENO ViT, λ = 0.6"],
    "EigenViT": TRAINING["EigenViT"],
}


def _gpt2_linear_layout(layers: int) -> GPT2LMHeadModel:
    """GPT-2 with its Conv1D weights in `nn.Linear` layers: the NeuTRENO GPT's weight layout (`bench_generation`)."""
    model = _gpt2(layers)
    into_linear_layers(model)
    return model


# Generation: one new token after a cached prompt. The NeuTRENO GPT also against GPT-2 in its own weight layout.
GENERATION = {
    "NeuTRENO GPT, λ = 0.4": TRAINING["NeuTRENO GPT, λ = 0.4"],
    "NeuTRENO GPT, λ = 0.4, against GPT-2 in nn.Linear layout": (
        _gpt2_linear_layout,
        TRAINING["NeuTRENO GPT, λ = 0.4"][1],
        _text_inputs,
    ),
    "GPT-2 + NeuTRENO": TRAINING["GPT-2 + NeuTRENO"],
    "GPT-2 + value residual": TRAINING["GPT-2 + value residual"],
    "GPT-2 + value embeddings": TRAINING["GPT-2 + value embeddings"],
}


def training_step(model: torch.nn.Module, inputs: dict):
    """(setup, step): forward and backward of one batch."""
    model.train()

    def setup():
        model.zero_grad(set_to_none=True)

    def step():
        model(**inputs).loss.backward()

    return setup, step


def inference_step(model: torch.nn.Module, inputs: dict):
    """(setup, step): one forward without gradients."""
    model.eval()
    inputs = {k: v for k, v in inputs.items() if k != "labels"}

    def step():
        with torch.inference_mode():
            model(**inputs)

    return lambda: None, step


def generation_step(model: torch.nn.Module, inputs: dict):
    """(setup, step): the forward of one new token after the prompt, whose keys and values are in the KV cache."""
    model.eval()
    prompt = inputs["input_ids"]
    state = {}

    def setup():
        with torch.inference_mode():
            state["cache"] = DynamicCache(config=model.config)
            model(input_ids=prompt, **{CACHE_FIELD: state["cache"]}, use_cache=True)

    def step():
        with torch.inference_mode():
            model(
                input_ids=prompt[:, -1:],
                **{CACHE_FIELD: state["cache"]},
                use_cache=True,
                position_ids=torch.tensor([[prompt.shape[1]]]),
            )

    return setup, step


def slope(builder, inputs, make_step) -> tuple[int, int]:
    """(per layer, per step) of a model builder: the count's slope over depth 2 → 4 and the rest."""
    at = {layers: sum(count(*reversed(make_step(builder(layers), inputs()))).values()) for layers in (2, 4)}
    per_layer = (at[4] - at[2]) // 2
    return per_layer, at[2] - 2 * per_layer


def against_native(entry, make_step) -> dict:
    """The counts of one table entry (native builder, model builder, inputs) and their differences."""
    native, model, inputs = entry
    native_layer, native_step = slope(native, inputs, make_step)
    layer, step = slope(model, inputs, make_step)
    total, native_total = step + DEPTH * layer, native_step + DEPTH * native_layer
    return {
        "per layer": layer,
        "native per layer": native_layer,
        "+ per layer": layer - native_layer,
        "per step": step,
        "native per step": native_step,
        "+ per step": step - native_step,
        f"× native at {DEPTH} layers": round(total / native_total, 4),
    }


def rows(models: dict, make_step, mode: str) -> list[dict]:
    return [{"model": name, "mode": mode} | against_native(entry, make_step) for name, entry in models.items()]


def all_rows() -> list[dict]:
    torch.manual_seed(0)
    return (
        rows(TRAINING, training_step, "training")
        + rows(INFERENCE, inference_step, "inference")
        + rows(GENERATION, generation_step, "generation")
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    meta = {
        "device": "any CPU (the count is exact)",
        "torch": torch.__version__,
        "transformers": transformers_version,
        "command": "python -m experiments count-ops" + (f" --out {args.out}" if args.out else ""),
    }
    report("Kernel-launching operations per training step and per generated token", all_rows(), meta, args.out)
