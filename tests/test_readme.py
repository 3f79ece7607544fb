"""The README and the user guide as a newcomer meets them: every code block they show runs as written, scaled down
only in steps and data, with local stand-ins for Hub checkpoints and datasets (no Hub here). The README's first two
commands are CI's own (`.ci/run` runs them; tests/test_compare.py checks the main command's output).
"""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fresh_process import run_fresh
from tiny_models import local_deit_tiny, local_qwen2

ROOT = Path(__file__).resolve().parents[1]
README, GUIDE = ROOT / "README.md", ROOT / "docs" / "guide.md"
# Hub checkpoint -> a builder of a local stand-in of the same architecture
STAND_INS = {"Qwen/Qwen2.5-0.5B": local_qwen2, "facebook/deit-tiny-patch16-224": local_deit_tiny}


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def _run_python(code: str, cwd: Path) -> None:
    for name, build in STAND_INS.items():
        if f'"{name}"' in code:
            code = code.replace(f'"{name}"', repr(str(build(cwd / name.replace("/", "--")))))
    script = cwd / "snippet.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_readme_is_short_and_shows_what_a_newcomer_needs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 120
    for heading in ("## Install and run", "## Usage", "## The main command", "## Documentation", "## Citation"):
        assert heading in text, heading
    assert len(blocks(README, "bash")) == 2 and len(blocks(README, "bibtex")) == 1
    links = re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", text)
    assert links and all((ROOT / link).exists() for link in links), links


def test_the_readme_says_how_to_get_the_cpu_only_torch_and_keeps_ci_commands_runnable_offline():
    """On Linux PyPI's torch is the CUDA build: the README names PyTorch's CPU wheel index for the CPU-only build and
    PyTorch's own instructions for a GPU, outside the ```bash commands, which CI runs verbatim on a machine that reaches
    only a local package mirror."""
    text = README.read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "https://pytorch.org/get-started/locally/" in text
    assert not [block for block in blocks(README, "bash") if "download.pytorch.org" in block]
    assert "multi-GB CUDA build" not in text  # the pin alone does not avoid it


def test_the_prose_under_the_example_output_claims_nothing_one_run_did():
    """The table is one CPU's run; the sentence under it says what to read in it, which holds on any CPU, not which
    way one run went ("lowered ... on 2 seeds" was false on another CPU)."""
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- compare-default-output -->", "<!-- /compare-default-output -->"
    assert re.search(r"^On a [^\n]*\(Zen \d, AVX[\w-]*\)", text.split(start)[1], flags=re.M)  # names the CPU
    prose = text.split(end)[1].split("\n## ")[0]
    assert "Δ" in prose and "std" in prose and "wins" in prose
    claims = re.findall(r"\b(?:lowered|raised|improved|beat|won|reduced|increased)\b|\bon (?:all )?\d\b", prose)
    assert not claims, claims


