"""Read every attention call of a transformers model (queries, keys, values, mask) as the model computes them.

transformers 5 models call attention through
``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)``. `attention_probe`
registers one more implementation, `"hf_neutreno_probe"`, that runs SDPA exactly as the `"sdpa"` implementation does
(same mask function, same kernel, so the model's outputs do not change) after handing the call to an observer. One
mechanism therefore covers native ViT/DeiT, BERT, GPT-2 (fused `c_attn`), Llama (queries and keys after RoPE,
grouped-query heads) and this package's models (NeuTRENO, EigenViT, GPT), with no per-architecture hooks and without
asking the model for `output_attentions` (which needs eager attention and returns every map at once).

Models whose attention does not go through the interface (for example NeuTRENO's linear kernel, or remote code that
calls `torch.nn.functional.scaled_dot_product_attention` itself) are never observed; callers detect that from the
number of calls.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .metrics import attention_probabilities

PROBE_IMPLEMENTATION = "hf_neutreno_probe"

# id(module) -> observer, for the modules of every model inside an `attention_probe` block.
_OBSERVERS: dict[int, Callable[["AttentionCall"], None]] = {}


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

    @property
    def is_self_attention(self) -> bool:
        return self.query.shape[-2] == self.key.shape[-2]

    def probabilities(self) -> torch.Tensor:
        """The attention maps softmax(q kᵀ · scaling + mask), float32, (batch, heads, queries, keys)."""
        return attention_probabilities(self.query, self.key, self.attention_mask, self.scaling, self.is_causal)


def _probe_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    observer = _OBSERVERS.get(id(module))
    if observer is not None:
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)  # as SDPA decides
        observer(
            AttentionCall(
                module=module,
                query=query,
                key=key,
                value=value,
                attention_mask=attention_mask,
                scaling=scaling if scaling is not None else query.shape[-1] ** -0.5,
                is_causal=bool(causal),
            )
        )
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def _register() -> None:
    if PROBE_IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(PROBE_IMPLEMENTATION, _probe_attention_forward)
        AttentionMaskInterface.register(PROBE_IMPLEMENTATION, sdpa_mask)


@contextmanager
def attention_probe(model: torch.nn.Module, observer: Callable[[AttentionCall], None]) -> Iterator[None]:
    """Within the block, every attention call of `model` is passed to `observer` before SDPA computes it.

    The model's attention implementation is switched to the probe and restored on exit. Raises `ProbeUnavailable`
    if the model cannot switch its attention implementation.
    """
    if not isinstance(model, PreTrainedModel):
        raise ProbeUnavailable(
            f"{type(model).__name__} is not a transformers PreTrainedModel, so its attention cannot be observed."
        )
    if not model._can_set_attn_implementation():
        raise ProbeUnavailable(
            f"{type(model).__name__} does not call attention through transformers' AttentionInterface."
        )
    module_ids = [id(module) for module in model.modules()]
    if any(module_id in _OBSERVERS for module_id in module_ids):
        raise ProbeUnavailable(f"{type(model).__name__} is already being observed (nested `attention_probe`).")
    _register()
    original = model.config._attn_implementation
    try:
        model.set_attn_implementation(PROBE_IMPLEMENTATION)
    except (ValueError, KeyError) as error:
        raise ProbeUnavailable(f"{type(model).__name__} cannot switch its attention implementation: {error}") from None
    for module_id in module_ids:
        _OBSERVERS[module_id] = observer
    try:
        yield
    finally:
        for module_id in module_ids:
            _OBSERVERS.pop(module_id, None)
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

    def observe(call: AttentionCall) -> None:
        maps.append(call.probabilities()[sample].cpu())

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
