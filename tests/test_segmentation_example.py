"""examples/run_semantic_segmentation.py: Segmenter's recipe as the defaults, and a training pipeline that keeps
images and labels aligned. References: the recipe's formulas written out, transformers' own label reduction."""

import random
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import HfArgumentParser, SegformerImageProcessorPil, Trainer, TrainingArguments

from examples_loader import load_example
from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForSemanticSegmentation
from tiny_models import MICRO_VIT

example = load_example("run_semantic_segmentation")


def parse(argv: list[str]):
    parser = HfArgumentParser((example.ModelArguments, example.DataArguments, TrainingArguments))
    parser.set_defaults(**example.SEGMENTER_TRAINING)
    return parser.parse_args_into_dataclasses(argv)


def test_defaults_are_segmenters_ade20k_recipe(tmp_path):
    """SGD with momentum 0.9 and no weight decay; lr 1e-3 decaying as (lr − 1e-5)(1 − t/T)^0.9 + 1e-5 over 160k
    iterations; batch 8; 512 crops, resize 0.5-2.0, flips, photometric distortion; λ = 0.6."""
    model_args, data_args, args = parse(["--output-dir", str(tmp_path), "--max-steps", "100"])
    assert (args.max_steps, args.per_device_train_batch_size) == (100, 8)
    assert parse(["--output-dir", str(tmp_path)])[2].max_steps == 160_000
    assert (
        data_args.crop_size,
        data_args.min_scale,
        data_args.max_scale,
        data_args.flip,
        data_args.photometric_distortion,
        data_args.cat_max_ratio,
    ) == (512, 0.5, 2.0, True, True, 0.75)
    assert (model_args.preset, model_args.neutreno_lambda, model_args.model_name_or_path) == (
        "segmenter-deit-tiny",
        None,  # not given: the preset's λ
        None,
    )
    assert NeuTRENOViTConfig.from_preset("segmenter-deit-tiny").neutreno_lambda == 0.6
    assert args.do_train and data_args.eval_multi_scale
    model = NeuTRENOViTForSemanticSegmentation(NeuTRENOViTConfig(**MICRO_VIT, num_hidden_layers=2, num_labels=3))
    trainer = Trainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=args.max_steps)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler
    assert type(optimizer) is torch.optim.SGD
    assert all(g["momentum"] == 0.9 and g["weight_decay"] == 0.0 for g in optimizer.param_groups)
    for step in range(100):
        expected = (1e-3 - 1e-5) * (1 - step / 100) ** 0.9 + 1e-5
        assert scheduler.get_last_lr()[0] == pytest.approx(expected, rel=1e-9), step
        optimizer.step()
        scheduler.step()


def test_reduce_labels_is_the_image_processors():
    label = np.array([[0, 1, 2], [150, 255, 37]], dtype=np.uint8)
    expected = SegformerImageProcessorPil().reduce_label(label.astype(np.int64))
    assert np.array_equal(example.reduce_labels(label), expected)
    assert example.reduce_labels(label).tolist() == [[255, 0, 1], [149, 255, 36]]


