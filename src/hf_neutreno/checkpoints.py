"""Where a model or a dataset comes from, and loading a model: the one rule that tells a local folder from a Hub id
(`is_local`, `check_source`), and the one loader (`load_checkpoint`) that `compare`, `diagnose`, `evaluate-lm`, `push`
and the converters use, with one set of messages.

torch and transformers are imported only where a model loads, so that a command checks its flags (and shows its
`--help`) without them.
"""

import os
import re
from contextlib import contextmanager
from pathlib import Path

# A Hub repo id: `name` or `namespace/name` (letters, digits, '-', '_', '.'; no leading '.' or '/').
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
# Names of files, not of repositories: what a user may pass by mistake for the folder that holds them.
FILE_SUFFIXES = (".parquet", ".csv", ".json", ".jsonl", ".arrow", ".txt", ".safetensors", ".bin", ".pt", ".pth")


def is_local(name: str | os.PathLike) -> bool:
    """Whether `name` means something on this machine, existing or not, rather than a Hub repository: a path object,
    anything that exists here, a name written as a path (``./``, ``/``, ``~``) or as a file (``data.parquet``), or
    one that cannot be a Hub id (``a/b/c``)."""
    if isinstance(name, os.PathLike):
        return True
    text = str(name)
    if text.startswith((".", "/", "~")) or text.lower().endswith(FILE_SUFFIXES):
        return True
    return Path(text).expanduser().exists() or not _REPO_ID.fullmatch(text)


def check_source(name: str | os.PathLike, what: str) -> None:
    """A local `name` must be a folder: say so before anything loads, rather than let the Hub client reject it as a
    malformed repository id. `what` names it in the message (a flag, or "dataset"). Hub ids pass unchecked."""
    path = Path(name).expanduser()
    if is_local(name) and not path.is_dir():
        problem = "a file, not a folder" if path.is_file() else "no such folder (it does not exist here)"
        raise ValueError(f"{what} {str(name)!r}: {problem}; give a folder, or a Hub id (`name` or `owner/name`).")


@contextmanager
def reading_weights(name: str | os.PathLike):
    """A failure to read a folder's pickled weights (`pytorch_model.bin`: torch refuses a pickle that holds more than
    tensors, and an old or damaged file) as one line that says what to do; other errors pass unchanged."""
    try:
        yield
    except Exception as error:
        folder = Path(name)
        if folder.is_dir() and not any(folder.glob("*.safetensors")) and any(folder.glob("*.bin")):
            reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            raise ValueError(
                f"{str(name)!r}: its weights are a pickled pytorch_model.bin that could not be read ({reason}). Load "
                "the model where it was made and save it with `save_pretrained(folder)`, which writes "
                "model.safetensors."
            ) from error
        raise


def load_checkpoint(
    name: str | os.PathLike, model_class=None, *, what: str = "MODEL", trust_remote_code: bool = False, **kwargs
):
    """The model saved at `name` (a folder or a Hub id), loaded with `model_class` (an Auto class or a model class)
    and `kwargs`, or without one by the class its config names (`architectures`), so that no weight is left unused:
    the remote-code class of its `auto_map`, a transformers class or this package's, else `AutoModel`; a remote-code
    class only with `trust_remote_code`, and a checkpoint saved with a value path only as the adapted model.

    This package's models load with the Auto classes (registered here). `what` names `name` in the messages."""
    check_source(name, what)
    import transformers

    from .auto_classes import register_auto_classes

    register_auto_classes()
    if model_class is None:  # outside `reading_weights`: its refusals are not about reading the weights
        model_class = _architecture_class(name, trust_remote_code, what)
    with reading_weights(name):
        if model_class.__name__.startswith("Auto"):
            kwargs["trust_remote_code"] = trust_remote_code
        elif not issubclass(model_class, transformers.PreTrainedModel):
            raise TypeError(f"Expected an Auto class or a model class, got {model_class!r}.")
        model = model_class.from_pretrained(name, **kwargs)
    _refuse_a_dropped_value_path(model, name, what)
    return model


def _refuse_a_dropped_value_path(model, name, what: str) -> None:
    """A checkpoint saved with a value path builds as the plain class without `trust_remote_code` (or with a
    transformers class): its weights load, the value path does not run. Refused, rather than measured or trained as
    the model it is not."""
    from .models.value_path import is_value_path_model

    saved_value_path = getattr(getattr(model, "config", None), "value_path", None)
    if saved_value_path is not None and not is_value_path_model(model):
        raise ValueError(
            f"{what} {str(name)!r} was saved with a value path ({saved_value_path}), which only --trust-remote-code "
            f"loads (trust_remote_code=True); {type(model).__name__} is the plain model."
        )


def _architecture_class(name, trust_remote_code: bool, what: str = "MODEL"):
    """The class that serves the first of the config's `architectures`: an Auto class of its `auto_map` (remote
    code), a transformers class, this package's class; else `AutoModel`.

    A remote-code architecture that neither transformers nor this package defines is refused without
    `trust_remote_code`: the Auto class would build transformers' own class of the model type instead, which drops
    the checkpoint's weights it has no place for (a custom head) and draws its own anew, with no error. Checkpoints
    saved with this package's value path are refused once built, by their `value_path` (`load_checkpoint`)."""
    import transformers

    import hf_neutreno

    config = transformers.AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
    architecture = (getattr(config, "architectures", None) or [None])[0]
    local_class = None
    if architecture is not None:
        local_class = getattr(transformers, architecture, None) or getattr(hf_neutreno, architecture, None)
        if not (isinstance(local_class, type) and issubclass(local_class, transformers.PreTrainedModel)):
            local_class = None
    auto_map = getattr(config, "auto_map", None) or {}
    for auto_name, reference in auto_map.items():  # remote code: the Auto class that serves the architecture
        if not isinstance(reference, str):  # a tokenizer's entry: [slow class, fast class]
            continue
        if auto_name != "AutoConfig" and reference.split(".")[-1] == architecture and hasattr(transformers, auto_name):
            if not trust_remote_code and local_class is None and getattr(config, "value_path", None) is None:
                raise ValueError(
                    f"{what} {str(name)!r}: its class {architecture} is remote code (the config's auto_map), which "
                    "loads only with trust_remote_code (--trust-remote-code); without it transformers would build "
                    f"its own {config.model_type!r} class, leaving out the weights that class has no place for."
                )
            return getattr(transformers, auto_name)
    return local_class or transformers.AutoModel
