"""`hf-neutreno` command line: one subcommand per task, each defined in its own module.

A subcommand module exposes `add_arguments(parser)` and `run(args) -> int`. Only the module of the subcommand
being run is imported, so `hf-neutreno --help` stays fast.
"""

import argparse
import importlib
import sys

# name: (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("hf_neutreno.compare", "Train a baseline and a NeuTRENO model side by side; table, plot, models."),
    "push": ("hf_neutreno.commands.push",
             "Push a saved model with its code, processor and model card to the Hugging Face Hub."),
    "evaluate-lm": ("hf_neutreno.lm_eval", "Perplexity of a causal LM: the paper's sliding window and blocks."),
    "diagnose": ("hf_neutreno.diagnostics.cli", "Measure over-smoothing of a model, per layer, on a dataset."),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-neutreno", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            sub_parser.description = module.__doc__ or help_text
            sub_parser.formatter_class = argparse.RawDescriptionHelpFormatter
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