@pytest.mark.slow
def test_readme_usage_block_runs_as_written(tmp_path, data_dir):
    code = blocks(README, "python")[0]
    assert "NeuTRENOViTConfig.from_preset" in code
    _run_python(code, tmp_path)
    # "anywhere, even without hf_neutreno installed": the folder it saved, in a process where the package is blocked
    out = run_fresh(
        f"""
        from transformers import AutoModelForImageClassification
        model = AutoModelForImageClassification.from_pretrained({str(tmp_path / "neutreno-deit-tiny")!r},
                                                                trust_remote_code=True)
        print(type(model).__name__, model.config.neutreno_lambda)
    """,
        tmp_path,
    )
    assert out.split() == ["NeuTRENOViTForImageClassification", "0.6"]
    # The folder holds the model's inputs too: `hf-neutreno diagnose` measures it on images as it is.
    import pyarrow.parquet as pq

    (tmp_path / "images").mkdir()
    cifar = pq.read_table(data_dir / "cifar10" / "test-00000-of-00001.parquet").slice(0, 2)
    pq.write_table(cifar, tmp_path / "images" / "test-00000-of-00001.parquet")
    argv = ["diagnose", "neutreno-deit-tiny", "--dataset", "images", "--metrics", "cosine_similarity", "--no-progress"]
    import os

    import hf_neutreno

    env = {**os.environ, "PYTHONPATH": str(Path(hf_neutreno.__file__).resolve().parents[1])}  # the code under test
    proc = subprocess.run(
        [sys.executable, "-m", "hf_neutreno", *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^layer 12 +\d\.\d{4}$", proc.stdout, flags=re.M), proc.stdout  # deit-tiny: 12 blocks


@pytest.mark.slow
def test_readme_value_path_block_runs_and_reloads_as_the_readme_says(tmp_path):
    """Adapted and saved as written; in a process without the package it loads adapted with trust_remote_code and
    as the plain model without it, as the sentence under the block says."""
    code = blocks(README, "python")[1]
    assert "apply_value_path" in code
    _run_python(code, tmp_path)
    out = json.loads(
        run_fresh(
            f"""
        import json, torch
        from transformers import AutoModelForCausalLM
        folder = {str(tmp_path / "qwen-value-residual")!r}
        adapted = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
        plain = AutoModelForCausalLM.from_pretrained(folder).eval()
        ids = torch.randint(3, 50, (1, 8))
        with torch.no_grad():
            difference = (adapted(ids).logits - plain(ids).logits).abs().max().item()
        print(json.dumps([type(adapted).__name__, type(plain).__name__, difference]))
    """,
            tmp_path,
        )
        .strip()
        .splitlines()[-1]
    )
    adapted_class, plain_class, difference = out
    assert (adapted_class, plain_class) == ("ValuePathQwen2ForCausalLM", "Qwen2ForCausalLM") and difference > 0


@pytest.mark.slow
def test_guide_segmenter_conversion_block_runs(tmp_path):
    code = next(block for block in blocks(GUIDE, "python") if "vit_to_neutreno" in block)
    # Scaled down in data only: the stand-in DeiT-tiny at the block's 512-pixel size, then a forward pass.
    _run_python(
        code
        + textwrap.dedent("""
        import torch
        assert type(model).__name__ == "NeuTRENOViTForSemanticSegmentation" and model.config.num_labels == 150
        with torch.no_grad():
            assert model(torch.randn(1, 3, 512, 512)).logits.shape == (1, 150, 32, 32)
    """),
        tmp_path,
    )


@pytest.mark.slow
def test_guide_wikitext_compare_command_runs(data_dir, tmp_path):
    [command] = [block for block in blocks(GUIDE, "bash") if "hf-neutreno compare" in block]
    args = command.replace("\\\n", " ").split()[2:]
    args[args.index("Salesforce/wikitext")] = str(data_dir / "wikitext-2-v1")
    args.remove("--dataset-config"), args.remove("wikitext-2-v1")
    args[args.index("--max-steps") + 1] = "2"  # scaled down: steps and data
    args[args.index("--max-eval-samples") + 1] = "2"
    args += [
        "--seeds",
        "2",
        "--max-train-samples",
        "16",
        "--probe-samples",
        "2",
        "--no-progress",
        "--output-dir",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "hf_neutreno", "compare", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["complete"] and results["metric"] == "perplexity" and results["seeds"] == [0, 1]


@pytest.mark.slow
def test_readme_compare_on_your_model_command_runs_as_written(tmp_path, data_dir):
    """The README's `compare` on "your model", as written, scaled down in steps and data only (2 steps of 8 images):
    the Hub checkpoint and dataset replaced by local stand-ins of the same kind (DeiT-tiny's shape, the CIFAR-10
    mirror)."""
    from cli_process import run_cli

    (command,) = blocks(README, "console")
    argv = command.replace("\\\n", " ").split()
    assert argv[:2] == ["hf-neutreno", "compare"]
    stand_ins = {
        "facebook/deit-tiny-patch16-224": str(local_deit_tiny(tmp_path / "deit")),
        "uoft-cs/cifar10": str(data_dir / "cifar10"),
    }
    argv = [stand_ins.get(arg, arg) for arg in argv[2:]]
    scale = ["--max-steps", "2", "--batch-size", "8", "--max-train-samples", "32", "--max-eval-samples", "16"]
    scale += ["--probe-samples", "8"]
    proc = run_cli("compare", *argv, *scale, "--output-dir", tmp_path / "out", "--no-progress", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(image-classification, fine-tuned from its weights)" in proc.stdout
    for variant in ("softmax", "neutreno-learnable", "value-residual-learnable"):
        assert re.search(rf"^{variant} +\d\.\d{{4}} ± \d\.\d{{4}}", proc.stdout, flags=re.M), proc.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    saved = [entry["model_dir"] for entry in results["variants"].values() if entry["model_dir"]]
    assert saved == list(results["variants"]) and all((tmp_path / "out" / d / "config.json").is_file() for d in saved)
    assert results["best_variant"] in (None, *saved) and results["verdict"]["text"]  # best only beyond the spread
    assert "learnable one starts at its coefficient (0: the pretrained function)" in proc.stdout.replace("\n", " ")
