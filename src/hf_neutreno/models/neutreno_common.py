"""Pieces every model file shares: the NeuTRENO term, eager attention, config validation and presets.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and
huggingface_hub (a dependency of transformers, whose own configs take ``strict`` from it too).
"""


import copy
import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import torch
from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import (
    StrictDataclassClassValidationError,
    StrictDataclassError,
    StrictDataclassFieldValidationError,
)
from torch import nn


def neutreno_residual(
    attn_output: torch.Tensor,
    value_states: torch.Tensor,
    first_layer_values: torch.Tensor | None,
    neutreno_lambda: float,
) -> torch.Tensor:
    """``U = A V + λ (V_0 − V)`` (NeuTRENO, paper eq. 26), for merged heads ``(batch, tokens, heads * head_dim)``.

    The term is per token and per head channel, so it is the same whether the heads are merged or not; adding it
    on the merged layout avoids a transpose. ``first_layer_values`` is never detached: the gradient of every later
    layer reaches layer 0's value projection.
    """
    if first_layer_values is None or neutreno_lambda == 0:
        return attn_output
    if torch.is_grad_enabled() and _any_requires_grad(attn_output, value_states, first_layer_values):
        return _residual(attn_output, value_states, first_layer_values, neutreno_lambda)
    # Inference: the attention output is not needed afterwards, so add in place (two passes, no new tensor).
    return attn_output.add_(first_layer_values, alpha=neutreno_lambda).sub_(value_states, alpha=neutreno_lambda)


def neutreno_projection(
    linear: nn.Module,
    attn_output: torch.Tensor,
    value_states: torch.Tensor,
    first_layer_values: torch.Tensor | None,
    neutreno_lambda: float,
) -> torch.Tensor:
    """``linear(A V + λ (V_0 − V))``: the output projection of a NeuTRENO layer.

    In training, the projection's input is not kept for the backward pass but recomputed from A V, V and V_0, which
    the attention kernels keep anyway: the term then costs no activation memory (one (batch, tokens, hidden) tensor
    per layer otherwise). This needs a plain `nn.Linear`; wrapped projections (LoRA, quantised) take the plain path.
    """
    if type(linear) is nn.Linear and _recompute_in_backward(
        attn_output, value_states, first_layer_values, neutreno_lambda, linear.weight
    ):
        return _NeuTRENOLinear.apply(
            attn_output, value_states, first_layer_values, linear.weight, linear.bias, float(neutreno_lambda)
        )
    return linear(neutreno_residual(attn_output, value_states, first_layer_values, neutreno_lambda))


def neutreno_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    attn_output: torch.Tensor,
    value_states: torch.Tensor,
    first_layer_values: torch.Tensor | None,
    neutreno_lambda: float,
) -> torch.Tensor:
    """`neutreno_projection` with the weights given as tensors (EigenViT computes its output weight in each forward),
    with the same memory saving in training."""
    if _recompute_in_backward(attn_output, value_states, first_layer_values, neutreno_lambda, weight):
        return _NeuTRENOLinear.apply(
            attn_output, value_states, first_layer_values, weight, bias, float(neutreno_lambda)
        )
    inputs = neutreno_residual(attn_output, value_states, first_layer_values, neutreno_lambda)
    return nn.functional.linear(inputs, weight, bias)


def _recompute_in_backward(attn_output, value_states, first_layer_values, neutreno_lambda, weight) -> bool:
    """The term is on and autograd records it: recompute the projection's input in backward instead of keeping it."""
    return (
        first_layer_values is not None
        and neutreno_lambda != 0
        and torch.is_grad_enabled()
        and _any_requires_grad(attn_output, value_states, first_layer_values, weight)
    )


def _any_requires_grad(*tensors: torch.Tensor) -> bool:
    return any(t.requires_grad for t in tensors)


def _residual(attn_output, value_states, first_layer_values, neutreno_lambda):
    """A V + λ (V_0 − V) as a new tensor, in two passes over memory."""
    return attn_output.add(first_layer_values, alpha=neutreno_lambda).sub_(value_states, alpha=neutreno_lambda)


