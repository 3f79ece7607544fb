"""The subcommands of `hf-neutreno` (entry point: `hf_neutreno.cli`), one module each: `add_arguments(parser)` and
`run(args) -> int`. They parse, call the library (`hf_neutreno.engine.compare`, `.diagnostics`, `.lm_eval`, `.hub`) and
print; errors are reported by the entry point. At its top a command imports only modules free of torch and
transformers (the names and defaults its parser shows come from `hf_neutreno.engine.names`, `.variants`,
`.value_path_defaults`, `.compare_settings`), and the library inside `run`, so that its `--help` is fast."""

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
