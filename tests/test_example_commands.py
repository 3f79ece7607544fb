"""Every command that examples/README.md and the example scripts' docstrings show runs, and trains.

The commands are read from the documents, so a documented command cannot drift from the scripts. Each runs as
written except for its size: a few optimizer steps (`--max-steps`), a few samples or tokens, small batches, crops
and contexts, and the local copy of the dataset in place of the Hub's. This machine has no GPU, so a launcher for
GPUs (`accelerate launch` with a GPU config, `torchrun` over 8 GPUs or 2 machines) runs its script in this process
with the documented arguments, and `--use-cpu` where the command asks for bf16; the CPU `torchrun` command runs as
written, in two processes. The accelerate config files the commands name are loaded and checked.
"""

import ast
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from examples_loader import EXAMPLES, load_example
from tiny_models import local_deit_tiny

README = EXAMPLES / "README.md"
SCRIPTS = ("run_image_classification", "run_clm_wikitext103", "run_eigen_vit", "run_semantic_segmentation")
SHELL_VARIABLES = {"NODE_RANK": "0", "MAIN_IP": "127.0.0.1", "HF_NEUTRENO_DATA": "HF_NEUTRENO_DATA"}
# Hub dataset -> the local copy's folder (the `data_dir` fixture).
LOCAL_COPIES = {
    "uoft-cs/cifar10": "cifar10",
    "Salesforce/wikitext": "wikitext-2-v1",
    "scene_parse_150": "fashion-scenes",
}  # ADE20K's columns (image, annotation), a local segmentation set
# Hub checkpoint -> a local stand-in of the same architecture and processor (random weights: no Hub here).
DEIT_TINY = "facebook/deit-tiny-patch16-224"
CIFAR100 = "uoft-cs/cifar100"


