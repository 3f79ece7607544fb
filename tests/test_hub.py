"""Publishing: the model card, the folder that is pushed, and pushes that fail cleanly (`hf_neutreno.hub`)."""

import fnmatch
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import matplotlib
import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import OfflineModeIsEnabled
from PIL import Image
from transformers import ViTImageProcessorPil
from transformers.modelcard import extract_hyperparameters_from_trainer

import hf_neutreno.hub as hub
from examples_loader import TINY_OVERRIDES, fashion_mnist_flags, load_example, trainer_flags
from fresh_process import make_local_hub_cache, run_fresh
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from hf_neutreno.cli import main as cli_main
from hf_neutreno.diagnostics import OversmoothingReport
from tiny_models import TINY_VIT, labelled

REPO_ROOT = Path(__file__).resolve().parents[1]
LABELS = {0: "t-shirt", 1: "trouser", 2: "pullover"}
REPO_ID = "neutreno-tests/tiny-neutreno-vit-card"
TRAINER_METRICS = {
    "eval_loss": 0.61,
    "eval_accuracy": 0.8125,
    "eval_top5_accuracy": 0.97,
    "eval_runtime": 1.5,
    "eval_samples_per_second": 300.0,
    "epoch": 3.0,
    "train_loss": 0.9,
    "train_runtime": 20.0,
}
PUBLISHED = dict(dataset="zalando-datasets/fashion_mnist", results={"accuracy": 0.8125})  # a card's dataset, result
COSINE = [0.21, 0.35, 0.42, 0.47]  # one per hidden state: embeddings + 3 blocks


def measured_report() -> OversmoothingReport:
    """Shaped as `measure_oversmoothing` returns it: hidden-state metrics from the embeddings (0) to block 3,
    attention metrics from block 1, NaN where undefined."""
    values = {
        "cosine_similarity": COSINE,
        "hfc_lfc_ratio": [1.0, 0.8, 0.7, 0.6],
        "effective_rank": [9.0, 8.0, 7.0, 6.0],
        "attention_map_similarity": [float("nan"), 0.5, 0.6],
    }
    layers = {metric: [1, 2, 3] if metric == "attention_map_similarity" else [0, 1, 2, 3] for metric in values}
    return OversmoothingReport(
        values=values,
        layers=layers,
        counts={m: [8] * len(v) for m, v in layers.items()},
        num_samples=8,
        model_name="tiny",
    )


def tiny_model() -> NeuTRENOViTForImageClassification:
    config = NeuTRENOViTConfig(**TINY_VIT, neutreno_lambda=0.6, **labelled(LABELS))
    return NeuTRENOViTForImageClassification(config).eval()


def processor() -> ViTImageProcessorPil:
    return ViTImageProcessorPil(size={"height": 16, "width": 16})


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Point tempfile at an empty folder, to see whatever a push leaves behind."""
    folder = tmp_path / "tempfiles"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


class FakeHubApi:
    """Records what a push would do: `create_repo`, and the files of each `upload_folder` call (top-level files, less
    `ignore_patterns`, as Trainer.push_to_hub passes them)."""

    calls: list = []
    fail_upload = False

    def __init__(self, token=None, **_):
        self.token = token

    def create_repo(self, repo_id, private=None, exist_ok=False, **_):
        FakeHubApi.calls.append(("create_repo", repo_id, private))
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def upload_folder(self, *, repo_id, folder_path, commit_message=None, ignore_patterns=(), **_):
        folder = Path(folder_path)
        files = {
            p.name: p.read_bytes()
            for p in folder.iterdir()
            if p.is_file() and not any(fnmatch.fnmatch(p.name, pattern) for pattern in ignore_patterns)
        }
        FakeHubApi.calls.append(("upload_folder", repo_id, folder, files))
        if FakeHubApi.fail_upload:
            raise ConnectionError("connection reset during upload")
        return "commit-info"


@pytest.fixture
def fake_hub(monkeypatch):
    """Both ways to the Hub: `hf_neutreno.hub` (huggingface_hub's HfApi) and Trainer (transformers' `hf_api()`)."""
    FakeHubApi.calls, FakeHubApi.fail_upload = [], False
    monkeypatch.setattr(hub, "HfApi", FakeHubApi)
    monkeypatch.setattr(transformers.utils.hub, "_hf_api", FakeHubApi())
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    return FakeHubApi


@pytest.fixture
def offline(monkeypatch):
    """huggingface_hub's offline mode, as it reads it: the environment at import, kept in its constants."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)


