"""The subcommands of `hf-neutreno` (entry point: `hf_neutreno.cli`), one module each: `add_arguments(parser)` and
`run(args) -> int`. They parse, call the library (`hf_neutreno.engine.compare`, `.diagnostics`, `.lm_eval`, `.hub`) and
print; errors are reported by the entry point. At its top a command imports only modules free of torch and
transformers (the names and defaults its parser shows come from `hf_neutreno.names`, `.variants`,
`models.value_path_defaults`, `.compare.settings`), and the library inside `run`, so that its `--help` is fast."""

from pathlib import Path


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