class _NeuTRENOLinear(torch.autograd.Function):
    """``F.linear(a + λ (v0 − v), W, b)`` that saves a, v, v0 (already alive) instead of its input."""

    @staticmethod
    def forward(ctx, attn_output, value_states, first_layer_values, weight, bias, neutreno_lambda):
        inputs = _residual(attn_output, value_states, first_layer_values, neutreno_lambda)
        # Under autocast the linear runs in the autocast dtype; backward (which runs outside autocast) uses the
        # same dtype for the matmuls and returns parameter gradients in the parameters' dtype.
        output = nn.functional.linear(inputs, weight, bias)
        ctx.save_for_backward(attn_output, value_states, first_layer_values, weight)
        ctx.neutreno_lambda = neutreno_lambda
        ctx.bias_dtype = None if bias is None else bias.dtype
        return output

    @staticmethod
    def backward(ctx, grad_output):
        attn_output, value_states, first_layer_values, weight = ctx.saved_tensors
        lam = ctx.neutreno_lambda
        compute_dtype = grad_output.dtype
        grad_inputs = grad_output @ weight.to(compute_dtype)
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[3]:
            inputs = _residual(attn_output, value_states, first_layer_values, lam).to(compute_dtype)
            grad_weight = (grad_output.reshape(-1, grad_output.shape[-1]).T @ inputs.reshape(-1, inputs.shape[-1]))
            grad_weight = grad_weight.to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[4]:
            grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0).to(ctx.bias_dtype)
        grad_attn = grad_inputs.to(attn_output.dtype) if ctx.needs_input_grad[0] else None
        grad_values = (-lam * grad_inputs).to(value_states.dtype) if ctx.needs_input_grad[1] else None
        grad_first = (lam * grad_inputs).to(first_layer_values.dtype) if ctx.needs_input_grad[2] else None
        return grad_attn, grad_values, grad_first, grad_weight, grad_bias, None


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention in plain torch ops (the `eager` backend), (batch, heads, tokens, head_dim) in, merged-ready
    (batch, tokens, heads, head_dim) out, as every `transformers` model writes it."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class InvalidConfigError(StrictDataclassError, ValueError):
    """A config value that breaks a rule. It is the strict-dataclass error transformers 5 configs raise, and a
    `ValueError`, as this package's configs always raised: callers catching either see it. The message is the
    rule's own (it names the field and the allowed values); the library's error is chained to it."""


def strict_config(cls):
    """``@strict`` (huggingface_hub), as every transformers 5 config: the annotations are checked on each assignment,
    and the ``validate_*`` methods (class validators) run at construction, in ``config.validate()`` and in
    ``save_pretrained`` (before anything is written), so one set of rules serves all three. The models call
    ``config.validate()`` too, for configs edited after construction. Errors of either kind are raised as
    `InvalidConfigError`."""
    cls = strict(cls)
    # `functools.wraps` keeps `@strict`'s mark on `validate`, which lets a subclass be `@strict` in turn.
    cls.__setattr__ = _raising_invalid_config_error(cls.__setattr__)
    cls.validate = _raising_invalid_config_error(cls.validate)
    save_pretrained = cls.save_pretrained

    @functools.wraps(save_pretrained)
    def validated_save_pretrained(self, *args, **kwargs):  # before transformers copies the code into the folder
        self.validate()
        return save_pretrained(self, *args, **kwargs)

    cls.save_pretrained = validated_save_pretrained
    return cls


class ValidatedSaveMixin:
    """`save_pretrained` checks the config before it writes anything. transformers copies the remote code into the
    folder first and validates the config only when it writes config.json, so a config edited into an invalid state
    would leave a folder with code and no model (or overwrite part of a saved one)."""

    def save_pretrained(self, *args, **kwargs):
        self.config.validate()
        return super().save_pretrained(*args, **kwargs)