def test_card_parses_and_carries_metrics_tags_curve_and_citations(tmp_path):
    card = hub.model_card(
        tiny_model(),
        repo_id=REPO_ID,
        dataset="zalando-datasets/fashion_mnist",
        results=TRAINER_METRICS,
        oversmoothing=measured_report(),
        training={"learning rate": 2e-3},
    )
    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")  # what the Hub and users read back

    results = {r.metric_type: r for r in loaded.data.eval_results}
    assert {name: r.metric_value for name, r in results.items()} == {
        "loss": 0.61,
        "accuracy": 0.8125,
        "top5_accuracy": 0.97,
    }
    assert {r.dataset_type for r in results.values()} == {"zalando-datasets/fashion_mnist"}
    assert {r.task_type for r in results.values()} == {"image-classification"}
    assert "custom_code" in loaded.data.tags
    assert loaded.data.pipeline_tag == "image-classification" and loaded.data.library_name == "transformers"
    assert loaded.data.datasets == ["zalando-datasets/fashion_mnist"]

    text = loaded.text
    assert "@inproceedings{nguyen2023mitigating" in text and "2312.00751" in text
    assert "@article{dovonon2024setting" in text and "2401.04301" in text
    assert f'AutoModelForImageClassification.from_pretrained("{REPO_ID}", trust_remote_code=True)' in text
    # The curve, one row per hidden state, the card's metrics (hf_neutreno.hub.CARD_METRICS) out of the report's:
    # the report's own Markdown table, not a copy of it.
    assert "| hidden state | cosine_similarity | hfc_lfc_ratio |" in text
    assert "| 0 (embeddings) | 0.2100 | 1.0000 |" in text and "| 3 | 0.4700 | 0.6000 |" in text
    assert measured_report().markdown_table(["cosine_similarity", "hfc_lfc_ratio"]) in text
    # The paper's numbers are there, and marked as the paper's.
    assert "the paper's numbers (not this checkpoint's)" in text and "| NeuTRENO DeiT-tiny | 73.01 | 91.56 |" in text
    assert "- learning rate: 0.002" in text


def test_card_table_aligns_metrics_by_layer_index():
    """Attention metrics start at block 1 and may be NaN: the table keys every value by its layer index."""
    table = measured_report().markdown_table(["cosine_similarity", "hfc_lfc_ratio", "attention_map_similarity"])
    assert table.splitlines()[:2] == [
        "| hidden state | cosine_similarity | hfc_lfc_ratio | attention_map_similarity |",
        "|---|---|---|---|",
    ]
    assert "| 0 (embeddings) | 0.2100 | 1.0000 |  |" in table and "| 1 | 0.3500 | 0.8000 | n/a |" in table
    assert "| 3 | 0.4700 | 0.6000 | 0.6000 |" in table and len(table.splitlines()) == 2 + 4


def test_bare_values_become_a_report():
    """A dict {metric: [value per hidden state]} or one list of cosines is read as a report (layer i at index i)."""
    report = hub.oversmoothing_report({"cosine_similarity": COSINE, "effective_rank": [9, 8, 7, 6]})
    assert isinstance(report, OversmoothingReport) and report.layer_indices("effective_rank") == [0, 1, 2, 3]
    assert report.per_layer("cosine_similarity") == COSINE and report.num_samples == 0
    assert hub.oversmoothing_report(COSINE).values == {"cosine_similarity": COSINE}
    report = measured_report()
    assert hub.oversmoothing_report(report) is report


def test_card_plot_leaves_the_matplotlib_backend_alone(tmp_path):
    """Drawing the card's plot must not switch the user's backend (it draws on a Figure with the Agg canvas)."""
    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        hub.write_card(tmp_path, tiny_model(), oversmoothing=measured_report())
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    with Image.open(tmp_path / hub.OVERSMOOTHING_PLOT) as image:
        assert image.format == "PNG"


@pytest.mark.parametrize("template", sorted(set(hub.CARD_TEMPLATES.values())))
def test_every_template_renders_a_card_that_parses(template, tmp_path):
    """Each shipped template is valid Jinja and gives a parseable card with results, citations and the papers'
    numbers marked as such. (Rendered with the ViT; the GPT's and EigenViT's own fields render with their models.)"""
    card = hub.model_card(
        tiny_model(), template=template, dataset="uoft-cs/cifar100", results={"accuracy": 0.5}, oversmoothing=COSINE
    )
    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")
    assert loaded.data.eval_results[0].metric_value == 0.5
    assert "custom_code" in loaded.data.tags
    assert "trust_remote_code=True" in loaded.text and "nguyen2023mitigating" in loaded.text
    assert "dovonon2024setting" in loaded.text
    assert "(not this checkpoint's)" in loaded.text
    assert "| 0 (embeddings) | 0.2100 |" in loaded.text


