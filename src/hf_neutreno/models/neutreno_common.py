"""Pieces every model file shares: the NeuTRENO term (from `neutreno_term.py`), eager attention, a layer's λ
(`NeuTRENOLayerLambda`), the `PreTrainedModel` additions (`NeuTRENOPreTrainedMixin`), the config rules and presets.

This file travels with every checkpoint (``trust_remote_code``): it imports only torch, transformers, its sibling
`neutreno_term.py` and huggingface_hub (a dependency of transformers, whose own configs take their validated fields
and validation errors from it too).
"""

import copy
import math
import os
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
from huggingface_hub.dataclasses import validated_field
from huggingface_hub.errors import StrictDataclassFieldValidationError
from torch import nn
from transformers.activations import ACT2FN
from transformers.utils import is_torchdynamo_compiling

from .neutreno_term import attention_with_neutreno_term


class NeuTRENOLayerLambda:
    """For an attention module with `config` and `layer_idx`: its layer's λ, `neutreno_lambda`.

    A block of a Segmenter's mask transformer has `segmentation_config`, the segmentation model's config, whose
    `decoder_lambda` it reads instead (its own config is a copy made at construction, of the decoder's shape)."""

    segmentation_config = None

    @property
    def neutreno_lambda(self) -> float:
        """λ of this layer: 0 for layer 0 (it provides V_0) and for layers outside ``config.neutreno_layers``. Read
        from the config at every forward, so that editing `neutreno_lambda` or `neutreno_layers` (or a Segmenter's
        `decoder_neutreno_lambda`) on a built model applies at once."""
        if self.segmentation_config is not None:  # every mask-transformer block after the first
            return 0.0 if self.layer_idx == 0 else float(self.segmentation_config.decoder_lambda)
        layers = self.config.neutreno_layers
        if self.layer_idx == 0 or (layers is not None and self.layer_idx not in layers):
            return 0.0
        return float(self.config.neutreno_lambda)


def values_checkable(tensor: torch.Tensor) -> bool:
    """Whether an input check may read `tensor`'s values into Python: only on the CPU (on a device it would wait for
    the device at every step), not while torch.compile traces, and not under torch.func's transforms (a `vmap`ped
    tensor has no values to read: per-sample gradients). Elsewhere the operation that uses the values still fails on
    a bad one, with its own message."""
    return (
        tensor.device.type == "cpu"
        and not is_torchdynamo_compiling()
        and not torch._C._are_functorch_transforms_active()
    )


def neutreno_attention(
    attention: Callable[[], tuple],
    values: torch.Tensor,
    first_layer_values: torch.Tensor | None,
    neutreno_lambda: float,
    recompute_saved: bool = True,
) -> tuple:
    """``attention()`` (a backend's call: (output, weights), output (batch, tokens, heads, head_dim)) with NeuTRENO's
    term ``λ (V_0 − V)`` added to its output (paper eq. 26; `attention_with_neutreno_term`), for this layer's values
    and layer 0's as the models hand them on, merged as (batch, tokens, heads * head_dim).

    `first_layer_values` is never detached: the gradient of every later layer reaches layer 0's value projection.
    `recompute_saved`: the backend's copy of its output is rebuilt in the backward pass rather than kept beside the
    output with the term (one (batch, tokens, hidden) tensor per layer: +5.5 % of a DeiT-tiny training step's peak
    memory at 224 px); False under activation checkpointing.
    """
    if first_layer_values is None or neutreno_lambda == 0:
        return attention()
    # merged heads, as the projections give them: the term needs no view operations to make heads
    return attention_with_neutreno_term(
        attention, first_layer_values, values, float(neutreno_lambda), recompute_saved=recompute_saved
    )


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
# and no assignment can store one; `validate()`, which every save runs first, runs them again for a value set past them
# (`object.__setattr__`, an in-place edit). Rules across fields are the configs' `validate_*` class validators.


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
    """0-based layers that add the term: unique, >= 1 (the upper bound, `num_hidden_layers` - 1, is checked by the
    configs' `__setattr__` and `validate_neutreno_layers`)."""

    def rule(layers):
        if layers is not None and 0 in layers:
            raise ValueError(
                "`neutreno_layers` cannot contain 0: layer 0 provides the first-layer values V_0, so its term is "
                f"zero. Allowed: layers 1 to num_hidden_layers - 1, got {list(layers)}."
            )
        check_layer_indices("neutreno_layers", layers)

    return _field(rule, None)


def check_layer_indices(
    name: str, indices: Iterable[int] | None, num_hidden_layers: int | None = None, low: int = 0
) -> None:
    """Layer lists are 0-based, unique, and inside ``[low, num_hidden_layers - 1]`` (when the count is given)."""
    if indices is None:
        return
    indices = list(indices)
    high = num_hidden_layers - 1 if num_hidden_layers is not None else math.inf
    bad = [i for i in indices if not low <= i <= high]
    if bad:
        within = f" (num_hidden_layers={num_hidden_layers}, 0-based)" if num_hidden_layers is not None else ""
        raise ValueError(f"`{name}` entries must be integers in [{low}, {high}]{within}, got {bad}.")
    if len(set(indices)) != len(indices):
        raise ValueError(f"`{name}` has repeated layer indices: {indices}.")


