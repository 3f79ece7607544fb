"""`hf-neutreno compare` on a user's own transformers model: a saved Llama, BERT classifier and ViT, on local data.

The whole command runs as a user runs it (a subprocess, offline); what it prints is recomputed from what it saves,
and the best variant's model is reloaded in a fresh process where the package cannot be imported, where it must
compute what the plain transformers model with the same weights and the value path's rule computes here.
"""

import json
import math
import re
import statistics

import pytest
import torch
import transformers

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM, cli
from hf_neutreno.engine.variants import VARIANTS as ALL_VARIANTS
from hf_neutreno.value_path import apply_value_path
from tiny_models import (
    DECODER,
    TINY_NEUTRENO_GPT,
    save_tiny_bert_classifier,
    save_tiny_llama,
    save_tiny_vit_classifier,
    tiny_sentences,
    write_image_folder,
    write_text_classification_dataset,
    write_text_dataset,
)

CASES = {
    # model, its dataset, the task compare must find, the metric
    "llama": (save_tiny_llama, write_text_dataset, "causal-lm", "perplexity"),
    "bert": (save_tiny_bert_classifier, write_text_classification_dataset, "text-classification", "accuracy"),
    "vit": (save_tiny_vit_classifier, write_image_folder, "image-classification", "accuracy"),
}
VARIANTS = ("softmax", "neutreno", "value-residual")


def _row(stdout: str, variant: str) -> str:
    return next(line for line in stdout.splitlines() if line.split(" ", 1)[0] == variant)


def _spread(values: list[float], digits: int, signed: bool = False) -> str:
    return f"{statistics.fmean(values):{'+' if signed else ''}.{digits}f} ± {statistics.stdev(values):.{digits}f}"


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_compare_on_a_saved_model_pairs_the_seeds_prints_what_it_saved_and_saves_a_model_that_loads_anywhere(
    name, tmp_path
):
    from cli_process import run_cli_here
    from fresh_process import run_fresh

    save_model, write_data, task, metric = CASES[name]
    model_dir, data_dir, out = save_model(tmp_path / "model"), write_data(tmp_path / "data"), tmp_path / "out"
    proc = run_cli_here(
        "compare",
        "--model",
        model_dir,
        "--dataset",
        data_dir,
        "--variants",
        ",".join(VARIANTS),
        "--seeds",
        "2",
        "--max-steps",
        "4",
        "--batch-size",
        "8",
        "--output-dir",
        out,
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["task"] == task and results["metric"] == metric
    assert results["model"]["pretrained"] is True

    # every variant x seed, and the variants of a seed start from the same weights (the new head included)
    runs = {variant: {run["seed"]: run for run in results["variants"][variant]["per_seed"]} for variant in VARIANTS}
    assert all(sorted(runs[variant]) == [0, 1] for variant in VARIANTS)
    for seed in (0, 1):
        assert len({runs[variant][seed]["initial_weights_sha256"] for variant in VARIANTS}) == 1
    if task != "causal-lm":  # a new head per seed: the two seeds start apart
        assert runs["softmax"][0]["initial_weights_sha256"] != runs["softmax"][1]["initial_weights_sha256"]

    # the printed table, recomputed from the per-seed values
    digits = 2 if metric == "perplexity" else 4
    for variant in VARIANTS:
        values = [runs[variant][seed][metric] for seed in (0, 1)]
        row = _row(proc.stdout, variant)
        assert row.split("  ")[0] == variant and _spread(values, digits) in row, row
        cosines = [runs[variant][seed]["last_layer_cosine"] for seed in (0, 1)]
        assert _spread(cosines, 4) in row
        if variant != "softmax":
            differences = [runs[variant][s][metric] - runs["softmax"][s][metric] for s in (0, 1)]
            base = [runs["softmax"][s][metric] for s in (0, 1)]
            tied = [abs(d) < 0.002 * (b if metric == "perplexity" else 1) for d, b in zip(differences, base)]
            better = [not t and (d < 0 if metric == "perplexity" else d > 0) for d, t in zip(differences, tied)]
            counts = f"{sum(better)}/{sum(tied)}/{2 - sum(better) - sum(tied)}"  # better / tied / worse
            assert f"{_spread(differences, digits, signed=True)} ({counts})" in row, row
        # the over-smoothing profile before and after training, one value per hidden state
        assert len(runs[variant][0]["cosine_similarity_before"]) == len(runs[variant][0]["cosine_similarity"])

    # a best variant is named only where its paired 95 % t-interval over the 2 seeds (t = 12.706) lies beyond the tie
    # tolerance (0.002, or 0.2 % of the baseline's mean perplexity), the best by its paired mean
    sign = -1 if metric == "perplexity" else 1
    tolerance = 0.002 * (statistics.fmean(runs["softmax"][s][metric] for s in (0, 1)) if metric == "perplexity" else 1)
    clear = {}
    for variant in VARIANTS[1:]:
        differences = [sign * (runs[variant][s][metric] - runs["softmax"][s][metric]) for s in (0, 1)]
        if statistics.fmean(differences) - 12.706 * statistics.stdev(differences) / 2**0.5 >= tolerance:
            clear[variant] = statistics.fmean(differences)
    best = max(clear, key=clear.get) if clear else None
    assert results["best_variant"] == best
    assert (f"The best {metric}: {best}." if best else "No variant is best beyond the seeds' spread.") in proc.stdout
    shown = best or "neutreno"  # every variant's model is saved; the load below checks a value path's
    folder = out / shown

    # ... and loads where the package is not installed, computing the plain model's weights with the variant's rule
    auto_class = {
        "causal-lm": "AutoModelForCausalLM",
        "text-classification": "AutoModelForSequenceClassification",
        "image-classification": "AutoModelForImageClassification",
    }[task]
    if task == "image-classification":
        torch.manual_seed(0)
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    else:
        inputs = {"input_ids": torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]])}
    torch.save(inputs, tmp_path / "inputs.pt")
    run_fresh(
        f"""
        import torch, transformers
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        model = transformers.{auto_class}.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            torch.save(model(**inputs).logits, {str(tmp_path / "fresh.pt")!r})
        """,
        tmp_path,
    )
    config = json.loads((folder / "config.json").read_text())
    plain_class = getattr(transformers, config["architectures"][0].removeprefix("ValuePath"))
    reference = plain_class.from_pretrained(folder).eval()
    if "value_path" in config:  # the plain model with the same weights, and the rule put on it here
        settings = config["value_path"]
        del reference.config.value_path
        apply_value_path(reference, settings["method"], settings["coefficient"], layers=settings["layers"])
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "fresh.pt"), reference(**inputs).logits, rtol=0, atol=1e-5)
    assert (shown == "softmax") == ("value_path" not in config)


