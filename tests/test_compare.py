"""`hf-neutreno compare`: the README's default run end to end, paired seeds with ViT⁻, a WikiText-2 run, a Segmenter
on fashion-scenes, Ctrl-C and --resume, a killed run, and bad input.

Training amplifies rounding, so the digits a run prints differ between CPUs: nothing here compares printed numbers
with numbers written down elsewhere. Expected values are recomputed from what the run saved, with plain formulas
(accuracy, an N×N token cosine matrix, block perplexity, mean IoU from a confusion matrix), and the summaries from the
per-seed values with numpy, not read back from the command's own helpers.
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from PIL import Image
from transformers import AutoImageProcessor, AutoModelForCausalLM, AutoModelForImageClassification, AutoTokenizer

import hf_neutreno
from fresh_process import run_fresh
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification, cli
from hf_neutreno.data.loading import load_image_dataset
from hf_neutreno.value_path import MARKER
from tiny_models import MICRO_VIT

CHANCE = 0.1  # digits: 10 balanced classes
TINY = [
    "--max-steps",
    "4",
    "--max-train-samples",
    "128",
    "--max-eval-samples",
    "64",
    "--probe-samples",
    "16",
    "--no-progress",
]
README = Path(__file__).resolve().parents[1] / "README.md"
# The README's example output lies between these markers (invisible once rendered).
README_START, README_END = "<!-- compare-default-output -->", "<!-- /compare-default-output -->"
NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
HEADER = ["variant", "accuracy", "Δ (w/t/l)", "last-layer cosine", "Δ (w/t/l)"]


def _table_block(stdout: str) -> list[str]:
    """The printed table and its notes: from the header line to the first blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("variant "))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _table_and_verdict(stdout: str) -> list[str]:
    """What the README shows of the output: the table, its notes and the verdict (up to "Written to")."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("variant "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Written to"))
    return "\n".join(lines[start:end]).rstrip().splitlines()


def _table_rows(stdout: str) -> dict[str, list[str]]:
    """The printed table: variant -> cells (cells are separated by two or more spaces)."""
    rows = {}
    for line in _table_block(stdout)[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] in ("softmax", "neutreno", "vit-minus"):
            rows[cells[0]] = cells
    return rows


def _mean_std(values) -> str:
    """'mean ± sample std' as the table prints it, computed with numpy."""
    return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"


def _pairwise_cosine(hidden: torch.Tensor) -> float:
    """Mean over samples of the mean cosine of all token pairs i ≠ j, from the full N×N matrix."""
    unit = torch.nn.functional.normalize(hidden.double(), dim=-1)
    gram = unit @ unit.transpose(1, 2)
    n = hidden.shape[1]
    off_diagonal = gram.sum(dim=(1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)
    return (off_diagonal / (n * (n - 1))).mean().item()


def _readme_example_block() -> list[str]:
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index(README_START) + len(README_START) : readme.index(README_END)]
    return re.search(r"^```\n(.*?)^```$", section, flags=re.S | re.M).group(1).splitlines()


def _shape(lines: list[str]) -> list[str]:
    """The table with its numbers masked: what every CPU prints alike."""
    return [" ".join(NUMBER.sub("#", line).split()) for line in lines]


@pytest.mark.slow
def test_default_compare_as_the_readme_runs_it(tmp_path):
    """The README's main command, as written (in a subprocess, offline) but 3 epochs instead of 8 (CI runs the full
    one), on any CPU: the table's layout, 3 paired seeds from identical weights, every printed summary recomputed from
    results.json, and the saved models."""
    out = tmp_path / "compare"
    readme = README.read_text(encoding="utf-8")
    assert "HF_HUB_OFFLINE=1 hf-neutreno compare" in readme and "ATEN_CPU_CAPABILITY" not in readme
    src = str(Path(hf_neutreno.__file__).resolve().parents[1])  # the code under test, wherever it is installed
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": src}
    command = [sys.executable, "-m", "hf_neutreno", "compare", "--epochs", "3", "--output-dir", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]

    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and list(results["variants"]) == ["softmax", "neutreno"]
    assert results["settings"]["model"] == "vit-micro" and results["settings"]["dataset"] == "digits"
    assert results["format_version"] == 3 and results["baseline"] == "softmax"
    assert results["seeds"] == [0, 1, 2] and results["models_from_seed"] == 0

    # The table: its columns and rows, as the README shows them (numbers aside).
    printed = _table_block(proc.stdout)
    assert re.split(r"\s{2,}", printed[0].strip()) == HEADER
    shown = _readme_example_block()  # the table, its notes, a blank line and the verdict, whose words vary with the run
    assert _shape(shown[: shown.index("")]) == _shape(printed)
    assert shown[shown.index("") + 1].startswith("Verdict: ") and _table_and_verdict(proc.stdout)[-1]
    assert any(line.startswith("Verdict: ") for line in _table_and_verdict(proc.stdout))

    # Paired: within a seed both variants start from the same weights; another seed starts elsewhere.
    per_seed = {variant: entry["per_seed"] for variant, entry in results["variants"].items()}
    starts = [[run["initial_weights_sha256"] for run in runs] for runs in per_seed.values()]
    assert starts[0] == starts[1] and len(set(starts[0])) == 3

    # Mean ± sample std over the seeds, the paired difference and w/t/l: recomputed from the per-seed values.
    rows = _table_rows(proc.stdout)
    assert set(rows) == {"softmax", "neutreno"}
    for variant, runs in per_seed.items():
        assert [run["seed"] for run in runs] == [0, 1, 2]
        for run in runs:
            assert run["accuracy"] > CHANCE, (variant, run)  # every seed of every variant learns
            curve = run["learning_curve"]  # about ten points: every tenth of the steps, rounded
            assert 8 <= len(curve) <= 10 and curve[-1]["loss"] < curve[0]["loss"], curve
        assert rows[variant][1] == _mean_std([run["accuracy"] for run in runs])
        assert rows[variant][2 if variant == "softmax" else 3] == _mean_std([run["last_layer_cosine"] for run in runs])
    for key, column, better in (("accuracy", 2, 1), ("last_layer_cosine", 4, -1)):
        difference = np.array([n[key] - b[key] for n, b in zip(per_seed["neutreno"], per_seed["softmax"])])
        ties = np.abs(difference) < 0.002  # the stated tolerance (hf_neutreno.engine.compare.verdict.TIE_TOLERANCE)
        wins, tied = int(((better * difference > 0) & ~ties).sum()), int(ties.sum())
        counts = f"({wins}/{tied}/{3 - wins - tied})"
        assert rows["neutreno"][column] == f"{difference.mean():+.4f} ± {difference.std(ddof=1):.4f} {counts}"
    with Image.open(out / "comparison.png") as plot:
        assert plot.format == "PNG" and plot.width > 200 and plot.height > 200
    assert sorted(p.name for p in out.iterdir()) == ["comparison.png", "neutreno", "results.json", "softmax"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare"]  # nothing left beside it

    # What the table says is what the saved models (the first seed's) do, recomputed here on the digits test split.
    test = load_image_dataset("digits")["test"]
    assert len(test) == results["data"]["eval_images"] == 360
    images = [image.convert("RGB") for image in test["image"]]
    expected = {}
    for variant, entry in results["variants"].items():
        folder = out / variant
        model = AutoModelForImageClassification.from_pretrained(folder).eval()
        assert model.config.neutreno_lambda == (0.6 if variant == "neutreno" else 0.0)
        pixels = AutoImageProcessor.from_pretrained(folder)(images, return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            logits = model(pixels).logits
            probe_hidden = model(pixels[:256], output_hidden_states=True).hidden_states[-1]
        first = entry["per_seed"][0]
        accuracy = (logits.argmax(-1) == torch.tensor(test["label"])).double().mean().item()
        assert abs(accuracy - first["accuracy"]) <= 1 / len(test) + 1e-9, (variant, accuracy, first["accuracy"])
        assert _pairwise_cosine(probe_hidden) == pytest.approx(first["last_layer_cosine"], rel=1e-4, abs=1e-6)
        expected[variant] = logits[:16]
    raw = np.stack([np.asarray(image) for image in test["image"][:16]])
    torch.save({"raw": torch.from_numpy(raw), "logits": expected}, tmp_path / "expected.pt")

    # Each saved folder loads where hf_neutreno cannot be imported, and predicts the same.
    report = json.loads(
        run_fresh(
            f"""
        import json, torch
        from PIL import Image
        from transformers import AutoImageProcessor, AutoModelForImageClassification
        expected = torch.load("{tmp_path / "expected.pt"}")
        images = [Image.fromarray(a.numpy()).convert("RGB") for a in expected["raw"]]
        report = {{}}
        for variant, logits in expected["logits"].items():
            folder = "{out}/" + variant
            model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
            pixels = AutoImageProcessor.from_pretrained(folder)(images, return_tensors="pt")["pixel_values"]
            with torch.no_grad():
                got = model(pixels).logits
            report[variant] = [type(model).__module__, (got - logits).abs().max().item(),
                               bool((got.argmax(-1) == logits.argmax(-1)).all())]
        print(json.dumps(report))
    """,
            tmp_path,
        )
        .strip()
        .splitlines()[-1]
    )
    for variant in ("softmax", "neutreno"):
        module, difference, same_predictions = report[variant]
        assert module.startswith("transformers_modules") and difference == 0.0 and same_predictions, report


def test_each_seed_pairs_the_variants_vit_minus_included(tmp_path, monkeypatch):
    """Within a seed every variant starts from the same weights (ViT⁻: all but its value/output maps) and sees the
    same batches in the same order; another seed gives other weights and another order."""
    starts, labels = {}, {}
    train, training_step = transformers.Trainer.train, transformers.Trainer.training_step

    def name(trainer):
        model = trainer.model
        return trainer.args.seed, f"{model.config.model_type} λ={model.config.neutreno_lambda}"

    def recording_train(self, *args, **kwargs):
        starts[name(self)] = {k: v.clone() for k, v in self.model.state_dict().items()}
        return train(self, *args, **kwargs)

    def recording_step(self, model, inputs, *args, **kwargs):
        labels.setdefault(name(self), []).append(inputs["labels"].clone())
        return training_step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "train", recording_train)
    monkeypatch.setattr(transformers.Trainer, "training_step", recording_step)
    out = tmp_path / "run"
    # vit-minus listed first: softmax, the baseline every variant starts from, still trains first in every seed
    argv = ["compare", "--variants", "vit-minus,neutreno,softmax", "--seed", "5", "--seeds", "2"]
    assert cli.main([*argv, "--output-dir", str(out), *TINY]) == 0

    results = json.loads((out / "results.json").read_text())
    assert list(results["variants"]) == ["softmax", "vit-minus", "neutreno"] and results["seeds"] == [5, 6]
    for entry in results["variants"].values():
        assert [run["seed"] for run in entry["per_seed"]] == [5, 6]
        assert all(
            math.isfinite(run["accuracy"]) and math.isfinite(run["last_layer_cosine"]) for run in entry["per_seed"]
        )
        assert entry.get("difference_from_baseline", {"accuracy": {"n": 2}})["accuracy"]["n"] == 2
    assert (
        sorted(starts)
        == sorted(labels)
        == [
            (seed, variant)
            for seed in (5, 6)
            for variant in ("eigen_vit λ=0.0", "neutreno_vit λ=0.0", "neutreno_vit λ=0.6")
        ]
    )
    for seed in (5, 6):
        baseline, neutreno = starts[seed, "neutreno_vit λ=0.0"], starts[seed, "neutreno_vit λ=0.6"]
        vit_minus = starts[seed, "eigen_vit λ=0.0"]
        assert baseline.keys() == neutreno.keys() and all(torch.equal(baseline[k], neutreno[k]) for k in baseline)
        shared = baseline.keys() & vit_minus.keys()
        assert all(torch.equal(baseline[k], vit_minus[k]) for k in shared)
        assert {k.rsplit(".", 2)[-2] for k in baseline.keys() - shared} == {"v_proj", "o_proj"}
        assert {k.rsplit(".", 1)[-1] for k in vit_minus.keys() - shared} == {"theta", "psi", "output_bias"}
        batches = [labels[key] for key in labels if key[0] == seed]
        assert len(batches) == 3 and all(len(b) == 4 for b in batches)
        assert all(torch.equal(a, b) for other in batches[1:] for a, b in zip(batches[0], other))
    first, second = starts[5, "neutreno_vit λ=0.0"], starts[6, "neutreno_vit λ=0.0"]
    assert not all(torch.equal(first[k], second[k]) for k in first)
    key = "neutreno_vit λ=0.0"
    assert not all(torch.equal(a, b) for a, b in zip(labels[5, key], labels[6, key]))

    # The saved ViT⁻ has the baseline's shape and a negative spectrum: every W_V W_O of every head is ≤ 0.
    config = json.loads((out / "vit-minus" / "config.json").read_text())
    reference = json.loads((out / "softmax" / "config.json").read_text())
    assert (config["model_type"], config["spectrum_sign"]) == ("eigen_vit", "negative")
    fields = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size")
    assert all(config[f] == reference[f] for f in fields)
    model = AutoModelForImageClassification.from_pretrained(out / "vit-minus")
    for layer in model.vit.layers:
        attention = layer.attention
        theta, psi = attention.theta.detach().double(), attention.psi.detach().double()
        basis = torch.linalg.qr(theta).Q
        product = basis @ torch.diag_embed(-psi.square()) @ basis.transpose(1, 2)
        assert torch.linalg.eigvalsh(product).max() <= 1e-9


def test_value_path_variants_are_the_seeds_softmax_model_adapted_trained_and_saved(tmp_path, monkeypatch):
    """`value-residual` and `neutreno-learnable`: the seed's softmax model (its weights, bit for bit) with
    `apply_value_path` at the run's α / λ; the learnable one adds only its coefficients, set to λ. They are trained,
    scored and saved like the others: the folder loads adapted where this package is not installed
    (`test_value_path_presets.py`)."""
    starts, train = {}, transformers.Trainer.train

    def recording_train(self, *args, **kwargs):
        starts[len(starts)] = (
            {k: v.clone() for k, v in self.model.state_dict().items()},
            getattr(self.model.config, "value_path", None),
        )
        return train(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "train", recording_train)
    out = tmp_path / "run"
    argv = [
        "compare",
        "--variants",
        "softmax,value-residual,neutreno-learnable",
        "--value-residual-alpha",
        "0.25",
        "--seeds",
        "1",
        "--output-dir",
        str(out),
        *TINY,
    ]
    assert cli.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["variants"]) == ["softmax", "value-residual", "neutreno-learnable"]
    (softmax, none), (residual, residual_path), (learnable, learnable_path) = starts.values()
    assert none is None
    assert residual_path == {
        "method": "value_residual",
        "coefficient": 0.25,
        "learnable": False,
        "layers": [1, 2, 3, 4, 5],
    }
    assert (learnable_path["method"], learnable_path["learnable"], learnable_path["coefficient"]) == (
        "neutreno",
        True,
        0.6,
    )
    assert residual.keys() - softmax.keys() == {MARKER}  # the adapted model's marker
    assert all(torch.equal(softmax[k], residual[k]) for k in softmax)
    own = learnable.keys() - softmax.keys() - {MARKER}  # one coefficient on each adapted layer
    assert own == {f"vit.layers.{i}.attention.value_path_coefficient.value" for i in range(1, 6)}, own
    assert all(torch.equal(softmax[k], learnable[k]) for k in softmax)
    assert all(torch.equal(learnable[k], torch.tensor(0.6)) for k in own)
    for name in ("value-residual", "neutreno-learnable"):
        entry = results["variants"][name]
        assert entry["value_path"]["method"] in ("value_residual", "neutreno")
        saved = json.loads((out / entry["model_dir"] / "config.json").read_text())
        assert saved["value_path"] == entry["value_path"], (saved["value_path"], entry["value_path"])
        assert saved["auto_map"]["AutoModelForImageClassification"].split(".")[-1].startswith("ValuePath")
        assert entry["difference_from_baseline"]["accuracy"]["n"] == 1
    assert results["variants"]["value-residual"]["description"] == "value residual, α=0.25"
    assert sorted(p.name for p in out.iterdir()) == [
        "comparison.png",
        "neutreno-learnable",
        "results.json",
        "softmax",
        "value-residual",
    ]


def test_text_compare_on_wikitext2_gives_the_perplexity_of_the_saved_models(data_dir, tmp_path, capsys):
    out = tmp_path / "text"
    argv = [
        "compare",
        "--model",
        "gpt-micro",
        "--dataset",
        str(data_dir / "wikitext-2-v1"),
        "--max-steps",
        "6",
        "--batch-size",
        "8",
        "--max-eval-samples",
        "8",
        "--probe-samples",
        "4",
        "--output-dir",
        str(out),
        "--no-progress",
        "--seeds",
        "1",
    ]
    assert cli.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["variants"]) == ["softmax", "neutreno"] and results["metric"] == "perplexity"
    assert results["variants"]["neutreno"]["neutreno_lambda"] == 0.4  # the GPT preset's λ
    # One seed: no spread to show; the difference is that seed's, a win when the perplexity is lower by more than the
    # tolerance.
    rows = _table_rows(capsys.readouterr().out)
    baseline, neutreno = (results["variants"][v]["per_seed"] for v in ("softmax", "neutreno"))
    assert [run["seed"] for run in baseline + neutreno] == [0, 0]
    difference = neutreno[0]["perplexity"] - baseline[0]["perplexity"]
    assert rows["softmax"][1] == f"{baseline[0]['perplexity']:.2f}"
    assert results["variants"]["softmax"]["perplexity"]["std"] is None  # strict JSON: one seed has no spread
    tie = abs(difference) < 0.002 * baseline[0]["perplexity"]  # the stated tolerance: 0.2 % of the baseline's
    counts = "0/1/0" if tie else f"{int(difference < 0)}/0/{int(difference > 0)}"  # better / tied / worse
    assert rows["neutreno"][2] == f"{difference:+.2f} ({counts})"

    # Independently: the first 8 blocks of 64 tokens of the test split, each line + <eos>, every token but the first
    # scored once with the context of its own block.
    text = pq.read_table(data_dir / "wikitext-2-v1" / "test-00000-of-00001.parquet").column("text").to_pylist()
    for variant, entry in results["variants"].items():
        entry = entry["per_seed"][0]
        tokenizer = AutoTokenizer.from_pretrained(out / variant, trust_remote_code=True)
        model = AutoModelForCausalLM.from_pretrained(out / variant).eval()
        assert len(tokenizer) == model.config.vocab_size == 33279  # WikiText-2's 33,278 words + <pad>
        ids = []
        for line in text:
            ids += tokenizer(line)["input_ids"]
            if len(ids) >= 8 * 64:
                break
        stream = torch.tensor(ids[: 8 * 64])
        nll, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(stream) - 1, 64):
                end = min(start + 64, len(stream) - 1)
                log_probs = model(input_ids=stream[None, start:end]).logits[0].float().log_softmax(-1)
                nll -= log_probs.gather(-1, stream[start + 1 : end + 1, None]).sum().item()
                count += end - start
        perplexity = math.exp(nll / count)
        assert 1 < entry["perplexity"] < len(tokenizer), entry  # finite, and better than a uniform guess
        assert entry["perplexity"] == pytest.approx(perplexity, rel=1e-4)
        assert math.isfinite(entry["last_layer_cosine"])


def test_segmenter_compare_on_fashion_scenes_scores_the_saved_models_by_mean_iou(data_dir, tmp_path):
    """A tiny run of softmax and NeuTRENO Segmenters (λ in encoder and decoder) over two paired seeds: mean IoU in
    [0, 1] per seed, and the first seed's saved models give that mIoU, recomputed from a confusion matrix on the raw
    annotation PNGs with transformers' own post-processing."""
    from datasets import load_dataset
    from transformers import AutoModelForSemanticSegmentation

    scenes = data_dir / "fashion-scenes"
    out = tmp_path / "segmentation"
    argv = [
        "compare",
        "--model",
        "segmenter-micro",
        "--dataset",
        str(scenes),
        "--max-steps",
        "3",
        "--batch-size",
        "8",
        "--max-train-samples",
        "48",
        "--max-eval-samples",
        "16",
        "--probe-samples",
        "4",
        "--seeds",
        "2",
        "--output-dir",
        str(out),
        "--no-progress",
    ]
    assert cli.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert (results["task"], results["metric"], results["eval_split"]) == (
        "semantic-segmentation",
        "mean_iou",
        "validation",
    )
    assert list(results["variants"]) == ["softmax", "neutreno"] and results["complete"]
    # the encoder's 6 blocks after the embeddings, then the mask transformer's 2; the table's cosine is block 6's
    assert results["cosine_layers"] == list(range(9)) and results["decoder_layers"] == [7, 8]
    assert results["last_layer"] == 6
    for entry in results["variants"].values():
        assert [run["seed"] for run in entry["per_seed"]] == [0, 1]
        for run in entry["per_seed"]:
            assert 0.0 <= run["mean_iou"] <= 1.0 and math.isfinite(run["last_layer_cosine"])
            assert run["last_layer_cosine"] == run["cosine_similarity"][6]
    assert results["variants"]["neutreno"]["difference_from_baseline"]["mean_iou"]["n"] == 2

    id2label = {int(k): v for k, v in json.loads((scenes / "id2label.json").read_text()).items()}
    validation = load_dataset("parquet", data_dir=str(scenes))["validation"].shuffle(seed=0).select(range(16))
    references = np.stack([np.asarray(annotation) for annotation in validation["annotation"]]).astype(np.int64)
    for variant, entry in results["variants"].items():
        model = AutoModelForSemanticSegmentation.from_pretrained(out / variant).eval()
        processor = AutoImageProcessor.from_pretrained(out / variant)
        assert model.config.id2label == id2label and type(model).__name__ == "NeuTRENOViTForSemanticSegmentation"
        lam = 0.6 if variant == "neutreno" else 0.0
        assert (model.config.neutreno_lambda, model.config.decoder_config().neutreno_lambda) == (lam, lam)
        pixels = processor([image.convert("RGB") for image in validation["image"]], return_tensors="pt")
        with torch.no_grad():
            outputs = model(pixel_values=pixels["pixel_values"])
        maps = processor.post_process_semantic_segmentation(outputs, target_sizes=[(64, 64)] * 16)
        predictions = torch.stack(maps).numpy()
        classes = len(id2label)
        confusion = np.bincount(references.ravel() * classes + predictions.ravel(), minlength=classes**2)
        confusion = confusion.reshape(classes, classes)
        union = confusion.sum(0) + confusion.sum(1) - np.diag(confusion)
        present = union > 0
        expected = (np.diag(confusion)[present] / union[present]).mean()
        assert entry["per_seed"][0]["mean_iou"] == pytest.approx(expected, abs=1e-9), variant


