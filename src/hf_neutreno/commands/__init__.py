"""The subcommands of `hf-neutreno` (entry point: `hf_neutreno.cli`), one module each: `add_arguments(parser)` and
`run(args) -> int`. They parse, call the library (`hf_neutreno.compare`, `.diagnostics`, `.lm_eval`, `.hub`) and
print; errors are reported by the entry point."""

from pathlib import Path


def check_model_folder(name: str, what: str = "MODEL") -> None:
    """A path that does not exist would reach the Hub client as a malformed repository id ("Repo id must be in the
    form ..."); name the missing folder instead. Hub ids (`gpt2`, `me/model`) pass unchecked."""
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise ValueError(f"{what} {name!r}: no such folder.")
