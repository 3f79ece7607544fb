"""A value path saved apart from the base model it adapts, as PEFT saves an adapter: `save_value_path(model, folder)`
writes a small config naming the base model (``base_model_name_or_path``, as PEFT's ``adapter_config.json``) with the
value-path settings, and a safetensors file with only the value path's own parameters (learnable coefficients,
gates); `load_value_path(base, folder)` puts it back onto the base in one call, the base given as a model or by name.

For a model whose other weights did not change (the pretrained weights with a value path trained or set on top):
the config records a digest of every other weight, and loading refuses a base whose weights differ, naming them.
Not a travelling file: it may import the rest of the package.
"""

import hashlib
import json
import os
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from .models.value_path import (
    MARKER,
    apply_value_path,
    check_coefficients,
    is_value_path_model,
    remove_value_path,
    value_path_parameters,
)

CONFIG_NAME = "value_path_config.json"
WEIGHTS_NAME = "value_path.safetensors"
FORMAT = "hf-neutreno value path"  # the config's `format`: what marks a folder as one of these
_KEYS = {"format", "base_model_name_or_path", "base_model_class", "value_path", "base_weights"}


def save_value_path(model: PreTrainedModel, folder, base_model_name_or_path: str | None = None) -> Path:
    """Save `model`'s value path alone into `folder` (created if needed) and return its path.

    Args:
        model: a model adapted by `apply_value_path` (not wrapped by PEFT: save a PeftModel with its own
            `save_pretrained`, with ``modules_to_save=PEFT_MODULES``).
        folder: where to write ``value_path_config.json`` and ``value_path.safetensors``.
        base_model_name_or_path: the base model's Hub name or folder, recorded for `load_value_path`; default
            ``model.config._name_or_path`` (what `from_pretrained` loaded it from), None if it has none.

    The model's other weights are the base's only if they did not change: the config records a digest of each,
    which `load_value_path` checks against the base it is given.
    """
    if not isinstance(model, PreTrainedModel) or not is_value_path_model(model):
        hint = " (a PeftModel saves with its own save_pretrained)" if hasattr(model, "peft_config") else ""
        raise ValueError(
            f"save_value_path saves the value path of a model adapted with apply_value_path; {type(model).__name__} "
            f"is not one{hint}."
        )
    if base_model_name_or_path is not None and not isinstance(base_model_name_or_path, (str, os.PathLike)):
        raise ValueError(f"`base_model_name_or_path` must be a string or a path, got {base_model_name_or_path!r}.")
    name = base_model_name_or_path if base_model_name_or_path is not None else model.config._name_or_path
    own = {key: tensor.detach().contiguous() for key, tensor in value_path_parameters(model).items()}
    check_coefficients(own)  # before anything is written, as save_pretrained refuses them
    config = {
        "format": FORMAT,
        "base_model_name_or_path": str(name) if name else None,
        "base_model_class": type(model)._value_path_base.__name__,
        "value_path": model.config.value_path,
        "base_weights": _digests(model, exclude={*own, MARKER}),
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({key: tensor.cpu() for key, tensor in own.items()}, folder / WEIGHTS_NAME, {"format": "pt"})
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    return folder


def load_value_path(base: PreTrainedModel | str | os.PathLike | None, folder, **from_pretrained_kwargs):
    """Adapt `base` with the value path saved in `folder` by `save_value_path`, and return it.

    Args:
        base: the plain base model (adapted in place), or its Hub name or folder (loaded with its recorded class's
            `from_pretrained(base, **from_pretrained_kwargs)`), or None for the recorded ``base_model_name_or_path``.
        folder: a folder written by `save_value_path`.

    Raises `ValueError` (before the base is changed) for a folder that is not such a save, a base of another class
    or an adapted one, and a base whose weights differ from those the value path was saved with (naming them).
    """
    config, weights = _read(folder)
    check_coefficients(weights)
    if base is None:
        base = config["base_model_name_or_path"]
        if base is None:
            raise ValueError(f"{folder} records no `base_model_name_or_path`: pass the base model as `base`.")
    if isinstance(base, (str, os.PathLike)):
        model_class = getattr(transformers, config["base_model_class"], None)
        if not (isinstance(model_class, type) and issubclass(model_class, PreTrainedModel)):
            raise ValueError(
                f"{folder} was saved from {config['base_model_class']}, which transformers does not define: pass the "
                "base model itself as `base`."
            )
        base = model_class.from_pretrained(base, **from_pretrained_kwargs)
    elif from_pretrained_kwargs:
        raise ValueError(f"`from_pretrained` arguments {sorted(from_pretrained_kwargs)} need `base` given by name.")
    if not isinstance(base, PreTrainedModel):
        raise ValueError(f"`base` must be a transformers model, a name or a folder, got {type(base).__name__}.")
    if is_value_path_model(base):
        raise ValueError(f"`base` ({type(base).__name__}) is already adapted: pass the plain base model.")
    if type(base).__name__ != config["base_model_class"]:
        raise ValueError(
            f"{folder} holds a value path for {config['base_model_class']}, but `base` is {type(base).__name__}."
        )
    _check_same_weights(base, config["base_weights"], folder)
    apply_value_path(base, **config["value_path"])
    own = value_path_parameters(base)
    if own.keys() != weights.keys() or any(own[key].shape != weights[key].shape for key in own):
        remove_value_path(base)  # as it was
        raise ValueError(
            f"{Path(folder) / WEIGHTS_NAME} holds {_shapes(weights)}, but the adapted base has {_shapes(own)}: the "
            "file does not belong to this config."
        )
    with torch.no_grad():
        for key, parameter in own.items():
            parameter.copy_(weights[key])
    return base


def _read(folder) -> tuple[dict, dict]:
    """The config and tensors of a `save_value_path` folder, or `ValueError` saying what is wrong with it."""
    folder = Path(folder)
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise ValueError(f"{folder} is not a value path saved by save_value_path: it has no {CONFIG_NAME}.")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}.") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT or not _KEYS <= config.keys():
        raise ValueError(
            f"{path} is not the config of a value path saved by save_value_path (it needs `format` = {FORMAT!r} and "
            f"the keys {sorted(_KEYS)})."
        )
    settings = config["value_path"]
    if not isinstance(settings, dict) or not {"method", "coefficient", "learnable", "layers"} <= settings.keys():
        raise ValueError(f"{path}: `value_path` must hold the settings of apply_value_path, got {settings!r}.")
    if not (folder / WEIGHTS_NAME).is_file():
        raise ValueError(f"{folder} has {CONFIG_NAME} but not {WEIGHTS_NAME}, the value path's parameters.")
    return config, load_file(folder / WEIGHTS_NAME)