# --- bad input: one line, exit 2, nothing written ------------------------------------------------------------------


def _save_unadaptable(kind: str, folder):
    from transformers import ResNetConfig, T5Config

    config = {
        "t5": T5Config(vocab_size=50, d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8),
        "resnet": ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
    }[kind]
    config.save_pretrained(folder)
    return folder


def _compare_briefly(model, data, variants: str, out, *extra) -> int:
    """`hf-neutreno compare` on one seed for two steps, without bars: its exit status."""
    argv = ["--model", model, "--dataset", data, "--variants", variants, "--seeds", "1", "--max-steps", "2"]
    return cli.main(["compare", *map(str, [*argv, *extra]), "--output-dir", str(out), "--no-progress"])


def _compare(capsys, *argv) -> str:
    capsys.readouterr()
    try:
        code = cli.main(["compare", *map(str, argv), "--no-progress"])
    except SystemExit as exit:
        code = exit.code
    assert code == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and message.startswith("hf-neutreno compare: error: "), message
    return message


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("t5", ["T5", "encoder-decoder", "Supported:", "Llama"]),
        ("resnet", ["ResNet", "attention interface", "Supported:", "Llama"]),
    ],
)
def test_a_model_the_adapter_cannot_adapt_is_refused_before_any_data_is_loaded(kind, expected, tmp_path, capsys):
    folder = _save_unadaptable(kind, tmp_path / kind)
    # a Hub dataset that cannot be reached: the model is refused first, so nothing is downloaded
    message = _compare(
        capsys,
        "--model",
        folder,
        "--dataset",
        "nobody/no-such-dataset",
        "--variants",
        "softmax,value-residual",
        "--output-dir",
        tmp_path / "out",
    )
    for part in [*expected, "--variants value-residual needs a value path"]:
        assert part in message, message
    assert not (tmp_path / "out").exists()


def test_a_default_variant_the_model_cannot_take_is_named_as_a_default_with_the_variants_it_takes(tmp_path, capsys):
    """This package's NeuTRENO GPT, saved, under compare's defaults for a pretrained model (softmax and the learnable
    NeuTRENO and value residual): it has its own term, so it takes no value path but NeuTRENO at its own λ. The first
    default it cannot take is refused as a default, and the message lists what it takes."""
    config = NeuTRENOGPTConfig(**{**TINY_NEUTRENO_GPT, "vocab_size": 50}, neutreno_lambda=0.5)
    NeuTRENOGPTForCausalLM(config).save_pretrained(tmp_path / "gpt")
    message = _compare(capsys, "--model", tmp_path / "gpt", "--dataset", "nobody/none", "--output-dir", tmp_path / "o")
    for part in (
        "--variants neutreno-learnable (a default for a pretrained model) needs a value path",
        "Of the variants, it takes softmax,neutreno: name them with --variants.",
    ):
        assert part in message, message
    assert not (tmp_path / "o").exists()


