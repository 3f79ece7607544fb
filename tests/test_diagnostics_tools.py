"""The report (JSON round trip, comparison, plots), the Trainer callback and the `hf-neutreno diagnose` CLI."""

import json
import math
import sys

import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from torch import nn
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    ViTImageProcessorPil,
)

import hf_neutreno
from cli_process import one_line_error, run_cli, run_cli_here
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification, NeuTRENOViTModel
from hf_neutreno.cli import main
from hf_neutreno.commands import diagnose as diagnose_cli
from hf_neutreno.diagnostics import (
    DEFAULT_METRICS,
    OversmoothingReport,
    attention_maps,
    measure_oversmoothing,
    plot_attention_maps,
)
from tiny_models import TINY_VIT, training_args

TINY = dict(TINY_VIT, image_size=32, patch_size=8)


def _report(neutreno_lambda: float = 0.6) -> OversmoothingReport:
    torch.manual_seed(0)
    model = NeuTRENOViTModel(NeuTRENOViTConfig(**TINY, neutreno_lambda=neutreno_lambda))
    return measure_oversmoothing(
        model, [{"pixel_values": torch.randn(2, 3, 32, 32)}], progress=False, model_name=f"λ={neutreno_lambda}"
    )


def test_report_json_round_trip(tmp_path):
    report = _report()
    report.metadata["dataset"] = "random"
    path = tmp_path / "report.json"
    text = report.to_json(path)
    assert OversmoothingReport.from_json(path) == report
    assert OversmoothingReport.from_json(text) == report
    assert OversmoothingReport.from_dict(json.loads(text)) == report
    assert len(report.per_layer("cosine_similarity")) == 4  # embeddings + 3 blocks
    with pytest.raises(ValueError, match="not in this report.*cosine_similarity"):
        report.per_layer("cosine")
    with pytest.raises(ValueError, match="field 'values' is missing"):
        OversmoothingReport.from_json('{"num_samples": 3}')


def test_undefined_values_survive_json_as_nan(tmp_path):
    report = OversmoothingReport(
        values={"cosine_similarity": [float("nan"), 0.5]},
        layers={"cosine_similarity": [0, 1]},
        counts={"cosine_similarity": [0, 4]},
        num_samples=4,
    )
    again = OversmoothingReport.from_json(report.to_json())
    assert math.isnan(again.per_layer("cosine_similarity")[0]) and again.per_layer("cosine_similarity")[1] == 0.5


def test_compare_table_and_logs():
    ours, theirs = _report(0.6), _report(0.0)
    comparison = ours.compare(theirs)
    assert set(comparison) == set(DEFAULT_METRICS)
    cosine = comparison["cosine_similarity"]
    assert cosine["layers"] == [0, 1, 2, 3]
    assert cosine["difference"] == pytest.approx([a - b for a, b in zip(cosine["self"], cosine["other"])])
    assert cosine["difference"][0] == pytest.approx(0.0, abs=1e-6)  # same seed, same embeddings
    table = ours.table([theirs])
    assert "λ=0.6" in table and "λ=0.0" in table and "layer 3" in table
    logs = ours.to_logs()
    assert logs["oversmoothing/cosine_similarity/layer_3"] == ours.per_layer("cosine_similarity")[3]
    assert "oversmoothing/functional_j/layer_1" in logs and "oversmoothing/functional_j/layer_0" not in logs


def test_plots_are_pngs(tmp_path):
    ours, theirs = _report(0.6), _report(0.0)
    path = ours.plot(tmp_path / "curves.png", others=[theirs], title="Fig. 1")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 600
    torch.manual_seed(0)
    models = {f"λ={lam}": NeuTRENOViTModel(NeuTRENOViTConfig(**TINY, neutreno_lambda=lam)) for lam in (0.0, 0.6)}
    batch = {"pixel_values": torch.randn(1, 3, 32, 32)}
    maps = {label: attention_maps(model, batch, layers=[1, 3]) for label, model in models.items()}
    assert maps["λ=0.0"][3].shape == (4, 17, 17)
    assert torch.allclose(maps["λ=0.0"][3].sum(-1), torch.ones(4, 17), atol=1e-5)
    grid = plot_attention_maps(maps, tmp_path / "maps.png")
    with Image.open(grid) as image:
        assert image.format == "PNG"


