"""NeuTRENO, the value residual, twicing and XSA on any transformers model, in one call: `apply_value_path(model,
method)`.

The first two reuse the values V_0 of a model's first attention layer in every later layer ℓ, per head:

- ``"neutreno"`` (Nguyen, Nguyen, Baraniuk, "Mitigating Over-smoothing in Transformers via Regularized Nonlocal
  Functionals", NeurIPS 2023): the attention output becomes ``U_ℓ = A_ℓ V_ℓ + λ (V_0 − V_ℓ)``, the term added before
  the heads are merged and projected.
- ``"value_residual"`` (Zhou et al., "Value Residual Learning", ACL 2025, ResFormer): layer ℓ attends over
  ``(1 − α) V_ℓ + α V_0`` instead of ``V_ℓ``, the mix made before attention.
- ``"twicing"`` (Abdullaev & Nguyen, "Transformer Meets Twicing: Harnessing Unattended Residual Information", ICLR
  2025): ``U_ℓ = A_ℓ V_ℓ + c A_ℓ (V_ℓ − A_ℓ V_ℓ)``, the layer's attention applied again to what it left unattended;
  it needs no V_0, so layer 0 may take it too.
- ``"xsa"`` (exclusive self-attention; Zhai, arXiv 2603.09078, 2026): each token's attention output, per head, loses
  its component along the token's own value, ``y ← y − s (y·v̂) v̂`` with ``v̂ = v / ‖v‖``, after attention and before
  the output projection; it needs no V_0 either.
- ``"value_embedding"`` (value embeddings, as modded-nanogpt's speedrun and nanochat put them on a causal language
  model): layer ℓ's values become ``V_ℓ + g E_ℓ[token]`` before attention, ``E_ℓ`` a token-embedding table of the
  layer's own, the width of its key/value heads, and ``g`` a strength (fixed, learnable per layer, or gated per token
  and key/value head as nanochat's ``3 σ(W x[..., :12])``); the value residual's idea with the token as the source.

``learnable=True`` makes λ (or α) one trainable scalar per layer, initialised at the given value, as modded-nanogpt
learns its value-residual mix. V_0 is taken in the same forward pass and is not detached.

How it works: every transformers 5 model calls attention through ``ALL_ATTENTION_FUNCTIONS``. `apply_value_path`
registers one more implementation, ``"value_path-<inner>"`` (with `AttentionInterface.register` and the inner's mask
function with `AttentionMaskInterface.register`), that wraps the model's own backend (``<inner>``: eager, sdpa,
flex_attention or any registered function), numbers the self-attention layers, and adds a forward pre-hook that hands
every call of the model a fresh context object in which layer 0 leaves its values for the later layers. It lives exactly
as long as the forward pass (and the gradient-checkpointing recompute that belongs to it), so caches, gradient
checkpointing, DDP and several adapted models in one process need no other state.

The model's class becomes ``ValuePath<Class>``, a subclass that adapts itself in ``__init__`` from
``config.value_path``, so `save_pretrained` stores the settings in the config, copies this file next to the weights
and records it in ``auto_map``: ``AutoModel*.from_pretrained(folder, trust_remote_code=True)`` loads the adapted model
where this package is not installed. This file imports only torch, transformers and its flat siblings
`value_path_methods.py` (each method's rule), `neutreno_term.py` (NeuTRENO's term, shared with this package's
models) and `value_path_defaults.py`, copied with it.
"""

import ast
import copy
import dataclasses
import functools
import inspect
import math
import numbers
import operator
import re
import sys
import textwrap
import weakref

import torch
import transformers
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.conversion_mapping import (
    get_checkpoint_conversion_mapping,
    register_checkpoint_conversion_mapping,
)
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.auto import modeling_auto
from transformers.utils import logging

from .neutreno_term import attention_with_neutreno_term, may_recompute_saved
from .value_path_defaults import DEFAULT_COEFFICIENTS, LEARNABLE_STARTS
from .value_path_methods import (
    OneGroup,
    exclusive,
    query_rows,
    stored_values,
    twicing,
    value_embedding,
    value_residual,
)

try:  # transformers 5 records `output_hidden_states` per model class, registered in PreTrainedModel.__init__
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
except ImportError:  # older or newer layouts: nothing to register
    _CAN_RECORD_REGISTRY = None

logger = logging.get_logger(__name__)

METHODS = ("neutreno", "value_residual", "twicing", "xsa", "value_embedding")
FROM_LAYER_0 = ("twicing", "xsa", "value_embedding")  # methods that need no V_0: layer 0 may take them too
UNIT_RANGE = ("value_residual", "xsa")  # coefficients in [0, 1]; the others >= 0

ATTENTION_PREFIX = "value_path-"  # registered implementation names: "value_path-sdpa", "value_path-eager", ...
CONTEXT_KWARG = "value_path_context"  # the per-call `_ForwardContext`, handed to every attention call as a keyword
LAYER_ATTRIBUTE = "value_path_layer"  # on each adapted self-attention module: its layer number, 0 = the first
GATE_ATTRIBUTE = "value_path_gate"  # learnable="gate": on each gated attention module, Linear(hidden → kv heads)
GATE = "gate"  # `learnable`'s third value: α per token and head, sigmoid(W x + b) of the layer's input x
COEFFICIENT_ATTRIBUTE = "value_path_coefficient"  # learnable=True: on each adapted attention module, its scalar
EMBEDDING_ATTRIBUTE = "value_path_embedding"  # value_embedding: on each adapted attention module, its table
EMBEDDING_GATE_INPUTS = 12  # nanochat's value-embedding gate reads the first 12 channels of the layer's input
# The modules a value path trains, by the attribute names PEFT matches: `LoraConfig(modules_to_save=PEFT_MODULES)`.
PEFT_MODULES = (COEFFICIENT_ATTRIBUTE, GATE_ATTRIBUTE, EMBEDDING_ATTRIBUTE)
# Earlier checkpoints kept the learnable scalars as one vector on the outermost model; loading converts it.
OLD_COEFFICIENTS = "value_path_coefficients"
# Every adapted model carries this empty buffer in its weights, so that a load which builds the plain class (without
# trust_remote_code, or a concrete class such as GPT2LMHeadModel) lists it as an UNEXPECTED key in transformers' load
# report: the value path is not running. A fixed coefficient would otherwise leave no trace in the weights. The
# report shows only the key, so the key says what to do. Checkpoints until 2026-11-28 carry it as OLD_MARKER.
MARKER = "value_path_applied__load_with_trust_remote_code"
OLD_MARKER = "value_path_applied"
CLASS_PREFIX = "ValuePath"