def check_heads(hidden_size: int, num_attention_heads: int, names=("hidden_size", "num_attention_heads")) -> None:
    if hidden_size % num_attention_heads:
        raise ValueError(f"`{names[0]}` ({hidden_size}) must be divisible by `{names[1]}` ({num_attention_heads}).")


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


# The fields that fix a transformer's shape, as transformers' configs name them (ViT, DeiT, GPT-2-style models).
TRANSFORMER_SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
)


class NeuTRENOConfigMixin:
    """What every config of this package adds to `PreTrainedConfig` (a base listed before it): presets, the rules
    that every model's fields share, and a `save_pretrained` that validates before it writes anything.

    Presets: ``Config.from_preset(name, **overrides)``; subclasses set ``presets = {name: {field: value}}``.
    """

    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    # Layer lists a built model reads at each forward, with their lowest allowed index: on assignment they are checked
    # against `num_hidden_layers` as well (a rule across fields, which a field rule cannot run), so that an index past
    # the last layer is refused where it is written rather than leaving the term off in every layer.
    layer_list_fields: ClassVar[dict[str, int]] = {"neutreno_layers": 1}

    def __setattr__(self, name: str, value: Any) -> None:
        # The field's own rules have run (type, unique, no 0); `num_hidden_layers` is set before the layer lists at
        # construction (field order), so a config being built checks them too, and `from_dict`/`update` set them last.
        # When assigning both on a config, set `num_hidden_layers` first.
        low = self.layer_list_fields.get(name)
        layers = self.__dict__.get("num_hidden_layers")
        if low is not None and value is not None and isinstance(layers, int):
            try:
                check_layer_indices(name, value, layers, low)
            except (TypeError, ValueError) as error:
                raise StrictDataclassFieldValidationError(field=name, cause=error) from error
        super().__setattr__(name, value)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        # transformers sets `from_pretrained`'s keyword arguments on the built config one by one, in the caller's
        # order; set the layer lists last, so that they are checked against a `num_hidden_layers` given beside them.
        return super().from_dict(config_dict, **cls._layer_lists_last(kwargs))

    def update(self, config_dict: dict[str, Any]) -> None:
        super().update(self._layer_lists_last(config_dict))

    @classmethod
    def _layer_lists_last(cls, fields: dict[str, Any]) -> dict[str, Any]:
        return dict(sorted(fields.items(), key=lambda item: item[0] in cls.layer_list_fields))

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

    def validate_fields(self) -> None:
        # The field rules run on assignment only; a value set past them (`object.__setattr__`, an in-place edit of a
        # list) would otherwise pass `validate()` and be saved. Run every field's rules again on what it holds now.
        for name, rules in type(self).__validators__.items():
            value = getattr(self, name)
            for rule in rules:
                try:
                    rule(value)
                except (TypeError, ValueError) as error:
                    raise ValueError(str(error)) from error

    def validate_neutreno_layers(self) -> None:
        """`neutreno_layers` against `num_hidden_layers`: run by `validate()`, and by the models at every forward (plain
        Python on a short list), where an in-place edit of the list (`config.neutreno_layers.append(3)`), which no
        assignment check sees, would otherwise leave the term off in the layers it meant."""
        if self.neutreno_layers is not None and 0 in self.neutreno_layers:  # an in-place edit skips the field rule
            raise ValueError("`neutreno_layers` cannot contain 0: layer 0 provides the first-layer values V_0.")
        check_layer_indices("neutreno_layers", self.neutreno_layers, self.num_hidden_layers, low=1)

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs):
        # transformers validates only after copying the code files: check first, so that a refused save writes nothing.
        self.validate()
        return super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)


class NeuTRENOPreTrainedMixin:
    """What the package's `PreTrainedModel` bases add to transformers': every Auto class the model's code file serves
    in ``config.auto_map`` (`_auto_classes`), and a config checked before anything is saved."""

    _auto_classes: ClassVar[dict[str, str]] = {}

    def __init__(self, config, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        # `save_pretrained` records only the saved class's own Auto class; with these entries a classifier checkpoint
        # also opens with `AutoModel` (the backbone) in a process where this package is not installed.
        module = type(self).__module__.rsplit(".", 1)[-1]
        entries = {auto: f"{module}.{name}" for auto, name in self._auto_classes.items()}
        config.auto_map = {**entries, **(getattr(config, "auto_map", None) or {})}

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, after checking, before any file is written, that no field in
        `built_fields` was edited on the config of the model or of any of its submodels, and the config's rules across
        fields. transformers copies the code files before it validates the config, and never compares the config with
        the built model, so a refused save would otherwise leave files behind (replacing an earlier save's), and an
        edited architecture field would be saved with weights that do not fit it."""
        for module in self.modules():
            built = getattr(module, "built_fields", None)
            if built is not None:
                check_built_fields(module.config, built)
        self.config.validate()
        return super().save_pretrained(save_directory, *args, **kwargs)
