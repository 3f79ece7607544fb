#!/usr/bin/env python
"""Files kept twice because each copy travels with its own kind of checkpoint, as a flat sibling of the files that
import it: the copy is generated from its source, never edited by hand, and a test fails while the two differ.

    python tests/copies.py           # writes every copy
    python tests/copies.py --check   # lists the copies that differ from their source; exit 1 if any
"""

import argparse
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hf_neutreno"
# copy -> source: NeuTRENO's term serves value_path.py (adapted checkpoints) and the models (the package's own).
COPIES = {SRC / "models" / "neutreno_term.py": SRC / "neutreno_term.py"}
HEADER = "# Generated from src/hf_neutreno/{source} by `python tests/copies.py`: edit the source, not this copy.\n"


def generated(copy: Path) -> str:
    source = COPIES[copy]
    return HEADER.format(source=source.relative_to(SRC).as_posix()) + source.read_text()


def stale() -> list[Path]:
    return [copy for copy in COPIES if not copy.exists() or copy.read_text() != generated(copy)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list the copies that differ from their source")
    args = parser.parse_args()
    if args.check:
        for copy in stale():
            print(f"{copy} differs from {COPIES[copy]}: run `python tests/copies.py`")
        return 1 if stale() else 0
    for copy in COPIES:
        copy.write_text(generated(copy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