def test_value_embeddings_on_a_model_that_is_not_a_causal_lm_are_refused_before_any_data_is_loaded(tmp_path, capsys):
    model = save_tiny_bert_classifier(tmp_path / "bert")
    message = _compare(
        capsys,
        "--model",
        model,
        "--dataset",
        "nobody/no-such-dataset",
        "--variants",
        "softmax,value-embedding-gate",
        "--output-dir",
        tmp_path / "out",
    )
    for part in ("--variants value-embedding-gate needs a value path", "not causal: value embeddings"):
        assert part in message, message
    assert not (tmp_path / "out").exists()


def test_a_dataset_without_the_columns_lists_them_and_the_flag(tmp_path, capsys):
    model = save_tiny_bert_classifier(tmp_path / "bert")
    data = tmp_path / "numbers"
    data.mkdir()
    (data / "train.csv").write_text("x,y\n1,2\n3,4\n")
    (data / "test.csv").write_text("x,y\n5,6\n")
    message = _compare(
        capsys, "--model", model, "--dataset", data, "--output-dir", tmp_path / "out", "--variants", "softmax,neutreno"
    )
    assert "'x'" in message and "'y'" in message and "--label-column" in message, message
    (data / "train.csv").write_text("x,label\n1,0\n3,1\n")  # a label, but no text
    (data / "test.csv").write_text("x,label\n5,0\n")
    message = _compare(
        capsys, "--model", model, "--dataset", data, "--output-dir", tmp_path / "out", "--variants", "softmax,neutreno"
    )
    assert "'x'" in message and "'label'" in message and "--text-column" in message, message
    assert not (tmp_path / "out").exists()


def test_labels_only_in_evaluation_and_empty_text_are_refused(tmp_path, capsys):
    model = save_tiny_bert_classifier(tmp_path / "bert")
    unseen = write_text_classification_dataset(
        tmp_path / "unseen", rows={"train": [("good cat", "pos"), ("bad dog", "neg")], "test": [("a mat", "meh")]}
    )
    message = _compare(capsys, "--model", model, "--dataset", unseen, "--output-dir", tmp_path / "out")
    assert "labels that training never sees" in message and "meh" in message, message
    empty = write_text_classification_dataset(
        tmp_path / "empty", rows={"train": [("good cat", "pos"), ("", "neg")], "test": [("a mat", "pos")]}
    )
    message = _compare(capsys, "--model", model, "--dataset", empty, "--output-dir", tmp_path / "out")
    assert "empty text" in message and "'sentence'" in message, message
    assert not (tmp_path / "out").exists()


def test_a_model_folder_without_its_tokenizer_is_refused(tmp_path, capsys):
    model = save_tiny_bert_classifier(tmp_path / "bert")
    for file in model.glob("tokenizer*"):
        file.unlink()
    data = write_text_classification_dataset(tmp_path / "data")
    message = _compare(capsys, "--model", model, "--dataset", data, "--output-dir", tmp_path / "out")
    assert "has no tokenizer" in message and "save_pretrained" in message, message
    assert not (tmp_path / "out").exists()


def test_preset_only_variants_and_flags_are_refused_where_they_do_not_apply(tmp_path, capsys):
    model = save_tiny_vit_classifier(tmp_path / "vit")
    message = _compare(
        capsys,
        "--model",
        model,
        "--dataset",
        "digits",
        "--variants",
        "softmax,vit-minus",
        "--output-dir",
        tmp_path / "out",
    )
    assert "vit-minus" in message and "value-residual-learnable" in message, message
    message = _compare(capsys, "--model", "vit-micro", "--task", "image-classification", "--output-dir", tmp_path / "o")
    assert "--task is for a transformers model" in message, message


def test_the_task_comes_from_the_head_then_from_the_columns():
    from datasets import ClassLabel, Features, Image, Value

    from hf_neutreno.engine.model_tasks import task_of_architecture, task_of_columns

    bert = transformers.BertConfig(architectures=["BertForSequenceClassification"])
    assert task_of_architecture(bert) == "text-classification"
    assert task_of_architecture(transformers.GPT2Config(architectures=["GPT2LMHeadModel"])) == "causal-lm"
    base = transformers.BertConfig(architectures=["BertModel"])
    assert task_of_architecture(base) is None
    text = Features({"text": Value("string")})
    assert task_of_columns(text, base) == "masked-lm"  # BERT has an MLM head
    assert task_of_columns(text, transformers.LlamaConfig()) == "causal-lm"
    labelled = Features({"text": Value("string"), "label": ClassLabel(names=["a", "b"])})
    assert task_of_columns(labelled, base) == "text-classification"
    images = Features({"image": Image(), "label": ClassLabel(names=["a", "b"])})
    assert task_of_columns(images, transformers.ViTConfig()) == "image-classification"
    scenes = Features({"image": Image(), "annotation": Image()})
    assert task_of_columns(scenes, transformers.ViTConfig()) == "semantic-segmentation"
    assert task_of_columns(Features({"x": Value("int64")}), base) is None


