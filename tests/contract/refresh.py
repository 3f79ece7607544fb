"""Vendor transformers' shared model contract (its own test mixins) into `tests/contract/upstream/`.

    python tests/contract/refresh.py [--version X.Y.Z] [--source DIR]

Downloads the sdist of the installed transformers version (or `--version`) from PyPI with pip, and copies the mixin
files the contract suite runs, `tests/test_modeling_common.py` (`ModelTesterMixin`) and
`tests/test_configuration_common.py` (`ConfigTester`), with every file of upstream's `tests` tree they import, and
nothing else. Each copy gets a header naming the version and the file it came from; upstream's Apache-2.0 notice
stays below it, and upstream's LICENSE is copied beside them. Imports of the `tests` tree (`from tests.x import`,
`from ..x import`) are rewritten to the vendored package, whose layout mirrors upstream's `tests` folder.

The sdist ships only the top-level `tests/test_*.py` (setuptools' default), not the subfolders. Three imported files
therefore come from `--source DIR` (a checkout of transformers at the tag `v<version>`) when it is given and has them,
and are otherwise replaced by the stubs below, each saying what it leaves out:

- `tests/generation/test_utils.py`: `GenerationTesterMixin`, an empty marker class (upstream's generate tests do not
  run; `test_generation_tester_mixin_inheritance` still checks that every generative class's test inherits it). The
  suite's own generation checks are in `tests/contract/test_contract_generation.py`.
- `tests/exporters/test_export.py`: `ExportTesterMixin`, an empty base class (the torch.export / ONNX / ExecuTorch
  tests do not run).
- `tests/utils/test_configuration_utils.py`: only `config_common_kwargs`, the common config arguments that
  `ConfigTester.check_config_arguments_init` sets, as upstream writes them for transformers 5's `PreTrainedConfig`;
  checked against the installed `PreTrainedConfig` here.
"""

import argparse
import ast
import inspect
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "upstream"
ROOTS = ("tests/test_modeling_common.py", "tests/test_configuration_common.py", "tests/generation/test_utils.py")

STUBS = {
    "tests/generation/test_utils.py": '''\
"""STUB of upstream's `tests/generation/test_utils.py`, which the sdist does not ship: `GenerationTesterMixin` as an
empty marker class, so that `ModelTesterMixin.test_generation_tester_mixin_inheritance` still checks the test classes.
Upstream's generate tests do not run; `refresh.py --source DIR` vendors the real file."""


class GenerationTesterMixin:
    pass
''',
    "tests/exporters/test_export.py": '''\
"""STUB of upstream's `tests/exporters/test_export.py`, which the sdist does not ship: `ExportTesterMixin`, the base
class of `ModelTesterMixin`, without its tests (torch.export, ONNX, ExecuTorch); `refresh.py --source DIR` vendors the
real file."""


class ExportTesterMixin:
    pass
''',
    "tests/utils/test_configuration_utils.py": '''\
"""STUB of upstream's `tests/utils/test_configuration_utils.py`, which the sdist does not ship: only
`config_common_kwargs` (what `test_configuration_common.py` imports), as upstream writes it for transformers 5's
`PreTrainedConfig`: every common argument, none at its default."""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
''',
}


def installed_version() -> str:
    import transformers

    return transformers.__version__


def download_sdist(version: str, folder: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"transformers=={version}", "--no-binary", ":all:", "--no-deps"]
        + ["--no-build-isolation", "--quiet", "-d", str(folder)],
        check=True,
    )
    (sdist,) = folder.glob(f"transformers-{version}.tar.gz")
    return sdist


def tests_imports(path: str, source: str) -> list[str]:
    """The files of upstream's `tests` tree that the file at `path` (e.g. "tests/generation/test_utils.py") imports."""
    package = path.split("/")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
        elif node.module and node.module.split(".")[0] == "tests":
            base = node.module.split(".")
        else:
            continue
        found.append("/".join(base) + ".py")
    return found


def rewrite_imports(path: str, source: str) -> str:
    """`from tests.x.y import` -> the relative import of the same vendored file (upstream's relative ones stay)."""
    dots = "." * (len(path.split("/")) - 1)  # "tests/a.py": ".", "tests/generation/b.py": ".."
    return re.sub(r"^(\s*)from tests\.([\w.]+) import", rf"\1from {dots}\2 import", source, flags=re.M)


def header(version: str, path: str, origin: str) -> str:
    return (
        f"# Vendored from transformers {version}: `{path}` ({origin}).\n"
        "# Written by tests/contract/refresh.py (do not edit; refresh instead). Imports of upstream's `tests` tree\n"
        "# point at this vendored copy. Upstream's Apache-2.0 notice follows (LICENSE beside this file).\n"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=None, help="transformers version (default: the installed one)")
    parser.add_argument("--source", type=Path, default=None, help="a transformers checkout at tag v<version>")
    args = parser.parse_args(argv)
    version = args.version or installed_version()
    with tempfile.TemporaryDirectory() as tmp:
        sdist = download_sdist(version, Path(tmp))
        prefix = f"transformers-{version}/"
        with tarfile.open(sdist) as archive:
            members = {m.name.removeprefix(prefix): m for m in archive.getmembers() if m.isfile()}
            files, origins = {}, {}
            license_text = archive.extractfile(members["LICENSE"]).read().decode()
            queue = list(ROOTS)
            while queue:
                path = queue.pop()
                if path in files:
                    continue
                if path in members:
                    files[path] = archive.extractfile(members[path]).read().decode()
                    origins[path] = f"sdist {sdist.name}"
                elif args.source is not None and (args.source / path).is_file():
                    files[path] = (args.source / path).read_text()
                    origins[path] = f"checkout {args.source}"
                elif path in STUBS:
                    files[path] = STUBS[path]
                    origins[path] = f"STUB: not in sdist {sdist.name}"
                else:
                    raise SystemExit(f"{path} is imported but neither in the sdist nor stubbed: add a stub for it.")
                queue.extend(tests_imports(path, files[path]))
    check_config_common_kwargs(files["tests/utils/test_configuration_utils.py"])
    if TARGET.exists():
        shutil.rmtree(TARGET)
    TARGET.mkdir()
    (TARGET / "LICENSE").write_text(license_text)
    packages = {Path(path).parent for path in files}
    for package in packages:
        init = TARGET / package.relative_to("tests") / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.write_text(f"# Vendored transformers {version} test helpers (tests/contract/refresh.py).\n")
    for path, text in sorted(files.items()):
        out = TARGET / Path(path).relative_to("tests")
        out.write_text(header(version, path, origins[path]) + rewrite_imports(path, text))
        print(f"{out.relative_to(HERE.parent.parent)}  <- {path} ({origins[path]})")


def check_config_common_kwargs(source: str) -> None:
    """The common config arguments must still be `PreTrainedConfig`'s (a stub can go stale when transformers moves)."""
    from transformers import PreTrainedConfig

    (kwargs,) = [
        ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["config_common_kwargs"]
    ]
    known = set(inspect.signature(PreTrainedConfig.__init__).parameters) | {"output_attentions"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise SystemExit(f"config_common_kwargs names {unknown}, which PreTrainedConfig no longer takes.")


if __name__ == "__main__":
    main()