def test_training_pipeline_keeps_pixels_and_labels_aligned_and_pads_with_the_ignore_index():
    """A scene whose pixel value encodes the label (value = 40·label): after random resize, crop, flip and padding
    (photometric distortion off), every labelled pixel still shows its label's value, and padding is 255 with
    normalised pixels 0."""
    random.seed(0)
    rows, columns = np.mgrid[:64, :64]
    label = (columns // 16 + rows // 32).astype(np.uint8)  # 4 stripes, shifted by one class in the lower half
    image = Image.fromarray(np.repeat((label * 40)[..., None], 3, axis=2))
    processor = SegformerImageProcessorPil(image_mean=[0.0] * 3, image_std=[1.0] * 3)
    data_args = example.DataArguments(crop_size=48, photometric_distortion=False)
    transform = example.train_transform(processor, data_args, reduce=False, ignore_index=255)
    padded = 0
    for _ in range(20):
        out = transform({"image": [image], "annotation": [Image.fromarray(label)]})
        pixels, labels = out["pixel_values"][0], out["labels"][0]
        assert pixels.shape == (3, 48, 48) and labels.shape == (48, 48)
        pad = labels == 255
        padded += int(pad.sum())
        assert torch.all(pixels[:, pad] == 0)
        values = (pixels[0] * 255).round()
        inside = ~pad
        # Bilinear resizing blends values at block edges only (nearest-neighbour labels stay exact): most pixels are
        # nearer their own label's value than any other's; a label map flipped against the image would not be.
        agree = ((values - labels.float() * 40).abs() < 20)[inside].float().mean()
        flipped = ((values - labels.flip(-1).float() * 40).abs() < 20)[inside & inside.flip(-1)].float().mean()
        assert agree > 0.85 and flipped < 0.5, (agree, flipped)
    assert padded > 0  # some draws scaled the 64-pixel scene below the 48-pixel crop


def test_photometric_distortion_changes_colours_only():
    random.seed(1)
    image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    outputs = [example.photometric_distortion(image) for _ in range(20)]
    assert all(o.shape == image.shape and o.dtype == np.uint8 for o in outputs)
    assert sum(not np.array_equal(o, image) for o in outputs) >= 15  # each step has probability 1/2; 4 steps


def _mmseg_convert(image, alpha=1.0, beta=0.0):
    """mmseg's PhotoMetricDistortion.convert (mmseg/datasets/pipelines/transforms.py), written out."""
    image = image.astype(np.float32) * alpha + beta
    image = np.clip(image, 0, 255)
    return image.astype(np.uint8)


@pytest.mark.parametrize(
    "draws, steps",
    [
        # brightness on (+30), contrast first and on (× 0.6), saturation and hue off
        ([0.1, 30.0, 0.1, 0.1, 0.6, 0.9, 0.9], [dict(beta=30.0), dict(alpha=0.6)]),
        # brightness on (−20.7), contrast last and on (× 1.45), saturation and hue off
        ([0.2, -20.7, 0.8, 0.9, 0.9, 0.3, 1.45], [dict(beta=-20.7), dict(alpha=1.45)]),
        # brightness off, contrast first and on (× 1.3), saturation and hue off
        ([0.7, 0.2, 0.4, 1.3, 0.6, 0.6], [dict(alpha=1.3)]),
    ],
)
def test_photometric_distortion_clips_and_casts_after_every_step_as_mmseg(monkeypatch, draws, steps):
    """Scripted draws (probabilities from `random.random`, amounts from `random.uniform`): the result is mmseg's
    `convert` (clip to [0, 255], cast to uint8) applied after each step, not once at the end. A pixel pushed past 255
    by the brightness stays at 255 before the contrast scales it."""
    import types

    script = iter(draws)
    monkeypatch.setattr(
        example, "random", types.SimpleNamespace(random=lambda: next(script), uniform=lambda a, b: next(script))
    )
    image = np.stack([np.arange(256, dtype=np.uint8).reshape(16, 16)] * 3, axis=-1)
    expected = image
    for step in steps:
        expected = _mmseg_convert(expected, **step)
    out = example.photometric_distortion(image)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    assert next(script, None) is None  # every scripted draw was used, in this order


def test_bad_arguments_are_refused_naming_the_flag(tmp_path):
    with pytest.raises(ValueError, match=r"--min_scale \(2.0\) and --max_scale \(0.5\)"):
        example.main(["--output-dir", str(tmp_path), "--min-scale", "2.0", "--max-scale", "0.5"])
    with pytest.raises(ValueError, match=r"--preset 'nope' is not one of"):
        example.build_model(example.ModelArguments(preset="nope"), {0: "a", 1: "b"}, 16)


def test_the_same_seed_gives_the_same_initial_weights_for_every_lambda():
    """The NeuTRENO and λ = 0 runs of docs/segmentation-results.md start from the same weights: λ is no parameter."""
    from transformers import set_seed

    labels = {0: "background", 1: "item"}

    def build(lam: float):
        set_seed(0)
        args = example.ModelArguments(
            neutreno_lambda=lam,
            config_overrides="num_hidden_layers=2,hidden_size=16,"
            "num_attention_heads=2,intermediate_size=32,patch_size=8",
        )
        return example.build_model(args, labels, 16)[0]

    neutreno, softmax = build(0.6), build(0.0)
    assert neutreno.decoder.layers[1].attention.neutreno_lambda == 0.6
    assert softmax.decoder.layers[1].attention.neutreno_lambda == 0.0 == softmax.vit.layers[1].attention.neutreno_lambda
    assert neutreno.state_dict().keys() == softmax.state_dict().keys()
    for name, weight in neutreno.state_dict().items():
        assert torch.equal(weight, softmax.state_dict()[name]), name


def test_metric_backend_choices_and_errors():
    """Offline (as here) `auto` falls back to the direct computation; `evaluate` says why it cannot run."""
    assert example.mean_iou_factory("direct", 1) is None
    assert example.mean_iou_factory("auto", 2) is None  # several processes: confusion matrices summed
    assert example.mean_iou_factory("auto", 1) is None  # evaluate.load cannot fetch the script: no Hub here
    with pytest.raises(RuntimeError, match=r"--metric_backend evaluate: evaluate.load\('mean_iou'\) failed"):
        example.mean_iou_factory("evaluate", 1)
    with pytest.raises(ValueError, match=r"--metric_backend evaluate runs in one process, not 2"):
        example.mean_iou_factory("evaluate", 2)
    with pytest.raises(ValueError, match=r"--metric_backend 'nope' is not one of \('auto', 'evaluate', 'direct'\)"):
        example.mean_iou_factory("nope", 1)


class _EvaluateModule:
    """Stands in for `evaluate.load("mean_iou")` where the Hub is out of reach: `add` / `compute` as evaluate's,
    scored by evaluate's definitions (checked against evaluate's documented example in test_segmenter)."""

    made: list["_EvaluateModule"] = []

    def __init__(self, path, experiment_id=None):
        assert path == "mean_iou"
        self.predictions, self.references, self.computed_with = [], [], None
        _EvaluateModule.made.append(self)

    def add(self, predictions, references):
        self.predictions.append(np.asarray(predictions))
        self.references.append(np.asarray(references))

    def compute(self, num_labels, ignore_index, reduce_labels):
        from hf_neutreno.data.segmentation import mean_iou

        self.computed_with = (num_labels, ignore_index, reduce_labels)
        return mean_iou(
            self.predictions,
            self.references,
            num_labels=num_labels,
            ignore_index=ignore_index,
            reduce_labels=reduce_labels,
        )


def test_evaluate_backend_scores_the_same_predictions_as_the_direct_one(data_dir, tmp_path, monkeypatch):
    """With `evaluate` loadable, each evaluated image's prediction and label map (original size) reach its mean_iou
    module, SS and MS separately, and the reported metrics are the module's: equal to the direct computation."""
    import types

    monkeypatch.setitem(sys.modules, "evaluate", types.SimpleNamespace(load=_EvaluateModule))
    args = [
        "--dataset-name",
        str(data_dir / "fashion-scenes"),
        "--crop-size",
        "32",
        "--max-steps",
        "1",
        "--max-train-samples",
        "4",
        "--max-eval-samples",
        "3",
        "--per-device-train-batch-size",
        "2",
        "--config-overrides",
        "num_hidden_layers=2,hidden_size=16,num_attention_heads=2,intermediate_size=32,"
        "patch_size=8,decoder_hidden_size=16,decoder_num_attention_heads=2",
        "--report-to",
        "none",
    ]
    metrics = {
        backend: example.main(args + ["--output-dir", str(tmp_path / backend), "--metric-backend", backend])
        for backend in ("direct", "evaluate")
    }
    ss, ms = _EvaluateModule.made[-2:]  # the evaluate run's modules (the first call of the factory only checked)
    assert len(ss.predictions) == len(ms.predictions) == 3
    assert ss.computed_with == ms.computed_with == (11, 255, False)  # fashion-scenes: 11 classes, none reduced
    for prediction, reference in zip(ss.predictions + ms.predictions, ss.references + ms.references):
        assert prediction.shape == reference.shape == (64, 64)
    evaluated = {
        k: v
        for k, v in metrics["direct"].items()
        if k.startswith("eval_") and "runtime" not in k and "per_second" not in k
    }
    assert "eval_mean_iou" in evaluated and "eval_mean_iou_ms" in evaluated
    assert evaluated == pytest.approx({k: metrics["evaluate"][k] for k in evaluated}, nan_ok=True)


def test_evaluation_resizes_the_logits_to_the_label_map_before_the_softmax(tmp_path):
    """Images evaluated at a short side of 16 (16 × 23) against label maps of their original 37 × 53: every copy's
    logits are resized to 37 × 53, then soft-maxed and averaged (Segmenter's `inference`, segm/model/utils.py); the
    prediction is their argmax, single-scale and multi-scale."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = NeuTRENOViTForSemanticSegmentation(
        NeuTRENOViTConfig(**{**MICRO_VIT, "image_size": 16}, num_hidden_layers=2, num_labels=4)
    ).eval()
    processor = SegformerImageProcessorPil(size={"height": 16, "width": 16})
    rng = np.random.default_rng(0)
    rows = [
        {
            "image": Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)),
            "annotation": Image.fromarray(rng.integers(0, 4, (37, 53), dtype=np.uint8)),
        }
        for _ in range(2)
    ]
    _EvaluateModule.made.clear()
    trainer = example.SegmenterTrainer(
        model=model,
        args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True, per_device_eval_batch_size=2),
        processing_class=processor,
        data_args=example.DataArguments(crop_size=16),
        reduce=False,
        mean_iou_factory=lambda name: _EvaluateModule("mean_iou"),
    )
    trainer.evaluate(rows, multi_scale=True)
    ss, ms = _EvaluateModule.made

    def resized(logits):
        return F.interpolate(logits, size=(37, 53), mode="bilinear", align_corners=False)

    old_order_differs = 0
    with torch.no_grad():
        for index, row in enumerate(rows):
            pixels = example.eval_pixels(processor, row["image"], 16)
            assert pixels.shape[-2:] == (16, 23)
            logits = model.sliding_window_logits(pixels)
            np.testing.assert_array_equal(ss.predictions[index], resized(logits).argmax(1)[0].numpy())
            old_order = resized(logits.softmax(1)).argmax(1)[0].numpy()  # softmax first, probabilities resized
            old_order_differs += int((old_order != ss.predictions[index]).sum())
            total = 0
            for scale in example.MS_SCALES:
                size = (int(16 * scale + 0.5), int(23 * scale + 0.5))
                scaled = F.interpolate(pixels, size=size, mode="bilinear", align_corners=False)
                for flip in (False, True):
                    copy = model.sliding_window_logits(scaled.flip(-1) if flip else scaled)
                    total = total + resized(copy.flip(-1) if flip else copy).softmax(1)
            np.testing.assert_array_equal(ms.predictions[index], total.argmax(1)[0].numpy())
            np.testing.assert_array_equal(ss.references[index], np.asarray(row["annotation"]))
    assert old_order_differs > 0  # the two orders give other predictions here: the test tells them apart
