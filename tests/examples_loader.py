"""Import an example script as a module, so tests run exactly what users run; and the flags of short test runs."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# 2 layers of hidden size 32 with 4 heads: the `--config_overrides` of most of the examples' test runs.
TINY_OVERRIDES = "num_hidden_layers=2,hidden_size=32,num_attention_heads=4,intermediate_size=64"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trainer_flags(output_dir: Path, use_cpu: bool = False) -> list[str]:
    """The Trainer flags of an example's short test run: its output folder; no checkpoint, report or progress bar;
    with `use_cpu`, `--use_cpu true` (the run stays on the CPU of a machine with a GPU)."""
    quiet = ["--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true"]
    return ["--output_dir", str(output_dir), *quiet, *(["--use_cpu", "true"] if use_cpu else [])]


def fashion_mnist_flags(data_dir: Path, config_overrides: str = TINY_OVERRIDES) -> list[str]:
    """`run_image_classification.py` on Fashion-MNIST (28 × 28 images in patches of 7) with the deit-tiny preset,
    shrunk by `config_overrides`."""
    model = ["--model_name_or_path", "deit-tiny", "--config_overrides", config_overrides]
    return [*model, "--image_size", "28", "--patch_size", "7", "--dataset_name", str(data_dir / "fashion_mnist")]