@pytest.mark.parametrize("coefficient_learning_rate", [None, 1e-2])
def test_value_path_parameters_train_without_weight_decay_at_their_own_learning_rate(
    tmp_path, coefficient_learning_rate
):
    """From scratch (no --coefficient-learning-rate: the model's rate) as when fine-tuning: the learnable coefficients
    and gates are in one optimizer group without weight decay, which would pull them towards 0 (the remedy off), and
    in no other group. One AdamW step with a zero gradient leaves them where they are."""
    from hf_neutreno import apply_value_path
    from hf_neutreno.engine.compare.run import _CompareTrainer
    from hf_neutreno.value_path import value_path_parameters
    from tiny_models import tiny_model, training_args

    model = apply_value_path(tiny_model("llama"), "value_residual", 0.3, learnable=True)
    args = training_args(tmp_path, learning_rate=1e-3, weight_decay=0.05)
    trainer = _CompareTrainer(model=model, args=args, coefficient_learning_rate=coefficient_learning_rate)
    optimizer = trainer.create_optimizer()
    own = list(value_path_parameters(model).values())
    groups = [g for g in optimizer.param_groups if any(p is q for p in g["params"] for q in own)]
    assert len(groups) == 1 and len(groups[0]["params"]) == len(own)
    assert groups[0]["weight_decay"] == 0.0 and groups[0]["lr"] == (coefficient_learning_rate or 1e-3)
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    before = [p.detach().clone() for p in own]
    optimizer.step()
    assert all(torch.equal(p, b) for p, b in zip(own, before))


