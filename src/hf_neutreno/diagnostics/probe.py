"""Read every attention call of a transformers model (queries, keys, values, mask) as the model computes them.

transformers 5 models call attention through
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)``. Inside an
`attention_probe` block the model's implementation ``<impl>`` is wrapped in ``"hf_neutreno_probe-<impl>"``,
registered with transformers' public `AttentionInterface.register` (and ``<impl>``'s mask function with
`AttentionMaskInterface.register`), which hands each call to the observer and then runs ``<impl>`` itself, so the
model's outputs do not change. One mechanism therefore covers native ViT/DeiT, BERT, GPT-2 (fused `c_attn`), Llama
(queries and keys after RoPE, grouped-query heads) and this package's models, with no per-architecture hooks and
without asking the model for `output_attentions` (which needs eager attention and returns every map at once).

A model adapted with `hf_neutreno.apply_value_path` keeps its value path: the probe goes inside it
(``"value_path-hf_neutreno_probe-<impl>"``), so it sees the values the attention averages (for the value residual,
the mixed values; for NeuTRENO, V_ℓ, to which λ (V_0 − V_ℓ) is added afterwards). Flash and paged backends, which
look their kernels up by the implementation's own name, and flex attention, whose mask is a block mask rather than a
tensor, are measured through SDPA instead.

The observer is kept on the attention modules themselves for the length of the block. Models whose attention does
not go through the interface (for example NeuTRENO's linear kernel, or remote code that calls
`torch.nn.functional.scaled_dot_product_attention` itself) are never observed; callers detect that from the number
of calls.
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, AttentionMaskInterface, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from ..models.value_path import (
    ATTENTION_PREFIX,
    attention_function,
    interface_attention_modules,
    register_value_path_attention,
)
from .metrics import attention_probabilities, attention_scores

PROBE_PREFIX = "hf_neutreno_probe-"
OBSERVER_ATTRIBUTE = "hf_neutreno_observer"  # on each attention module, inside an `attention_probe` block


# Keywords of an attention call that change its scores in ways the maps here do not model (a sparse selection of keys):
# a map recomputed without them would be silently wrong, so calls with them have none.
UNMODELLED_KEYWORDS = ("indices", "block_indices")


class ProbeUnavailable(RuntimeError):
    """The model's attention cannot be observed (the message says why)."""


@dataclass
class AttentionCall:
    """One call of the attention interface: per-head tensors (batch, heads, tokens, head_dim) and the mask."""

    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float
    is_causal: bool
    softcap: float | None = None  # Gemma 2's logit soft-capping: scores -> softcap · tanh(scores / softcap)
    position_bias: torch.Tensor | None = None  # added to the scores (T5's relative position bias, and others)
    sinks: torch.Tensor | None = None  # attention sinks (gpt-oss): logits in the softmax that take mass but no value
    unmodelled: tuple[str, ...] = ()  # the call's `UNMODELLED_KEYWORDS`

    @property
    def is_self_attention(self) -> bool:
        return self.query.shape[-2] == self.key.shape[-2]

    def scores(self) -> torch.Tensor:
        """The scores q kᵀ · scaling + mask, with the model's soft-capping and position bias where it has them,
        float32, (batch, heads, queries, keys)."""
        if self.unmodelled:
            raise ProbeUnavailable(
                f"{type(self.module).__name__}'s attention scores take {list(self.unmodelled)}, which the attention "
                "maps and metrics here do not model."
            )
        return attention_scores(
            self.query,
            self.key,
            self.attention_mask,
            self.scaling,
            self.is_causal,
            softcap=self.softcap,
            position_bias=self.position_bias,
        )

    def probabilities(self, scores: torch.Tensor | None = None) -> torch.Tensor:
        """The attention maps softmax(q kᵀ · scaling + mask), with the model's soft-capping, position bias and sinks
        where it has them, float32, (batch, heads, queries, keys); `scores`: this call's `scores()`, where the caller
        has them already."""
        return attention_probabilities(self.scores() if scores is None else scores, sinks=self.sinks)


class _ProbeAttention:
    """The registered function of ``"hf_neutreno_probe-<inner>"``: observe, then run ``<inner>``."""

    def __init__(self, inner: str):
        self.inner = inner

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        # The module's own attribute, not one found through a view of it: twicing's second call (on a view of the
        # module with one query head per key/value head) applies the same attention matrix again.
        observer = vars(module).get(OBSERVER_ATTRIBUTE)
        if observer is not None:
            scaling, is_causal = kwargs.get("scaling"), kwargs.get("is_causal")
            observer(
                AttentionCall(
                    module=module,
                    query=query,
                    key=key,
                    value=value,
                    attention_mask=attention_mask,
                    scaling=scaling if scaling is not None else query.shape[-1] ** -0.5,
                    # as SDPA decides when the mask is None; with a mask, the mask already holds the causality
                    is_causal=bool(is_causal if is_causal is not None else getattr(module, "is_causal", True)),
                    softcap=kwargs.get("softcap"),
                    position_bias=kwargs.get("position_bias"),
                    sinks=_sinks(kwargs),
                    unmodelled=tuple(name for name in UNMODELLED_KEYWORDS if kwargs.get(name) is not None),
                )
            )
        return attention_function(module, self.inner)(module, query, key, value, attention_mask, *args, **kwargs)


