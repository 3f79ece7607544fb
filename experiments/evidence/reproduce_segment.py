"""The Segmenter units: `examples/run_semantic_segmentation.py` (Segmenter's augmentation, polynomial decay, single-
and multi-scale mean IoU) on fashion-scenes, from a kept CIFAR-10 encoder or from random weights of its shape."""

import importlib.util
import os
import shutil
from pathlib import Path

import datasets
from transformers import AutoImageProcessor, AutoModelForSemanticSegmentation
from transformers.trainer_utils import get_last_checkpoint

from hf_neutreno.data.loading import load_image_dataset
from hf_neutreno.diagnostics import measure_oversmoothing

from .reproduce_cifar import VIT_LAMBDA, budget_vit_shape
from .reproduce_training import ROOT, Context

SEGMENT_SCENES = "fashion-scenes"  # a local dataset (64 × 64 scenes of Fashion-MNIST items, 11 classes)
SEGMENT_PILOT_IMAGES = 500
SEGMENT_SHAPE = (
    "num_hidden_layers={num_hidden_layers},hidden_size={hidden_size},num_attention_heads={num_attention_heads},"
    "intermediate_size={intermediate_size},patch_size=4"
)  # the kept ViTs' shape, for the Segmenters trained from random weights


def segmentation_script():
    """examples/run_semantic_segmentation.py as a module (an example script, not part of the package)."""
    path = ROOT / "examples" / "run_semantic_segmentation.py"
    spec = importlib.util.spec_from_file_location("run_semantic_segmentation", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def script_arguments(context: Context, scenes: Path, seed: int, lam: float, recipe: dict, pilot: bool) -> list:
    """The script's command line: the budget's steps and batch, a checkpoint every quarter of the run, the pilot's
    held-out scenes scored single-scale (all of them: fewer than the validation split's)."""
    budget = context.budget
    scored = min(budget.segment_eval_samples, SEGMENT_PILOT_IMAGES) if pilot else budget.segment_eval_samples
    options = {
        "dataset-name": scenes,
        "crop-size": 64,
        "neutreno-lambda": lam,
        "max-steps": budget.segment_steps,
        "per-device-train-batch-size": budget.segment_batch_size,
        "lr-scheduler-type": "polynomial",
        "seed": seed,
        "output-dir": context.work_dir,
        "save-strategy": "steps",
        "save-steps": max(budget.segment_steps // 4, 1),
        "save-total-limit": 1,
        "logging-steps": max(budget.segment_steps // 10, 1),
        "report-to": "none",
        "disable-tqdm": "true",
        "metric-backend": "direct",
        "max-eval-samples": scored,
        "eval-multi-scale": str(not pilot).lower(),
        **{key.replace("_", "-"): value for key, value in recipe.items()},
    }
    return [token for key, value in options.items() for token in (f"--{key}", str(value))]


def run_segment(context: Context, seed: int, variant: str, recipe: dict, encoder: Path | None, pilot=False) -> dict:
    """A Segmenter of `variant` (`vit`, `neutreno`, `scratch-vit`, `scratch-neutreno`) trained with the optimiser
    `recipe`: its encoder the kept CIFAR-10 model in `encoder` (None, for `scratch-*`: random weights of the same
    shape), a new mask transformer, λ 0.6 in encoder and decoder for NeuTRENO. `pilot`: trained on 3,500 training
    scenes and scored on the other 500. Resumes from the last checkpoint in the work folder."""
    if context.data is None:
        raise ValueError(
            "The Segmenter units read fashion-scenes from a local copy: pass --data (or set "
            "HF_NEUTRENO_DATA); it is not on the Hub."
        )
    scenes = Path(context.data) / SEGMENT_SCENES
    if pilot:
        scenes = pilot_scenes(scenes, Path(context.work_dir).parent / f"{SEGMENT_SCENES}-pilot")
    lam = VIT_LAMBDA if variant.removeprefix("scratch-") == "neutreno" else 0.0
    args = script_arguments(context, scenes, seed, lam, recipe, pilot)
    if encoder is None:
        args += ["--config-overrides", SEGMENT_SHAPE.format(**budget_vit_shape(context.budget))]
    else:
        args += ["--model-name-or-path", str(encoder)]
    if os.path.isdir(context.work_dir) and get_last_checkpoint(context.work_dir):
        args.append("--resume-from-checkpoint")
    metrics = segmentation_script().main(args)
    model = AutoModelForSemanticSegmentation.from_pretrained(context.work_dir).eval()
    multi_scale = ("mean_iou_ms", "pixel_accuracy_ms")
    return {
        "mean_iou": metrics["eval_mean_iou"],
        "pixel_accuracy": metrics["eval_pixel_accuracy"],
        **({} if pilot else {k: metrics[f"eval_{k}"] for k in multi_scale}),
        "scored_on": "held-out training scenes" if pilot else "validation",
        "neutreno_lambda": lam,
        "start_from": None if encoder is None else encoder.name,
        "train_loss": metrics.get("train_loss"),
        "steps": context.budget.segment_steps,
        "train_seconds": metrics.get("train_runtime"),  # this session's (a resumed unit's earlier ones are lost)
        "resumed_from_step": metrics.get("resumed_from_step"),
        "parameters": model.num_parameters(),
        "trained": {"oversmoothing": segment_smoothing(model, context, scenes)},
    }


def segment_smoothing(model, context: Context, scenes: Path) -> dict:
    """The trained Segmenter's per-layer over-smoothing on the first validation scenes."""
    processor = AutoImageProcessor.from_pretrained(context.work_dir)
    count = context.budget.oversmoothing_samples // 4
    evaluation = load_image_dataset(str(scenes))["validation"].select(range(count))
    pixels = processor([image.convert("RGB") for image in evaluation["image"]], return_tensors="pt")["pixel_values"]
    batches = [{"pixel_values": chunk} for chunk in pixels.split(50)]
    metrics = ["cosine_similarity", "hfc_lfc_ratio"]
    return measure_oversmoothing(model, batches, metrics=metrics, progress=False).to_dict()


def pilot_scenes(scenes: Path, folder: Path) -> Path:
    """fashion-scenes' training scenes split 3,500 / 500 (seed 0) as a dataset folder of its own: `train` and the
    held-out `validation` the pilot scores on."""
    if (folder / "id2label.json").exists():
        return folder
    train = datasets.load_dataset("parquet", data_dir=str(scenes), split="train")
    split = train.train_test_split(test_size=SEGMENT_PILOT_IMAGES, seed=0)
    # Written under this process's name, then renamed: the pilot's units run in parallel workers.
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    split["train"].to_parquet(str(partial / "train-00000-of-00001.parquet"))
    split["test"].to_parquet(str(partial / "validation-00000-of-00001.parquet"))
    shutil.copy(scenes / "id2label.json", partial / "id2label.json")
    try:
        partial.rename(folder)
    except OSError:  # another worker renamed its copy first: the same split (seed 0)
        shutil.rmtree(partial)
    return folder
