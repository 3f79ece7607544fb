"""The subcommands of `hf-neutreno` (entry point: `hf_neutreno.cli`), one module each: `add_arguments(parser)` and
`run(args) -> int`. They parse, call the library (`hf_neutreno.engine.compare`, `.diagnostics`, `.lm_eval`, `.hub`) and
print; errors are reported by the entry point. At its top a command imports only modules free of torch and
transformers (the names and defaults its parser shows come from `hf_neutreno.names`, `.variants`,
`models.value_path_defaults`, `.compare_settings`), and the library inside `run`, so that its `--help` is fast."""

from contextlib import contextmanager
from pathlib import Path


def check_model_folder(name: str, what: str = "MODEL") -> None:
    """A path that does not exist would reach the Hub client as a malformed repository id ("Repo id must be in the
    form ..."); name the missing folder instead. Hub ids (`gpt2`, `me/model`) pass unchecked."""
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise ValueError(f"{what} {name!r}: no such folder.")


def check_output_file(path: str, flag: str, overwrite: bool) -> Path:
    """Where a command will write `flag`'s file, checked before any work: not a folder, in a folder that exists, and
    not an existing file unless `overwrite` (`--overwrite`): a finished report is not replaced by accident."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path!r} is a folder; give a file name.")
    if not target.absolute().parent.is_dir():
        raise ValueError(f"{flag} {path!r}: the folder {str(target.parent)!r} does not exist.")
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise ValueError(f"{flag} {path!r} already exists; pass --overwrite to replace it, or give another file name.")
    return target


def check_new_folder(path: str, flag: str) -> None:
    """A folder a command will create, checked before any work: new, or an empty folder (or a link to one)."""
    target = Path(path)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(f"{flag} {path!r} already holds files; give a new or empty folder.")


@contextmanager
def reading_weights(name: str):
    """A failure to read a folder's pickled weights (`pytorch_model.bin`: torch refuses a pickle that holds more than
    tensors, and an old or damaged file) as one line that says what to do; other errors pass unchanged."""
    try:
        yield
    except Exception as error:
        folder = Path(name)
        if folder.is_dir() and not any(folder.glob("*.safetensors")) and any(folder.glob("*.bin")):
            reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            raise ValueError(
                f"{name!r}: its weights are a pickled pytorch_model.bin that could not be read ({reason}). Load the "
                "model where it was made and save it with `save_pretrained(folder)`, which writes model.safetensors."
            ) from error
        raise
