"""The layout of `src/hf_neutreno`: every import runs down the layers, and nothing is loaded by its file path.

A module may import from its own layer and the ones below it. The layers, bottom first: names, defaults and small
runtime helpers that import nothing of the package; the model files that travel with a checkpoint (their preset tables
import nothing); the value paths and the converters; data and diagnostics; the engine and the Hub; the example-script
helpers; the commands; the command line.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hf_neutreno"
# module (a dotted path inside the package; the longest prefix decides) -> layer, bottom first
LAYERS = {
    "names": 0,
    "runtime": 0,
    "markdown": 0,
    "models.value_path_defaults": 0,
    "models.presets": 0,
    "models": 1,
    "value_path": 2,
    "value_path_delta": 2,
    "convert": 2,
    "checkpoints": 2,
    "auto_classes": 2,
    "data": 3,
    "diagnostics": 3,
    "engine": 4,
    "hub": 4,
    "examples": 5,
    "commands": 6,
    "cli": 7,
    "__main__": 7,
}


def layer(module: str) -> int:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in LAYERS:
            return LAYERS[".".join(parts[:end])]
    raise AssertionError(f"{module} has no layer in LAYERS")


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:  # the package's own __init__ gathers the public names of every layer
            found[".".join(parts)] = path
    return found


KNOWN = set(modules())


def imports(module: str, path: Path) -> set[str]:
    """The package's modules that `module` imports (relative or absolute), as dotted paths inside the package."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.split(".")[0] == "hf_neutreno":
                target = ".".join(node.module.split(".")[1:])
            else:
                continue
            for alias in node.names:  # `from .models import presets` imports the module models.presets
                submodule = f"{target}.{alias.name}".strip(".")
                found.add(submodule if submodule in KNOWN else target)
        elif isinstance(node, ast.Import):
            found.update(".".join(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == "hf_neutreno")
    return {name for name in found if name}


def test_every_import_runs_down_the_layers():
    upward = []
    for module, path in modules().items():
        for target in imports(module, path):
            if layer(target) > layer(module):
                upward.append(f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})")
    assert not upward, "\n".join(upward)


def test_nothing_in_the_package_is_loaded_by_its_path():
    loaders = ("spec_from_file_location", "SourceFileLoader", "runpy.run_path")
    found = [
        f"{path.relative_to(SRC)}: {name}" for path in SRC.rglob("*.py") for name in loaders if name in path.read_text()
    ]
    assert not found, found


def test_the_checker_sees_an_upward_import():
    """Guards the test above: the import that ran up before (data.loading importing the engine's names) is caught."""
    assert layer("engine.names") > layer("data.loading")
    assert "names" in imports("data.loading", SRC / "data" / "loading.py")


EXPERIMENTS = SRC.parents[1] / "experiments"


def test_the_experiments_are_one_package_with_one_command_line():
    """experiments/ imports its own modules as a package (no sibling loaded as a top-level module or by its path, which
    would work only from one folder or through a path setting), and each command of `python -m experiments` is a module
    with `main(argv)`. The one file it loads by path is an example script, which is not a package."""
    import importlib
    import inspect

    from experiments import COMMANDS

    siblings = {path.stem for path in EXPERIMENTS.rglob("*.py") if "results" not in path.parts}
    found = []
    for path in EXPERIMENTS.rglob("*.py"):
        if "results" in path.parts:  # the kept checkpoints' code snapshots
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            found += [f"{path.relative_to(EXPERIMENTS)}: {n}" for n in names if n.split(".")[0] in siblings]
        if "spec_from_file_location" in path.read_text() and "examples" not in path.read_text():
            found.append(f"{path.relative_to(EXPERIMENTS)} loads a module by its path")
    assert not found, found
    for command, module in COMMANDS.items():
        main = importlib.import_module(f"experiments.{module}").main
        assert list(inspect.signature(main).parameters) == ["argv"], command
