"""The trained ViTs committed with the cpu-long run (experiments/evidence/results/reproduce-cpu-long/models/): each
loads through the Auto classes with `trust_remote_code=True` in a process where `hf_neutreno` cannot be imported, and
scores what its unit's JSON recorded: the last-layer token cosine similarity on the first 1,000 of CIFAR-10's test
images, recomputed here with plain tensor math from the model's hidden states, and, for NeuTRENO's seed-0 model, the
test accuracy on all 10,000. The cosine, to 1e-5, is a fingerprint of each model's weights and code; the accuracy checks
the whole scoring path once (each model's 10,000 images cost about half a minute on one CPU thread)."""

import json
from pathlib import Path

import pytest

from fresh_process import run_fresh

RUN = Path(__file__).resolve().parents[1] / "experiments" / "evidence" / "results" / "reproduce-cpu-long"
KEPT = sorted(path.stem for path in (RUN / "units").glob("parent-*.json"))

# The unit's accuracy came from another process, batch size and (possibly) CPU: a logit within rounding of a tie may
# flip. Two of 10,000 images allow for that; the seeds' models differ by 5 or more (62.25 / 62.20 / 63.24 %).
ACCURACY_TOLERANCE = 2 / 10_000

# One fresh process scores every kept model: the images are decoded once, and each model's own image processor makes
# its pixels (a processor equal to an earlier one reuses them).
SCORE = """
import io, json
import pyarrow.parquet as pq
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoModelForImageClassification

table = pq.read_table(parquet).to_pydict()
images = [Image.open(io.BytesIO(image["bytes"])).convert("RGB") for image in table["img"]]
labels = torch.tensor(table["label"])
pixels_by_processor, scores = {}, {}
for name, (folder, scored_images) in folders.items():
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    key = processor.to_json_string()
    if key not in pixels_by_processor:
        pixels_by_processor[key] = processor(images, return_tensors="pt")["pixel_values"]
    pixel_values = pixels_by_processor[key]
    correct, cosines = 0, []
    with torch.inference_mode():
        for start in range(0, scored_images, 500):
            out = model(pixel_values=pixel_values[start:start + 500], output_hidden_states=start < 1000)
            correct += (out.logits.argmax(-1) == labels[start:start + 500]).sum().item()
            if start < 1000:  # mean over token pairs i != j of the normalised last hidden state, per image
                tokens = torch.nn.functional.normalize(out.hidden_states[-1].double(), dim=-1)
                n = tokens.shape[1]
                cosines.append((tokens.sum(1).pow(2).sum(-1) - n) / (n * (n - 1)))
    scores[name] = {"module": type(model).__module__, "accuracy": correct / scored_images,
                    "cosine": torch.cat(cosines).mean().item(), "images": scored_images}
print(json.dumps(scores))
"""


def test_every_kept_model_folder_belongs_to_a_finished_unit_and_the_weights_stay_within_20_mb():
    folders = sorted(path.name for path in (RUN / "models").iterdir() if path.is_dir())
    recorded = sorted(Path(json.loads((RUN / "units" / f"{name}.json").read_text())["model_dir"]).name for name in KEPT)
    assert folders == recorded, (folders, recorded)  # no folder without its unit, no unit without its folder
    weights = sum(path.stat().st_size for path in (RUN / "models").rglob("*.safetensors"))
    assert 0 < weights <= 20 * 10**6, weights


@pytest.mark.slow
def test_every_kept_model_loads_without_the_package_and_scores_its_recorded_results(data_dir, tmp_path):
    units = {name: json.loads((RUN / "units" / f"{name}.json").read_text()) for name in KEPT}
    whole_test_set = {"parent-neutreno-seed0"}
    folders = {
        name: (str(RUN / unit["model_dir"]), 10_000 if name in whole_test_set else 1000) for name, unit in units.items()
    }
    parquet = data_dir / "cifar10" / "test-00000-of-00001.parquet"
    code = f"folders, parquet = {folders!r}, {str(parquet)!r}\n" + SCORE
    scores = json.loads(run_fresh(code, tmp_path, timeout=900).strip().splitlines()[-1])

    assert sorted(scores) == KEPT and len(KEPT) == 6
    for name, unit in units.items():
        scored = scores[name]
        assert scored["module"].startswith("transformers_modules."), name  # the folder's own code, not the package's
        assert unit["scored_on"] == "test", name
        if name in whole_test_set:
            assert scored["images"] == 10_000, name
            assert abs(scored["accuracy"] - unit["accuracy"]) <= ACCURACY_TOLERANCE, (name, scored, unit["accuracy"])
        recorded_cosine = unit["trained"]["oversmoothing"]["values"]["cosine_similarity"][-1]
        assert scored["cosine"] == pytest.approx(recorded_cosine, abs=1e-5), (name, scored, recorded_cosine)