def test_pushed_folder_loads_by_repo_id_in_a_fresh_process(tmp_path):
    model = tiny_model()
    folder = hub.save_for_hub(
        tmp_path / "upload", model, processor(), **PUBLISHED, oversmoothing=measured_report(), repo_id=REPO_ID
    )
    files = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "configuration_neutreno_vit.py",
        "modeling_neutreno_vit.py",
        "neutreno_common.py",
        "presets.py",
        "preprocessor_config.json",
        "README.md",
        hub.OVERSMOOTHING_PLOT,
    } <= files
    assert Image.open(folder / hub.OVERSMOOTHING_PLOT).size[0] > 100
    assert f"]({hub.OVERSMOOTHING_PLOT})" in (folder / "README.md").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["upload"]  # no staging folder left

    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.save({"pixels": pixels, "logits": model(pixels).logits}, tmp_path / "expected.pt")
    hf_home = tmp_path / "hf_home"
    make_local_hub_cache(hf_home, REPO_ID, folder)
    out = run_fresh(
        f"""
        import json, torch
        from huggingface_hub import ModelCard, hf_hub_download
        from transformers import AutoImageProcessor, AutoModelForImageClassification
        expected = torch.load("{tmp_path / "expected.pt"}")
        model = AutoModelForImageClassification.from_pretrained("{REPO_ID}", trust_remote_code=True).eval()
        processor = AutoImageProcessor.from_pretrained("{REPO_ID}")
        card = ModelCard.load(hf_hub_download("{REPO_ID}", "README.md"))
        with torch.no_grad():
            diff = (model(expected["pixels"]).logits - expected["logits"]).abs().max().item()
        print(json.dumps({{"diff": diff, "module": type(model).__module__,
                           "size": [processor.size.height, processor.size.width],
                           "accuracy": card.data.eval_results[0].metric_value}}))
    """,
        tmp_path,
        hf_home=hf_home,
    )
    report = json.loads(out.strip().splitlines()[-1])
    assert report["diff"] == 0.0 and report["module"].startswith("transformers_modules")
    assert report["size"] == [16, 16] and report["accuracy"] == 0.8125


def test_save_for_hub_leaves_nothing_half_written(tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds files"):
        hub.save_for_hub(occupied, tiny_model())

    class BrokenProcessor:
        def save_pretrained(self, folder):
            (Path(folder) / "preprocessor_config.json").write_text("{")  # a partial file, then the failure
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        hub.save_for_hub(tmp_path / "upload", tiny_model(), BrokenProcessor())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]  # no folder, no staging leftovers


def test_push_offline_fails_clearly_before_writing_anything(private_tmp, offline, monkeypatch):
    calls = []
    monkeypatch.setattr(hub, "HfApi", lambda *a, **k: calls.append(a) or pytest.fail("no Hub client offline"))
    with pytest.raises(OfflineModeIsEnabled, match="offline mode \\(HF_HUB_OFFLINE=1\\). Nothing was written"):
        hub.push_to_hub(tiny_model(), REPO_ID, processor())
    assert calls == [] and list(private_tmp.iterdir()) == []


def test_push_to_an_unreachable_hub_fails_clearly_before_writing(private_tmp, monkeypatch):
    """Online mode, but nothing listens at the endpoint: the real huggingface_hub client fails on the first (read)
    request, before the folder is prepared or anything is created remotely."""
    with socket.socket() as probe:  # a port that was free a moment ago: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionError, match=f"Cannot reach the Hugging Face Hub at http://127.0.0.1:{port}"):
        hub.push_to_hub(tiny_model(), REPO_ID, processor(), token="hf_not_a_real_token")
    assert list(private_tmp.iterdir()) == []


def test_push_uploads_the_prepared_folder_in_one_commit_and_cleans_up(fake_hub, private_tmp, tmp_path):
    model = tiny_model()
    commit = hub.push_to_hub(model, REPO_ID, processor(), private=True, **PUBLISHED)
    assert commit == "commit-info"
    names = [call[0] for call in fake_hub.calls]
    assert names == ["create_repo", "upload_folder"]  # created (the first request: it fails fast), then ONE commit
    assert fake_hub.calls[0] == ("create_repo", REPO_ID, True)
    uploaded = fake_hub.calls[1][3]
    reference = hub.save_for_hub(tmp_path / "reference", model, processor(), **PUBLISHED, repo_id=REPO_ID)
    assert set(uploaded) == {p.name for p in reference.iterdir()}  # exactly what save_for_hub writes
    assert uploaded["README.md"] == (reference / "README.md").read_bytes()
    assert list(private_tmp.iterdir()) == []

    fake_hub.calls, fake_hub.fail_upload = [], True  # the upload itself breaks: the error surfaces, no leftovers
    with pytest.raises(ConnectionError, match="connection reset"):
        hub.push_to_hub(model, REPO_ID, processor())
    assert list(private_tmp.iterdir()) == []


BAD_CARD_INPUTS = [
    dict(results={"accuracy": 0.5}),  # no dataset
    dict(template="nope.md"),
    dict(oversmoothing=0.3),
    dict(card="a ready card", dataset="uoft-cs/cifar10"),  # both a card and the arguments to render one
]