def test_diverged_runs_are_recorded_and_read_instead_of_stopping_the_command(tmp_path):
    """At a learning rate of 1e9 every run's weights become NaN (their accuracy, by argmax, is still a number). Each
    run is recorded as diverged with no score, no diverged model is saved, results.json stays valid JSON, and the
    verdict says the baseline diverged. Before, the NaN cosine stopped the command at its first JSON write."""
    out = tmp_path / "diverged"
    assert cli.main(["compare", "--output-dir", str(out), "--seeds", "2", "--learning-rate", "1e9", *TINY]) == 0
    results = json.loads((out / "results.json").read_text())
    runs = [run for entry in results["variants"].values() for run in entry["per_seed"]]
    assert len(runs) == 4 and all(run["diverged"] and run["accuracy"] is None for run in runs)
    assert results["best_variant"] is None and results["verdict"]["text"].startswith("The baseline diverged")
    assert not any((out / name).exists() for name in results["variants"])


def test_library_entry_point_returns_what_it_writes_and_the_cli_shares_its_defaults(tmp_path):
    """`run_comparison` (what `hf-neutreno compare` calls) returns results.json's content; the command's defaults are
    `CompareSettings()`'s; the caller's settings and torch's thread count are left as they were."""
    from hf_neutreno.cli import build_parser
    from hf_neutreno.engine.compare import CompareSettings, run_comparison

    args = build_parser("compare").parse_args(["compare"])
    assert CompareSettings(**{k: getattr(args, k) for k in vars(CompareSettings())}) == CompareSettings()
    settings = CompareSettings(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        max_train_samples=64,
        max_eval_samples=32,
        probe_samples=8,
        no_progress=True,
    )
    threads = torch.get_num_threads()
    results = run_comparison(settings)
    assert results == json.loads((tmp_path / "run" / "results.json").read_text()) and results["complete"]
    assert results["settings"]["learning_rate"] == 3e-3 and settings.learning_rate is None
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="--probe-samples must be at least 1"):
        run_comparison(CompareSettings(output_dir=str(tmp_path / "bad"), probe_samples=0))
    assert not (tmp_path / "bad").exists()


