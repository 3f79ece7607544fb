"""docs/segmentation-results.md: the commands it documents run as written (scaled down in steps and data only), and
its table quotes the metrics that the commands printed (the output blocks on the page)."""

import re
import shlex
from pathlib import Path

import pytest

from examples_loader import load_example

PAGE = Path(__file__).resolve().parents[1] / "docs" / "segmentation-results.md"
LOCAL_DATA = "$HF_NEUTRENO_DATA/fashion-scenes"  # as written on the page: the local copy of the dataset


def page_commands() -> list[list[str]]:
    """The script arguments of every documented run of examples/run_semantic_segmentation.py."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            tokens = shlex.split(line.split(" #")[0])
            if "examples/run_semantic_segmentation.py" in tokens:
                commands.append(tokens[tokens.index("examples/run_semantic_segmentation.py") + 1 :])
    return commands


def printed_metrics() -> list[dict[str, float]]:
    """The `***** all metrics *****` blocks quoted on the page, one per run, as printed by the script."""
    blocks = re.findall(r"```text\n(\*\*\*\*\* all metrics \*\*\*\*\*\n.*?)```", PAGE.read_text(), flags=re.S)
    return [
        {name: value for name, value in re.findall(r"^\s+(\S+)\s+=\s+(\S+)$", block, flags=re.M)} for block in blocks
    ]


def _without(command: list[str], *flags: str) -> list[str]:
    """The command without the given flags and their values."""
    return [t for i, t in enumerate(command) if t not in flags and not (i and command[i - 1] in flags)]


def test_the_page_documents_a_neutreno_and_a_softmax_run_with_the_same_settings():
    commands = page_commands()[:2]
    assert len(page_commands()) == 4  # the λ pair, then the decoder pair
    lambdas = [command[command.index("--neutreno-lambda") + 1] for command in commands]
    assert lambdas == ["0.6", "0"]
    assert _without(commands[0], "--neutreno-lambda", "--output-dir") == _without(
        commands[1], "--neutreno-lambda", "--output-dir"
    )  # the same seed, data, schedule and model: only λ differs
    assert LOCAL_DATA in commands[0] and "--seed" in commands[0]


def test_the_table_quotes_what_the_commands_printed():
    printed = printed_metrics()
    assert len(printed) == 2
    rows = dict(re.findall(r"^\| (NeuTRENO[^|]*|softmax[^|]*) \|(.*)\|$", PAGE.read_text(), flags=re.M))
    assert len(rows) == 2
    for (name, cells), metrics in zip(rows.items(), printed):
        values = [cell.strip() for cell in cells.split("|")]
        expected = [
            metrics[key]
            for key in (
                "eval_mean_iou",
                "eval_mean_iou_ms",
                "eval_pixel_accuracy",
                "eval_pixel_accuracy_ms",
                "train_runtime",
            )
        ]
        assert values[:5] == expected, name


def test_the_decoder_runs_differ_only_in_the_decoder():
    mask, linear = page_commands()[2:]
    overrides = [c[c.index("--config-overrides") + 1] for c in (mask, linear)]
    assert overrides[0].endswith(",decoder_type=mask_transformer") and overrides[1].endswith(",decoder_type=linear")
    assert overrides[0].rsplit(",", 1)[0] == overrides[1].rsplit(",", 1)[0]
    flags = ("--config-overrides", "--output-dir")
    assert _without(mask, *flags) == _without(linear, *flags)
    assert "--eval-steps" in mask and "--seed" in mask and LOCAL_DATA in mask


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1, 2, 3], ids=["neutreno", "softmax", "mask-transformer", "linear"])
def test_documented_command_runs(index, data_dir, tmp_path):
    args = page_commands()[index]
    args[args.index(LOCAL_DATA)] = str(data_dir / "fashion-scenes")
    args[args.index("--output-dir") + 1] = str(tmp_path / "run")
    metrics = load_example("run_semantic_segmentation").main(
        args + ["--max-steps", "2", "--max-train-samples", "32", "--max-eval-samples", "4"]
    )
    multi_scale = "--eval-multi-scale" not in args  # the decoder runs evaluate single-scale only
    for key in ("eval_mean_iou", "eval_pixel_accuracy") + (
        ("eval_mean_iou_ms", "eval_pixel_accuracy_ms") if multi_scale else ()
    ):
        assert 0 <= metrics[key] <= 1, (key, metrics)
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_results_page_quotes_the_segmentation_runs():
    """docs/results.md (the reproductions) reports the same mean IoUs as this page's table."""
    rows = re.findall(r"^\| (NeuTRENO[^|]*|softmax[^|]*) \|([^|]*)\|([^|]*)\|", PAGE.read_text(), flags=re.M)
    (_, neutreno_ss, neutreno_ms), (_, softmax_ss, softmax_ms) = rows
    text = " ".join((PAGE.parent / "results.md").read_text().split())
    section = text.split("**Semantic segmentation (NeuTRENO Table 2).**", 1)[1].split("**", 1)[0]
    assert f"Single-scale mIoU {neutreno_ss.strip()} (NeuTRENO" in section
    ss, ms = softmax_ss.strip(), neutreno_ms.strip()
    assert f"against {ss} (λ = 0); multi-scale {ms} against {softmax_ms.strip()}" in section
