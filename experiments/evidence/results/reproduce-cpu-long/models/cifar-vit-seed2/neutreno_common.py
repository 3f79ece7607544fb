"""Pieces every model file shares: the NeuTRENO term, eager attention, the config rules and presets.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers and
huggingface_hub (a dependency of transformers, whose own configs take their validated fields from it too).
"""


import copy
import math
import os
from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from huggingface_hub.dataclasses import validated_field
from torch import nn
from transformers.activations import ACT2FN


def neutreno_lambda_for_layer(config, layer_idx: int) -> float:
    """The λ layer ``layer_idx`` applies: 0 for layer 0 (it provides V_0) and for layers outside
    ``config.neutreno_layers``. The models call it in every forward, so an edit of the config applies at once."""
    layers = config.neutreno_layers
    if layer_idx == 0 or (layers is not None and layer_idx not in layers):
        return 0.0
    return float(config.neutreno_lambda)


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
    the attention kernels keep anyway. Kept, it would be one more (batch, tokens, hidden) tensor per layer: +5.5 % of
    a DeiT-tiny training step's peak memory at 224 px. This needs a plain `nn.Linear`; wrapped projections (LoRA,
    quantised) take the plain path.
    """
    if type(linear) is nn.Linear:
        return neutreno_linear(
            linear.weight, linear.bias, attn_output, value_states, first_layer_values, neutreno_lambda
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
    if (
        first_layer_values is not None
        and neutreno_lambda != 0
        and torch.is_grad_enabled()
        and _any_requires_grad(attn_output, value_states, first_layer_values, weight)
    ):
        return _NeuTRENOLinear.apply(
            attn_output, value_states, first_layer_values, weight, bias, float(neutreno_lambda)
        )
    inputs = neutreno_residual(attn_output, value_states, first_layer_values, neutreno_lambda)
    return nn.functional.linear(inputs, weight, bias)


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


# --- Config fields and rules ------------------------------------------------------------------------------------
# Rules on one field are `@strict` field validators: they run on every assignment, at construction and when a
# config.json is read, so a bad value is refused where it is written (`config.neutreno_lambda = float("nan")` raises)
# and a config can never hold one. Rules across fields are the configs' `validate_*` class validators.


def _field(rule, default):
    return validated_field(rule, default=default)


def positive_int_field(name: str, default: int):
    def rule(value):
        if value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")

    return _field(rule, default)


def optional_positive_int_field(name: str, default: int | None, none_means: str):
    def rule(value):
        if value is not None and value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, or None for {none_means}; got {value!r}.")

    return _field(rule, default)


def dropout_field(name: str, default: float):
    def rule(value):
        if not 0.0 <= value < 1.0:  # NaN is outside too
            raise ValueError(f"`{name}` must be in [0, 1), got {value!r}.")

    return _field(rule, default)


def activation_field(default: str):
    def rule(value):
        if value not in ACT2FN:
            raise ValueError(f"`hidden_act` must be one of {sorted(ACT2FN)}, got {value!r}.")

    return _field(rule, default)


def neutreno_lambda_field(default: float, name: str = "neutreno_lambda", none_means: str | None = None):
    """λ: a finite float >= 0 (NaN or ∞ would make every output NaN); `none_means` allows None."""

    def rule(value):
        if value is None and none_means is not None:
            return
        if value is None or not (math.isfinite(value) and value >= 0):
            allowed = "a finite float >= 0 (0 gives the plain transformer)"
            allowed += f", or None for {none_means}" if none_means is not None else ""
            raise ValueError(f"`{name}` must be {allowed}, got {value!r}.")

    return _field(rule, default)


def neutreno_layers_field():
    """0-based layers that add the term: unique, >= 1 (the upper bound is the configs' `validate_neutreno_layers`)."""

    def rule(layers):
        if layers is not None and 0 in layers:
            raise ValueError(
                "`neutreno_layers` cannot contain 0: layer 0 provides the first-layer values V_0, so its term is "
                f"zero. Allowed: layers 1 to num_hidden_layers - 1, got {list(layers)}."
            )
        check_layer_indices("neutreno_layers", layers)

    return _field(rule, None)


def check_layer_indices(name: str, indices: Iterable[int] | None, num_hidden_layers: int | None = None) -> None:
    """Layer lists are 0-based, unique, and inside ``[0, num_hidden_layers - 1]`` (when the count is given)."""
    if indices is None:
        return
    indices = list(indices)
    high = num_hidden_layers - 1 if num_hidden_layers is not None else math.inf
    bad = [i for i in indices if not 0 <= i <= high]
    if bad:
        within = f" (num_hidden_layers={num_hidden_layers})" if num_hidden_layers is not None else ""
        raise ValueError(f"`{name}` entries must be integers in [0, {high}]{within}, got {bad}.")
    if len(set(indices)) != len(indices):
        raise ValueError(f"`{name}` has repeated layer indices: {indices}.")


def check_heads(hidden_size: int, num_attention_heads: int, names=("hidden_size", "num_attention_heads")) -> None:
    if hidden_size % num_attention_heads:
        raise ValueError(
            f"`{names[0]}` ({hidden_size}) must be divisible by `{names[1]}` ({num_attention_heads})."
        )


def built_fields(config, names: Iterable[str]) -> dict[str, Any]:
    """Copies of the config fields that fix a model's parameters, attention classes or dropout rates when it is
    built (the config's `architecture_fields`): what `check_built_fields` compares with at each forward."""
    return {name: copy.deepcopy(getattr(config, name)) for name in names}


def check_built_fields(config, built: dict[str, Any]) -> None:
    """Refuse to run once such a field was edited on the model's config: the model cannot follow the edit, and a
    model saved now would be rebuilt from the edited value and compute something else. Plain Python comparisons."""
    fields = vars(config)  # the dataclass fields, without the config's attribute-alias lookup (this runs per forward)
    changed = [name for name, value in built.items() if fields[name] != value]
    if changed:
        name = changed[0]
        raise ValueError(
            f"`{name}` was set to {getattr(config, name)!r} on the config of a model built with {built[name]!r} "
            f"(edited fields: {changed}). It fixes the model's parameters or blocks when the model is built, so the "
            "model cannot follow the edit, and a model saved now would not compute what this one computes. Set it "
            f"back, or build a new model with it (e.g. `from_pretrained(folder, {name}=...)`)."
        )


def check_before_save(model: nn.Module) -> None:
    """What a model's `save_pretrained` checks before anything is written: no field in `built_fields` edited on the
    config of the model or of any of its submodels, and the config's rules across fields. transformers copies the code
    files before it validates the config, and never compares the config with the built model, so a refused save would
    otherwise leave files behind (replacing an earlier save's), and an edited architecture field would be saved with
    weights that do not fit it."""
    for module in model.modules():
        built = getattr(module, "built_fields", None)
        if built is not None:
            check_built_fields(module.config, built)
    model.config.validate()


class NeuTRENOConfigMixin:
    """What every config of this package adds to `PreTrainedConfig` (a base listed before it): presets, the rules
    that every model's fields share, and a `save_pretrained` that validates before it writes anything.

    Presets: ``Config.from_preset(name, **overrides)``; subclasses set ``presets = {name: {field: value}}``.
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def from_preset(cls, name: str, **overrides):
        if name not in cls.presets:
            raise ValueError(f"Unknown preset {name!r} for {cls.__name__}; known presets: {sorted(cls.presets)}.")
        fields = copy.deepcopy(cls.presets[name])
        fields.update(overrides)
        return cls(**fields)

    def validate_architecture(self) -> None:
        super().validate_architecture()
        check_heads(self.hidden_size, self.num_attention_heads)

    def validate_neutreno_layers(self) -> None:
        check_layer_indices("neutreno_layers", self.neutreno_layers, self.num_hidden_layers)
        if self.neutreno_layers is not None and 0 in self.neutreno_layers:  # an in-place edit skips the field rule
            raise ValueError("`neutreno_layers` cannot contain 0: layer 0 provides the first-layer values V_0.")

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs):
        # transformers validates only after copying the code files: check first, so that a refused save writes nothing.
        self.validate()
        return super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)


def add_auto_map(config, model: torch.nn.Module, auto_classes: dict[str, str]) -> None:
    """List every Auto class the model's code file serves in ``config.auto_map``.

    `save_pretrained` records only the saved class's own Auto class; with these entries a classifier checkpoint also
    opens with `AutoModel` (the backbone) in a process where this package is not installed.
    """
    module = type(model).__module__.rsplit(".", 1)[-1]
    entries = {auto: f"{module}.{name}" for auto, name in auto_classes.items()}
    config.auto_map = {**entries, **(getattr(config, "auto_map", None) or {})}