NUMBERS = (
    "initial_weights_sha256",
    "accuracy",
    "last_layer_cosine",
    "cosine_similarity",
    "train_loss",
    "learning_curve",
)  # what a run computes (not how long it took)


def _numbers(results: dict) -> dict:
    return {
        variant: [{key: run[key] for key in NUMBERS} for run in entry["per_seed"]]
        for variant, entry in results["variants"].items()
    }


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    """An uninterrupted tiny run of two seeds."""
    torch.set_num_threads(1)  # as every test's (conftest): the thread count changes the rounding
    out = tmp_path_factory.mktemp("compare") / "complete"
    assert cli.main(["compare", "--output-dir", str(out), "--seeds", "2", *TINY]) == 0
    return out


@pytest.mark.parametrize("where", ["training", "saving"])
def test_ctrl_c_keeps_finished_runs_and_resume_ends_as_an_uninterrupted_run(
    tmp_path, monkeypatch, capsys, where, complete_run, request
):
    """Ctrl-C in the first seed's neutreno run: the finished softmax run stays usable beside --output-dir and nothing
    half-written remains; a rerun without --resume refuses to drop it; --resume trains only what is left, with the
    numbers of an uninterrupted run."""
    if where == "training":
        request.getfixturevalue("interrupt_neutreno_training")
    else:  # after part of the folder is written
        save = NeuTRENOViTForImageClassification.save_pretrained

        def save_then_interrupt(self, folder, *args, **kwargs):
            save(self, folder, *args, **kwargs)
            if self.config.neutreno_lambda > 0:
                raise KeyboardInterrupt

        monkeypatch.setattr(NeuTRENOViTForImageClassification, "save_pretrained", save_then_interrupt)
    out, work = tmp_path / "run", tmp_path / "run.incomplete"
    seeds = 2 if where == "training" else 1
    argv = ["compare", "--output-dir", str(out), "--seeds", str(seeds), *TINY]
    assert cli.main(argv) == 130
    message = capsys.readouterr().err
    assert "Interrupted" in message and "--resume" in message and str(work / "results.json") in message
    assert not out.exists() and sorted(p.name for p in work.iterdir()) == ["results.json", "softmax"]
    results = json.loads((work / "results.json").read_text())
    assert not results["complete"] and list(results["variants"]) == ["softmax"]
    assert AutoModelForImageClassification.from_pretrained(work / "softmax").config.neutreno_lambda == 0.0
    AutoImageProcessor.from_pretrained(work / "softmax")
    monkeypatch.undo()

    trained, original_train = [], transformers.Trainer.train

    def recording_train(self, *args, **kwargs):
        trained.append((self.args.seed, self.model.config.neutreno_lambda))
        return original_train(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "train", recording_train)
    assert cli.main(argv) == 2  # without --resume the finished run is not dropped
    message = capsys.readouterr().err
    assert "--resume" in message and str(work) in message and "1 runs finished" in message
    assert not trained and not out.exists() and json.loads((work / "results.json").read_text()) == results

    assert cli.main([*argv, "--resume"]) == 0
    assert trained == [(0, 0.6), (1, 0.0), (1, 0.6)][: 2 * seeds - 1]  # only what was left
    assert not work.exists() and sorted(p.name for p in out.iterdir()) == [
        "comparison.png",
        "neutreno",
        "results.json",
        "softmax",
    ]
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["complete"] and list(resumed["variants"]) == ["softmax", "neutreno"]
    if where == "training":  # the same numbers as a run that was never interrupted
        assert _numbers(resumed) == _numbers(json.loads((complete_run / "results.json").read_text()))