@pytest.mark.parametrize("bad", BAD_CARD_INPUTS, ids=["results-without-dataset", "template", "oversmoothing", "card"])
def test_push_checks_the_card_inputs_before_creating_the_repository(bad, fake_hub, private_tmp):
    """A card input that is refused raised only after `create_repo` had made the (public, by default) repository: now
    nothing is created or written. The reference is the error `save_for_hub` raises for the same inputs, offline."""
    model = tiny_model()
    with pytest.raises(ValueError) as reference:
        hub.save_for_hub(private_tmp / "reference", model, **bad)
    with pytest.raises(ValueError) as error:
        hub.push_to_hub(model, REPO_ID, **bad)
    assert str(error.value) == str(reference.value)
    assert fake_hub.calls == [] and list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--template", "nope.md"], "Unknown model card template 'nope.md'"),
        (["--results", "{results}", "--dataset", "uoft-cs/cifar10"], "holds a JSON list"),
    ],
)
def test_cli_push_checks_its_card_inputs_before_creating_the_repository(flags, message, fake_hub, tmp_path, capsys):
    """An unknown --template, or --results that are no metrics, made create_repo first and failed after it."""
    model_dir = tmp_path / "model"
    tiny_model().save_pretrained(model_dir)
    (tmp_path / "results.json").write_text(json.dumps([{"accuracy": 0.5}]))
    flags = [flag.format(results=tmp_path / "results.json") for flag in flags]
    assert cli_main(["push", str(model_dir), REPO_ID, *flags]) == 2
    assert message in capsys.readouterr().err
    assert fake_hub.calls == []


def uploaded_card(files: dict[str, bytes], tmp_path: Path) -> ModelCard:
    """The model card of an uploaded folder, parsed the way the Hub does."""
    (tmp_path / "README.md").write_bytes(files["README.md"])
    return ModelCard.load(tmp_path / "README.md")


def single_upload(fake_hub, repo_id: str, *files: str) -> dict[str, bytes]:
    """The files of the one folder upload, which went to `repo_id` (a Trainer pushes nothing during training) with
    the weights, the config, the card and `files`."""
    uploads = [call for call in fake_hub.calls if call[0] == "upload_folder"]
    assert len(uploads) == 1 and uploads[0][1] == repo_id, uploads
    assert {"config.json", "model.safetensors", "README.md", *files} <= set(uploads[0][3]), sorted(uploads[0][3])
    return uploads[0][3]


def example_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        *fashion_mnist_flags(data_dir),
        *trainer_flags(output_dir),
        *("--max_train_samples", "64", "--max_eval_samples", "64", "--max_steps", "2"),
        *("--per_device_train_batch_size", "32", "--push_to_hub", "--hub_model_id", REPO_ID),
    ]


def test_example_push_to_hub_publishes_model_code_processor_and_card(data_dir, tmp_path, fake_hub):
    metrics, trainer = load_example("run_image_classification").main(example_args(data_dir, tmp_path / "run"))
    files = single_upload(fake_hub, REPO_ID, "modeling_neutreno_vit.py", "preprocessor_config.json")
    card = uploaded_card(files, tmp_path)
    accuracy = next(r for r in card.data.eval_results if r.metric_type == "accuracy")
    assert accuracy.metric_value == metrics["eval_accuracy"] and accuracy.dataset_name == "fashion_mnist"
    # The hyper-parameters are transformers' own reading of the Trainer.
    hyperparameters = extract_hyperparameters_from_trainer(trainer)
    assert hyperparameters["training_steps"] == 2 and hyperparameters["train_batch_size"] == 32
    for key, value in hyperparameters.items():
        assert f"- {key}: {value}\n" in card.text


def lm_example_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        *("--dataset_name", str(data_dir / "wikitext-2-v1"), "--config_overrides", TINY_OVERRIDES),
        *"--max_vocab_size 500 --adaptive_softmax_cutoffs 100 --block_size 16 --max_train_tokens 2048".split(),
        *"--max_eval_tokens 64 --max_steps 2 --warmup_steps 0 --per_device_train_batch_size 8".split(),
        *trainer_flags(output_dir, use_cpu=True),
        *("--push_to_hub", "--hub_model_id", "neutreno-tests/tiny-neutreno-gpt"),
    ]


def test_lm_example_push_to_hub_publishes_model_code_tokenizer_and_card(data_dir, tmp_path, fake_hub):
    metrics = load_example("run_clm_wikitext103").main(lm_example_args(data_dir, tmp_path / "run"))
    code = ("modeling_neutreno_gpt.py", "configuration_neutreno_gpt.py", "neutreno_common.py")
    files = single_upload(fake_hub, "neutreno-tests/tiny-neutreno-gpt", *code, "tokenizer.json")
    card = uploaded_card(files, tmp_path)
    perplexity = {r.metric_type: r for r in card.data.eval_results}
    assert perplexity["sliding perplexity"].metric_value == metrics["test_sliding_perplexity"]
    assert perplexity["blocks perplexity"].metric_value == metrics["test_blocks_perplexity"]
    assert perplexity["sliding perplexity"].dataset_split == "test"
    assert "custom_code" in card.data.tags and "- context: 16" in card.text


def eigen_example_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        *("--dataset", str(data_dir / "cifar10"), "--output-dir", str(output_dir)),
        *"--quick --variants vit-minus --fractions 1.0 --corruptions gaussian_noise --severities 0 5".split(),
        *"--push-to-hub --hub-model-id neutreno-tests/tiny-eigenvit --hub-private-repo".split(),
    ]