def _commands(text: str) -> list[str]:
    """Shell commands of `text` (continuation lines joined, comments dropped) that run an example script."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line.split(" #")[0].strip() for line in joined.splitlines()]
    return [line for line in lines if re.search(r"examples/run_\w+\.py", line) and not line.startswith("#")]


def readme_commands() -> list[str]:
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    variables = dict(SHELL_VARIABLES)
    commands = []
    for block in blocks:
        for name, value in re.findall(r'^(\w+)="(.*?)"', re.sub(r"\\\n\s*", " ", block), flags=re.M | re.S):
            variables[name] = value
        commands += _commands(block)
    return [re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], command) for command in commands]


def docstring_commands(script: str) -> list[str]:
    tree = ast.parse((EXAMPLES / f"{script}.py").read_text())
    return _commands(ast.get_docstring(tree))


ALL_COMMANDS = [("README", c) for c in readme_commands()] + [
    (script, c) for script in SCRIPTS for c in docstring_commands(script)
]


def test_the_documents_show_the_commands_this_test_runs():
    readme = [c for source, c in ALL_COMMANDS if source == "README"]
    assert len(readme) == 13 and sum(c.startswith("torchrun") for c in readme) == 3
    first = ("run_image_classification", "run_image_classification", "run_clm_wikitext103", "run_eigen_vit")
    assert [c.split()[1] for c in readme[:5]] == [f"examples/{s}.py" for s in (*first, "run_semantic_segmentation")]
    assert _flag(shlex.split(readme[0]), "--dataset-name") == "digits"  # the first command needs no network
    assert {source for source, _ in ALL_COMMANDS} == {"README", *SCRIPTS}
    for _, command in ALL_COMMANDS:
        assert "$" not in command and "../shared" not in command, command


def _split(command: str) -> tuple[list[str], str, list[str]]:
    """(launcher tokens, script name, script arguments)."""
    tokens = shlex.split(command)
    index = next(i for i, t in enumerate(tokens) if t.startswith("examples/run_"))
    return tokens[:index], Path(tokens[index]).stem, tokens[index + 1 :]


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _local_cifar100(data_dir: Path, folder: Path) -> Path:
    """CIFAR-100's layout and columns (`img`, `fine_label` of 100 names, `coarse_label`) holding real CIFAR-10
    images, as `uoft-cs/cifar100` (not in the local copies): the command's flags (`--label-column fine_label`) run
    as written."""
    import datasets

    features = datasets.Features(
        {
            "img": datasets.Image(),
            "fine_label": datasets.ClassLabel(num_classes=100),
            "coarse_label": datasets.ClassLabel(num_classes=20),
        }
    )
    for split in ("train", "test"):
        source = datasets.load_dataset("parquet", data_dir=str(data_dir / "cifar10"), split=split).select(range(64))
        rows = {"img": source["img"], "fine_label": source["label"], "coarse_label": [0] * len(source)}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))
    return folder


def _scaled(script: str, args: list[str], data_dir: Path, output_dir: Path) -> list[str]:
    """The documented arguments with the size scaled down: the local dataset, a few samples and steps."""
    args = list(args)
    if _flag(args, "--model-name-or-path") == DEIT_TINY:
        args[args.index("--model-name-or-path") + 1] = str(local_deit_tiny(output_dir.parent / "deit-tiny"))
    for flag in ("--dataset-name", "--dataset"):
        if flag in args:
            i = args.index(flag) + 1
            if args[i] == CIFAR100:
                args[i] = str(_local_cifar100(data_dir, output_dir.parent / "cifar100"))
            elif args[i] != "digits":  # bundled (as written); else a Hub name or a folder of the local copy
                name = args[i].removeprefix("HF_NEUTRENO_DATA/")
                args[i] = str(data_dir / LOCAL_COPIES.get(name, name))
    for flag in ("--output-dir",):
        args[args.index(flag) + 1] = str(output_dir)
    # Small batches too: this CPU has no bf16 units, so the commands that ask for bf16 run ~20x slower per sample.
    if script == "run_clm_wikitext103":
        if "--dataset-name" not in args:  # the paper's WikiText-103 from the Hub by default: its little sibling
            args += ["--dataset-name", str(data_dir / "wikitext-2-v1")]
        return (
            args
            + (
                "--max-steps 2 --max-train-tokens 1024 --max-eval-tokens 64 --block-size 32 "
                "--per-device-train-batch-size 2 --per-device-eval-batch-size 2"
            ).split()
        )
    if script == "run_semantic_segmentation":  # 128-pixel crops, not 512: a few images, one evaluated
        return (
            args
            + (
                "--max-steps 2 --max-train-samples 2 --per-device-train-batch-size 1 --crop-size 128 "
                "--max-eval-samples 1"
            ).split()
        )
    if script == "run_eigen_vit":
        return (
            args
            + ("--max-steps 2 --max-train-samples 40 --max-eval-samples 8 --batch-size 4 --spectral-samples 4").split()
        )
    return (
        args
        + (
            "--max-steps 2 --max-train-samples 16 --max-eval-samples 8 --per-device-train-batch-size 4 "
            "--per-device-eval-batch-size 8"
        ).split()
    )


def _check_trained(script: str, output_dir: Path) -> None:
    if script == "run_eigen_vit":
        results = json.loads((output_dir / "results.json").read_text())
        args = results["args"]
        assert len(results["data_efficiency"]) == len(args["variants"]) * len(args["fractions"])
        return
    name = "final_results.json" if script == "run_clm_wikitext103" else "all_results.json"
    metrics = json.loads((output_dir / name).read_text())
    assert math.isfinite(metrics["train_loss"]) and metrics["train_runtime"] > 0, metrics
    assert (output_dir / "model.safetensors").is_file()
    if script == "run_semantic_segmentation":  # SS and MS evaluation, and the processor saved with the model
        from transformers import AutoImageProcessor

        assert 0 <= metrics["eval_mean_iou"] <= 1 and 0 <= metrics["eval_mean_iou_ms"] <= 1, metrics
        assert 0 <= metrics["eval_pixel_accuracy"] <= 1 and 0 <= metrics["eval_pixel_accuracy_ms"] <= 1, metrics
        processor = AutoImageProcessor.from_pretrained(output_dir)
        assert type(processor).__name__ == "SegformerImageProcessorPil", type(processor)


@pytest.mark.slow
@pytest.mark.parametrize("source, command", ALL_COMMANDS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(ALL_COMMANDS)])
def test_documented_command_trains(source, command, data_dir, tmp_path):
    launcher, script, args = _split(command)
    args = _scaled(script, args, data_dir, tmp_path / "run")
    if "--config-file" in launcher:  # the accelerate config it names is valid
        from accelerate.commands.config.config_args import load_config_from_file

        config = load_config_from_file(str(EXAMPLES.parent / _flag(launcher, "--config-file")))
        assert config.mixed_precision == "bf16"
    gpu = "accelerate" in launcher or (launcher[:1] == ["torchrun"] and "--use-cpu" not in args)
    if launcher[:1] == ["torchrun"] and not gpu:  # the CPU command, as written: two processes joined by gloo
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        # `torchrun` is this interpreter's `torch.distributed.run`: the venv's own, activated or not.
        torchrun = [sys.executable, "-m", "torch.distributed.run", *launcher[1:]]
        process = subprocess.run(
            torchrun + [str(EXAMPLES / f"{script}.py"), *args],
            cwd=EXAMPLES.parent,
            env=env,
            timeout=600,
            capture_output=True,
            text=True,
        )
        assert process.returncode == 0, process.stderr[-6000:]  # the ranks' tracebacks, which check=True hid
    else:
        if gpu or "--bf16" in args:
            args += ["--use-cpu"]  # bf16 on a machine without a GPU (the only change besides the size)
        load_example(script).main(args)
    _check_trained(script, tmp_path / "run")