def test_a_preset_and_a_transformers_model_are_the_same_task_objects_with_the_same_inputs(tmp_path):
    """One family of tasks: the task objects of both kinds of --model are their task's class, whose inputs, score and
    probe they do not redefine. On one image folder, a preset's and a saved ViT's probe images are what their image
    processors make of the first evaluation images."""
    from hf_neutreno.data.loading import load_dataset_splits
    from hf_neutreno.engine.compare.settings import CompareSettings
    from hf_neutreno.engine.model_tasks import MODEL_TASKS, CheckedModel, ModelTask
    from hf_neutreno.engine.preset_tasks import PresetTask, task_class, task_for
    from hf_neutreno.engine.tasks import TASKS

    presets = {
        "image-classification": "vit-micro",
        "causal-lm": "gpt-micro",
        "semantic-segmentation": "segmenter-micro",
    }
    assert list(MODEL_TASKS) == list(TASKS)
    for name, task in TASKS.items():
        sources = [MODEL_TASKS[name]] + ([task_class(presets[name])] if name in presets else [])
        for source in sources:
            assert source.__mro__[1] in (ModelTask, PresetTask) and source.__mro__[2] is task, source.__mro__
            assert not {"score", "probe_batches", "trainer_arguments"} & set(vars(source)), source

    data = write_image_folder(tmp_path / "images")
    vit = save_tiny_vit_classifier(tmp_path / "vit")
    settings = {"dataset": str(data), "probe_samples": 5, "batch_size": 2, "variants": ("softmax", "neutreno")}
    # each task transforms its splits in place: each gets its own copy of the dataset
    tasks = [
        task_for(CompareSettings(model="vit-micro", **settings), load_dataset_splits(data)),
        CheckedModel(CompareSettings(model=str(vit), **settings)).prepare(load_dataset_splits(data)),
    ]
    assert [type(task).__mro__[2] for task in tasks] == [TASKS["image-classification"]] * 2
    images = [image.convert("RGB") for image in load_dataset_splits(data)["test"][:5]["image"]]
    for task in tasks:
        expected = task.processing(images, return_tensors="pt")["pixel_values"]
        probe = task.probe_batches()
        assert [len(batch["pixel_values"]) for batch in probe] == [2, 2, 1]
        torch.testing.assert_close(torch.cat([batch["pixel_values"] for batch in probe]), expected, rtol=0, atol=0)


def test_the_most_common_classs_share_of_the_evaluation_data_is_recorded(tmp_path):
    """results.json's `data.majority`: the accuracy of always predicting the most common evaluation class, which the
    verdict takes as chance on imbalanced data. Text (30 of 40 test rows "neg") and images (a preset)."""
    from collections import Counter

    from hf_neutreno.data.loading import load_dataset_splits
    from hf_neutreno.engine.compare.settings import CompareSettings
    from hf_neutreno.engine.model_tasks import CheckedModel
    from hf_neutreno.engine.preset_tasks import task_for

    sentences = tiny_sentences(200)
    rows = {
        "train": [(t, "pos" if i % 2 else "neg") for i, t in enumerate(sentences[:160])],
        "test": [(t, "pos" if i < 10 else "neg") for i, t in enumerate(sentences[160:])],
    }
    text = write_text_classification_dataset(tmp_path / "text", rows=rows)
    bert = str(save_tiny_bert_classifier(tmp_path / "bert"))
    settings = CompareSettings(model=bert, dataset=str(text), variants=("softmax", "neutreno"))
    assert CheckedModel(settings).prepare(load_dataset_splits(text)).sizes["majority"] == 30 / 40
    images = write_image_folder(tmp_path / "images", train=8, test=6)
    labels = load_dataset_splits(images)["test"]["label"]
    settings = CompareSettings(model="vit-micro", dataset=str(images), variants=("softmax", "neutreno"))
    task = task_for(settings, load_dataset_splits(images))
    assert task.sizes["majority"] == max(Counter(labels).values()) / len(labels)


