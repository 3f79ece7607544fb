"""`python -m experiments COMMAND [ARGS]`: the experiments' one command line (the commands: `experiments.COMMANDS`)."""

import importlib
import sys

from . import COMMANDS


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m experiments COMMAND [ARGS]\n\ncommands: {', '.join(COMMANDS)}")
        return
    command, *args = argv
    if command not in COMMANDS:
        raise SystemExit(f"python -m experiments: unknown command {command!r}; the commands are {', '.join(COMMANDS)}")
    sys.argv[0] = f"python -m experiments {command}"  # argparse's program name in usage and errors
    importlib.import_module(f"{__package__}.{COMMANDS[command]}").main(args)


if __name__ == "__main__":  # guarded: reproduce's worker processes import this module again
    main()
