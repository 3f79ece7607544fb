"""`hf-neutreno`: train and compare NeuTRENO models, measure over-smoothing, evaluate language models, publish.

The entry point of the command line: one subcommand per module of `hf_neutreno.commands`, each exposing
`add_arguments(parser)` and `run(args) -> int`. Only the module of the subcommand being run is imported, and it
imports torch and transformers only in `run`, so `hf-neutreno --help` and every subcommand's `--help` stay fast.

Errors are handled here, once. A user's mistake (a bad flag or value, a missing file or folder, an unknown model or
dataset, offline mode, a Hub refusal) ends the command with one line, `hf-neutreno COMMAND: error: ...`, and exit
status 2. Those are the exceptions the package and the libraries raise for bad input: `ValueError` (every check in
this package raises it, naming the flag or field), huggingface_hub's `StrictDataclassError` (a config field's rule,
as for every transformers config), `OSError` (files, and huggingface_hub's HTTP, token and offline
errors) and `ImportError` (an optional extra that is not installed; the message says which). Anything else is a bug
and keeps its traceback. Ctrl-C exits with 130.
"""

import argparse
import importlib
import sys

from huggingface_hub.errors import StrictDataclassError

# name: (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("hf_neutreno.commands.compare",
                "Train a baseline and a NeuTRENO model side by side; table, plot, models."),
    "push": ("hf_neutreno.commands.push",
             "Push a saved model with its code, processor and model card to the Hugging Face Hub."),
    "evaluate-lm": ("hf_neutreno.commands.evaluate_lm",
                    "Perplexity of a causal LM: the paper's sliding window and blocks."),
    "diagnose": ("hf_neutreno.commands.diagnose", "Measure over-smoothing of a model, per layer, on a dataset."),
}  # fmt: skip
USER_ERRORS = (ValueError, StrictDataclassError, OSError, ImportError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line, like every other error of the command (argparse would print the whole usage first).
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="hf-neutreno", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            sub_parser.description = module.__doc__ or help_text
            sub_parser.formatter_class = argparse.RawDescriptionHelpFormatter
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_module=module, _parser=sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        args, unknown = build_parser(command if command in SUBCOMMANDS else None).parse_known_args(argv)
        if unknown:  # reported by the subcommand's parser, which names the subcommand
            args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exit:  # --help, or a bad argument (already reported)
        return exit.code
    try:
        return int(args._module.run(args) or 0)
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return 130
    except USER_ERRORS as error:
        message = " ".join(str(error).split()) or type(error).__name__  # one line, whatever the library wrote
        print(f"hf-neutreno {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