@pytest.mark.parametrize("made_once", [True, False], ids=["made once", "on the fly"])
def test_image_inputs_are_the_processors_whether_made_once_or_batch_by_batch(made_once, tmp_path, monkeypatch):
    """Small image splits become tensors once (`PREPROCESSED_BYTES`), larger ones stay transformed per batch: either
    way the training and evaluation inputs equal the image processor's output on the raw images, in order."""
    from torch.utils.data import StackDataset

    from hf_neutreno.data.image_transforms import collate_images
    from hf_neutreno.data.loading import load_dataset_splits
    from hf_neutreno.engine import tasks
    from hf_neutreno.engine.compare.settings import CompareSettings
    from hf_neutreno.engine.model_tasks import CheckedModel
    from hf_neutreno.engine.preset_tasks import task_for

    if made_once:  # in chunks that divide neither split (24 and 12 images)
        monkeypatch.setattr(tasks, "PREPROCESSING_CHUNK", 5)
    else:
        monkeypatch.setattr(tasks, "PREPROCESSED_BYTES", 0)
    data, vit = write_image_folder(tmp_path / "images"), save_tiny_vit_classifier(tmp_path / "vit")
    settings = {"dataset": str(data), "variants": ("softmax", "neutreno")}
    for task in (
        task_for(CompareSettings(model="vit-micro", **settings), load_dataset_splits(data)),
        CheckedModel(CompareSettings(model=str(vit), **settings)).prepare(load_dataset_splits(data)),
    ):
        assert isinstance(task.train, StackDataset) is made_once and isinstance(task.eval, StackDataset) is made_once
        for name, split in (("train", task.train), ("test", task.eval)):
            raw = load_dataset_splits(data)[name]
            expected = task.processing([image.convert("RGB") for image in raw["image"]], return_tensors="pt")
            batch = collate_images([split[i] for i in range(len(split))])
            torch.testing.assert_close(batch["pixel_values"], expected["pixel_values"], rtol=0, atol=0)
            assert batch["labels"].tolist() == raw["label"]


def test_the_summary_names_the_model_the_task_and_the_carved_split(tmp_path, capsys):
    """A dataset without a test or validation split gets one carved from train with a fixed seed, and says so."""
    model = save_tiny_llama(tmp_path / "llama")
    data = write_text_dataset(tmp_path / "data")
    (data / "test.jsonl").unlink()
    code = _compare_briefly(model, data, "softmax,neutreno-learnable", tmp_path / "out", "--batch-size", "4")
    assert code == 0
    stdout = capsys.readouterr().out
    assert re.search(r"\(causal-lm, fine-tuned from its weights\)", stdout), stdout
    assert "held-out 10% of train (seed 0)" in stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["model"]["splits"] == {"train": 144, "held-out 10% of train (seed 0)": 16}
    assert results["model"]["eval_split_from"] == "train"
    run = results["variants"]["neutreno-learnable"]["per_seed"][0]
    assert results["variants"]["neutreno-learnable"]["description"] == "NeuTRENO, learnable λ from 0"
    assert len(run["learned_coefficients"]) == 2  # layers 1 and 2 of 3


def test_value_embeddings_and_xsa_compare_on_a_causal_lm_and_save_their_tables(tmp_path, capsys):
    """The frontier variants by name, their learnable strengths from 0 (the pretrained function); the value-embedding
    tables are saved with the first seed's model, which loads adapted."""
    from transformers import AutoModelForCausalLM

    model = save_tiny_llama(tmp_path / "llama")
    data = write_text_dataset(tmp_path / "data")
    variants = "softmax,value-embedding-learnable,xsa-learnable"
    assert _compare_briefly(model, data, variants, tmp_path / "out", "--batch-size", "4") == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    embedding = results["variants"]["value-embedding-learnable"]
    assert embedding["description"] == "value embeddings, learnable g from 0"
    assert len(embedding["per_seed"][0]["learned_coefficients"]) == 2  # nanochat's layers of 3: 0 and 2
    assert all(value >= 0 for value in embedding["per_seed"][0]["learned_coefficients"])  # used as g ≥ 0
    saved = next((tmp_path / "out").glob("**/value-embedding-learnable*/config.json")).parent
    loaded = AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)
    assert loaded.config.value_path["method"] == "value_embedding"
    assert sum("value_path_embedding" in name for name, _ in loaded.named_parameters()) == 2


def test_the_value_paths_compare_on_a_model_with_sliding_window_layers(tmp_path):
    """A Mistral whose window (4) is shorter than the training rows: every method trains and evaluates beside softmax
    (each was refused there before, but XSA), and their saved models load adapted."""
    from transformers import AutoModelForCausalLM

    model = save_tiny_llama(tmp_path / "mistral", sliding_window=4)
    data = write_text_dataset(tmp_path / "data")
    variants = "softmax,neutreno,value-residual-learnable,twicing,xsa-learnable,value-embedding"
    assert _compare_briefly(model, data, variants, tmp_path / "out", "--batch-size", "4", "--max-length", "16") == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["variants"]) == set(variants.split(","))
    for variant in variants.split(",")[1:]:
        method = ALL_VARIANTS[variant].method
        saved = next((tmp_path / "out").glob(f"**/{variant}*/config.json")).parent
        loaded = AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)
        assert type(loaded).__name__ == "ValuePathMistralForCausalLM"
        assert loaded.config.value_path["method"] == method and loaded.config.sliding_window == 4