def _sinks(kwargs: dict) -> torch.Tensor | None:
    """The sink logits of a call, broadcastable to (batch, heads, queries, 1): gpt-oss hands one per head as `s_aux`,
    others one per head and query as `sinks`."""
    if kwargs.get("s_aux") is not None:
        return kwargs["s_aux"].reshape(1, -1, 1, 1)
    return kwargs.get("sinks")


def _register_probe(implementation: str, attention_modules) -> str:
    """Register the probe around `implementation` (SDPA where that cannot be wrapped, or where its mask is not a
    tensor: flex attention's is a block mask, from which the maps cannot be recomputed) and return its name."""
    inner = implementation
    if "flash" in inner or inner.startswith("paged") or inner == "flex_attention":
        inner = "sdpa"
    elif inner == "eager" and not all(
        hasattr(sys.modules[type(module).__module__], "eager_attention_forward") for _, module in attention_modules
    ):
        inner = "sdpa"
    name = PROBE_PREFIX + inner
    AttentionInterface.register(name, _ProbeAttention(inner))
    if inner in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    return name


@contextmanager
def attention_probe(model: torch.nn.Module, observer: Callable[[AttentionCall], None]) -> Iterator[None]:
    """Within the block, every attention call of `model` is passed to `observer` before the attention is computed.

    The model's attention implementation is wrapped and restored on exit. Raises `ProbeUnavailable` if the model's
    attention does not go through transformers' attention interface.
    """
    name = type(model).__name__
    if not isinstance(model, PreTrainedModel):
        raise ProbeUnavailable(f"{name} is not a transformers PreTrainedModel, so its attention cannot be observed.")
    attention_modules = interface_attention_modules(model)
    if not attention_modules:
        raise ProbeUnavailable(f"{name} does not call attention through transformers' AttentionInterface.")
    if any(hasattr(module, OBSERVER_ATTRIBUTE) for _, module in attention_modules):
        raise ProbeUnavailable(f"{name} is already being observed (nested `attention_probe`).")
    original = model.config._attn_implementation
    if original.startswith(ATTENTION_PREFIX):  # a value path: the probe goes inside it
        probed = register_value_path_attention(
            _register_probe(original.removeprefix(ATTENTION_PREFIX), attention_modules)
        )
    else:
        probed = _register_probe(original, attention_modules)
    try:
        model.set_attn_implementation(probed)
    except (ValueError, KeyError) as error:
        raise ProbeUnavailable(f"{name} cannot switch its attention implementation: {error}") from None
    if model.config._attn_implementation != probed:  # transformers only warns when a class cannot switch
        raise ProbeUnavailable(f"{name} cannot switch its attention implementation (it stays {original!r}).")
    for _, module in attention_modules:
        setattr(module, OBSERVER_ATTRIBUTE, observer)
    try:
        yield
    finally:
        for _, module in attention_modules:
            delattr(module, OBSERVER_ATTRIBUTE)
        model.set_attn_implementation(original)


def attention_maps(
    model: torch.nn.Module, inputs: dict, layers: list[int] | None = None, sample: int = 0
) -> dict[int, torch.Tensor]:
    """The attention maps of one sample, per layer, as (heads, tokens, tokens) float32 CPU tensors (NeuTRENO Fig. 4).

    `inputs` is one batch (a dict of tensors); `sample` picks the row. Layers are numbered from 1 (block 1 is the first
    transformer block), as in `OversmoothingReport`; None returns every layer. Padded tokens are removed from the maps
    when `inputs` has a 2-D `attention_mask`. For a figure, pass the result to `plot_attention_maps`.
    """
    maps: list[torch.Tensor] = []
    calls: dict[int, int] = {}  # module -> its calls in this forward

    def observe(call: AttentionCall) -> None:
        calls[id(call.module)] = calls.get(id(call.module), 0) + 1
        if calls[id(call.module)] > 1:  # differential attention, or a call per image: not one map per layer
            raise ProbeUnavailable(
                f"{type(call.module).__name__} called the attention interface more than once in one forward pass "
                "(differential attention, or one call per image), so its maps cannot be numbered by layer"
            )
        probabilities = call.probabilities()
        if not -probabilities.shape[0] <= sample < probabilities.shape[0]:
            raise ProbeUnavailable(
                f"`sample` {sample} is out of range: the attention ran on a batch of {probabilities.shape[0]}"
            )
        maps.append(probabilities[sample].cpu())

    device = next(model.parameters()).device
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    was_training = model.training
    model.eval()
    try:
        with attention_probe(model, observe), torch.no_grad():
            model(**inputs)
    except ProbeUnavailable as error:
        raise ValueError(f"No attention maps: {error}") from None
    finally:
        model.train(was_training)
    if not maps:
        raise ValueError(f"No attention maps: {type(model).__name__} never called the attention interface.")
    wanted = list(range(1, len(maps) + 1)) if layers is None else list(layers)
    bad = [layer for layer in wanted if not 1 <= layer <= len(maps)]
    if bad:
        raise ValueError(f"`layers` {bad} out of range: the model has attention layers 1..{len(maps)}.")
    token_mask = inputs.get("attention_mask")
    keep = None
    if isinstance(token_mask, torch.Tensor) and token_mask.ndim == 2 and token_mask.shape[1] == maps[0].shape[-1]:
        keep = token_mask[sample].bool().cpu()
    return {layer: maps[layer - 1] if keep is None else maps[layer - 1][:, keep][:, :, keep] for layer in wanted}
