"""A saved NeuTRENO ViT loads where `hf_neutreno` is not installed: from a folder, from the Hub cache, in a pipeline."""

import json

import torch
from transformers import ViTImageProcessorPil

from fresh_process import make_local_hub_cache, run_fresh
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification
from tiny_models import TINY_VIT, labelled

LABELS = {0: "cat", 1: "dog", 2: "bird"}
REPO_ID = "neutreno-tests/tiny-neutreno-vit"


def test_fresh_process_loads_the_checkpoint_with_its_own_code(tmp_path):
    config = NeuTRENOViTConfig(**TINY_VIT, neutreno_lambda=0.6, **labelled(LABELS))
    model = NeuTRENOViTForImageClassification(config).eval()
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 16, "width": 16}).save_pretrained(folder)
    saved_config = json.loads((folder / "config.json").read_text())
    assert saved_config["auto_map"]["AutoModelForImageClassification"].startswith("modeling_neutreno_vit.")
    assert {"modeling_neutreno_vit.py", "configuration_neutreno_vit.py", "neutreno_common.py"} <= {
        p.name for p in folder.iterdir()
    }

    pixels = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.save(
            {"pixels": pixels, "logits": model(pixels).logits, "pooled": model.vit(pixels).pooler_output},
            tmp_path / "expected.pt",
        )
    hf_home = tmp_path / "hf_home"
    make_local_hub_cache(hf_home, REPO_ID, folder)

    out = run_fresh(
        f"""
        import json, torch
        from PIL import Image
        from transformers import AutoModel, AutoModelForImageClassification, pipeline
        expected = torch.load("{tmp_path / "expected.pt"}")
        report = {{}}
        for name, source in (("folder", "{folder}"), ("hub", "{REPO_ID}")):
            model = AutoModelForImageClassification.from_pretrained(source, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            with torch.no_grad():
                report[name] = (model(expected["pixels"]).logits - expected["logits"]).abs().max().item()
            report[name + "_labels"] = model.config.id2label
        backbone = AutoModel.from_pretrained("{folder}", trust_remote_code=True).eval()
        with torch.no_grad():
            report["backbone"] = (backbone(expected["pixels"]).pooler_output - expected["pooled"]).abs().max().item()
        report["backbone_class"] = type(backbone).__name__
        classifier = pipeline("image-classification", model="{folder}", trust_remote_code=True)
        report["pipeline"] = classifier(Image.new("RGB", (40, 30), (200, 30, 30)))
        print(json.dumps(report))
    """,
        tmp_path,
        hf_home=hf_home,
    )
    report = json.loads(out.strip().splitlines()[-1])
    assert report["folder"] == 0.0 and report["hub"] == 0.0  # identical logits, not merely close
    assert report["folder_labels"] == {str(k): v for k, v in LABELS.items()} == report["hub_labels"]
    assert report["backbone_class"] == "NeuTRENOViTModel" and report["backbone"] == 0.0
    assert {p["label"] for p in report["pipeline"]} == set(LABELS.values())
    assert abs(sum(p["score"] for p in report["pipeline"]) - 1) < 1e-5