def test_the_kept_cifar10_tables_in_the_docs_are_what_the_committed_results_print():
    """docs/compare.md shows `format_table` of the committed results of fine-tuning a kept CIFAR-10 ViT through the
    main command: recomputed here from the saved JSON, whatever CPU runs the test."""
    from pathlib import Path

    from hf_neutreno.engine.compare.report import format_table

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "compare.md").read_text(encoding="utf-8")
    for name in ("fixed", "learnable"):
        results = json.loads(
            (root / "experiments/evidence/results/compare-kept-cifar10" / name / "results.json").read_text()
        )
        assert results["complete"] and results["model"]["pretrained"] and results["model"]["head"] == "kept"
        assert results["seeds"] == [0, 1, 2] and all(len(v["per_seed"]) == 3 for v in results["variants"].values())
        shown = text.split(f"<!-- kept-cifar10: {name} -->\n```\n")[1].split("\n```\n<!-- /kept-cifar10")[0]
        assert shown == format_table(results)


@pytest.mark.slow
def test_compare_runs_unchanged_under_torchrun_one_process_writing_and_reporting(tmp_path):
    """`torchrun --nproc_per_node 2 -m hf_neutreno compare ...` on CPU (gloo): both processes train every run
    data-parallel, one writes the folder and prints the table once."""
    from cli_process import run_torchrun

    model, data = save_tiny_bert_classifier(tmp_path / "bert"), write_text_classification_dataset(tmp_path / "data")
    proc = run_torchrun(
        "-m",
        "hf_neutreno",
        "compare",
        "--model",
        str(model),
        "--dataset",
        str(data),
        "--variants",
        "softmax,value-residual",
        "--seeds",
        "2",
        "--max-steps",
        "3",
        "--batch-size",
        "8",
        "--output-dir",
        str(tmp_path / "out"),
        "--no-progress",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["complete"] and results["processes"] == 2
    assert all(len(entry["per_seed"]) == 2 for entry in results["variants"].values())
    assert proc.stdout.count("Mean ± sample std over 2 seeds") == 1 and proc.stdout.count("[softmax, seed 0]") == 1
    for seed in (0, 1):
        assert len({entry["per_seed"][seed]["initial_weights_sha256"] for entry in results["variants"].values()}) == 1


@pytest.mark.slow
def test_compare_fine_tunes_a_saved_segmenter_on_a_local_segmentation_set(tmp_path, data_dir):
    """The segmentation task from the checkpoint's head: a saved NeuTRENO Segmenter at λ = 0 on fashion-scenes (its
    `id2label.json` names the classes); `neutreno` sets the model's own λ, scored by mean IoU."""
    from hf_neutreno.data.segmentation import make_image_processor
    from hf_neutreno.engine.model_factories import segmenter

    labels = json.loads((data_dir / "fashion-scenes" / "id2label.json").read_text())
    model = segmenter("segmenter-micro", [labels[str(i)] for i in range(len(labels))], neutreno_lambda=0.0)
    model.save_pretrained(tmp_path / "seg")
    make_image_processor(model.config).save_pretrained(tmp_path / "seg")
    extra = ["--max-train-samples", "32", "--max-eval-samples", "8", "--batch-size", "8"]
    code = _compare_briefly(tmp_path / "seg", data_dir / "fashion-scenes", "softmax,neutreno", tmp_path / "out", *extra)
    assert code == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["task"] == "semantic-segmentation" and results["metric"] == "mean_iou"
    assert results["variants"]["neutreno"]["neutreno_lambda"] == 0.4 and results["decoder_layers"]
    assert 0 <= results["variants"]["neutreno"]["per_seed"][0]["mean_iou"] <= 1


def test_a_test_split_without_labels_is_passed_over_for_validation(tmp_path, capsys):
    """GLUE's test splits carry label -1 everywhere: the comparison is scored on validation, and says so."""
    model = save_tiny_bert_classifier(tmp_path / "bert")
    rows = {
        "train": [("good cat", 1), ("bad dog", 0)] * 8,
        "validation": [("great mat", 1), ("poor log", 0)] * 2,
        "test": [("a cat", -1), ("a dog", -1)],
    }
    data = write_text_classification_dataset(tmp_path / "glue-like", rows=rows)
    code = _compare_briefly(model, data, "softmax,value-residual", tmp_path / "out", "--batch-size", "4")
    assert code == 0
    assert "not test, which has no labels" in capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["eval_split"] == "validation" and results["model"]["splits"] == {"train": 16, "validation": 4}


def test_text_without_labels_on_a_checkpoint_without_a_masked_lm_head_is_refused(tmp_path, capsys):
    """An encoder checkpoint without its masked-LM head (a sentence encoder saved as BertModel) and text without
    labels: compare trained a new head from scratch and reported its perplexity (about the vocabulary size) as the
    remedies'. It now refuses, before anything is written, and says how to go on; --task masked-lm still runs."""
    from transformers import BertConfig, BertModel

    classifier = save_tiny_bert_classifier(tmp_path / "bert")
    config = BertConfig.from_pretrained(classifier)
    config.architectures = None
    BertModel(config).save_pretrained(tmp_path / "encoder")
    for file in classifier.glob("*token*"):
        (tmp_path / "encoder" / file.name).write_bytes(file.read_bytes())
    data = write_text_dataset(tmp_path / "text")
    message = _compare(capsys, "--model", tmp_path / "encoder", "--dataset", data, "--output-dir", tmp_path / "out")
    assert "has no masked-LM head" in message and "--task masked-lm" in message, message
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.incomplete").exists()


def test_image_data_for_a_text_model_says_so_before_anything_is_written(tmp_path, capsys):
    """It ended in transformers' "Unrecognized configuration class ..." cut mid-list."""
    model = save_tiny_bert_classifier(tmp_path / "bert")
    images = write_image_folder(tmp_path / "images")
    message = _compare(capsys, "--model", model, "--dataset", images, "--task", "image-classification")
    assert "is a bert model, which has no image-classification head" in message, message
    config = json.loads((model / "config.json").read_text())
    config.pop("architectures")  # no head: the task comes from the image data
    (model / "config.json").write_text(json.dumps(config))
    message = _compare(capsys, "--model", model, "--dataset", images, "--output-dir", tmp_path / "out")
    assert "the image data of --dataset" in message and "no image-classification head" in message, message
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.incomplete").exists()


def test_a_model_folder_without_weights_is_refused_before_the_data_loads(tmp_path, capsys):
    """A folder with config and tokenizer but no weights loaded the data and wrote out.incomplete/results.json before
    transformers' "no file named model.safetensors"; --from-scratch needs no weights."""
    model = save_tiny_bert_classifier(tmp_path / "bert")
    (model / "model.safetensors").unlink()
    message = _compare(capsys, "--model", model, "--dataset", "nobody/no-such-dataset", "--output-dir", tmp_path / "o")
    assert "has a config.json but no weights" in message and "--from-scratch" in message, message
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.incomplete").exists()


def test_no_progress_keeps_the_time_estimate_and_the_defaults_on_a_model_start_at_its_function(tmp_path, capsys):
    """--no-progress dropped the estimate of the run's time; and on --model the default variants are the learnable
    remedies from 0, which compute the pretrained function: before training, their probe equals softmax's."""
    model, data = save_tiny_bert_classifier(tmp_path / "bert"), write_text_classification_dataset(tmp_path / "data")
    argv = ["--model", model, "--dataset", data, "--seeds", "2", "--max-steps", "4", "--output-dir", tmp_path / "out"]
    capsys.readouterr()
    assert cli.main(["compare", *map(str, argv), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "per run" in out and "The first run trained in" in out, out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(results["variants"]) == ["softmax", "neutreno-learnable", "value-residual-learnable"]
    base = results["variants"]["softmax"]["per_seed"]
    for name in ("neutreno-learnable", "value-residual-learnable"):
        entry = results["variants"][name]
        assert entry["value_path"]["coefficient"] == 0.0 and entry["value_path"]["learnable"] is True
        for run, softmax in zip(entry["per_seed"], base):
            assert run["cosine_similarity_before"] == pytest.approx(softmax["cosine_similarity_before"], abs=1e-6)
    assert "Verdict: " in out and results["verdict"]["text"] in " ".join(out.split())


@pytest.mark.slow
def test_compare_on_a_pretrained_classifier_with_its_defaults_reads_what_the_remedies_learned(tmp_path, capsys):
    """A tiny BERT classifier pretrained for 300 steps (compare's own softmax run from scratch, saved), then `compare
    --model <it>` with its defaults: the learnable remedies from 0, whose probe before training is the pretrained
    model's; their learned coefficients in the table; a verdict in the output and in results.json."""
    data = write_text_classification_dataset(tmp_path / "data", train=320, test=80)
    model = save_tiny_bert_classifier(tmp_path / "bert")
    common = ["--dataset", data, "--batch-size", "16", "--no-progress"]
    pretrain = ["--model", model, "--from-scratch", "--variants", "softmax,neutreno", "--seeds", "1"]
    assert (
        cli.main(["compare", *map(str, [*pretrain, *common, "--max-steps", "300", "--output-dir", tmp_path / "pre"])])
        == 0
    )
    pretrained = tmp_path / "pre" / "softmax"
    capsys.readouterr()
    argv = ["--model", pretrained, *common, "--max-steps", "60", "--seeds", "2", "--output-dir", tmp_path / "out"]
    assert cli.main(["compare", *map(str, argv)]) == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    variants = results["variants"]
    assert list(variants) == ["softmax", "neutreno-learnable", "value-residual-learnable"]
    assert variants["softmax"]["accuracy"]["mean"] > 0.75  # the baseline learned: no warning about it
    assert results["verdict"]["baseline_problem"] is None
    moved = []
    for name in ("neutreno-learnable", "value-residual-learnable"):
        entry = variants[name]
        assert entry["value_path"]["coefficient"] == 0.0  # the pretrained function
        for run, base in zip(entry["per_seed"], variants["softmax"]["per_seed"]):
            assert run["cosine_similarity_before"] == pytest.approx(base["cosine_similarity_before"], abs=1e-6)
            moved += [abs(value) for value in run["learned_coefficient_parameters"]]  # from 0
        reading = results["verdict"]["variants"][name]
        assert f"{name}: learned" in " ".join(out.split())  # the table's line of learned coefficients
        if reading["switched_off"]:
            said = " ".join(out.split())
            assert "learned from 0, ended at 0 in every layer and seed" in said and "switched itself off" in said
    assert max(moved) > 0.01, moved
    assert "Verdict: On this model and data" in out
    assert " ".join(results["verdict"]["text"].split()) in " ".join(out.split())


def test_masked_lm_perplexity_weighs_every_masked_token_once(tmp_path):
    """The masked-LM score is exp(summed NLL / masked tokens) over the evaluation blocks, written out here with
    log_softmax; blocks with 1 and 12 masked tokens in one set, where a mean of per-batch means would differ."""
    from types import SimpleNamespace

    from hf_neutreno.engine.tasks import MaskedLM

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.BertForMaskedLM(config).train()
    blocks = []
    for masked in (1, 1, 1, 12, 12):
        input_ids = torch.randint(5, 50, (16,))
        labels = torch.full((16,), -100)
        labels[:masked] = input_ids[:masked]
        blocks.append({"input_ids": input_ids, "labels": labels})
    task = MaskedLM.__new__(MaskedLM)
    task.eval, task.eval_split, task.settings = blocks, "test", SimpleNamespace(batch_size=2)
    args = transformers.TrainingArguments(str(tmp_path), per_device_eval_batch_size=1, report_to=[], use_cpu=True)
    perplexity = task.score(transformers.Trainer(model=model, args=args))
    restored = model.training  # scored in eval mode (no dropout), its mode restored after

    model.eval()
    nll, count, block_means = 0.0, 0, []
    with torch.no_grad():
        for block in blocks:
            log_probs = model(input_ids=block["input_ids"][None]).logits[0].double().log_softmax(-1)
            terms = [-log_probs[i, t].item() for i, t in enumerate(block["labels"].tolist()) if t != -100]
            nll, count = nll + sum(terms), count + len(terms)
            block_means.append(sum(terms) / len(terms))
    assert count == 27
    assert perplexity == pytest.approx(math.exp(nll / count), rel=1e-5)
    per_block = statistics.fmean(block_means)  # what exp(eval_loss) gave, at an evaluation batch of one block
    assert abs(math.exp(per_block) - perplexity) / perplexity > 1e-3  # the weighting matters for these blocks
    assert restored


def test_causal_lm_rows_keep_their_special_tokens_as_run_clm_tokenizes_them(tmp_path):
    """A transformers causal LM's text is tokenised row by row with the tokenizer's special tokens, then concatenated
    (transformers' run_clm.py: `tokenizer(texts)`, then `group_texts`): with a Llama-style tokenizer that adds a BOS,
    every row starts with it, an empty row is that BOS alone. Reference: the ids written out from the vocabulary."""
    from datasets import Dataset, DatasetDict
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from hf_neutreno.engine.compare.settings import CompareSettings
    from hf_neutreno.engine.model_tasks import CheckedModel

    vocab = {"<pad>": 0, "<s>": 1, "<unk>": 2, "hello": 3, "world": 4, "foo": 5, "bar": 6}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", unk_token="<unk>", pad_token="<pad>"
    )
    config = transformers.LlamaConfig(
        **{**DECODER, "vocab_size": len(vocab), "pad_token_id": 0, "bos_token_id": 1}, max_position_embeddings=64
    )
    folder = tmp_path / "llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    rows = {
        "train": [" hello world \n", "", " foo bar foo \n", "", " bar \n", " world hello \n"] * 2,
        "test": [" hello world \n", "", " foo \n", "", " bar bar \n"],
    }
    expected = {
        split: [i for row in texts for i in [1] + [vocab[word] for word in row.split()]]
        for split, texts in rows.items()
    }
    assert expected["test"] == [1, 3, 4, 1, 1, 5, 1, 1, 6, 6]
    settings = CompareSettings(model=str(folder), dataset="rows", max_length=4, variants=("softmax", "neutreno"))
    task = CheckedModel(settings).prepare(
        DatasetDict({split: Dataset.from_dict({"text": t}) for split, t in rows.items()})
    )
    assert task.stream.tolist() == expected["test"]
    train = [i for block in task.train["input_ids"] for i in block]
    assert train == expected["train"][: len(expected["train"]) // 4 * 4]