# Auto classes a saved model can name in `auto_map`, most specific first, with transformers' public name tables.
_AUTO_CLASSES = (
    ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("AutoModelForSequenceClassification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("AutoModelForTokenClassification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("AutoModelForQuestionAnswering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    ("AutoModelForMultipleChoice", "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES"),
    ("AutoModelForImageClassification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("AutoModelForMaskedImageModeling", "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES"),
    ("AutoModelForImageTextToText", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("AutoModel", "MODEL_MAPPING_NAMES"),
    ("AutoModelForPreTraining", "MODEL_FOR_PRETRAINING_MAPPING_NAMES"),
)


# --- public API ---------------------------------------------------------------------------------------------------


def apply_value_path(
    model: PreTrainedModel,
    method: str,
    coefficient: float | None = None,
    *,
    learnable: bool | str = False,
    layers: list[int] | None = None,
    stack: str | None = None,
) -> PreTrainedModel:
    """Adapt a built transformers model in place to NeuTRENO, the value residual, twicing, XSA or value embeddings,
    and return it.

    Args:
        model: a transformers `PreTrainedModel` whose self-attention goes through transformers' attention interface
            (Llama, Qwen2, GPT-2, BERT, ViT, DeiT, ...), pretrained or not.
        method: ``"neutreno"`` (U_ℓ = A_ℓ V_ℓ + λ (V_0 − V_ℓ)), ``"value_residual"`` (attend over
            (1 − α) V_ℓ + α V_0), ``"twicing"`` (U_ℓ = A_ℓ V_ℓ + c A_ℓ (V_ℓ − A_ℓ V_ℓ)), ``"xsa"`` (exclusive
            self-attention: each token's output per head without s times its component along its own value) or
            ``"value_embedding"`` (V_ℓ + g E_ℓ[token], a token-embedding table per adapted layer; causal language
            models only, called with ``input_ids``).
        coefficient: λ for NeuTRENO (default 0.4, a finite number >= 0; 0 computes the unmodified model), α for
            the value residual (default 0.5, in [0, 1]; 0 computes the unmodified model), or c for twicing
            (default 1, the paper's (2A − A²) V; >= 0, 0 computes the unmodified model; not learnable), s for
            XSA (default 1, the paper's whole removal; in [0, 1], 0 computes the unmodified model; learnable, it
            starts at 0 unless given), or g for value embeddings (default 1, modded-nanogpt's ``V + E[token]``;
            >= 0, 0 computes the unmodified model; learnable, it starts at 0 unless given).
        learnable: one trainable scalar per adapted layer, initialised at `coefficient`: a `LayerCoefficient` named
            ``value_path_coefficient`` on each adapted attention module (`learned_coefficients(model)` reads them in
            increasing layer order, that of ``config.value_path["layers"]``, stored sorted). A learnable α is used
            clamped to [0, 1], so that a value moved outside by training or by hand still computes a mix (and the
            saved model computes the same); its gradient passes straight through the clamp, so that a value pushed
            outside can come back.
            ``learnable="gate"`` (value residual and value embeddings): α per token and key/value head,
            ``sigmoid(W x + b)`` of the layer's attention input x (x-transformers' learned value-residual mix), a
            ``Linear`` named ``value_path_gate`` on each adapted attention module; W starts at 0 and b at logit(α), so
            that the model starts as the fixed-α one. For value embeddings the gate is nanochat's,
            g = 2 g₀ σ(W x[..., :12]) per token and key/value head without a bias, W starting at 0 so that g starts at
            the given g₀ (``coefficient=1.5`` is nanochat's 3 σ(W x[..., :12])). The tables of value embeddings (an
            ``Embedding`` named ``value_path_embedding`` on each adapted attention module, initialised as nanochat's)
            always train.
            PEFT trains and saves the scalars, gates and tables beside LoRA with
            ``LoraConfig(..., modules_to_save=PEFT_MODULES)``.
        layers: the self-attention layers (0-based) that get the rule; default every layer after the first. Layer 0
            is where V_0 comes from, so it is never one of them, except for twicing and XSA (default: every layer)
            and value embeddings (default: nanochat's, every other layer, ending with the last).
        stack: in a model with several stacks of self-attention layers whose other stacks are towers of their own (a
            vision-language model's vision encoder beside its language model), the path of the list of layers that
            takes the value path, as the refusal without it names them (``"model.language_model.layers"``); the
            other stacks are left as they are. The model itself is adapted, so that its own `save_pretrained` (and
            `Trainer`'s checkpoints) carry the value path. Default: the model's one stack.

    The settings are stored in ``model.config.value_path``; they cannot change afterwards (call `remove_value_path`
    and adapt again). The model's class becomes ``ValuePath<Class>``, a subclass, so that the saved checkpoint loads
    adapted with ``trust_remote_code=True``. Raises `ValueError` for what it cannot adapt exactly (see
    docs/value-path.md): attention outside the interface, encoder-decoders, several attention stacks without
    `stack`, flash-attention backends, a model already adapted.
    """
    _refuse_unadaptable_model(model)
    # transformers' classes are registered for their Auto class here; this package's models keep their own
    auto_class = _auto_class_of(type(model)) if _is_transformers_class(type(model)) else None
    attention_layers, _ = _check_adaptable(model, stack)  # everything is checked before anything changes
    settings = check_settings(method, coefficient, learnable, layers, len(attention_layers), stack)
    _check_method_fits(model, settings, attention_layers)
    _own_config(model)
    model.config.value_path = settings
    model.__class__ = value_path_class(type(model), auto_class)
    if _CAN_RECORD_REGISTRY is not None:  # as __init__ would have registered the new class (hidden states, attentions)
        _CAN_RECORD_REGISTRY[model] = model._can_record_outputs
    _adapt(model)
    return model


def _refuse_unadaptable_model(model) -> None:
    """`ValueError` for a model that `apply_value_path` cannot take as it is, whatever the settings."""
    if not isinstance(model, PreTrainedModel):
        raise ValueError(
            f"apply_value_path adapts a transformers PreTrainedModel, got {type(model).__name__}; adapt the model "
            "before wrapping it (PEFT, DDP, torch.compile)."
        )
    name = type(model).__name__
    if is_value_path_model(model):
        raise ValueError(
            f"{name} is already adapted (config.value_path = {model.config.value_path}); call "
            "remove_value_path(model) first to adapt it with other settings."
        )
    if getattr(model.config, "value_path", None) is not None:
        raise ValueError(
            f"{name}'s config has `value_path` = {model.config.value_path} but the model is not adapted: it was "
            "loaded from an adapted checkpoint without `trust_remote_code=True`, which builds the plain model. "
            "Load it again with `trust_remote_code=True`, or delete `config.value_path` to start afresh."
        )
    _refuse_built_in_term(model)


def check_adaptable(
    model: PreTrainedModel, method: str, learnable: bool | str = False, stack: str | None = None
) -> None:
    """`ValueError` for what `apply_value_path(model, method, learnable=learnable, stack=stack)` would refuse at its
    default coefficient and layers, changing nothing: a model built on the meta device will do (no weights needed)."""
    _refuse_built_in_term(model)
    layers, _ = _check_adaptable(model, stack)
    _check_method_fits(model, check_settings(method, None, learnable, None, len(layers), stack), layers)


def _own_config(model: PreTrainedModel) -> None:
    """Give the model a config object of its own before the settings go into it: models built from one config object
    share it, and the settings of one would otherwise appear on the other (which then refused to be adapted)."""
    shared = model.config
    own = copy.deepcopy(shared)
    # A composite model's sub-models hold its sub-configs (a VLM's language model, `config.text_config`): they take
    # the copy's, so that the config and the sub-models' stay one object each.
    copies, pending = {id(shared): own}, [(shared, own)]
    while pending:
        original, copied = pending.pop()
        for key in getattr(original, "sub_configs", None) or {}:
            if isinstance(getattr(original, key, None), PretrainedConfig):
                copies[id(getattr(original, key))] = getattr(copied, key)
                pending.append((getattr(original, key), getattr(copied, key)))
    for module in model.modules():
        if id(getattr(module, "config", None)) in copies:
            module.config = copies[id(module.config)]


def remove_value_path(model: PreTrainedModel) -> PreTrainedModel:
    """Undo `apply_value_path` in place (also on a model loaded adapted): the original class, attention
    implementation and config, without the learnable coefficients. Returns the model."""
    if not is_value_path_model(model):
        raise ValueError(f"{type(model).__name__} is not adapted with apply_value_path: nothing to remove.")
    for handle in model._value_path_hooks:
        handle.remove()
    del model._value_path_hooks
    for module in model.modules():
        if hasattr(module, LAYER_ATTRIBUTE):
            delattr(module, LAYER_ATTRIBUTE)
        for name in PEFT_MODULES:
            if name in module._modules:
                delattr(module, name)
    delattr(model, MARKER)
    stack = model.config.value_path.get("stack")
    inner = _inner_implementation(model, stack)
    model.__class__ = type(model)._value_path_base
    _set_implementation(model, stack, inner)
    del model.config.value_path
    auto_map = {k: v for k, v in (getattr(model.config, "auto_map", None) or {}).items() if not _is_ours(v)}
    if auto_map:
        model.config.auto_map = auto_map
    elif hasattr(model.config, "auto_map"):
        del model.config.auto_map
    return model


def is_value_path_model(model) -> bool:
    """Whether `model` is adapted by `apply_value_path` (or loaded adapted)."""
    return hasattr(type(model), "_value_path_base")


def coefficient_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The learnable coefficients of `model` (``learnable=True``; a PEFT model's active adapter's under
    ``modules_to_save``), one scalar parameter per adapted layer, in increasing layer order; empty for fixed ones."""
    holders = [
        (getattr(module, LAYER_ATTRIBUTE), getattr(module, COEFFICIENT_ATTRIBUTE))
        for module in model.modules()
        if COEFFICIENT_ATTRIBUTE in module._modules and hasattr(module, LAYER_ATTRIBUTE)
    ]
    return [holder() for _, holder in sorted(holders, key=operator.itemgetter(0))]


def learned_coefficients(model: nn.Module) -> list[float] | None:
    """The learnable coefficient of each adapted layer as the forward pass uses it, as floats, in increasing layer
    order (entry i belongs to the i-th smallest of ``config.value_path["layers"]``): λ clamped to λ ≥ 0, α to [0, 1]
    (`_forward_coefficients`). None where the coefficients are not learnable."""
    parameters = coefficient_parameters(model)
    if not parameters:
        return None
    settings = getattr(getattr(model, "config", None), "value_path", None) or {}
    upper = 1.0 if settings.get("method") in UNIT_RANGE else math.inf
    values = [float(p.item()) for p in parameters]
    return [min(max(value, 0.0), upper) if math.isfinite(value) else value for value in values]


def check_coefficients(state: dict[str, torch.Tensor]) -> None:
    """`ValueError` naming every learnable coefficient or gate weight of a state dict (or `named_parameters`) that
    holds NaN or an infinity: a model with one gives NaN outputs, so it is refused where it is loaded or saved."""
    bad = [
        name
        for name, tensor in state.items()
        if any(f".{module}." in f".{name}" for module in PEFT_MODULES)
        and tensor.is_floating_point()
        and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        raise ValueError(
            f"Value-path coefficients that are not finite (NaN or infinite): {bad}. Such a model gives NaN outputs; "
            "the training that wrote them diverged (lower the coefficients' learning rate), or the file is damaged."
        )


def value_path_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters a value path adds to `model` by name (learnable coefficients and gates): those PEFT's
    ``modules_to_save=PEFT_MODULES`` trains, and which a model's other weights do not include."""
    return {
        name: parameter
        for name, parameter in model.named_parameters()
        if any(f".{module}." in f".{name}" for module in PEFT_MODULES)
    }


class LayerCoefficient(nn.Module):
    """One adapted layer's learnable λ or α, a module of its own on the layer's attention module so that PEFT's
    ``modules_to_save`` can name it, as it names the gates. Calling it gives the parameter (through PEFT's wrapper:
    the active adapter's copy)."""

    def __init__(self, value: float, dtype=None, device=None):
        super().__init__()
        self.value = nn.Parameter(torch.tensor(value, dtype=dtype, device=device))

    def forward(self) -> torch.Tensor:
        return self.value


def check_settings(method, coefficient, learnable, layers, num_layers: int, stack: str | None = None) -> dict:
    """The settings as ``config.value_path`` stores them (`stack` only where one is named), or `ValueError` naming the
    bad argument. `stack` has been checked against the model's stacks (`self_attention_layers`)."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}.")
    symbol = {"neutreno": "λ", "value_residual": "α", "twicing": "the weight of A (V − A V)", "xsa": "s"}.get(
        method, "g"
    )
    if coefficient is None:  # a learnable scalar may start elsewhere (at 0: the model's own function)
        starts = LEARNABLE_STARTS if learnable is True else DEFAULT_COEFFICIENTS
        coefficient = starts.get(method, DEFAULT_COEFFICIENTS[method])
    number = _as_real(coefficient)
    if number is None or not math.isfinite(number):
        raise ValueError(f"`coefficient` ({symbol} of {method!r}) must be a finite number, got {coefficient!r}.")
    coefficient = number
    if method == "neutreno" and coefficient < 0:
        raise ValueError(f"`coefficient` (λ of 'neutreno') must be >= 0 (0 is the plain model), got {coefficient}.")
    if method == "value_residual" and not 0 <= coefficient <= 1:
        raise ValueError(
            f"`coefficient` (α of 'value_residual') must be in [0, 1] (V_0's weight in the mix), got {coefficient}."
        )
    if method == "xsa" and not 0 <= coefficient <= 1:
        raise ValueError(
            f"`coefficient` (s of 'xsa', the share of the own-value component removed) must be in [0, 1], got "
            f"{coefficient}."
        )
    if method == "twicing" and coefficient < 0:
        raise ValueError(f"`coefficient` (twicing's weight) must be >= 0 (0 is the plain model), got {coefficient}.")
    if method == "value_embedding" and coefficient < 0:
        raise ValueError(
            f"`coefficient` (g of 'value_embedding', the tables' weight) must be >= 0 (0 is the plain model), got "
            f"{coefficient}."
        )
    if method == "twicing" and learnable is not False:
        raise ValueError(f"'twicing' takes no learnable coefficient (`learnable=False`), got {learnable!r}.")
    if not (isinstance(learnable, bool) or learnable == GATE):
        raise ValueError(f"`learnable` must be True, False or {GATE!r}, got {learnable!r}.")
    if learnable == GATE and method == "value_embedding" and not coefficient > 0:
        raise ValueError(
            f"`learnable={GATE!r}` of 'value_embedding' is g = 2 g₀ sigmoid(W x[..., :{EMBEDDING_GATE_INPUTS}]), which "
            f"starts at `coefficient` g₀ > 0; got {coefficient}."
        )
    if learnable == GATE and method != "value_embedding" and (method != "value_residual" or not 0 < coefficient < 1):
        raise ValueError(
            f"`learnable={GATE!r}` is a value-residual mix α = sigmoid(W x + b), which starts at `coefficient` "
            f"strictly inside (0, 1), or a value-embedding gate; got method {method!r} and coefficient {coefficient}."
        )
    lowest = 0 if method in FROM_LAYER_0 else 1  # twicing and XSA need no V_0, so layer 0 may take them too
    if num_layers < lowest + 1:
        raise ValueError(f"A value path needs at least {lowest + 1} self-attention layers, the model has {num_layers}.")
    if layers is None and method == "value_embedding":  # nanochat's: every other layer, ending with the last
        layers = list(range((num_layers - 1) % 2, num_layers, 2))
    if layers is None:
        layers = list(range(lowest, num_layers))
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise ValueError(f"`layers` must be a list of layer indices, got {layers!r}.")
    layers = [_as_index(i) for i in layers]
    bad = [i for i in layers if not isinstance(i, int) or not lowest <= i < num_layers]
    if bad or not layers or len(set(layers)) != len(layers):
        why = "" if lowest == 0 else " (layer 0 provides V_0)"
        raise ValueError(
            f"`layers` must list distinct self-attention layers in {lowest}..{num_layers - 1}{why}, got {layers}."
        )
    settings = {"method": method, "coefficient": float(coefficient), "learnable": learnable, "layers": sorted(layers)}
    return settings if stack is None else {**settings, "stack": stack}


def _as_real(value) -> float | None:
    """A real number of any numeric type (Python, NumPy, a one-element tensor) as a float; None for anything else
    (booleans and strings included)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
            return None
        return float(value.item())
    if isinstance(value, (bool, str, bytes)) or type(value).__name__ == "bool_" or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _as_index(value):
    """An integer of any integer type (Python, NumPy, a one-element integer tensor) as an int; else the value as it
    is, for the error message."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


def self_attention_layers(model: nn.Module, stack: str | None = None) -> list[nn.Module]:
    """The self-attention modules of `model`'s one stack of layers, or of the stack at path `stack`, in layer order
    (cross-attention left out). In a hybrid stack (Qwen3.5's and Qwen3-Next's linear-attention layers, Jamba's and
    Nemotron-H's state-space layers) the layers without one are left as they are: the value path's layers are the
    self-attention layers, counted from 0, and V_0 is the first one's values.

    Raises `ValueError` if the model's attention does not go through transformers' attention interface, if it is an
    encoder-decoder, if it has several stacks (two towers) and `stack` names none of them, or if a layer has several
    self-attention modules, runs another layer's, or holds attention outside the interface beside layers whose
    attention goes through it (MiniMax's lightning attention).
    """
    return _self_attention_stack(model, stack)[0]


def _self_attention_stack(model: nn.Module, stack: str | None = None) -> tuple[list[nn.Module], int]:
    """`self_attention_layers`, and the number of layers in their stack (with those that have no self-attention)."""
    name = type(model).__name__
    if stack is not None and not isinstance(stack, str):
        raise ValueError(f"`stack` must be the path of a list of layers (a str) or None, got {stack!r}.")
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        raise ValueError(
            f"{name} is an encoder-decoder: each stack would need its own V_0, which a value path does not do."
        )
    lists = {path for path, module in model.named_modules() if isinstance(module, nn.ModuleList)}
    attention = interface_attention_modules(model)
    stacks: dict[str, dict[int, list[str]]] = {}
    for path, module in attention:
        if _is_cross_attention(module):
            continue
        holder, layer = _layer_of(path, lists)
        if holder is None:
            raise ValueError(f"{name}: the attention module {path!r} is not in a list of layers.")
        stacks.setdefault(holder, {}).setdefault(layer, []).append(path)
    if not stacks:
        raise ValueError(
            f"{name}'s attention does not go through transformers' attention interface (no module calls "
            "`ALL_ATTENTION_FUNCTIONS.get_interface`), so a value path cannot reach it."
        )
    if stack is not None and stack not in stacks:
        raise ValueError(
            f"`stack` must name one of {name}'s stacks of self-attention layers that go through transformers' "
            f"attention interface, {sorted(stacks)}; got {stack!r}."
        )
    if stack is not None:  # the other stacks are left as they are, as asked
        stacks = {stack: stacks[stack]}
    if len(stacks) > 1:
        raise ValueError(
            f"{name} has self-attention in {len(stacks)} stacks of layers ({', '.join(sorted(stacks))}); a value "
            "path needs one stack, whose first layer provides V_0. Name the one to adapt with `stack=` (the others "
            "are left as they are), or adapt the sub-model that holds it."
        )
    # Another stack whose attention bypasses the interface (GIT's text decoder beside its vision encoder): a value
    # path would act on the one stack alone, which the caller of the whole model does not expect.
    if stack is None:
        outside = {_layer_of(path, lists)[0] for path in _attention_outside_interface(model)} - {None, *stacks}
        if outside:
            raise ValueError(
                f"{name} has self-attention in {', '.join(sorted(outside))} that does not go through transformers' "
                f"attention interface, beside {', '.join(stacks)} that does: a value path would act on the latter "
                "alone. Name that one stack with `stack=`, or adapt the sub-model that holds it."
            )
    ((stack_path, entries),) = stacks.items()
    holder = model.get_submodule(stack_path)
    crowded = sorted(i for i, paths in entries.items() if len(paths) > 1)
    # A layer without a self-attention module of its own is left as it is (a hybrid's linear-attention or state-space
    # layer), unless it reaches one by another path (an attention block shared by several layers, which would run at
    # several depths) or holds attention that was not found as such: those would not be the model's own function.
    found = {id(module) for _, module in attention}
    declared = _declared_attention_classes(model)
    hidden = [
        i
        for i in range(len(holder))
        if i not in entries
        and any(
            id(inner) in found or isinstance(inner, declared) or _forward_calls_interface(type(inner))
            for _, inner in holder[i].named_modules(remove_duplicate=False)
        )
    ]
    if crowded or hidden:
        raise ValueError(
            f"{name}: every layer of {stack_path!r} must have at most one self-attention module, its own, through "
            f"transformers' attention interface (layers with several: {crowded}; layers whose attention another layer "
            f"shares, or which does not go through the interface: {hidden})."
        )
    return [model.get_submodule(entries[i][0]) for i in sorted(entries)], len(holder)


def _layer_of(path: str, lists: set[str]) -> tuple[str | None, int | None]:
    """The innermost list of layers (among the paths `lists`) above the module at `path`, and its entry there."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:cut]) in lists and parts[cut].isdigit():
            return ".".join(parts[:cut]), int(parts[cut])
    return None, None


def _attention_outside_interface(model: nn.Module) -> list[str]:
    """The paths of the attention modules the model declares (as `interface_attention_modules` finds them) that do
    not go through the interface."""
    return [name for name, inner in _declared_attention(model) if not _goes_through_interface(inner)]


def interface_attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) of every module that calls transformers' attention interface (self and cross), in model order.

    Found by structure where the model declares its attention: the classes under "attentions" and "cross_attentions"
    in the ``_can_record_outputs`` of its `PreTrainedModel` levels (a class, an `OutputRecorder`'s target, or a list
    of them). A declared module calls the interface itself, unless it wraps the module that does (DeiT's
    `DeiTAttention` holds `DeiTSelfAttention` and the output projection): a wrapper has no ``is_causal``, the attribute
    the interface's functions read from the module they are handed, and descendants that have it, the outermost of
    which are taken instead. Either way the class's source must name ``ALL_ATTENTION_FUNCTIONS``
    (`_goes_through_interface`).

    The fallback, only for a model that declares no attention class (Bloom, for one): the modules whose forward's
    source text calls ``ALL_ATTENTION_FUNCTIONS.get_interface(``.
    """
    if not _declared_attention_classes(model):
        return _attention_modules_by_source(model)
    found = {name: inner for name, inner in _declared_attention(model) if _goes_through_interface(inner)}
    return list(found.items())


def _declared_attention(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) of each module of a class the model declares as attention, or, for a wrapper, of the modules
    inside it that would call the interface (`_interface_module`)."""
    declared = _declared_attention_classes(model)
    return [
        (name, inner)
        for path, module in model.named_modules()
        if isinstance(module, declared)
        for name, inner in _interface_module(path, module)
    ]


def _declared_attention_classes(model: nn.Module) -> tuple[type, ...]:
    """The attention classes the model's `PreTrainedModel` levels declare in ``_can_record_outputs``."""
    classes = []
    for level in model.modules():
        if not isinstance(level, PreTrainedModel):
            continue
        recorded = getattr(level, "_can_record_outputs", None) or {}
        for key in ("attentions", "cross_attentions"):
            entries = recorded.get(key, [])
            for entry in entries if isinstance(entries, (list, tuple)) else [entries]:
                target = getattr(entry, "target_class", entry)  # an OutputRecorder names its class
                if isinstance(target, type) and target not in classes:
                    classes.append(target)
    return tuple(classes)


def _interface_module(path: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """The declared `module`, unless it is a wrapper: no ``is_causal`` of its own, but descendants that carry it (then
    the outermost of those)."""
    if hasattr(module, "is_causal"):
        return [(path, module)]
    found = []
    for name, inner in module.named_modules(prefix=path):
        if hasattr(inner, "is_causal") and not any(name.startswith(outer + ".") for outer, _ in found):
            found.append((name, inner))
    return found or [(path, module)]


def _goes_through_interface(module: nn.Module) -> bool:
    """Whether the module's class, or a base class it inherits its attention from (EigenViT's from the NeuTRENO
    ViT's), reads the interface: its methods' source names ``ALL_ATTENTION_FUNCTIONS``. A file that imports it
    may still hold an attention that does not (SAM's vision attention, beside its mask decoder's). Where no source
    can be read, the file importing the interface is taken as enough."""
    reads = _reads_interface(type(module))
    return _defining_module(module, "ALL_ATTENTION_FUNCTIONS") is not None if reads is None else reads


@functools.cache  # per class: its source does not change while the process runs
def _reads_interface(kind: type) -> bool | None:
    """Whether the source of the class's methods names ``ALL_ATTENTION_FUNCTIONS``; None where none can be read."""
    sources = [source for method in _methods(kind) if (source := _source_text(method)) is not None]
    return any("ALL_ATTENTION_FUNCTIONS" in source for source in sources) if sources else None


def _defining_module(module: nn.Module, name: str):
    """The first file along the module's class hierarchy that defines `name` (None if none does)."""
    for kind in type(module).__mro__:
        found = sys.modules.get(kind.__module__)
        if hasattr(found, name):
            return found
    return None


def _attention_modules_by_source(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The fallback for a model that declares no attention class: modules whose forward's source text calls the
    attention interface."""
    return [(path, module) for path, module in model.named_modules() if _forward_calls_interface(type(module))]


@functools.cache  # per class: its source does not change while the process runs
def _forward_calls_interface(kind: type) -> bool:
    """Whether the source of the class's forward calls ``ALL_ATTENTION_FUNCTIONS.get_interface(``."""
    source = _source_text(kind.forward)
    return source is not None and "ALL_ATTENTION_FUNCTIONS.get_interface(" in source


def attention_function(module: nn.Module, implementation: str):
    """The attention function a module calls for `implementation`; "eager" is the one in the module's own file (for
    twicing's view of a module, `OneGroup`, the file of the module it views)."""
    if implementation == "eager":
        if isinstance(module, OneGroup):
            module = module.viewed
        return _defining_module(module, "eager_attention_forward").eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[implementation]


def register_value_path_attention(inner: str) -> str:
    """Register ``"value_path-<inner>"`` (attention and mask) and return the name; registering again is harmless."""
    name = ATTENTION_PREFIX + inner
    AttentionInterface.register(name, _ValuePathAttention(inner))
    if inner in ALL_MASK_ATTENTION_FUNCTIONS:  # else no mask, as for the inner implementation itself
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    return name


# --- the attention function ---------------------------------------------------------------------------------------


class _ValuePathAttention:
    """The registered function of ``"value_path-<inner>"``: the rule around the inner backend.

    Called as every attention function, with q/k/v as (batch, heads, tokens, head_dim) (V with the key/value heads
    under grouped-query attention, after the KV-cache update) and returning (batch, queries, heads, head_dim).
    """

    def __init__(self, inner: str):
        self.inner = inner

    def __call__(self, module, query, key, value, attention_mask, *args, **kwargs):
        context = kwargs.pop(CONTEXT_KWARG, None)
        attention = attention_function(module, self.inner)
        if context is not None and context.keeps_values and _backend_copies(self.inner, query, value):
            # The copy the backend would make and keep, made here: the rule keeps it too, not the view, which would
            # keep the projection's output alive (multi-head latent attention's joint key/value output, twice V).
            value = value.contiguous()

        def run(values=value, target=module, keys=key):
            """The inner backend's call, with other values (and, for twicing's second call, module and keys)."""
            return attention(target, query, keys, values, attention_mask, *args, **kwargs)

        layer = getattr(module, LAYER_ATTRIBUTE, None)
        if layer is None:  # cross-attention of an adapted model
            return run()
        _check_context(context, module, layer)
        if getattr(module, "is_causal", False):
            _check_queries(context, module, layer, query.shape[2])
        if context.method == "twicing":
            if layer not in context.layers:
                return run()
            return twicing(run, context, module, layer, query, key, value, kwargs.get("dropout", 0.0))
        if context.method == "xsa":
            if layer not in context.layers:
                return run()
            return exclusive(run, context, value, _layer_coefficient(context, layer, value))
        if context.method == "value_embedding":
            if layer not in context.layers:
                return run()
            table = getattr(module, EMBEDDING_ATTRIBUTE)  # looked up at each call: PEFT may have wrapped it
            strength = _layer_coefficient(context, layer, value)
            return value_embedding(run, context, table, layer, value, strength, _in_cache(context, module, value))
        if context.method == "neutreno":
            own = query_rows(value, context.past, query.shape[2])  # token-wise: the queries' own rows of V_0 and V
            if layer == 0:
                context.first_values = own
            if layer not in context.layers:
                return run()
            first, coefficient = _first_values(context, layer, own), _layer_coefficient(context, layer, value)
            return attention_with_neutreno_term(run, first, own, coefficient, recompute_saved=context.recompute_saved)
        if layer == 0:
            context.first_values = value
            return run()
        if layer not in context.layers:
            return run()
        first = _first_values(context, layer, value)
        coefficient = _layer_coefficient(context, layer, value)
        if layer in context.gates:  # α per token and key/value head, for this call's tokens
            coefficient = context.gates[layer].transpose(1, 2).unsqueeze(-1).to(value.dtype)  # (batch, kv, q, 1)
            if coefficient.shape[1] != value.shape[1]:
                raise ValueError(
                    f"Layer {layer}'s gate gives α for {coefficient.shape[1]} key/value heads (the config's), but its "
                    f"attention gets values of {value.shape[1]} heads (JetMoe repeats them per expert): use a fixed "
                    "or learnable α."
                )
        in_cache = _in_cache(context, module, value)
        return value_residual(run, context, layer, query, value, first, coefficient, in_cache)


def _backend_copies(inner: str, query: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether the backend's ``matmul(weights, V)`` copies V (batch, heads, tokens, d) into a contiguous tensor, which
    it keeps for its backward pass: eager attention, or SDPA on a CPU with values of another head size than the
    queries' (multi-head latent attention), which only its math path takes; with gradients, where V is used as it is
    (no grouped-query attention, whose `repeat_kv` copies it into another shape) and its batch and head dimensions
    cannot be viewed as one (the transposed view of a projection's (batch, tokens, heads · d) output, at batch > 1).
    SDPA's fused kernels keep V's view itself."""
    if inner == "sdpa":
        if value.device.type != "cpu" or query.shape[-1] == value.shape[-1]:
            return False
    elif inner != "eager":
        return False
    batch, heads = value.shape[:2]
    return (
        value.requires_grad
        and query.shape[1] == heads
        and batch > 1
        and heads > 1
        and value.stride(0) != heads * value.stride(1)
    )


def _in_cache(context, module, value: torch.Tensor) -> bool:
    """Whether this call mixes its rows into the KV cache's own tensor, in place (generation at O(d) per new token and
    layer): without gradients, with a cache that returns what it stores, and only where `value` lies over the tensor
    that cache holds for this layer, ending at the same row: the same tensor, or, under a sliding window, the rows it
    keeps of `value` (or `value`, the last rows of what it keeps while it records its past for assisted decoding). A
    model that copies its values after the cache update (JetMoe repeats them per expert) hands over a copy, and an
    offloading cache moves what it stores to the CPU after the update: a mix made in the tensor at hand would be lost
    before the next token, so those get the whole mix at every token."""
    if not context.mix_in_cache or torch.is_grad_enabled():
        return False
    stored = stored_values(context, module)
    return (
        stored is not None
        and value.dtype == stored.dtype
        and value.stride() == stored.stride()
        and value.shape[:2] + value.shape[3:] == stored.shape[:2] + stored.shape[3:]
        and _last_row(value) == _last_row(stored)
    )


def _last_row(values: torch.Tensor) -> int:
    """The address of the last row (along the tokens) of (batch, heads, rows, d) `values`."""
    return values.data_ptr() + (values.shape[2] - 1) * values.stride(2) * values.element_size()


def _layer_coefficient(context, layer: int, value: torch.Tensor):
    """The coefficient of `layer` in this forward pass: the fixed one, or (learnable) the layer's own scalar."""
    coefficient = context.coefficient
    if isinstance(coefficient, tuple):
        coefficient = coefficient[context.layers[layer]].to(value.dtype)
    return coefficient


def _check_context(context, module, layer: int) -> None:
    """An adapted layer runs inside its model's forward, once, with gradients as that forward had them."""
    if context is None:
        raise RuntimeError(
            f"{type(module).__name__} (value-path layer {layer}) was called without `{CONTEXT_KWARG}`: the "
            "model did not hand its keyword arguments down to its attention, or the layer was called outside "
            "the adapted model's forward."
        )
    if layer in context.called and not context.finished:
        raise ValueError(
            f"{type(module).__name__} (value-path layer {layer}) called the attention interface twice in one forward "
            "pass (differential attention, once per image or chunk, or one layer run at several depths, as ALBERT's "
            "shared layers). A value path is defined for one attention call per layer (V_0 is layer 0's values, each "
            "layer's rule acts on its one output), so this model cannot take one."
        )
    context.called.add(layer)
    if context.grad_enabled and not torch.is_grad_enabled():
        raise RuntimeError(
            "Gradient checkpointing with use_reentrant=True runs each layer without gradients first, so V_0 "
            "(NeuTRENO, the value residual) would lose the gradient later layers send it; value paths run with "
            "use_reentrant=False only (the one their tests check). Enable it so, transformers' default: "
            "`model.activation_checkpointing_enable()` (Trainer: leave `activation_checkpointing_kwargs` unset)."
        )


def _check_queries(context, module, layer: int, queries: int) -> None:
    """A causal layer runs on every token of the call: the methods find the rows of this call's tokens as the last of
    what the KV cache hands over. A model that runs a later layer on its last tokens alone (as Gemma 4 runs its
    KV-shared layers in generation) would have them find other tokens' rows: an error, not another answer."""
    if context.queries is None:
        context.queries = queries
    elif queries != context.queries:
        raise RuntimeError(
            f"{type(module).__name__} (value-path layer {layer}) runs on {queries} of this call's {context.queries} "
            "tokens (the model skips the others in this layer): a value path finds each token's rows among the "
            "values by the call's tokens, so it cannot run on such a model."
        )


def _first_values(context, layer: int, value: torch.Tensor) -> torch.Tensor:
    """V_0 of this forward pass, which layer `layer`'s values must line up with."""
    first = context.first_values
    if first is None:
        raise RuntimeError(f"Value-path layer {layer} ran before layer 0 in this forward pass.")
    if first.shape[:2] + first.shape[3:] != value.shape[:2] + value.shape[3:]:  # the rows may differ: a window's
        raise ValueError(
            f"Layer {layer}'s values have shape {tuple(value.shape)} but layer 0's {tuple(first.shape)}: a value "
            "path needs the same key/value heads and head size in every layer."
        )
    return first


def _begin_forward(model, settings, attention_modules, checkpointing, layer_drop, backend, module, args, kwargs):
    """Forward pre-hook of every PreTrainedModel level that holds the adapted stack: the outermost call gets a fresh
    context for its layers."""
    if CONTEXT_KWARG in kwargs:  # an outer level of the same call made it
        return None
    if getattr(model.config, "value_path", None) != settings:
        raise ValueError(
            f"config.value_path changed from {settings} to {getattr(model.config, 'value_path', None)} after the "
            "model was adapted; call remove_value_path(model) and apply_value_path again to change it."
        )
    _refuse_built_in_term(model)
    if model.training and torch.is_grad_enabled() and FROZEN_CHECKED not in model.__dict__:
        _warn_if_frozen(model, attention_modules)
    implementation = backend._attn_implementation  # the adapted stack's config (`_implementation_config`)
    if not implementation.startswith(ATTENTION_PREFIX):
        raise ValueError(
            f"The attention implementation was set to {implementation!r} after the model was adapted, which would "
            "run it without its value path. To change the backend: remove_value_path(model), "
            "model.set_attn_implementation(...), then apply_value_path again."
        )
    if layer_drop and model.training:
        _refuse_layer_drop(layer_drop)
    cache = kwargs.get("cache")
    if cache is None:
        cache = kwargs.get("past_key_values")
    for arg in args if cache is None else ():  # a loop, not a generator: torch.compile may meet this frame alone
        if isinstance(arg, Cache):
            cache = arg
            break
    token_ids = None
    if settings["method"] == "value_embedding":
        token_ids = kwargs.get("input_ids")
        if token_ids is None and args and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point():
            token_ids = args[0]
        if token_ids is None:
            raise ValueError(
                "A model with value embeddings looks its tables up by token id: call it with `input_ids` "
                "(inputs_embeds alone carry no token ids)."
            )
    kwargs[CONTEXT_KWARG] = _ForwardContext(
        method=settings["method"],
        token_ids=token_ids,
        coefficient=_forward_coefficients(settings, attention_modules),
        layers={layer: position for position, layer in enumerate(settings["layers"])},
        past=int(cache.get_seq_length()) if cache is not None else 0,
        mix_in_cache=_returns_its_storage(cache),
        cache=cache,
        grad_enabled=torch.is_grad_enabled(),
        recompute_saved=_recompute_saved(checkpointing),
        # twicing keeps A V of the earlier tokens with the KV cache that holds their keys and values
        cache_given=cache is not None,
        keeps_values=settings["method"] == "xsa"
        or (settings["learnable"] is not False and settings["method"] in ("neutreno", "value_residual")),
        **(_kept_beside(cache) if cache is not None else {}),
    )
    return args, kwargs


LAYER_DROP_FIELDS = ("layerdrop", "layer_drop", "encoder_layerdrop", "decoder_layerdrop")


def _layer_drop_fields(model, settings) -> tuple[tuple, ...]:
    """(config, field) of each LayerDrop field that `_refuse_layer_drop` reads at each training forward, on the model's
    config and, where it is another object, the adapted stack's: none for the methods that need no V_0, or where the
    configs have none (most models: no per-forward cost)."""
    if settings["method"] in FROM_LAYER_0:
        return ()
    own = _stack_config(model, settings.get("stack"))
    levels = (model.config,) if own is model.config else (model.config, own)
    return tuple((level, name) for level in levels for name in LAYER_DROP_FIELDS if hasattr(level, name))


def _refuse_layer_drop(fields: tuple[tuple, ...]) -> None:
    """LayerDrop (wav2vec 2.0's `config.layerdrop`, 0.1 by default) skips layers at random in training, layer 0 among
    them, and then the later layers have no V_0: a training run would fail at a random step. Refused at the first
    training forward instead, naming the field (any of `fields` above 0). Skipping a later layer is harmless (it adds
    nothing, as natively), so the methods that need no V_0 train with it."""
    dropping = {
        name: value
        for level, name in fields
        if isinstance(value := getattr(level, name, None), numbers.Real) and value > 0
    }
    if dropping:
        fields = ", ".join(f"config.{name} = {value}" for name, value in dropping.items())
        raise ValueError(
            f"LayerDrop is on ({fields}): in training it skips layers at random, layer 0 among them, and the value "
            "path's later layers then have no V_0. Set it to 0 to train with this value path (inference is not "
            "affected)."
        )


FROZEN_CHECKED = "_value_path_frozen_checked"  # in the model's __dict__ once its first training forward has run


def _warn_if_frozen(model, attention_modules: list[nn.Module]) -> None:
    """Once per model, at its first training forward with gradients: a warning naming the value path's own modules
    (learnable coefficients, gates, value-embedding tables) none of whose parameters train. PEFT freezes every module
    outside its adapters and `modules_to_save`, so without ``modules_to_save=PEFT_MODULES`` a learnable coefficient
    stays at its start (a learnable XSA strength or value-embedding weight at 0: the model as loaded) and the tables
    at their random start, which the adapter file then leaves out. A wrapped module (PEFT's `modules_to_save`) trains
    through its copy, which counts."""
    model.__dict__[FROZEN_CHECKED] = True
    frozen = sorted(
        {
            name
            for module in attention_modules
            for name in PEFT_MODULES
            if isinstance(getattr(module, name, None), nn.Module)
            and not any([parameter.requires_grad for parameter in getattr(module, name).parameters()])  # no generator
        }
    )
    if frozen:
        logger.warning(
            f"The value path's {', '.join(frozen)} do not train (requires_grad=False) in this training forward pass: "
            "they stay at their start. With PEFT, list them in modules_to_save (hf_neutreno.value_path.PEFT_MODULES) "
            "so that they train and are saved with the adapter; if they are frozen on purpose, ignore this."
        )


# What a value path keeps beside a KV cache, between the calls that step it (`_ForwardContext`'s fields of that name).
_KEPT_FIELDS = ("mixed_rows", "gate_rows", "first_rows", "twicing_history", "twicing_offset", "token_rows")
_KEPT_ATTRIBUTE = "_value_path_kept"  # on the cache
# A cache's batch operations (beam search reorders the rows at every step; other decoding strategies select or repeat
# them), applied to the batch-first tensors kept beside it too: method -> (tensor, its argument) -> the tensor.
_BATCH_OPERATIONS = {
    "reorder_cache": lambda tensor, beam_idx: tensor.index_select(0, beam_idx.to(tensor.device)),
    "batch_select_indices": lambda tensor, indices: tensor[indices],
    "batch_repeat_interleave": lambda tensor, repeats: tensor.repeat_interleave(repeats, dim=0),
}


def _kept_beside(cache: Cache, made: "_ForwardContext | None" = None) -> dict:
    """What the value path keeps beside `cache`: per field of `_KEPT_FIELDS`, a dict per layer. Made on first use
    (from the forward pass that made the cache, `made`, if any), and carried through the cache's batch operations:
    without them, beam search would pair twicing's A V of the earlier tokens with another beam's."""
    kept = cache.__dict__.get(_KEPT_ATTRIBUTE)
    if kept is None:
        kept = {field: getattr(made, field) if made is not None else {} for field in _KEPT_FIELDS}
        cache.__dict__[_KEPT_ATTRIBUTE] = kept
        for name in _BATCH_OPERATIONS:
            if hasattr(cache, name):  # on this instance only
                setattr(cache, name, _Rearranging(cache, name))
    return kept


class _Rearranging:
    """A cache's batch operation `name`, then the same on the tensors kept beside the cache. It holds the cache
    weakly: a strong reference from the cache's own attribute would be a cycle, which keeps the cache (and the values
    it holds) alive after a training step until the garbage collector runs. A copy of the cache (`copy.deepcopy`)
    gets one of its own."""

    def __init__(self, cache: Cache, name: str):
        self.cache, self.name = weakref.ref(cache), name

    def __call__(self, argument):
        cache = self.cache()
        result = getattr(type(cache), self.name)(cache, argument)
        rearrange = _BATCH_OPERATIONS[self.name]
        for per_layer in cache.__dict__[_KEPT_ATTRIBUTE].values():
            for layer, value in per_layer.items():
                if isinstance(value, torch.Tensor):
                    per_layer[layer] = rearrange(value, argument)
        return result

    def __deepcopy__(self, memo):
        cache = self.cache()
        return _Rearranging(memo.get(id(cache), cache), self.name)  # the cache's copy, made before its attributes


def _end_forward(module, args, kwargs, output):
    """Forward hook of every PreTrainedModel level that holds the adapted stack: the forward pass's layers have run (a
    later call of one with this context is activation checkpointing's recomputation), and a cache that the model made
    itself in this call (none was handed in) takes what the value path keeps beside it, so that a later call with that
    cache continues from it."""
    context = kwargs.get(CONTEXT_KWARG)
    if context is None:
        return None
    context.finished = True
    if context.cache_given:
        return None
    # Found by type, not by field name: transformers 5.24 renamed the field `past_key_values` -> `cache`, and reading
    # the old name warns there.
    items = output.values() if isinstance(output, dict) else output if isinstance(output, tuple) else ()
    cache = next((item for item in items if isinstance(item, Cache)), None)
    if cache is not None:
        _kept_beside(cache, context)
    return None


@dataclasses.dataclass
class _ForwardContext:
    """What one forward pass of an adapted model hands to each of its attention layers (as `CONTEXT_KWARG`)."""

    method: str  # one of METHODS
    coefficient: float | tuple  # the fixed one, or one tensor per adapted layer (`_forward_coefficients`)
    layers: dict  # adapted layer -> its position among the coefficients
    past: int  # tokens in the KV cache before this call's
    mix_in_cache: bool  # the cache returns its own storage: generation may mix the new values there (`_in_cache`)
    grad_enabled: bool  # at the call (gradient checkpointing's recompute must match it)
    recompute_saved: bool  # may swap the backend's saved tensors for a recipe (`_recompute_saved`)
    cache_given: bool  # a KV cache came with the call (else the model may make one: `_end_forward`)
    keeps_values: bool  # the rule keeps V_ℓ or V_0 for its backward pass (a learnable or gated coefficient, XSA)
    cache: Cache | None = None  # the KV cache that came with the call
    token_ids: torch.Tensor | None = None  # value embeddings: this call's tokens, (batch, tokens)
    called: set = dataclasses.field(default_factory=set)  # the layers that have run (`_check_context`)
    queries: int | None = None  # the first causal layer's queries: this call's tokens (`_check_queries`)
    finished: bool = False  # the forward pass has returned (`_end_forward`)
    first_values: torch.Tensor | None = None  # V_0, left by layer 0 for the later layers
    # learnable="gate": layer -> α (value residual) or σ(W x[..., :12]) (value embeddings), (batch, tokens, kv heads)
    gates: dict = dataclasses.field(default_factory=dict)
    # Kept beside the KV cache (`_kept_beside`), per layer: how many tokens' rows of the cache's own tensor hold the
    # value residual's mix or the value embeddings; a gate's values of the tokens after those, their V_0 and their
    # token ids; twicing's A V of the cached tokens.
    mixed_rows: dict = dataclasses.field(default_factory=dict)
    gate_rows: dict = dataclasses.field(default_factory=dict)
    first_rows: dict = dataclasses.field(default_factory=dict)
    token_rows: dict = dataclasses.field(default_factory=dict)
    twicing_history: dict = dataclasses.field(default_factory=dict)
    twicing_offset: dict = dataclasses.field(default_factory=dict)  # the token of each layer's first row of A V


# KV-cache layers whose `update` returns the tensors they store (so values mixed in place stay mixed for the next
# tokens); other caches (quantised ones hand back a dequantised copy) get the whole mix at every token instead.
_STORING_CACHE_LAYERS = (
    *("DynamicLayer", "StaticLayer", "DynamicSlidingWindowLayer", "StaticSlidingWindowLayer"),
    # a hybrid layer's (Falcon-H1's, Zamba's): a state beside the values of one of the above, whose `update` it inherits
    *("LinearAttentionAndFullAttentionLayer", "LinearAttentionAndSlidingWindowAttentionLayer"),
    *("LinearAttentionAndStaticFullAttentionLayer", "LinearAttentionAndStaticSlidingWindowAttentionLayer"),
)
# A hybrid's linear-attention or state-space layers keep a state and no values, and its MLP-only layers (Nemotron-H's)
# nothing: no method reads or mixes them
_STATE_CACHE_LAYERS = ("LinearAttentionLayer", "DummyLayer")


def _returns_its_storage(cache) -> bool:
    """The same answer at every step of a generation: a cache that makes its layers on first use (a `DynamicCache`
    built without a config) is judged by the layer class it will make."""
    layers = getattr(cache, "layers", None)
    if layers:
        return all(type(layer).__name__ in _STORING_CACHE_LAYERS + _STATE_CACHE_LAYERS for layer in layers)
    future = getattr(cache, "layer_class_to_replicate", None)
    return future is not None and future.__name__ in _STORING_CACHE_LAYERS


def _forward_coefficients(settings, attention_modules):
    """The coefficient of this forward pass: the fixed one, or the learnable ones as one scalar per layer. They are the
    forward pass's own copy (the backward pass's recompute reads it; an optimizer step does not change it), stacked
    from the layers' `LayerCoefficient`s (looked up at each call: PEFT may have wrapped them) and unbound: one kernel
    each way per pass, not per layer. Each is clamped to the range a fixed one may take (λ ≥ 0; α in [0, 1], where the
    mix is defined), with the gradient passed straight through the clamp: a coefficient at 0 (where a pretrained
    model's starts) that a step pushes below 0 still learns, instead of staying there with no gradient."""
    if settings["learnable"] is not True:  # fixed, or a gate (whose α the layers' hooks compute)
        return settings["coefficient"]
    values = torch.stack([getattr(module, COEFFICIENT_ATTRIBUTE)() for module in attention_modules])
    upper = 1.0 if settings["method"] in UNIT_RANGE else None  # λ ≥ 0, α and s in [0, 1]: a fixed one's range
    return (values + (values.clamp(0.0, upper) - values).detach()).unbind()


def _recompute_saved(checkpointing: list[nn.Module]) -> bool:
    """Whether the layers may swap a tensor the backend saves for a recipe (`neutreno_term.rebuild_saved`): where
    `may_recompute_saved` allows it (a backward pass, not under torch.compile or torch.func), and not under activation
    checkpointing (whose own hooks must see every saved tensor, or it keeps them). `checkpointing`: the modules that can
    checkpoint (those with the `gradient_checkpointing` attribute that `gradient_checkpointing_enable` sets), found when
    the model was adapted rather than by walking every module at every forward pass."""
    return may_recompute_saved() and not any(module.gradient_checkpointing for module in checkpointing)


# --- adapting a model -----------------------------------------------------------------------------------------------


def _adapt(model: PreTrainedModel) -> None:
    """Adapt `model` to its ``config.value_path``: number the layers, add the hooks and the learnable coefficients,
    switch the attention implementation."""
    stored = getattr(model.config, "value_path", None)
    if not isinstance(stored, dict):
        raise ValueError(f"{type(model).__name__} needs `config.value_path` (a dict), got {stored!r}.")
    unknown = set(stored) - {"method", "coefficient", "learnable", "layers", "stack"}
    if unknown:
        raise ValueError(f"config.value_path has unknown keys {sorted(unknown)}.")
    stack = _rooted_stack(model, stored.get("stack"))
    layers, inner = _check_adaptable(model, stack)
    settings = check_settings(
        stored.get("method"),
        stored.get("coefficient"),
        stored.get("learnable", False),
        stored.get("layers"),
        len(layers),
        stack,
    )
    _check_method_fits(model, settings, layers)
    model.config.value_path = settings
    for index, module in enumerate(layers):
        setattr(module, LAYER_ATTRIBUTE, index)
    reference = next((p for p in model.parameters() if p.is_floating_point()), None)
    model.register_buffer(
        MARKER, torch.empty(0, dtype=torch.bool, device=reference.device if reference is not None else None)
    )
    if settings["learnable"] is True:
        # On the attention module of its layer, as the gates, so that PEFT's `modules_to_save` can name it.
        reference = next((p for p in model.parameters() if p.is_floating_point()), None)
        for layer in settings["layers"]:
            coefficient = LayerCoefficient(
                settings["coefficient"],
                dtype=reference.dtype if reference is not None else None,
                device=reference.device if reference is not None else None,
            )
            setattr(layers[layer], COEFFICIENT_ATTRIBUTE, coefficient)
    config = _stack_config(model, settings.get("stack"))
    if settings["learnable"] == GATE or settings["method"] == "value_embedding":
        kv_heads, head_dim = _value_heads(config)
    if settings["learnable"] == GATE:
        # On the attention module it gates, so that PEFT's `modules_to_save=["value_path_gate"]` trains and saves it.
        # The value residual's reads the layer's whole input; the value embeddings' (nanochat's) its first channels.
        reference = next((p for p in model.parameters() if p.is_floating_point()), None)
        embedding = settings["method"] == "value_embedding"
        inputs = min(config.hidden_size, EMBEDDING_GATE_INPUTS) if embedding else config.hidden_size
        for layer in settings["layers"]:
            gate = nn.Linear(inputs, kv_heads, bias=not embedding, dtype=reference.dtype, device=reference.device)
            _initialise_gate(gate, settings["coefficient"])
            setattr(layers[layer], GATE_ATTRIBUTE, gate)
    if settings["method"] == "value_embedding":  # a table per adapted layer, on its attention module (PEFT)
        reference = next((p for p in model.parameters() if p.is_floating_point()), None)
        vocabulary = model.get_input_embeddings().num_embeddings
        for layer in settings["layers"]:
            table = nn.Embedding(vocabulary, kv_heads * head_dim, dtype=reference.dtype, device=reference.device)
            _initialise_table(table, config.hidden_size)
            setattr(layers[layer], EMBEDDING_ATTRIBUTE, table)
    hook_settings = copy.deepcopy(settings)  # the hook's own copy: a change to the config is detected, not followed
    adapted = [layers[layer] for layer in settings["layers"]]
    # The levels a call of the adapted stack goes through (not a vision-language model's vision tower beside it)
    levels = [
        level
        for level in model.modules()
        if isinstance(level, PreTrainedModel) and any(module is layers[0] for module in level.modules())
    ]
    model._value_path_hooks = [
        level.register_forward_pre_hook(_Hook(model, hook_settings, adapted), with_kwargs=True) for level in levels
    ] + [level.register_forward_hook(_end_forward, with_kwargs=True) for level in levels]
    # `load_state_dict` of a state dict in the earlier layout (Trainer resuming an earlier checkpoint)
    model._value_path_hooks.append(model.register_load_state_dict_pre_hook(_convert_old_state_dict))
    if settings["learnable"] == GATE:  # each gated layer reads its attention input x
        model._value_path_hooks += [
            layers[layer].register_forward_pre_hook(_gate_hook, with_kwargs=True) for layer in settings["layers"]
        ]
    _set_implementation(model, settings.get("stack"), register_value_path_attention(inner))


def _read_checkpoint_tensor(key: str, state_dict: dict | None, checkpoint_files: list | None) -> torch.Tensor:
    """One tensor of a checkpoint that `from_pretrained` read (a state dict, or safetensors or .bin files)."""
    if state_dict is not None and key in state_dict:
        return state_dict[key]
    for file in checkpoint_files or ():
        if str(file).endswith(".safetensors"):
            # transformers' own safetensors reader (this file imports only torch and transformers)
            with transformers.modeling_utils.safe_open(str(file), framework="pt") as opened:
                if key in opened.keys():
                    return opened.get_tensor(key)
        else:
            tensors = transformers.modeling_utils.load_state_dict(file)
            if key in tensors:
                return tensors[key]
    raise KeyError(f"{key!r} is not in the checkpoint.")


def _initialise_gate(gate: nn.Linear, coefficient: float) -> None:
    """W = 0 and b = logit(α) (the value residual's): every token starts with α, the fixed-coefficient model; W = 0
    and no b (value embeddings'): every token starts with 2 g₀ σ(0) = g₀."""
    init.zeros_(gate.weight)
    if gate.bias is not None:
        init.constant_(gate.bias, math.log(coefficient / (1 - coefficient)))


def _initialise_table(table: nn.Embedding, hidden_size: int) -> None:
    """nanochat's value embeddings: uniform in ±√3 / √hidden, as its value projection."""
    bound = math.sqrt(3.0 / hidden_size)
    init.uniform_(table.weight, -bound, bound)


def _value_heads(config) -> tuple[int, int]:
    """(key/value heads, value head size) of a text config: multi-head latent attention (DeepSeek V2/V3) has values
    of their own size, `v_head_dim`, unlike its queries and keys (`head_dim`). `ValueError` where there is no one
    number of heads (a gate and value embeddings are sized by it)."""
    heads = _one_value(config, "num_attention_heads")
    if not isinstance(heads, int):  # Hiera (SAM 2's vision encoder): heads per stage
        raise ValueError(
            f"{type(config).__name__} has no single `num_attention_heads` (got {heads!r}), which a gate and value "
            "embeddings size their key/value heads by; use a fixed or learnable coefficient, or another method."
        )
    head_dim = _one_value(config, "v_head_dim") or _one_value(config, "head_dim") or config.hidden_size // heads
    return _one_value(config, "num_key_value_heads") or heads, head_dim


def _one_value(config, name: str):
    """`config.<name>` (None if absent), or `ValueError` where transformers' heterogeneous configs set it per layer."""
    try:
        return getattr(config, name, None)
    except RuntimeError as error:  # reading a per-layer attribute of a heterogeneous config globally
        raise ValueError(
            f"{type(config).__name__} sets `{name}` per layer, so its layers have no one size that a gate and value "
            "embeddings could be made for; use a fixed or learnable coefficient, or another method."
        ) from error


def _check_method_fits(model: PreTrainedModel, settings: dict, layers: list[nn.Module]) -> None:
    """`ValueError` for a method the model cannot take: a gate and value embeddings need one number of key/value
    heads, and value embeddings a causal language model (a table indexed by the token ids of its input embeddings,
    and attention that sees no later token)."""
    if settings["learnable"] == GATE or settings["method"] == "value_embedding":
        _value_heads(_stack_config(model, settings.get("stack")))
    if settings["method"] != "value_embedding":
        return
    name = type(model).__name__
    if not all(getattr(layers[layer], "is_causal", False) for layer in settings["layers"]):
        raise ValueError(
            f"{name}'s self-attention is not causal: value embeddings (method 'value_embedding') are for decoder-only "
            "language models (GPT-2, Llama, Qwen2, ...). Use 'value_residual', 'neutreno', 'twicing' or 'xsa' here."
        )
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embeddings = None
    if not isinstance(embeddings, nn.Embedding):
        raise ValueError(
            f"{name} has no token-embedding table (get_input_embeddings() is {type(embeddings).__name__}), which "
            "value embeddings (method 'value_embedding') index by token id like the model's own."
        )


def _gate_hook(module, args, kwargs):
    """Forward pre-hook of a gated layer's attention module: its input x gives the layer's α = sigmoid(W x + b) per
    token and key/value head (the value residual's; value embeddings': sigmoid(W x[..., :12])), left in the call's
    context for the attention function."""
    context = kwargs.get(CONTEXT_KWARG)
    if context is not None:
        hidden_states = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        if context.method == "value_embedding":
            hidden_states = hidden_states[..., :EMBEDDING_GATE_INPUTS]
        gate = getattr(module, GATE_ATTRIBUTE)  # looked up at each call: PEFT may have wrapped it
        if hidden_states.shape[-1] != gate.weight.shape[1]:  # MobileBERT's attention reads its bottleneck's width
            raise ValueError(
                f"{type(module).__name__} (value-path layer {getattr(module, LAYER_ATTRIBUTE)}) is called with inputs "
                f"of width {hidden_states.shape[-1]}, but its gate was made for config.hidden_size = "
                f"{gate.weight.shape[1]}: this model cannot take a gate; use a fixed or learnable coefficient."
            )
        # `weight`, which PEFT's wrappers also give, not `parameters()`: a walk over modules on every forward
        context.gates[getattr(module, LAYER_ATTRIBUTE)] = torch.sigmoid(gate(hidden_states.to(gate.weight.dtype)))
    return None


class _Hook:
    """`_begin_forward` bound to its model (a class rather than a closure, so that the model can be pickled)."""

    def __init__(self, model, settings, attention_modules):
        self.model, self.settings, self.attention_modules = model, settings, attention_modules
        self.checkpointing = [level for level in model.modules() if hasattr(level, "gradient_checkpointing")]
        self.layer_drop = _layer_drop_fields(model, settings)
        self.backend = _implementation_config(model, settings.get("stack"))

    def __call__(self, module, args, kwargs):
        return _begin_forward(
            self.model,
            self.settings,
            self.attention_modules,
            self.checkpointing,
            self.layer_drop,
            self.backend,
            module,
            args,
            kwargs,
        )


def _convert_old_state_dict(module, state_dict, prefix, *args):
    """`load_state_dict` pre-hook of the adapted model: the earlier layout's vector of learnable coefficients
    (``value_path_coefficients`` on the outermost model) becomes one entry per layer's `LayerCoefficient`."""
    if state_dict.pop(prefix + OLD_MARKER, None) is not None:
        state_dict[prefix + MARKER] = getattr(module, MARKER)
    old = state_dict.pop(prefix + OLD_COEFFICIENTS, None)
    if old is not None:
        state_dict.update({prefix + key: value for key, value in _split_old_coefficients(module, old).items()})
    check_coefficients(state_dict)


def _split_old_coefficients(model, old: torch.Tensor) -> dict[str, torch.Tensor]:
    """The earlier layout's coefficient vector (entry i: the i-th smallest adapted layer) as the state-dict entries of
    the layers' `LayerCoefficient`s; nothing for a model without them (a gated one kept an unused vector)."""
    names = {
        getattr(module, LAYER_ATTRIBUTE): f"{path}.{COEFFICIENT_ATTRIBUTE}.value"
        for path, module in model.named_modules()
        if COEFFICIENT_ATTRIBUTE in module._modules
    }
    if not names:
        return {}
    if old.shape != (len(names),):
        raise ValueError(
            f"The checkpoint's `{OLD_COEFFICIENTS}` has shape {tuple(old.shape)}, but the model has {len(names)} "
            "learnable coefficients (one per adapted layer)."
        )
    return {names[layer]: value.clone() for layer, value in zip(sorted(names), old)}


def _check_adaptable(model: PreTrainedModel, stack: str | None = None) -> tuple[list[nn.Module], str]:
    """The self-attention layers (of `stack`, if named) and the backend to wrap, or `ValueError` for what a value path
    cannot do exactly."""
    layers, stacked = _self_attention_stack(model, stack)
    config = _stack_config(model, stack)
    depth = getattr(config, "num_hidden_layers", None)
    if isinstance(depth, int) and depth > stacked:
        raise ValueError(
            f"{type(model).__name__} runs its {stacked} layer(s) at {depth} depths "
            "(config.num_hidden_layers; shared layers, as ALBERT's): a value path is defined for one attention call "
            "per layer (V_0 is layer 0's values, each layer's rule acts on its one output), so this model cannot "
            f"take one. If layers were removed from it, set config.num_hidden_layers to the {stacked} left."
        )
    sharing = getattr(config, "kv_sharing_modes", None) or ()  # read as transformers' caches read it
    if "reuse" in sharing:
        raise ValueError(
            f"{type(model).__name__}'s layers {[i for i, mode in enumerate(sharing) if mode == 'reuse']} reuse an "
            "earlier layer's keys and values (config.num_kv_shared_layers: Gemma 3n's and Gemma 4's KV sharing), and "
            "Gemma 4 runs them on the last tokens alone in generation: a value path would mix a value tensor that "
            "another layer attends over too, and would lack the rows of the tokens that such a layer skips. Models "
            "without shared layers (num_kv_shared_layers=0) take every method."
        )
    _refuse_dropped_keywords(model, layers)
    # An attention of its own that bypasses the interface (the NeuTRENO ViT's kernel attention) would run unchanged.
    own = sorted({type(module).__name__ for module in layers if getattr(module, "attention_function", None)})
    if own:
        raise ValueError(
            f"{', '.join(own)} computes its own attention (attention_kernel='linear'), not through transformers' "
            "attention interface, so a value path would not act on it; use softmax attention (attention_kernel="
            "'softmax')."
        )
    inner = _inner_implementation(model, stack)
    branching = sorted({type(module).__name__ for module in layers if inner in _branch_names(type(module))})
    if branching:
        raise ValueError(
            f"{', '.join(branching)} takes another path where config._attn_implementation is not {inner!r} (the "
            "sparse attention of DeepSeek V3.2, GLM-5 and Mistral Large 4 builds its indexer's mask only for 'eager' "
            f"and 'sdpa'), and a value path runs the backend under its own name, {ATTENTION_PREFIX + inner!r}: the "
            "model would silently attend to other keys, so it cannot take one."
        )
    upcast = sorted({type(module).__name__ for module in layers if getattr(module, "reorder_and_upcast_attn", 0)})
    if inner == "eager" and upcast:
        raise ValueError(
            f"{', '.join(upcast)} with config.reorder_and_upcast_attn=True computes its attention in float32 with its "
            "own code where the implementation is 'eager', outside the attention interface; under a value path's own "
            "name it would run plain eager attention, without the upcast. Adapt it with sdpa "
            "(`model.set_attn_implementation('sdpa')`), or set config.reorder_and_upcast_attn=False."
        )
    return layers, inner


# `config._attn_implementation in ("eager", "sdpa")`, or `not in`, with a tuple, list or set of names
_NAME_BRANCH = re.compile(r"_attn_implementation\s+(?:not\s+)?in\s*[(\[{]([^)\]}]*)[)\]}]")


@functools.cache  # per class: its source does not change while the process runs
def _branch_names(kind: type) -> frozenset[str]:
    """The attention implementations whose names the class's methods test `config._attn_implementation` against:
    under a value path's own name the model would take the other branch."""
    sources = (_source_text(method) or "" for method in _methods(kind))
    groups = (group for source in sources for group in _NAME_BRANCH.findall(source))
    return frozenset(name for group in groups for name in re.findall(r"[\"']([^\"']+)[\"']", group))


def _rooted_stack(model: PreTrainedModel, stack: str | None) -> str | None:
    """A stored `stack` as a path in `model`: a checkpoint saved by a task model names it from the task model's root,
    and loaded as its base model (`AutoModel`) the path loses the base model's prefix (``model.layers`` -> ``layers``);
    saved by the base model and loaded with a head, it gains it. A path found in neither is refused by name."""
    prefix = getattr(model, "base_model_prefix", "")
    if stack is None or not prefix or _holds(model, stack):
        return stack
    if stack.startswith(prefix + ".") and _holds(model, stack.removeprefix(prefix + ".")):
        return stack.removeprefix(prefix + ".")
    return f"{prefix}.{stack}" if _holds(model, f"{prefix}.{stack}") else stack


def _holds(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _stack_config(model: PreTrainedModel, stack: str | None = None):
    """The config of the stack of layers a value path acts on: without `stack`, the model's text config; with it, the
    config of the innermost module on the way to it that has one (a vision-language model's text config, for its
    language model's layers)."""
    if stack is None:
        return model.config.get_text_config()
    config, module = model.config, model
    for name in stack.split("."):
        module = module.get_submodule(name)
        config = module.config if isinstance(getattr(module, "config", None), PretrainedConfig) else config
    return config


def _implementation_config(model: PreTrainedModel, stack: str | None = None):
    """The config whose attention implementation the adapted stack reads: the model's; with `stack`, the stack's own
    (a VLM's text config), so that the model's other towers keep their backend."""
    return model.config if stack is None else _stack_config(model, stack)


def _set_implementation(model: PreTrainedModel, stack: str | None, implementation: str) -> None:
    """Set `implementation` on the config of `_implementation_config` and what it holds, in `set_attn_implementation`'s
    form: a name for the whole model, or nested dicts keyed by sub-config for a stack's sub-config alone."""
    target = _implementation_config(model, stack)

    def keyed(config):
        if config is target:
            return implementation
        for key in getattr(config, "sub_configs", None) or {}:
            sub = getattr(config, key, None)
            found = keyed(sub) if isinstance(sub, PretrainedConfig) else None
            if found is not None:
                return {key: found}
        return None

    model.set_attn_implementation(keyed(model.config) or implementation)


def _inner_implementation(model: PreTrainedModel, stack: str | None = None) -> str:
    implementation = _implementation_config(model, stack)._attn_implementation
    if implementation is None:  # transformers never dispatched one to this config (it warns when attention reads it)
        raise ValueError(
            f"The config of {stack!r} in {type(model).__name__} has no attention implementation (transformers sets "
            "one on the configs of its sub-models only): name a stack of one of its sub-models."
        )
    inner = implementation.removeprefix(ATTENTION_PREFIX)
    if inner.startswith(ATTENTION_PREFIX):
        raise ValueError(f"{type(model).__name__} uses {implementation!r}: a value path twice.")
    if "flash" in inner or inner.startswith("paged"):
        raise ValueError(
            f"{type(model).__name__} uses attn_implementation={inner!r}: flash and paged attention look their "
            "kernels up by the implementation's own name, so they cannot be wrapped. Use sdpa, eager or "
            "flex_attention (`model.set_attn_implementation('sdpa')`) before adapting."
        )
    if inner != "eager" and inner not in ALL_ATTENTION_FUNCTIONS:
        raise ValueError(f"{type(model).__name__} uses attn_implementation={inner!r}, which is not registered.")
    if inner == "eager":
        missing = {
            type(module).__module__
            for _, module in interface_attention_modules(model)
            if not hasattr(sys.modules[type(module).__module__], "eager_attention_forward")
        }
        if missing:
            raise ValueError(f"No `eager_attention_forward` in {sorted(missing)}; adapt the model with sdpa.")
    return inner


def _refuse_dropped_keywords(model: nn.Module, layers: list[nn.Module]) -> None:
    """The forward pass hands its context to each layer's attention function as a keyword argument, through the
    modules that call the attention module and the attention module itself. Where one calls the next without
    the keyword arguments it is given, the context never arrives, and the model would fail at its first forward:
    refused here instead, before the model is changed. Judged from the source: an attention whose forward calls the
    interface (a name taken from `ALL_ATTENTION_FUNCTIONS`) with no ``**`` (transformers' SigLIP and AIMv2
    attention), or a module on the way down to it whose methods call the next one (``self.<its name>(...)``) with no
    ``**`` (StableLM's decoder layer, HuBERT's model around its encoder; a list of layers through the loop over it,
    DPT's encoder). Source that cannot be read, or calls made another way, are left to that first forward
    (`_check_context`)."""
    for kind in dict.fromkeys(type(module) for module in layers):  # in layer order: the same message every run
        _, unconditional, looped = _interface_calls(kind)
        if unconditional > 1 or looped:
            how = "in a loop (once per image or chunk)" if looped else "twice (differential attention)"
            raise ValueError(
                f"{kind.__name__} calls the attention interface {how} in its forward: a value path is defined for "
                "one attention call per layer (V_0 is layer 0's values, each layer's rule acts on its one output), so "
                "this model cannot take one."
            )
        if _calls_interface_without_keywords(kind):
            raise ValueError(
                f"{kind.__name__} calls the attention interface without the keyword arguments its forward is given, "
                "so a value path cannot hand its attention the forward pass's context; this model cannot take one."
            )
    for kind, name in _callers(model, layers):
        if _calls_child_without_keywords(kind, name):
            raise ValueError(
                f"{kind.__name__} calls `self.{name}` (or its entries) without the keyword arguments it is given, so "
                "a value path cannot hand the attention below it the forward pass's context; this model cannot take "
                "one."
            )


@functools.cache  # per class, as the source it reads
def _interface_calls(kind: type) -> tuple[list[ast.Call], int, bool]:
    """The calls of the attention interface in the class's forward (of a name taken from `ALL_ATTENTION_FUNCTIONS`,
    or of it directly), how many statements of the forward's own body (not inside a branch or loop, so that every
    call runs) make one, and whether one is made in a loop or comprehension (once per image or chunk)."""
    tree = _source_tree(kind.forward)
    if tree is None:
        return [], 0, False
    names = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and node.value is not None
        and "ALL_ATTENTION_FUNCTIONS" in ast.unparse(node.value)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }

    def calls_in(node) -> list[ast.Call]:  # not the look-ups (`ALL_ATTENTION_FUNCTIONS.get_interface(...)`)
        return [
            call
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
            and (getattr(call.func, "id", None) in names or "ALL_ATTENTION_FUNCTIONS" in ast.unparse(call.func))
            and not (isinstance(call.func, ast.Attribute) and "ALL_ATTENTION_FUNCTIONS" in ast.unparse(call.func.value))
        ]

    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    unconditional = sum(
        1 for statement in body if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr)) and calls_in(statement)
    )
    # Every call outside flash attention's branch made in a loop (Qwen2-VL's vision attention, once per image); not
    # where another path calls it once (RADIO's loop runs only for packed images)
    loops = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    in_loops = {id(call) for node in ast.walk(tree) if isinstance(node, loops) for call in calls_in(node)}
    flash = {
        id(call)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "flash" in ast.unparse(node.test)
        for statement in node.body
        for call in calls_in(statement)
    }
    calls = calls_in(tree)
    looped = bool(in_loops) and all(id(call) in in_loops | flash for call in calls)
    return calls, unconditional, looped


def _calls_interface_without_keywords(kind: type) -> bool:
    """Whether the class's forward calls the attention interface, none of the calls with ``**``."""
    calls = _interface_calls(kind)[0]
    return bool(calls) and not _passes_keywords(calls)


@functools.cache
def _calls_child_without_keywords(kind: type, name: str) -> bool:
    """Whether the class's methods call its child `name` (`_calls_of`), none of the calls with ``**``."""
    calls = [call for method in _methods(kind) for call in _calls_of(_source_tree(method), name)]
    return bool(calls) and not _passes_keywords(calls)


def _callers(model: nn.Module, layers: list[nn.Module]) -> list[tuple[type, str]]:
    """(class, attribute name) of each module on the way from the innermost `PreTrainedModel` level above an
    attention layer down to it, and the child it calls on that way: the calls its context travels through (each
    level's forward pre-hook makes one). For a list of layers, the module holding the list and the list's name. In
    order from the attention up, so that a refusal names the nearest one, the same in every process."""
    parents = {id(child): (parent, name) for parent in model.modules() for name, child in parent.named_children()}
    found: dict[tuple[type, str], None] = {}
    for module in layers:
        while id(module) in parents and not isinstance(module, PreTrainedModel):
            parent, name = parents[id(module)]
            if not isinstance(parent, (nn.ModuleList, nn.ModuleDict)):
                found[type(parent), name] = None
            module = parent
    return list(found)


def _calls_of(tree: ast.AST | None, name: str) -> list[ast.Call]:
    """The calls in `tree` of the child `self.<name>`: ``self.<name>(...)``, an entry of it (``self.<name>[i](...)``),
    or, for a list of layers, the loop variable of a ``for`` over it (``for layer in self.<name>[:n]: layer(...)``, or
    over ``enumerate`` or ``zip`` of it)."""
    if tree is None:
        return []

    def is_child(node) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == name
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        )

    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (is_child(node.func) or (isinstance(node.func, ast.Subscript) and is_child(node.func.value)))
    ]
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.comprehension)) or not any(map(is_child, ast.walk(loop.iter))):
            continue
        targets = {node.id for node in ast.walk(loop.target) if isinstance(node, ast.Name)}
        body = loop.body if isinstance(loop, ast.For) else []
        calls += [
            node
            for statement in body
            for node in ast.walk(statement)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in targets
        ]
    return calls


def _source_text(function) -> str | None:
    """The source of a function, or None where it cannot be read (built in, made at run time, or empty)."""
    try:
        return inspect.getsource(function) or None
    except (OSError, TypeError):
        return None


def _source_tree(function) -> ast.AST | None:
    """The parsed source of a function, or None where it cannot be read."""
    source = _source_text(function)
    try:
        return None if source is None else ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None


def _methods(kind: type) -> list:
    """The functions of a module class and of its bases (the overridden ones too: a call there may still run through
    `super()`), short of `nn.Module` and transformers' `PreTrainedModel`, whose own methods call no child."""
    return [
        member
        for level in kind.__mro__
        if issubclass(level, nn.Module) and level not in _MODULE_BASES
        for member in vars(level).values()
        if inspect.isfunction(member)
    ]


_MODULE_BASES = frozenset(PreTrainedModel.__mro__)


def _passes_keywords(calls: list[ast.Call]) -> bool:
    """Whether any of the calls passes keyword arguments on with ``**``."""
    return any(keyword.arg is None for call in calls for keyword in call.keywords)


def _refuse_built_in_term(model) -> None:
    """This package's own models have NeuTRENO built in (`config.neutreno_lambda`): a value path runs on them only
    while that term is off, so that one rule, not two, acts on the values."""
    lam = getattr(model.config, "neutreno_lambda", None)
    if lam:
        raise ValueError(
            f"{type(model).__name__} has its own NeuTRENO term on (config.neutreno_lambda = {lam}); a value path "
            "runs on it only with config.neutreno_lambda = 0 (for NeuTRENO itself, set λ there instead)."
        )


def _is_transformers_class(model_class: type) -> bool:
    return getattr(transformers, model_class.__name__, None) is model_class


def _is_sibling(model_class: type) -> bool:
    """A model class of a file beside this one (this package's models, in the package or in a checkpoint's folder)."""
    return model_class.__module__.rpartition(".")[0] == __name__.rpartition(".")[0]


def is_saveable(model: nn.Module) -> bool:
    """Whether `save_pretrained` writes a folder that `from_pretrained(..., trust_remote_code=True)` loads adapted:
    a model without a value path, or one whose base is a transformers class or one of this package's models."""
    if not is_value_path_model(model):
        return True
    base = type(model)._value_path_base
    return _is_transformers_class(base) or _is_sibling(base)


def _is_cross_attention(module: nn.Module) -> bool:
    return bool(getattr(module, "is_cross_attention", False)) or "CrossAttention" in type(module).__name__


def _is_ours(reference) -> bool:
    return isinstance(reference, str) and reference.startswith(__name__.split(".")[-1] + "." + CLASS_PREFIX)


def _auto_class_of(model_class: type) -> str:
    """The Auto class that loads `model_class`; only transformers' own classes can be saved with a value path."""
    name = model_class.__name__
    if getattr(transformers, name, None) is not model_class:
        raise ValueError(
            f"apply_value_path adapts transformers' own model classes; {name} comes from {model_class.__module__}."
        )
    model_type = getattr(model_class.config_class, "model_type", None)
    for auto_class, table in _AUTO_CLASSES:
        names = getattr(modeling_auto, table, {}).get(model_type, ())
        if name in ((names,) if isinstance(names, str) else names):
            return auto_class
    raise ValueError(
        f"No Auto class loads {name} ({', '.join(a for a, _ in _AUTO_CLASSES)}), so an adapted checkpoint could not "
        "be loaded; adapt a model class that one of them loads."
    )


# --- the ValuePath<Class> subclasses --------------------------------------------------------------------------------


def _add_base_model_auto_map(model: PreTrainedModel) -> None:
    """List the adapted base model (``ValuePath<Model>``) under `AutoModel` in ``config.auto_map`` beside the saved
    class's own entry, so that `AutoModel.from_pretrained(folder, trust_remote_code=True)` loads the backbone adapted
    too (transformers builds the plain one from the model type otherwise)."""
    base = type(model)._value_path_base
    if not _is_transformers_class(base):
        return
    model_type = getattr(model.config, "model_type", None)
    names = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
    name = names if isinstance(names, str) else (names[0] if names else None)
    backbone = getattr(transformers, name, None) if name else None
    if backbone is None or backbone is base:
        return
    entry = f"{__name__.split('.')[-1]}.{CLASS_PREFIX}{name}"
    model.config.auto_map = {**(getattr(model.config, "auto_map", None) or {}), "AutoModel": entry}


def _adapt_sibling_auto_map(model: PreTrainedModel) -> None:
    """One of this package's models lists the other classes of its file in ``config.auto_map`` (the backbone under
    `AutoModel`): name their ``ValuePath<Class>``, so that each loads with the value path, as the saved class does."""
    base = type(model)._value_path_base
    if not _is_sibling(base):
        return
    module = base.__module__.rpartition(".")[2]
    auto_map = dict(getattr(model.config, "auto_map", None) or {})
    for auto_class, reference in auto_map.items():
        file, _, name = reference.rpartition(".")
        if auto_class != "AutoConfig" and file == module and not name.startswith(CLASS_PREFIX):
            auto_map[auto_class] = f"{module}.{CLASS_PREFIX}{name}"
    model.config.auto_map = auto_map


class _ValuePathModel:
    """What ``ValuePath<Base>`` adds to its transformers base class (listed after it in `value_path_class`)."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if not hasattr(self, "_value_path_hooks"):  # a base whose __init__ does not end with post_init
            _adapt(self)

    def post_init(self):
        # Adapted before the weights are initialised, so that what the value path adds (a value-embedding table drawn
        # at random) is initialised with the rest and in the same order as `from_pretrained` initialises it.
        if not hasattr(self, "_value_path_hooks"):
            _adapt(self)
        super().post_init()

    def __setstate__(self, state):
        # Unpickled in a new process (torch.load of a whole model): its attention implementation is registered there
        # by nobody else.
        super().__setstate__(state)
        backend = _implementation_config(self, self.config.value_path.get("stack"))
        register_value_path_attention(backend._attn_implementation.removeprefix(ATTENTION_PREFIX))

    @classmethod
    def is_custom_code(cls) -> bool:
        # A transformers class plus what `_adapt` adds, so treated as one: transformers initialises its own classes
        # fully (custom code cautiously: it skips a module whose own parameters are all set, which leaves out a
        # parent's pass over its children, as GPT-2's scaled residual projections), and applies its checkpoint renames
        # to them, on loading and back on saving, so that the saved layout is the base's (LLaVA's
        # `language_model.model.*`).
        if _is_transformers_class(cls._value_path_base):
            return False
        return super().is_custom_code()

    @torch.no_grad()
    @init.guard_torch_init_functions()
    def initialize_weights(self):
        super().initialize_weights()
        # The coefficients and gates sit in the sub-model whose own `_init_weights` visits them (a Linear: random W):
        # set them to the configured start afterwards, where a checkpoint lacks them (from_pretrained creates
        # parameters empty, then fills the missing ones; loaded ones are left as they are).
        start = self.config.value_path["coefficient"]
        for module in self.modules():
            if isinstance(getattr(module, GATE_ATTRIBUTE, None), nn.Linear):
                _initialise_gate(getattr(module, GATE_ATTRIBUTE), start)
            if isinstance(getattr(module, COEFFICIENT_ATTRIBUTE, None), LayerCoefficient):
                init.constant_(getattr(module, COEFFICIENT_ATTRIBUTE).value, start)
            if isinstance(getattr(module, EMBEDDING_ATTRIBUTE, None), nn.Embedding):
                hidden_size = _stack_config(self, self.config.value_path.get("stack")).hidden_size
                _initialise_table(getattr(module, EMBEDDING_ATTRIBUTE), hidden_size)

    def resize_token_embeddings(self, *args, **kwargs):
        # The value-embedding tables index the same tokens as the input embeddings: they follow the new vocabulary
        # (rows kept; a new token starts without a value embedding, a zero row).
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        vocabulary = self.get_input_embeddings().num_embeddings
        for module in self.modules():
            table = getattr(module, EMBEDDING_ATTRIBUTE, None)
            if isinstance(table, nn.Embedding) and table.num_embeddings != vocabulary:
                resized = nn.Embedding(
                    vocabulary, table.embedding_dim, dtype=table.weight.dtype, device=table.weight.device
                )
                with torch.no_grad():
                    resized.weight.zero_()
                    kept = min(vocabulary, table.num_embeddings)
                    resized.weight[:kept] = table.weight[:kept]
                setattr(module, EMBEDDING_ATTRIBUTE, resized)
        return embeddings

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, load_config, *args, **kwargs):
        # A checkpoint in the earlier layout: its coefficient vector is read here (transformers reports it as
        # unexpected) and put into the layers' coefficients once they are initialised (below).
        loading_info, *rest = type(model)._value_path_base._load_pretrained_model(
            model, state_dict, checkpoint_files, load_config, *args, **kwargs
        )
        if OLD_COEFFICIENTS in loading_info.unexpected_keys:
            old = _read_checkpoint_tensor(OLD_COEFFICIENTS, state_dict, checkpoint_files)
            model.__dict__["_value_path_old_coefficients"] = old
            loading_info.unexpected_keys.discard(OLD_COEFFICIENTS)
        return (loading_info, *rest)

    def _adjust_missing_and_unexpected_keys(self, loading_info):
        super()._adjust_missing_and_unexpected_keys(loading_info)
        old = self.__dict__.pop("_value_path_old_coefficients", None)
        if old is not None:
            converted = _split_old_coefficients(self, old)
            with torch.no_grad():
                for name, value in converted.items():
                    self.get_parameter(name).copy_(value)
            loading_info.missing_keys.difference_update(converted)
        check_coefficients(dict(self.named_parameters()))

    def save_pretrained(self, *args, **kwargs):
        check_coefficients(dict(self.named_parameters()))  # before anything is written
        _add_base_model_auto_map(self)
        _adapt_sibling_auto_map(self)
        super().save_pretrained(*args, **kwargs)
        base = type(self)._value_path_base
        if _is_transformers_class(base) or _is_sibling(base):
            logger.warning_once(
                "A model adapted with a value path loads adapted with `from_pretrained(..., trust_remote_code=True)`; "
                "without trust_remote_code, transformers builds the plain model from the same folder, and its load "
                f"report lists `{MARKER}` as UNEXPECTED."
            )
        else:  # Trainer's checkpoints go through here: they resume into the adapted model in memory
            logger.warning_once(
                f"{base.__name__} is not a transformers class, so its saved folder (weights, value-path settings and "
                "coefficients) loads as the plain model: Trainer resumes such a checkpoint into the adapted model, "
                "but from_pretrained does not adapt it. Save a transformers class or one of this package's to share it."
            )


def value_path_class(base: type, auto_class: str | None = None) -> type:
    """``ValuePath<base>``: `base` adapting itself in ``__init__`` from ``config.value_path`` (one class per base)."""
    name = CLASS_PREFIX + base.__name__
    if name in globals():
        return globals()[name]
    attributes = {
        # This package's models keep theirs in their own file, whose `auto_map` entry a saved checkpoint names
        "__module__": base.__module__ if _is_sibling(base) else __name__,
        "__qualname__": name,
        "__doc__": f"{base.__name__} with the value path of `config.value_path` (NeuTRENO, value residual, ...).",
        "_value_path_base": base,
        # Checkpoints saved before the marker lack it; a backbone loaded from a task checkpoint sees it at the root.
        "_keys_to_ignore_on_load_missing": [*(base._keys_to_ignore_on_load_missing or []), MARKER],
        "_keys_to_ignore_on_load_unexpected": [*(base._keys_to_ignore_on_load_unexpected or []), MARKER, OLD_MARKER],
    }
    adapted = type(name, (_ValuePathModel, base), attributes)
    if _is_transformers_class(base):
        adapted.register_for_auto_class(auto_class or _auto_class_of(base))
        # transformers looks its checkpoint renames up by class name (Qwen2-VL's), else by model type: the base's, so
        # that the adapted class saves and loads the base's layout (`is_custom_code`)
        renames = get_checkpoint_conversion_mapping(base.__name__)
        if renames is not None:
            register_checkpoint_conversion_mapping(name, renames, overwrite=True)
    elif _is_sibling(base) and getattr(base, "_auto_class", None):
        adapted.register_for_auto_class(base._auto_class)
    globals()[name] = adapted
    return adapted


def sibling_attribute(name: str, namespace: dict):
    """The module `__getattr__` of this package's model files: ``ValuePath<Class>`` of a class there (the class that
    the `auto_map` of a checkpoint saved with a value path names), built on first use."""
    base = namespace.get(name.removeprefix(CLASS_PREFIX)) if name.startswith(CLASS_PREFIX) else None
    if isinstance(base, type) and issubclass(base, PreTrainedModel):
        return value_path_class(base)
    raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")


def __getattr__(name: str):
    # `auto_map` names the subclass ("value_path.ValuePathLlamaForCausalLM"): build it on first use.
    base = getattr(transformers, name.removeprefix(CLASS_PREFIX), None) if name.startswith(CLASS_PREFIX) else None
    if isinstance(base, type) and issubclass(base, PreTrainedModel):
        return value_path_class(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