def test_plot_colours_and_legend_name_the_same_report_in_every_panel(tmp_path, monkeypatch):
    """A report without the first panel's metric (an earlier report given to --compare) keeps its colour in every
    panel and is in the legend: each curve has the colour the legend gives its report's label."""
    from hf_neutreno.diagnostics import report as report_module

    figures = []
    make = report_module._figure
    monkeypatch.setattr(report_module, "_figure", lambda **kwargs: figures.append(make(**kwargs)) or figures[-1])
    both = {"cosine_similarity": [0.1, 0.2, 0.3], "hfc_lfc_ratio": [1.0, 0.9, 0.8]}
    ours = OversmoothingReport.from_values(both, model_name="ours")
    no_cosine = OversmoothingReport.from_values({"hfc_lfc_ratio": [1.0, 0.5, 0.2]}, model_name="earlier")
    theirs = OversmoothingReport.from_values({k: [v + 0.05 for v in vs] for k, vs in both.items()}, model_name="base")
    ours.plot(tmp_path / "curves.png", others=[no_cosine, theirs])
    legend = figures[0].axes[0].get_legend()
    legend_colours = {text.get_text(): line.get_color() for text, line in zip(legend.get_texts(), legend.get_lines())}
    assert list(legend_colours) == ["ours", "earlier", "base"]
    drawn = {}
    for axes in figures[0].axes:
        for line in axes.get_lines():
            drawn.setdefault(line.get_label(), set()).add(line.get_color())
            assert line.get_color() == legend_colours[line.get_label()], (axes.get_title(), line.get_label())
    assert len(drawn) == 3 and all(len(colours) == 1 for colours in drawn.values())


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes `import matplotlib.figure` fail
    with pytest.raises(ImportError, match=r"hf-neutreno\[plots\]"):
        _report().plot(tmp_path / "x.png")


# --- Trainer callback ---------------------------------------------------------------------------------------------