@pytest.mark.parametrize(
    "script, make_args",
    [
        ("run_image_classification", example_args),
        ("run_clm_wikitext103", lm_example_args),
        ("run_eigen_vit", eigen_example_args),
        ("run_semantic_segmentation", lambda *args: segmentation_example_args(*args)),
    ],
)  # defined below
def test_example_push_to_hub_offline_stops_before_training(script, make_args, data_dir, tmp_path, offline):
    with pytest.raises(OfflineModeIsEnabled, match="Nothing was written"):
        load_example(script).main(make_args(data_dir, tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_eigen_example_push_to_hub_publishes_each_variant_with_its_card(data_dir, tmp_path, fake_hub):
    results = load_example("run_eigen_vit").main(eigen_example_args(data_dir, tmp_path / "run"))
    code = ("modeling_eigen_vit.py", "modeling_neutreno_vit.py")
    files = single_upload(fake_hub, "neutreno-tests/tiny-eigenvit-vit-minus", *code, "preprocessor_config.json")
    assert ("create_repo", "neutreno-tests/tiny-eigenvit-vit-minus", True) in fake_hub.calls  # --hub_private_repo
    metrics = {r.metric_type: r.metric_value for r in uploaded_card(files, tmp_path).data.eval_results}
    clean = next(r["accuracy"] for r in results["data_efficiency"] if r["variant"] == "vit-minus")
    corrupted = {
        f"accuracy_severity_{r['severity']}": r["accuracy"]
        for r in results["robustness"]
        if r["variant"] == "vit-minus" and r["severity"] > 0
    }
    assert "accuracy_severity_5" in corrupted
    assert metrics == {"accuracy": clean, **corrupted}


def test_cli_push_save_to_writes_the_folder_with_the_run_results(data_dir, tmp_path):
    model_dir = tmp_path / "run"
    tiny_model().save_pretrained(model_dir)
    processor().save_pretrained(model_dir)
    (model_dir / "all_results.json").write_text(json.dumps(TRAINER_METRICS))  # as Trainer.save_metrics writes it
    (tmp_path / "curve.json").write_text(json.dumps({"cosine_similarity": COSINE}))
    assert (
        cli_main(
            [
                "push",
                str(model_dir),
                REPO_ID,
                "--dataset",
                str(data_dir / "fashion_mnist"),
                "--oversmoothing",
                str(tmp_path / "curve.json"),
                "--save-to",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == {
        "loss": 0.61,
        "accuracy": 0.8125,
        "top5_accuracy": 0.97,
    }
    assert card.data.datasets is None  # a local folder is not a Hub dataset id
    assert (tmp_path / "out" / "modeling_neutreno_vit.py").is_file()
    assert (tmp_path / "out" / hub.OVERSMOOTHING_PLOT).is_file()


def card_row(card: str, label: str) -> str:
    (row,) = [line for line in card.splitlines() if line.startswith(f"| {label} |")]
    return row.split("|")[2].strip()


def listed_layers(text: str, num_layers: int) -> list[int] | None:
    """The 0-based layers a card's row lists: "all" (None), "none ...", "in no layer ...", "... layers 1 to 3 ..." or
    "... layer(s) 1, 3 (0-based)"."""
    if text == "all":
        return None
    if text.startswith(("none", "in no layer")) or text.split(", ", 1)[-1].startswith("in no layer"):
        return []
    numbers = text.removesuffix(" (0-based)").split("layer")[-1].lstrip("s ")
    if " to " in numbers:
        first, last = map(int, numbers.split(" to "))
        return list(range(first, last + 1))
    return [int(n) for n in numbers.split(", ")]


def layers_with_the_term(model) -> list[int]:
    """The layers whose attention adds λ (V₀ − V_ℓ), as the built model reads its λ at each forward."""
    from hf_neutreno.models.neutreno_common import NeuTRENOLayerLambda

    return sorted(m.layer_idx for m in model.modules() if isinstance(m, NeuTRENOLayerLambda) and m.neutreno_lambda)


@pytest.mark.parametrize(
    "kind, config",
    [
        ("vit", dict(neutreno_layers=None)),
        ("vit", dict(neutreno_layers=[])),
        ("vit", dict(neutreno_layers=[2])),
        ("vit", dict(neutreno_layers=[2, 1])),
        ("vit", dict(num_hidden_layers=1)),
        ("vit", dict(neutreno_lambda=0.0)),
        ("gpt", dict(neutreno_layers=None)),
        ("gpt", dict(neutreno_layers=[])),
        ("gpt", dict(neutreno_layers=[3, 1])),
        ("eigen", dict(neutreno_lambda=0.4, neutreno_layers=[], eigen_layers=[])),
        ("eigen", dict(neutreno_lambda=0.4, eigen_layers=[2, 0])),
        ("eigen", dict(neutreno_lambda=0.4, neutreno_layers=[1], eigen_layers=None)),
    ],
)
def test_card_names_exactly_the_layers_with_the_term(kind, config):
    """`neutreno_layers=[]` (no layer adds the term) rendered "NeuTRENO λ | 0.6, in layers 1 to 2" without the softmax
    baseline sentence, and `eigen_layers=[]` (no layer reparameterised) "reparameterised layers | all": Jinja takes []
    for false. The reference is the built model: the attention modules whose λ is not 0, and those of EigenViT."""
    from hf_neutreno import EigenViTConfig, EigenViTForImageClassification, NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
    from hf_neutreno.models.modeling_eigen_vit import EigenViTAttention
    from tiny_models import TINY_NEUTRENO_GPT

    if kind == "gpt":
        model = NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**{**TINY_NEUTRENO_GPT, **config}))
    elif kind == "eigen":
        model = EigenViTForImageClassification(EigenViTConfig(**TINY_VIT, **config, num_labels=2))
    else:
        model = NeuTRENOViTForImageClassification(NeuTRENOViTConfig(**{**TINY_VIT, **config}, num_labels=2))
    card = str(hub.model_card(model))
    with_term = layers_with_the_term(model)
    row = card_row(card, "NeuTRENO λ")
    if model.config.neutreno_lambda:
        assert listed_layers(row, model.config.num_hidden_layers) == with_term, row
    baseline = "it is the softmax baseline" in card
    if kind != "eigen":
        assert baseline == (not with_term), card
    else:
        reparameterised = [
            i for i, layer in enumerate(model.vit.layers) if isinstance(layer.attention, EigenViTAttention)
        ]
        listed = listed_layers(card_row(card, "reparameterised layers"), model.config.num_hidden_layers)
        assert (list(range(model.config.num_hidden_layers)) if listed is None else listed) == reparameterised
        assert ("No layer of this checkpoint is reparameterised" in card) == (not reparameterised)


def test_segmenter_card_is_the_baseline_when_no_encoder_layer_and_no_decoder_block_has_the_term():
    from hf_neutreno import NeuTRENOViTForSemanticSegmentation

    for kw, baseline in [
        (dict(neutreno_layers=[], decoder_neutreno_lambda=0.0), True),
        (dict(neutreno_layers=[], decoder_neutreno_lambda=0.3), False),
        (dict(neutreno_layers=[2], decoder_neutreno_lambda=0.0), False),
    ]:
        config = NeuTRENOViTConfig(**TINY_VIT, neutreno_lambda=0.6, **kw, **labelled(SEGMENTATION_LABELS))
        model = NeuTRENOViTForSemanticSegmentation(config)
        card = str(hub.model_card(model))
        assert ("it is the softmax baseline" in card) == (not layers_with_the_term(model)) == baseline, kw
        encoder = card_row(card, "NeuTRENO λ").split(";")[0]
        assert listed_layers(encoder.removeprefix("encoder "), 3) == kw["neutreno_layers"], encoder


# all_results.json of the language-model example: the training run's statistics, then every split's evaluation.
LM_RESULTS = {
    "epoch": 1.0,
    "train_loss": 5.2,
    "train_runtime": 30.0,
    "validation_sliding_perplexity": 30.5,
    "validation_sliding_loss": 3.418,
    "test_sliding_perplexity": 32.25,
    "test_sliding_loss": 3.4735,
    "context_length": 64,
}


def test_cli_push_labels_the_results_with_the_split_they_were_measured_on(fake_hub, tmp_path, capsys):
    """`push --split validation` on a language-model folder kept the `test_*` numbers and labelled them validation.
    Each split now gives its own numbers, labelled with it (the reference: the values written above), and a --split
    the results do not have is refused, naming those they have, before the Hub is asked for anything."""
    from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM
    from tiny_models import TINY_NEUTRENO_GPT

    model_dir = tmp_path / "run"
    NeuTRENOGPTForCausalLM(NeuTRENOGPTConfig(**TINY_NEUTRENO_GPT)).save_pretrained(model_dir)
    (model_dir / "all_results.json").write_text(json.dumps(LM_RESULTS))
    push = ["push", str(model_dir), "me/lm", "--dataset", "Salesforce/wikitext"]
    for split in ("validation", "test"):
        assert cli_main([*push, "--split", split, "--save-to", str(tmp_path / split)]) == 0
        card = ModelCard.load(tmp_path / split / "README.md")
        recorded = {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results}
        assert recorded == {
            (split, "sliding_perplexity"): LM_RESULTS[f"{split}_sliding_perplexity"],
            (split, "sliding_loss"): LM_RESULTS[f"{split}_sliding_loss"],
        }
    capsys.readouterr()
    assert cli_main([*push, "--split", "train", "--save-to", str(tmp_path / "train")]) == 2
    error = capsys.readouterr().err
    assert "no metrics of the split 'train'" in error and "['test', 'validation']" in error and "--split" in error
    assert not (tmp_path / "train").exists()
    assert cli_main([*push, "--split", "dev"]) == 2 and fake_hub.calls == []  # refused before create_repo


def test_card_results_keep_the_split_asked_for():
    """`model_card` with Trainer's keys: the named split's own keys, else `eval_` ones labelled with the split asked
    for, else (no key names a split) every metric; a split the results do not name is refused."""

    def recorded(results, split):
        card = hub.model_card(tiny_model(), dataset="uoft-cs/cifar10", dataset_split=split, results=results)
        return {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results}

    both = {"eval_accuracy": 0.8, "test_accuracy": 0.7, "train_loss": 0.9}
    assert recorded(both, "test") == {("test", "accuracy"): 0.7}
    assert recorded(both, "validation") == {("validation", "accuracy"): 0.8}  # evaluate()'s, on the split named
    assert recorded(TRAINER_METRICS, "validation") == {
        ("validation", "loss"): 0.61,
        ("validation", "accuracy"): 0.8125,
        ("validation", "top5_accuracy"): 0.97,
    }
    assert recorded({"accuracy": 0.8, "train_loss": 0.9}, "test") == {("test", "accuracy"): 0.8}
    with pytest.raises(ValueError, match=r"no metrics of the split 'validation'.*\['test'\]"):
        recorded({"test_accuracy": 0.7, "train_loss": 0.9}, "validation")


def test_bad_card_inputs_are_clear_errors():
    model = tiny_model()
    with pytest.raises(ValueError, match="need the `dataset`"):
        hub.model_card(model, results={"accuracy": 0.5})
    with pytest.raises(ValueError, match="Unknown model card template 'nope.md'"):
        hub.model_card(model, template="nope.md")
    with pytest.raises(ValueError, match="has no per-layer values"):
        hub.model_card(model, oversmoothing={"cosine_similarity": []})
    with pytest.raises(ValueError, match="must be an OversmoothingReport"):
        hub.model_card(model, oversmoothing=0.3)
    with pytest.raises(ValueError, match="either `card` or the arguments"):
        hub.save_for_hub("unused", model, card=hub.model_card(model), results={"accuracy": 0.5})
    model.config.model_type = "bert"  # a model type without a template
    with pytest.raises(ValueError, match="No model card template for model_type 'bert'"):
        hub.model_card(model)


def test_templates_ship_in_the_wheel(tmp_path):
    """A non-editable install finds the templates: they are package data of hf_neutreno, read through
    importlib.resources. Builds the wheel of a copy of this checkout, offline."""
    setuptools = pytest.importorskip("setuptools", reason="building a wheel offline needs setuptools")
    if int(setuptools.__version__.split(".")[0]) < 70:
        pytest.importorskip("wheel", reason="setuptools < 70 needs the `wheel` package to build wheels offline")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with zipfile.ZipFile(next(tmp_path.glob("hf_neutreno-*.whl"))) as wheel:
        names = set(wheel.namelist())
    expected = {f"hf_neutreno/model_cards/{name}" for name in [*hub.CARD_TEMPLATES.values(), hub.CITATIONS_FILE]}
    assert expected <= names, sorted(names)
    # ... and the top-level model_cards/ of the checkout is the same folder, not a second copy.
    assert (REPO_ROOT / "model_cards").resolve() == (REPO_ROOT / "src" / "hf_neutreno" / "model_cards").resolve()


# --- the Segmenter's card and the segmentation example's push -------------------------------------------------------

SEGMENTATION_LABELS = {0: "background", 1: "T-shirt/top", 2: "Trouser"}
SEGMENTATION_METRICS = {
    "eval_mean_iou": 0.4125,
    "eval_pixel_accuracy": 0.875,
    "eval_mean_accuracy": 0.5,
    "eval_iou_background": 0.9,
    "eval_iou_T-shirt/top": 0.3375,
    "eval_iou_Trouser": float("nan"),
    "eval_mean_iou_ms": 0.42,
    "eval_runtime": 3.0,
    "train_loss": 0.7,
}


def tiny_segmenter():
    from hf_neutreno import NeuTRENOViTForSemanticSegmentation

    config = NeuTRENOViTConfig(
        **TINY_VIT, neutreno_lambda=0.6, decoder_neutreno_lambda=0.3, **labelled(SEGMENTATION_LABELS)
    )
    return NeuTRENOViTForSemanticSegmentation(config).eval()


def test_segmenter_card_renders_offline_with_its_own_template(tmp_path):
    """A Segmenter (model type neutreno_vit, like the classifier) gets the segmentation card: the pipeline tag,
    mean IoU and pixel accuracy in the eval results (a NaN IoU left out), a per-class table, the paper's Table 2 marked
    as the paper's, and the segmentation loading example."""
    card = hub.model_card(
        tiny_segmenter(),
        repo_id=REPO_ID,
        dataset="scene_parse_150",
        dataset_split="validation",
        results=SEGMENTATION_METRICS,
        oversmoothing=measured_report(),
    )
    card.save(tmp_path / "README.md")
    loaded = ModelCard.load(tmp_path / "README.md")
    assert loaded.data.pipeline_tag == "image-segmentation" and "custom_code" in loaded.data.tags
    results = {r.metric_type: r for r in loaded.data.eval_results}
    assert {name: r.metric_value for name, r in results.items()} == {
        "mean_iou": 0.4125,
        "pixel_accuracy": 0.875,
        "mean_accuracy": 0.5,
        "iou_background": 0.9,
        "iou_T-shirt/top": 0.3375,
        "mean_iou_ms": 0.42,
    }
    assert {r.task_type for r in results.values()} == {"image-segmentation"}
    assert {r.dataset_split for r in results.values()} == {"validation"}

    text = loaded.text
    assert "| mean iou | 0.4125 | scene_parse_150 | validation |" in text
    assert "| mean iou ms | 0.4200 | scene_parse_150 | validation |" in text
    assert "| T-shirt/top | 0.3375 |" in text and "| background | 0.9000 |" in text and "Trouser" not in text
    assert "| NeuTRENO λ | encoder 0.6, in layers 1 to 2 (0-based); decoder 0.3 |" in text
    assert "| decoder | mask_transformer: 2 blocks × 32 × 4 heads |" in text
    assert "the paper's numbers (not this checkpoint's)" in text
    assert "| NeuTRENO Segmenter (DeiT-tiny) | 37.24 | 38.06 |" in text
    assert f'AutoModelForSemanticSegmentation.from_pretrained("{REPO_ID}", trust_remote_code=True)' in text
    assert f'pipeline("image-segmentation", model="{REPO_ID}", trust_remote_code=True)' in text
    assert "@inproceedings{strudel2021segmenter" in text and "@inproceedings{nguyen2023mitigating" in text
    assert "| 0 (embeddings) | 0.2100 | 1.0000 |" in text
    # The classifier keeps its own card.
    assert "image-classification" == hub.model_card(tiny_model()).data.pipeline_tag
    assert "Table 1" in hub.model_card(tiny_model()).text


def segmentation_example_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        *("--config_overrides", TINY_OVERRIDES + ",patch_size=16,decoder_num_layers=1"),
        *("--crop_size", "64", "--dataset_name", str(data_dir / "fashion-scenes"), "--no_eval_multi_scale"),
        *"--max_train_samples 16 --max_eval_samples 4 --max_steps 2 --per_device_train_batch_size 4".split(),
        *trainer_flags(output_dir),
        *("--push_to_hub", "--hub_model_id", "neutreno-tests/tiny-segmenter"),
    ]


def test_segmentation_example_push_to_hub_publishes_model_code_processor_and_card(data_dir, tmp_path, fake_hub):
    metrics = load_example("run_semantic_segmentation").main(segmentation_example_args(data_dir, tmp_path / "run"))
    files = single_upload(
        fake_hub, "neutreno-tests/tiny-segmenter", "modeling_neutreno_vit.py", "preprocessor_config.json"
    )
    assert json.loads(files["preprocessor_config.json"])["image_processor_type"] == "SegformerImageProcessor"
    card = uploaded_card(files, tmp_path)
    results = {r.metric_type: r for r in card.data.eval_results}
    assert results["mean_iou"].metric_value == metrics["eval_mean_iou"]
    assert results["pixel_accuracy"].metric_value == metrics["eval_pixel_accuracy"]
    assert results["mean_iou"].dataset_name == "fashion-scenes" and card.data.pipeline_tag == "image-segmentation"
    assert "| NeuTRENO Segmenter (DeiT-tiny) | 37.24 | 38.06 |" in card.text


def test_push_names_its_flag_for_an_occupied_save_to_and_writes_through_a_link(tmp_path):
    """`--save-to` into a folder that holds files is refused before the model loads, naming the flag (it named
    Python's `folder`); a link to an empty folder is written through (it failed with "[Errno 20] Not a directory")."""
    model_dir = tmp_path / "model"
    tiny_model().save_pretrained(model_dir)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    code = cli_main(["push", str(model_dir), "me/model", "--save-to", str(occupied)])
    assert code == 2 and sorted(p.name for p in occupied.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "link").symlink_to(empty)
    assert cli_main(["push", str(model_dir), "me/model", "--save-to", str(tmp_path / "link")]) == 0
    assert (empty / "model.safetensors").is_file() and (tmp_path / "link").is_symlink()


def test_push_and_diagnose_of_unreadable_pickled_weights_say_what_to_do(tmp_path, capsys):
    """A `pytorch_model.bin` that torch will not unpickle (it holds more than tensors) ended both commands with a
    traceback: each now exits 2 with one line that says how to get safetensors."""
    model_dir = tmp_path / "model"
    model = tiny_model()
    model.save_pretrained(model_dir)
    processor().save_pretrained(model_dir)  # diagnose's inputs
    (model_dir / "model.safetensors").unlink()
    state = {**model.state_dict(), "trainer_state": {"optimizer": torch.optim.SGD}}
    torch.save(state, model_dir / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    for argv in (
        ["push", str(model_dir), "me/model", "--save-to", str(tmp_path / "out")],
        ["diagnose", str(model_dir)],
    ):
        capsys.readouterr()
        assert cli_main([*argv, "--dataset", "digits"] if argv[0] == "diagnose" else argv) == 2
        error = capsys.readouterr().err
        assert "pickled pytorch_model.bin" in error and "save_pretrained" in error, error
    assert not (tmp_path / "out").exists()