def _raising_invalid_config_error(method):
    @functools.wraps(method)
    def wrapper(*args):
        try:
            return method(*args)
        except (StrictDataclassFieldValidationError, StrictDataclassClassValidationError) as error:
            raise InvalidConfigError(str(error.__cause__ or error)) from error

    return wrapper


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {list(allowed)}, got {value!r}.")


def check_heads(hidden_size: int, num_attention_heads: int) -> None:
    if num_attention_heads <= 0 or hidden_size % num_attention_heads != 0:
        raise ValueError(
            f"`hidden_size` ({hidden_size}) must be divisible by `num_attention_heads` ({num_attention_heads})."
        )


def check_positive(config, names: Iterable[str]) -> None:
    """Sizes and counts are >= 1 (their type, int, is checked by the annotations)."""
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, got {getattr(config, name)!r}.")


def check_layer_indices(name: str, indices: Iterable[int] | None, num_hidden_layers: int, first: int = 0) -> None:
    """Layer lists are 0-based, unique, and inside ``[first, num_hidden_layers - 1]``."""
    if indices is None:
        return
    indices = list(indices)
    bad = [i for i in indices if not first <= i < num_hidden_layers]
    if bad:
        raise ValueError(
            f"`{name}` entries must be integers in [{first}, {num_hidden_layers - 1}] "
            f"(num_hidden_layers={num_hidden_layers}), got {bad}."
        )
    if len(set(indices)) != len(indices):
        raise ValueError(f"`{name}` has repeated layer indices: {indices}.")


class NeuTRENOConfigRules:
    """The value rules every NeuTRENO config shares, as `@strict` class validators: λ and its layers, and the
    dropout rates the config names in `dropout_fields`."""

    dropout_fields: ClassVar[tuple[str, ...]] = ()

    def validate_neutreno(self) -> None:
        lam, layers = self.neutreno_lambda, self.neutreno_layers
        if not (math.isfinite(lam) and lam >= 0):  # NaN or ∞ would make every output NaN
            raise ValueError(
                f"`neutreno_lambda` must be a finite float >= 0 (0 gives the plain transformer), got {lam!r}."
            )
        if layers is not None and 0 in layers:
            raise ValueError(
                "`neutreno_layers` cannot contain 0: layer 0 provides the first-layer values V_0, so its term is zero. "
                f"Allowed: [1, {self.num_hidden_layers - 1}], got {list(layers)}."
            )
        check_layer_indices("neutreno_layers", layers, self.num_hidden_layers, first=1)

    def validate_dropout(self) -> None:
        for name in self.dropout_fields:
            if not 0.0 <= getattr(self, name) < 1.0:  # NaN is outside too
                raise ValueError(f"`{name}` must be in [0, 1), got {getattr(self, name)}.")


def neutreno_lambda_for_layer(config, layer_idx: int) -> float:
    """The λ layer ``layer_idx`` applies: 0 for layer 0 and for layers outside ``config.neutreno_layers``."""
    if layer_idx == 0:
        return 0.0
    layers = config.neutreno_layers
    if layers is not None and layer_idx not in layers:
        return 0.0
    return float(config.neutreno_lambda)


class PresetsMixin:
    """``Config.from_preset(name, **overrides)``; subclasses set ``presets = {name: {field: value}}``."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def from_preset(cls, name: str, **overrides):
        if name not in cls.presets:
            raise ValueError(f"Unknown preset {name!r} for {cls.__name__}; known presets: {sorted(cls.presets)}.")
        fields = copy.deepcopy(cls.presets[name])
        fields.update(overrides)
        return cls(**fields)


def add_auto_map(config, model: torch.nn.Module, auto_classes: dict[str, str]) -> None:
    """List every Auto class the model's code file serves in ``config.auto_map``.

    `save_pretrained` records only the saved class's own Auto class; with these entries a classifier checkpoint also
    opens with `AutoModel` (the backbone) in a process where this package is not installed.
    """
    module = type(model).__module__.rsplit(".", 1)[-1]
    entries = {auto: f"{module}.{name}" for auto, name in auto_classes.items()}
    config.auto_map = {**entries, **(getattr(config, "auto_map", None) or {})}