class _RandomImages(torch.utils.data.Dataset):
    def __init__(self, count: int):
        generator = torch.Generator().manual_seed(0)
        self.pixels = torch.randn(count, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 3, (count,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"pixel_values": self.pixels[i], "labels": self.labels[i]}


class _LogRecorder(TrainerCallback):
    """Stands in for a `report_to` integration: they receive logs through `on_log` too."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def test_trainer_callback_logs_per_layer_metrics(tmp_path):
    from hf_neutreno import OversmoothingCallback

    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, num_labels=3))
    recorder = _LogRecorder()
    args = training_args(
        tmp_path,
        max_steps=4,
        per_device_train_batch_size=4,
        eval_strategy="steps",
        eval_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        seed=0,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=_RandomImages(16), eval_dataset=_RandomImages(8), callbacks=[recorder]
    )
    probe = [{"pixel_values": _RandomImages(6).pixels}]
    callback = OversmoothingCallback(probe, metrics=["cosine_similarity", "functional_j"]).attach(trainer)
    trainer.train()

    entries = [e for e in trainer.state.log_history if "oversmoothing/cosine_similarity/layer_3" in e]
    assert [e["step"] for e in entries] == [2, 4]
    for entry in entries:
        for layer in range(4):
            assert math.isfinite(entry[f"oversmoothing/cosine_similarity/layer_{layer}"])
        assert {f"oversmoothing/functional_j/layer_{layer}" for layer in (1, 2, 3)} <= set(entry)
    assert sum("oversmoothing/functional_j/layer_2" in logs for logs in recorder.logs) == 2
    assert callback.last_report.num_samples == 6
    assert (
        entries[-1]["oversmoothing/cosine_similarity/layer_3"] == callback.last_report.per_layer("cosine_similarity")[3]
    )


def test_measuring_leaves_the_random_state_as_it_was():
    """A DataLoader draws a seed from torch's random state at each pass: measured during training (the callback), it
    would shift every later dropout mask and shuffle. The state after measuring is the state before."""
    from torch.utils.data import DataLoader

    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, num_labels=3))
    images = [{"pixel_values": pixels} for pixels in _RandomImages(8).pixels]
    probe = DataLoader(images, batch_size=4, shuffle=True)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    measure_oversmoothing(model, probe, metrics=["cosine_similarity"], progress=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_an_evaluation_after_training_measures_the_best_model_loaded_at_the_end(tmp_path):
    """With load_best_model_at_end, `trainer.evaluate()` after training runs at the last step again, on the best
    checkpoint's weights: the callback measures the model as it is then, not the last step's (which it had measured
    already). The weights are changed after training here so that they differ whichever checkpoint was best."""
    from hf_neutreno import OversmoothingCallback

    torch.manual_seed(0)
    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, num_labels=3))
    args = training_args(
        tmp_path,
        max_steps=6,
        per_device_train_batch_size=4,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="loss",
        greater_is_better=False,
        learning_rate=5e-2,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_RandomImages(24), eval_dataset=_RandomImages(8))
    probe = [{"pixel_values": _RandomImages(6).pixels}]
    callback = OversmoothingCallback(probe, metrics=["cosine_similarity"]).attach(trainer)
    trainer.train()
    with torch.no_grad():  # other weights at the same step, whichever checkpoint was best in this run
        trainer.model.vit.embeddings.position_embeddings.mul_(3.0)
    trainer.evaluate()
    now = measure_oversmoothing(trainer.model, probe, metrics=["cosine_similarity"], progress=False)
    assert callback.last_report.per_layer("cosine_similarity") == now.per_layer("cosine_similarity")


def test_unbound_callback_says_how_to_bind():
    from hf_neutreno import OversmoothingCallback

    callback = OversmoothingCallback(iter([{"pixel_values": torch.randn(1, 3, 32, 32)}]))
    assert isinstance(callback.probe_batches, list)  # a one-shot iterator is kept for every evaluation
    with pytest.raises(RuntimeError, match="attach"):
        callback.on_evaluate(None, None, None)
    with pytest.raises(ValueError, match="Unknown metric"):
        OversmoothingCallback([], metrics=["nope"])


# --- CLI ------------------------------------------------------------------------------------------------------------


def _save_with_processor(model, folder):
    """`model` and an image processor for its 32 px input, saved to `folder`: what the CLI loads."""
    model.save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def image_model_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, num_labels=10))
    return _save_with_processor(model, tmp_path_factory.mktemp("neutreno-vit"))


def _parquet_subset(source, target_dir, rows: int, split: str = "test"):
    target_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pq.read_table(source).slice(0, rows), target_dir / f"{split}-00000-of-00001.parquet")
    return target_dir


@pytest.fixture(scope="module")
def cifar_dir(data_dir, tmp_path_factory):
    """24 real CIFAR-10 test images in the Hub's Parquet layout (the full file would take longer to index)."""
    return _parquet_subset(data_dir / "cifar10" / "test-00000-of-00001.parquet", tmp_path_factory.mktemp("cifar"), 24)


def test_cli_writes_report_and_plot_for_an_image_model(image_model_dir, cifar_dir, tmp_path, capsys):
    out, png = tmp_path / "report.json", tmp_path / "report.png"
    diagnose = ["diagnose", str(image_model_dir), "--dataset", str(cifar_dir), "--num-samples", "20", "--no-progress"]
    code = main([*diagnose, "--batch-size", "8", "--out", str(out), "--plot", str(png)])
    assert code == 0, capsys.readouterr().err
    report = OversmoothingReport.from_json(out)
    assert report.num_samples == 20 and report.metrics == list(DEFAULT_METRICS)
    assert report.metadata["split"] == "test" and report.model_name == str(image_model_dir)
    assert report.layer_indices("cosine_similarity") == [0, 1, 2, 3]
    with Image.open(png) as image:
        assert image.format == "PNG"
    assert "cosine_similarity" in capsys.readouterr().out

    # A second run drawn against the first: same model, same subset, so identical values.
    again = tmp_path / "again.json"
    code = main([*diagnose, "--metrics", "cosine_similarity", "--compare", str(out), "--out", str(again)])
    assert code == 0
    second = OversmoothingReport.from_json(again)
    assert second.metrics == ["cosine_similarity"]
    assert second.per_layer("cosine_similarity") == pytest.approx(report.per_layer("cosine_similarity"), rel=1e-6)


def test_cli_text_model_with_padding(data_dir, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text_dir = _parquet_subset(data_dir / "wikitext-2-v1" / "test-00000-of-00001.parquet", tmp_path / "wiki", 40)
    lines = [line for line in pq.read_table(text_dir).column("text").to_pylist() if line.strip()]
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<eos>"]))
    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>")
    model_dir = tmp_path / "gpt2"
    GPT2LMHeadModel(
        GPT2Config(vocab_size=len(hf_tokenizer), n_embd=32, n_layer=2, n_head=4, bos_token_id=2, eos_token_id=2)
    ).save_pretrained(model_dir)
    hf_tokenizer.save_pretrained(model_dir)  # no pad token: the CLI pads with eos, masked out

    out = tmp_path / "text.json"
    code = main(
        [
            "diagnose",
            str(model_dir),
            "--dataset",
            str(text_dir),
            "--num-samples",
            "12",
            "--batch-size",
            "5",
            "--max-length",
            "24",
            "--out",
            str(out),
            "--variants",
            "softmax,value-embedding",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    reports = {v: OversmoothingReport.from_json(tmp_path / f"text-{v}.json") for v in ("softmax", "value-embedding")}
    report = reports["softmax"]
    assert report.num_samples == 12 and report.layer_indices("functional_j") == [1, 2]
    assert set(report.metrics) == set(DEFAULT_METRICS)
    embedded = reports["value-embedding"]
    assert embedded.metadata["value_path"] == {"method": "value_embedding", "learnable": False, "coefficient": 1.0}
    # what the value embeddings (nanochat's layers: the last of 2) do to the last layer's token cosine
    assert embedded.per_layer("cosine_similarity")[-1] != report.per_layer("cosine_similarity")[-1]
    assert embedded.per_layer("cosine_similarity")[:-1] == report.per_layer("cosine_similarity")[:-1]


class _LogitsOnly(nn.Module):
    def forward(self, pixel_values):
        return pixel_values.mean()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--split", "validation"], "Unknown split 'validation'; the dataset has \\['test'\\]"),
        (["--metrics", "cosine", "effective_rank"], "Unknown metric.*'cosine_similarity'"),
        (["--num-samples", "0"], "`--num-samples` must be at least 1"),
        (["--layers", "7"], "`layers` contains 7"),
        # the embedding output has no attention map: an empty report, not a measurement
        (["--layers", "0", "--metrics", "cosine_similarity", "functional_j"], r"\['functional_j'\] have no value"),
        (["--layers", "1", "--metrics", "attention_map_similarity"], r"\['attention_map_similarity'\] have no"),
    ],
)
def test_cli_errors(image_model_dir, cifar_dir, capsys, extra, message):
    code = main(["diagnose", str(image_model_dir), "--dataset", str(cifar_dir), "--no-progress", *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert "hf-neutreno diagnose: error:" in err
    assert __import__("re").search(message, err), err


def test_cli_empty_dataset_and_model_without_hidden_states(
    image_model_dir, cifar_dir, data_dir, tmp_path, capsys, monkeypatch
):
    import pyarrow.compute as pc

    wiki = pq.read_table(data_dir / "wikitext-2-v1" / "test-00000-of-00001.parquet").slice(0, 50)
    blank = wiki.filter(pc.equal(pc.utf8_trim_whitespace(wiki.column("text")), ""))  # only empty lines
    assert blank.num_rows > 0
    (tmp_path / "blank").mkdir()
    pq.write_table(blank, tmp_path / "blank" / "test-00000-of-00001.parquet")
    assert main(["diagnose", str(image_model_dir), "--dataset", str(tmp_path / "blank"), "--no-progress"]) == 2
    assert "Split 'test' of" in capsys.readouterr().err  # "... has no samples to measure"
    empty = _parquet_subset(data_dir / "cifar10" / "test-00000-of-00001.parquet", tmp_path / "empty", 0)
    assert main(["diagnose", str(image_model_dir), "--dataset", str(empty), "--no-progress"]) == 2
    assert "could not be read" in capsys.readouterr().err
    assert main(["diagnose", str(image_model_dir), "--dataset", str(tmp_path / "missing"), "--no-progress"]) == 2
    assert "does not exist" in capsys.readouterr().err

    monkeypatch.setattr(diagnose_cli, "load_checkpoint", lambda name, **kwargs: _LogitsOnly())
    assert main(["diagnose", str(image_model_dir), "--dataset", str(cifar_dir), "--no-progress"]) == 2
    assert "cannot return hidden states" in capsys.readouterr().err


def test_package_exports_the_callback():
    assert "OversmoothingCallback" in hf_neutreno.__all__
    assert hf_neutreno.OversmoothingCallback.__module__ == "hf_neutreno.diagnostics.callback"


@pytest.fixture(scope="module")
def native_vit_dir(tmp_path_factory):
    """A native ViTForImageClassification folder with its image processor."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    model = ViTForImageClassification(ViTConfig(**TINY, num_labels=10))
    return _save_with_processor(model, tmp_path_factory.mktemp("vit"))


def test_cli_variants_measure_the_model_with_each_value_path(native_vit_dir, cifar_dir, tmp_path, capsys):
    from transformers import ViTForImageClassification

    common = ["--dataset", str(cifar_dir), "--num-samples", "12", "--batch-size", "5", "--no-progress"]
    code = main(
        [
            "diagnose",
            str(native_vit_dir),
            *common,
            "--variants",
            "softmax,neutreno,value-residual-learnable,xsa",
            "--neutreno-lambda",
            "0.6",
            "--out",
            str(tmp_path / "r.json"),
            "--plot",
            str(tmp_path / "r.png"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    reports = {
        v: OversmoothingReport.from_json(tmp_path / f"r-{v}.json")
        for v in ("softmax", "neutreno", "value-residual-learnable", "xsa")
    }
    assert reports["neutreno"].metadata["value_path"] == {"method": "neutreno", "learnable": False, "coefficient": 0.6}
    assert reports["xsa"].metadata["value_path"] == {"method": "xsa", "learnable": False, "coefficient": 1.0}
    last = reports["softmax"].layer_indices("cosine_similarity")[-1]
    cosines = {
        v: dict(zip(r.layer_indices("cosine_similarity"), r.per_layer("cosine_similarity"))) for v, r in reports.items()
    }
    assert cosines["xsa"][last] != cosines["softmax"][last]  # what XSA does to the last layer's token cosine
    assert "[value-residual-learnable]" in capsys.readouterr().out  # one table, a column per variant

    # The same measurements as the model as loaded, and as the adapted model saved and loaded (remote code).
    code = main(["diagnose", str(native_vit_dir), *common, "--out", str(tmp_path / "plain.json")])
    assert code == 0
    assert OversmoothingReport.from_json(tmp_path / "plain.json").values == reports["softmax"].values
    model = ViTForImageClassification.from_pretrained(native_vit_dir)
    adapted_dir = _save_with_processor(hf_neutreno.apply_value_path(model, "neutreno", 0.6), tmp_path / "adapted")
    code = main(["diagnose", str(adapted_dir), *common, "--trust-remote-code", "--out", str(tmp_path / "a.json")])
    assert code == 0
    adapted = OversmoothingReport.from_json(tmp_path / "a.json")
    # One variant alone is named as such: its table column and curve are not the model as loaded.
    alone_flags = ["--variants", "neutreno", "--neutreno-lambda", "0.6", "--out", str(tmp_path / "n.json")]
    code = main(["diagnose", str(native_vit_dir), *common, *alone_flags])
    assert code == 0
    alone = OversmoothingReport.from_json(tmp_path / "n.json")
    assert alone.model_name == f"{native_vit_dir} [neutreno]" and alone.values == reports["neutreno"].values
    for metric in adapted.metrics:
        assert adapted.per_layer(metric) == pytest.approx(reports["neutreno"].per_layer(metric), rel=1e-5), metric
    assert adapted.values != reports["softmax"].values
    capsys.readouterr()
    assert main(["diagnose", str(adapted_dir), *common]) == 2  # without --trust-remote-code: refused, not plain
    assert "only --trust-remote-code loads" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--variants", "softmax,twice"], "`--variants` takes distinct names from"),
        (["--variants", "neutreno", "--neutreno-lambda", "nan"], "--neutreno-lambda.*must be a finite number"),
        (["--variants", "value-residual", "--value-residual-alpha", "2"], r"--value-residual-alpha.*\[0, 1\]"),
        (["--variants", "neutreno"], "has its own NeuTRENO term on"),  # this package's NeuTRENO ViT, λ = 0.6
    ],
)
def test_cli_variant_errors(image_model_dir, cifar_dir, capsys, extra, message):
    assert main(["diagnose", str(image_model_dir), "--dataset", str(cifar_dir), "--no-progress", *extra]) == 2
    assert __import__("re").search(message, capsys.readouterr().err)


# --- `hf-neutreno diagnose` as a user meets it: one line and exit 2 for a user's mistake, the files it writes --------


def test_cli_more_variants_on_a_model_saved_with_a_value_path_are_refused_with_a_flag_as_advice(
    native_vit_dir, cifar_dir, tmp_path
):
    from transformers import ViTForImageClassification

    model = ViTForImageClassification.from_pretrained(native_vit_dir)
    adapted = _save_with_processor(hf_neutreno.apply_value_path(model, "neutreno", 0.6), tmp_path / "adapted")
    proc = run_cli(
        "diagnose",
        adapted,
        "--dataset",
        cifar_dir,
        "--trust-remote-code",
        "--num-samples",
        "4",
        "--variants",
        "softmax,value-residual",
        "--no-progress",
    )
    message = one_line_error(proc, "diagnose")
    assert message.startswith(f"--variants 'softmax,value-residual': {str(adapted)!r} already has a value path")
    assert "['value-residual'] would put another on it" in message and "`--variants softmax` (the default)" in message
    assert "remove_value_path" not in message  # Python advice, from a command line


def _tokenizer_dropping_control_characters(folder):
    """A GPT-2 with a word-level tokenizer that drops control characters (as BERT's normaliser does): text made of
    them is not empty to Python (`"\\x01".strip()`), but gives no tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, lowercase=False)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(["a b c", "d e f"], trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>"]))
    hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>")
    GPT2LMHeadModel(GPT2Config(vocab_size=len(hf_tokenizer), n_embd=16, n_layer=2, n_head=2)).save_pretrained(folder)
    hf_tokenizer.save_pretrained(folder)
    return folder


def test_cli_text_that_gives_no_tokens_is_one_line_naming_the_sample(tmp_path):
    import pyarrow as pa

    model_dir = _tokenizer_dropping_control_characters(tmp_path / "gpt2")
    (tmp_path / "text").mkdir()
    pq.write_table(pa.table({"text": ["a b", "\x01\x02"]}), tmp_path / "text" / "test-00000-of-00001.parquet")
    proc = run_cli_here("diagnose", model_dir, "--dataset", tmp_path / "text", "--no-progress")
    message = one_line_error(proc, "diagnose")
    assert message == (
        f"--dataset {str(tmp_path / 'text')!r}: 1 text sample(s) of a batch give 0 tokens with the tokenizer of "
        f"{str(model_dir)!r} (the first: '\\x01\\x02'); every sample needs at least 1."
    )
    proc = run_cli_here("diagnose", model_dir, "--dataset", tmp_path / "text", "--max-length", "0")
    assert one_line_error(proc, "diagnose") == "`--max-length` must be at least 1, got 0."


def test_cli_pads_text_on_the_right_whatever_the_tokenizers_side(tmp_path):
    """A GPT-2 (absolute positions) whose tokenizer pads on the left: left-padded batches shift the real tokens'
    positions, so the measurements changed with --batch-size. The reference: each text alone, unpadded, through the
    model, and the token cosine from its definition (explicit pairs, float64), averaged over the texts."""
    import pyarrow as pa
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = ["a b c d e f a b", "c d", "e f a", "b c d e f a b c d e", "f e", "d c b a"]
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>"]))
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", padding_side="left"
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(hf_tokenizer), n_embd=16, n_layer=2, n_head=2)).eval()
    model.save_pretrained(tmp_path / "gpt2")
    hf_tokenizer.save_pretrained(tmp_path / "gpt2")
    (tmp_path / "text").mkdir()
    pq.write_table(pa.table({"text": texts}), tmp_path / "text" / "test-00000-of-00001.parquet")

    expected = torch.zeros(3, dtype=torch.float64)  # embeddings + 2 blocks
    for text in texts:
        with torch.no_grad():
            states = model(torch.tensor([hf_tokenizer(text)["input_ids"]]), output_hidden_states=True).hidden_states
        for layer, state in enumerate(states):
            x = state[0].double()
            n = x.shape[0]
            pairs = [x[i] @ x[j] / (x[i].norm() * x[j].norm()) for i in range(n) for j in range(n) if i != j]
            expected[layer] += sum(pairs) / len(pairs) / len(texts)
    for batch_size in (1, 6):
        out = tmp_path / f"batch-{batch_size}.json"
        argv = ["diagnose", str(tmp_path / "gpt2"), "--dataset", str(tmp_path / "text"), "--no-progress"]
        argv += ["--metrics", "cosine_similarity", "--batch-size", str(batch_size), "--out", str(out)]
        assert main(argv) == 0
        got = OversmoothingReport.from_json(out).per_layer("cosine_similarity")
        assert got == pytest.approx(expected.tolist(), rel=1e-5), batch_size


def test_cli_a_folder_without_an_image_processor_says_what_is_missing(cifar_dir, tmp_path):
    torch.manual_seed(0)
    NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**TINY, num_labels=10)).save_pretrained(tmp_path / "bare")
    message = one_line_error(run_cli_here("diagnose", tmp_path / "bare", "--dataset", cifar_dir), "diagnose")
    assert message.startswith(
        f"MODEL_OR_DIR {str(tmp_path / 'bare')!r} has no image processor (the folder has no preprocessor_config.json)"
    )


def test_cli_output_files_are_never_replaced_silently_and_the_plot_path_printed_is_the_real_one(
    image_model_dir, cifar_dir, tmp_path
):
    common = ["diagnose", image_model_dir, "--dataset", cifar_dir, "--num-samples", "4", "--no-progress"]
    proc = run_cli_here(*common, "--out", "report.json", "--plot", "curves", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png", "report.json"]  # matplotlib adds .png
    assert proc.stdout.strip().splitlines()[-2:] == ["Report written to report.json", "Plot written to curves.png"]
    with Image.open(tmp_path / "curves.png") as image:
        assert image.format == "PNG"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for flag, value, existing in (("--out", "report.json", "report.json"), ("--plot", "curves", "curves.png")):
        message = one_line_error(run_cli_here(*common, flag, value, cwd=tmp_path), "diagnose")
        assert (
            message == f"{flag} {existing!r} already exists; pass --overwrite to replace it, or give another file name."
        )
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    proc = run_cli_here(*common, "--seed", "1", "--out", "report.json", "--overwrite", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert OversmoothingReport.from_json(tmp_path / "report.json").metadata["seed"] == 1


def test_cli_measures_the_images_of_a_segmentation_set_whatever_its_column_order(image_model_dir, data_dir, tmp_path):
    """fashion-scenes (scene_parse_150's columns) with its `annotation` label maps before the images: the report is
    the images', the same as with the columns in the Hub's order, not the label maps'."""
    table = pq.read_table(data_dir / "fashion-scenes" / "validation-00000-of-00001.parquet").slice(0, 6)
    reports = {}
    for name, columns in (("image-first", ["image", "annotation"]), ("annotation-first", ["annotation", "image"])):
        (tmp_path / name).mkdir()
        pq.write_table(table.select(columns), tmp_path / name / "validation-00000-of-00001.parquet")
        out = tmp_path / f"{name}.json"
        argv = ["diagnose", str(image_model_dir), "--dataset", str(tmp_path / name), "--no-progress", "--out", str(out)]
        assert main([*argv, "--metrics", "cosine_similarity", "hfc_lfc_ratio"]) == 0
        reports[name] = OversmoothingReport.from_json(out)
    assert reports["annotation-first"].values == reports["image-first"].values