def _digests(model: torch.nn.Module, exclude=()) -> dict[str, str]:
    """SHA-256 (first 16 hex digits) of each tensor of `model`'s state dict (its bytes, dtype and shape), by name."""
    digests = {}
    for name, tensor in sorted(model.state_dict().items()):
        if name in exclude:
            continue
        digest = hashlib.sha256(f"{tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        digests[name] = digest.hexdigest()[:16]
    return digests


def _check_same_weights(base: torch.nn.Module, recorded: dict, folder) -> None:
    actual = _digests(base)
    missing, extra = sorted(recorded.keys() - actual.keys()), sorted(actual.keys() - recorded.keys())
    changed = sorted(name for name in recorded.keys() & actual.keys() if recorded[name] != actual[name])
    if missing or extra or changed:
        found = (("differ", changed), ("missing from the base", missing), ("not in the saved base", extra))
        parts = [f"{label}: {_first(names)}" for label, names in found if names]
        raise ValueError(
            f"The base model's weights are not those the value path in {folder} was saved with ({'; '.join(parts)}): "
            "load it onto the same base (same checkpoint and dtype), or, for a model whose other weights changed, "
            "save the whole model with save_pretrained."
        )


def _shapes(tensors: dict) -> str:
    return _first([f"{key} {tuple(tensor.shape)}" for key, tensor in sorted(tensors.items())]) or "nothing"


def _first(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


__all__ = ["load_value_path", "save_value_path"]