def test_a_rerun_keeps_the_earlier_run_until_it_is_complete(
    tmp_path, monkeypatch, capsys, complete_run, interrupt_neutreno_training
):
    """A second run into the same --output-dir, stopped in its last training: the first run is there, complete and
    untouched; the second replaces it only once it completes."""
    out = tmp_path / "run"
    shutil.copytree(complete_run, out)
    argv = ["compare", "--output-dir", str(out), "--seeds", "1", *TINY]
    first = (out / "results.json").read_text()
    weights = (out / "neutreno" / "model.safetensors").read_bytes()
    assert cli.main([*argv[: -len(TINY)], "--max-steps", "5", *TINY[2:]]) == 130
    assert (out / "results.json").read_text() == first
    assert (out / "neutreno" / "model.safetensors").read_bytes() == weights
    monkeypatch.undo()
    second_argv = [*argv[: -len(TINY)], "--max-steps", "5", *TINY[2:], "--resume"]
    assert cli.main(second_argv) == 0
    second = (out / "results.json").read_text()
    assert json.loads(second)["complete"] and json.loads(second)["settings"]["max_steps"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    # Killed between the two renames of the final swap: the earlier run is in run.replaced, the complete new one
    # still in run.incomplete, and no run/. The next command finishes the swap (here, nothing is left to train).
    shutil.copytree(out, tmp_path / "run.incomplete")
    out.rename(tmp_path / "run.replaced")
    (tmp_path / "run.replaced" / "results.json").write_text(first)
    monkeypatch.setattr(transformers.Trainer, "train", lambda *args, **kwargs: pytest.fail("training started"))
    capsys.readouterr()
    assert cli.main(second_argv) == 0
    assert "nothing to resume" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and (out / "results.json").read_text() == second


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_numbers_of_an_uninterrupted_one(tmp_path):
    """SIGKILL, no clean-up at all, as a user's run meets it (the CLI in a subprocess): killed during its second
    seed, `--resume` ends with the results.json numbers of an uninterrupted run; and a rerun killed at any moment
    leaves no fewer finished runs on disk than there were before it started."""
    src = str(Path(hf_neutreno.__file__).resolve().parents[1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": src}
    command = [sys.executable, "-m", "hf_neutreno", "compare", "--seeds", "3", *TINY]

    def finished(folder: Path) -> int:
        try:
            results = json.loads((folder / "results.json").read_text())
        except (OSError, ValueError):
            return 0
        return sum(len(entry["per_seed"]) for entry in results["variants"].values())

    def on_disk(out: Path) -> int:  # every finished run: the complete one, the interrupted one, one being swapped
        return sum(finished(out.with_name(out.name + suffix)) for suffix in ("", ".incomplete", ".replaced"))

    def run(out: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, "--output-dir", str(out), *extra],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )

    def killed(out: Path, when, *extra: str) -> None:
        """Start a run and SIGKILL it once `when(seconds since start)` holds."""
        process = subprocess.Popen(
            [*command, "--output-dir", str(out), *extra],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        start = time.monotonic()
        while process.poll() is None and not when(time.monotonic() - start):
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL  # killed while running, not after it ended

    full = tmp_path / "full"
    assert run(full).returncode == 0
    out, work = tmp_path / "run", tmp_path / "run.incomplete"
    killed(out, lambda _: finished(work) >= 2)  # seed 0's two runs are recorded: the second seed has begun
    done = finished(work)
    assert 2 <= done < 6 and not out.exists()
    refused = run(out)  # without --resume the finished runs are kept, not overwritten
    assert refused.returncode == 2 and "--resume" in refused.stderr and finished(work) == done
    assert run(out, "--resume").returncode == 0 and not work.exists()
    numbers = _numbers(json.loads((out / "results.json").read_text()))
    assert numbers == _numbers(json.loads((full / "results.json").read_text()))

    # Reruns with other settings (the complete run above stays until one completes), killed at several moments.
    for when in (lambda seconds: seconds > 1.0, lambda _: finished(work) >= 5):
        before = on_disk(out)
        killed(out, when, "--seed", "7", "--resume")  # each continues what the one before it finished
        assert on_disk(out) >= before and _numbers(json.loads((out / "results.json").read_text())) == numbers
    assert run(out, "--seed", "7", "--resume").returncode == 0
    assert json.loads((out / "results.json").read_text())["seeds"] == [7, 8, 9] and not work.exists()


def _parquet_folder(folder: Path) -> Path:
    folder.mkdir()
    table = pa.table({"pixels": [[0, 1], [2, 3]], "y": [0, 1]})
    for split in ("train", "test"):
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet")
    return folder


def _saved_model(folder: Path) -> Path:
    config = NeuTRENOViTConfig(**MICRO_VIT, num_hidden_layers=1)
    NeuTRENOViTForImageClassification(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "case, options, expected",
    [
        (
            "unknown model",
            ["--model", "vit-huge"],
            ["--model", "vit-huge", "a preset", "vit-micro", "Hub model id", "could not be loaded"],
        ),
        (
            "unknown dataset",
            ["--dataset", "no-such-dataset-xyz"],
            ["--dataset 'no-such-dataset-xyz'", "'digits'", "HF_HUB_OFFLINE"],
        ),
        ("missing folder", ["--dataset", "{tmp}/missing"], ["--dataset", "does not exist"]),
        (
            "image preset, text data",
            ["--dataset", "{data}/wikitext-2-v1"],
            ["--model vit-micro is an image classifier", "no Image column and ClassLabel column", "'text'"],
        ),
        (
            "text preset, image data",
            ["--model", "gpt-micro"],
            ["--model gpt-micro is a language model", "--dataset 'digits' has no `text` column"],
        ),
        ("wrong columns", ["--dataset", "{parquet}"], ["--dataset", "no Image column", "'pixels'", "'y'"]),
        (
            "vit-minus for text",
            ["--model", "gpt-micro", "--variants", "softmax,vit-minus"],
            ["--variants vit-minus needs an image classifier preset", "gpt-micro is a language model"],
        ),
        (
            "unknown variant",
            ["--variants", "softmax,neutreno,linear"],
            ["--variants 'softmax,neutreno,linear'", "'vit-minus'", "unknown: ['linear']"],
        ),
        ("no baseline", ["--variants", "neutreno"], ["--variants 'neutreno'", "softmax (the baseline"]),
        (
            "output dir with a model",
            ["--output-dir", "{model}"],
            ["--output-dir", "a model (config.json)", "nothing was written"],
        ),
        ("output dir with files", ["--output-dir", "{files}"], ["--output-dir", "notes.txt", "not an earlier"]),
        ("bad budget", ["--batch-size", "0"], ["--batch-size must be at least 1"]),
        ("no seeds", ["--seeds", "0"], ["--seeds must be at least 1, got 0"]),
        (
            "segmentation preset, classification data",
            ["--model", "segmenter-micro"],
            [
                "--model segmenter-micro is a segmentation preset",
                "--dataset 'digits' has no Image column and `annotation` label-map column",
                "an image-classification dataset",
                "'vit-micro'",
            ],
        ),
        (
            "classifier preset, segmentation data",
            ["--dataset", "{data}/fashion-scenes"],
            [
                "--model vit-micro is an image classifier",
                "'annotation'",
                "it is a segmentation dataset",
                "'segmenter-micro'",
            ],
        ),
        (
            "segmentation preset, text data",
            ["--model", "segmenter-micro", "--dataset", "{data}/wikitext-2-v1"],
            ["--model segmenter-micro is a segmentation preset", "'text'", "scene_parse_150"],
        ),
        (
            "vit-minus for a segmenter",
            ["--model", "segmenter-micro", "--vit-minus"],
            ["--variants vit-minus needs an image classifier preset", "segmentation preset"],
        ),
        (
            "value embeddings for an image classifier",
            ["--variants", "softmax,value-embedding"],
            ["--variants value-embedding (value embeddings", "needs a language-model preset"],
        ),
        (
            "value path for a segmenter",
            ["--model", "segmenter-micro", "--variants", "softmax,value-residual"],
            ["--variants value-residual needs an image classifier or language-model preset", "two stacks"],
        ),
        (
            "value-residual alpha",
            ["--variants", "softmax,value-residual", "--value-residual-alpha", "1.5"],
            ["--value-residual-alpha must be in (0, 1]", "got 1.5"],
        ),
    ],
)
def test_bad_input_is_refused_before_training(case, options, expected, tmp_path, data_dir, monkeypatch, capsys):
    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(transformers.Trainer, "train", no_training)
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text("mine")
    paths = {
        "tmp": tmp_path,
        "data": data_dir,
        "parquet": _parquet_folder(tmp_path / "parquet"),
        "model": _saved_model(tmp_path / "model"),
        "files": files,
    }
    before = {p: sorted(q.name for q in p.iterdir()) for p in (paths["model"], files)}
    options = [option.format(**paths) for option in options]
    if "--output-dir" not in options:
        options += ["--output-dir", str(tmp_path / "out")]
    capsys.readouterr()  # what setting up the folders printed (save_pretrained's progress bar) is not the command's
    try:
        code = cli.main(["compare", *options, "--no-progress"])
    except SystemExit as exit:  # argparse
        code = exit.code
    assert code == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and message.startswith("hf-neutreno compare: error: "), message
    for part in expected:
        assert part in message, (case, message)
    assert not (tmp_path / "out").exists()
    assert {p: sorted(q.name for q in p.iterdir()) for p in before} == before


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--no-progress"], ["--verbose"]], ids=["default", "no progress", "verbose"])
def test_the_output_is_one_bar_per_run_and_the_table_unless_verbose(tmp_path, flags):
    """The command as a user runs it: by default, one progress bar per run (stderr) and the runs' headers and the table
    (stdout), no Trainer log dictionaries; --no-progress hides the bars too; --verbose shows Trainer's logs."""
    from cli_process import run_cli

    tiny = [flag for flag in TINY if flag != "--no-progress"]
    proc = run_cli("compare", "--output-dir", tmp_path / "out", "--seeds", "2", *tiny, *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    runs = 4  # 2 variants x 2 seeds
    headers = re.findall(r"^\[(softmax|neutreno), seed [01]\] ", proc.stdout, flags=re.M)
    assert len(headers) == runs and "last-layer cosine" in proc.stdout
    if flags == ["--verbose"]:
        assert output.count("{'loss'") >= runs
        return
    assert "{'loss'" not in output and "'train_runtime'" not in output and "'eval_" not in output
    assert len(proc.stdout.splitlines()) < 40, proc.stdout  # headers, estimates, the table, its notes and verdict
    # Every line on stderr is a training bar of 4 steps (redrawn with \r, or a line per redraw where stderr is no
    # terminal), and one starts per run.
    lines = [line for line in re.split(r"[\r\n]", proc.stderr) if line.strip()]
    if flags == ["--no-progress"]:
        assert lines == [], proc.stderr
    else:
        assert all(re.fullmatch(r" *\d+%\|.*\| [0-4]/4 \[.*\]", line) for line in lines), proc.stderr
        assert sum(" 0/4 [" in line for line in lines) == runs, proc.stderr
