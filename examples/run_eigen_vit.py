#!/usr/bin/env python
"""The poster's experiments for ViT, ViT⁺ and ViT⁻ (Dovonon, Bronstein, Kusner): data efficiency and robustness.

For every variant (plain ViT, EigenViT "positive" = ViT⁺, EigenViT "negative" = ViT⁻) and every fraction of the
training set (Table 2: 100 / 50 / 10 %), train from scratch with `Trainer` and report test accuracy. The models trained
on the largest fraction are also evaluated on deterministic corruptions at severities 0-5 (Table 3: accuracy averaged
over the corruptions), and `spectral_dominance` on test images gives Table 1's share of smoothing-dominated cases.
Results go to `<output_dir>/results.json` and `results.md`.

    # CIFAR-10 from the Hub, the full recipe (hours on a GPU); a local Parquet copy works the same (a folder path)
    python examples/run_eigen_vit.py --dataset uoft-cs/cifar10 --output-dir runs/eigen_cifar10
    # CIFAR-100 from the Hub, as in the poster
    python examples/run_eigen_vit.py --dataset uoft-cs/cifar100 --label-column fine_label --output-dir runs/eigen_c100
    # a couple of minutes on a CPU: tiny subsets, few steps, 2 layers
    python examples/run_eigen_vit.py --dataset uoft-cs/cifar10 --quick --output-dir runs/eigen_quick

Every variant of the seed starts from the same initial weights (the plain ViT's, wherever the shapes coincide) and
sees the same batches in the same order (`hf_neutreno.engine.experiment`). `results.json` is rewritten after every run;
an `--output-dir` that already holds results is refused unless `--overwrite-output-dir` is given, and
`--resume-from-checkpoint` continues an interrupted run: its finished runs are kept, and the run it stopped in
continues from its last checkpoint (one per epoch, in the run's folder).

`--push-to-hub --hub-model-id me/eigenvit-cifar10` publishes each variant trained on the largest fraction (weights,
code, image processor, a model card with its clean and corrupted accuracies) as me/eigenvit-cifar10-vit-minus, ...
"""

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import TrainingArguments, ViTImageProcessorPil

from hf_neutreno.data.corruptions import CORRUPTIONS, check_corruption, corruption_accuracy
from hf_neutreno.data.image_transforms import collate_images, image_transform
from hf_neutreno.data.loading import get_split, image_and_label_columns, load_image_dataset, subset
from hf_neutreno.data.scores import accuracy
from hf_neutreno.diagnostics import spectral_dominance
from hf_neutreno.engine.experiment import Run, pairing_arguments, run_paired
from hf_neutreno.engine.model_factories import IMAGE_PRESETS, image_classifier
from hf_neutreno.engine.variants import BASELINE
from hf_neutreno.engine.variants import VARIANTS as ALL_VARIANTS
from hf_neutreno.examples import recipes
from hf_neutreno.examples.scripts import (
    LAST_CHECKPOINT,
    has_accelerator,
    refuse_to_overwrite,
    resolve_checkpoint,
    resume_requested,
    run_script,
)
from hf_neutreno.hub import HubTrainer, create_repo

# The baseline and the poster's two eigen-parameterised ViTs (`hf_neutreno.engine.variants`): softmax, vit-minus,
# vit-plus.
VARIANTS = tuple(name for name, variant in ALL_VARIANTS.items() if variant.preset_only or name == BASELINE)
# Arguments that a resumed run may change: where it pushes, and the flags that ask for resuming or overwriting.
UNCOMPARED_ARGS = (
    "resume_from_checkpoint",
    "overwrite_output_dir",
    "push_to_hub",
    "hub_model_id",
    "hub_private_repo",
    "hub_token",
)


# Flags whose default depends on --quick: name -> (the full run's default, --quick's).
UNSET_DEFAULTS = {
    "batch_size": (recipes.POSTER_CIFAR_TRAINING["per_device_train_batch_size"], 32),
    "spectral_samples": (32, 8),
    "severities": ([0, 1, 2, 3, 4, 5], [0, 3, 5]),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_experiment_arguments(parser)
    add_training_arguments(parser)
    add_hub_and_resume_arguments(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CPU smoke run: 2 layers, 512 training / 64 test images, 10 steps, batch 32, 8 spectral samples, "
        "severities 0, 3, 5; each where the flag is not given.",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.num_hidden_layers = args.num_hidden_layers or 2
        args.max_train_samples = args.max_train_samples or 512
        args.max_eval_samples = args.max_eval_samples or 64
        args.max_steps = args.max_steps if args.max_steps > 0 else 10
    # Flags the user did not give (None): --quick's smoke-run values, else the full run's.
    for name, (full, quick) in UNSET_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    for severity in args.severities:
        check_corruption(args.corruptions[0], severity)
    if not all(0 < f <= 1 for f in args.fractions):
        parser.error(f"--fractions must lie in (0, 1], got {args.fractions}")
    return args


def add_experiment_arguments(p: argparse.ArgumentParser) -> None:
    """The data, the variants, the fractions of the training set and the corruptions."""
    p.add_argument("--dataset", default="uoft-cs/cifar10", help="Hub name or local Parquet/imagefolder folder.")
    p.add_argument("--dataset-config", default=None)
    p.add_argument("--label-column", default=None, help="Default: the first ClassLabel column (CIFAR-100: fine_label).")
    p.add_argument("--train-split", default="train")
    p.add_argument("--eval-split", default="test")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--fractions", nargs="+", type=float, default=[1.0, 0.5, 0.1])
    p.add_argument("--corruptions", nargs="+", default=list(CORRUPTIONS), choices=CORRUPTIONS)
    p.add_argument("--severities", nargs="+", type=int, default=None, help="Default: 0-5 (--quick: 0 3 5).")


def add_training_arguments(p: argparse.ArgumentParser) -> None:
    """The model and, as defaults, this package's recipe for the poster's CIFAR set-up
    (`recipes.POSTER_CIFAR_TRAINING`: the poster gives no training hyperparameters)."""
    recipe = recipes.POSTER_CIFAR_TRAINING
    p.add_argument("--preset", default="vit-tiny", choices=IMAGE_PRESETS)
    p.add_argument("--num-hidden-layers", type=int, default=None, help="Override the preset's depth.")
    p.add_argument(
        "--eigenvalue-range",
        nargs=2,
        type=float,
        default=None,
        metavar=("LOW", "HIGH"),
        help="Clip ViT⁻'s eigenvalues, e.g. -1 0 (ViT⁺ gets the mirrored range).",
    )
    p.add_argument("--epochs", type=float, default=recipe["num_train_epochs"])
    p.add_argument("--max-steps", type=int, default=-1, help="Overrides --epochs when > 0.")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"Default: {recipe['per_device_train_batch_size']}, the recipe's (--quick: 32).",
    )
    p.add_argument("--learning-rate", type=float, default=recipe["learning_rate"])
    p.add_argument("--weight-decay", type=float, default=recipe["weight_decay"])
    p.add_argument(
        "--warmup", type=float, default=recipe["warmup_steps"], help="Warm-up steps, or a fraction of them if < 1."
    )
    p.add_argument("--label-smoothing", type=float, default=recipe["label_smoothing_factor"])
    p.add_argument("--drop-path-rate", type=float, default=recipes.POSTER_CIFAR_DROP_PATH)
    p.add_argument("--no-augment", action="store_true", help="No random crop (4 px padding) / horizontal flip.")
    p.add_argument("--max-train-samples", type=int, default=None, help="Cap the training set before taking fractions.")
    p.add_argument("--max-eval-samples", type=int, default=None)
    p.add_argument(
        "--spectral-samples",
        type=int,
        default=None,
        help="Test images for the spectral analysis. Default: 32 (--quick: 8).",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--num-workers", type=int, default=0)


def add_hub_and_resume_arguments(p: argparse.ArgumentParser) -> None:
    """Publishing the trained models, and what happens to an --output-dir that holds results."""
    p.add_argument(
        "--push-to-hub",
        action="store_true",
        help="Push each variant trained on the largest fraction, with code, processor and a model card, to "
        "<hub-model-id>-<variant> (softmax, vit-minus, vit-plus). The Hub is checked before any training.",
    )
    p.add_argument(
        "--hub-model-id", default=None, help="Repository prefix, `namespace/name` (default: the output folder's name)."
    )
    p.add_argument("--hub-private-repo", action="store_true")
    p.add_argument("--hub-token", default=None)
    p.add_argument(
        "--overwrite-output-dir",
        action="store_true",
        help="Run into --output-dir even if it holds results (they are replaced).",
    )
    p.add_argument(
        "--resume-from-checkpoint",
        nargs="?",
        const=LAST_CHECKPOINT,
        default=None,
        metavar="last",
        help="Continue the interrupted run in --output-dir: its finished runs are kept, the run it stopped "
        "in resumes from its last checkpoint.",
    )


def hub_repo_ids(args) -> dict[str, str]:
    """The repository each variant is pushed to; created before any training (offline mode, login, valid ids)."""
    if not args.push_to_hub:
        return {}
    prefix = args.hub_model_id or Path(args.output_dir).absolute().name
    repo_ids = {variant: f"{prefix}-{variant}" for variant in args.variants}
    for repo_id in repo_ids.values():
        create_repo(repo_id, token=args.hub_token, private=args.hub_private_repo)
    return repo_ids


def start_or_resume(args) -> dict:
    """The results so far: those of the interrupted run in --output-dir with --resume-from-checkpoint (with the same
    arguments), else empty ones, after checking that no earlier results get overwritten by accident."""
    path = Path(args.output_dir) / "results.json"
    recorded = {k: v for k, v in vars(args).items() if k not in UNCOMPARED_ARGS}
    if not resume_requested(args.resume_from_checkpoint):
        refuse_to_overwrite(args.output_dir, args.overwrite_output_dir)
        return {"args": recorded, "complete": False, "data_efficiency": [], "robustness": [], "spectral": {}}
    if str(args.resume_from_checkpoint).lower() not in (LAST_CHECKPOINT, "true"):
        raise ValueError(
            f"--resume-from-checkpoint {args.resume_from_checkpoint!r}: this script takes no path; each "
            "run resumes from the last checkpoint in its own folder of --output-dir."
        )
    if not path.is_file():
        raise ValueError(
            f"--resume-from-checkpoint: --output-dir {args.output_dir!r} holds no interrupted run "
            "(no results.json); run without the flag."
        )
    results = json.loads(path.read_text())
    changed = [
        f"--{k.replace('_', '-')} {results['args'].get(k)} (now {v})"
        for k, v in recorded.items()
        if results["args"].get(k) != json.loads(json.dumps(v))
    ]
    if changed:
        raise ValueError(
            f"--resume-from-checkpoint: the run in --output-dir {args.output_dir!r} had other arguments: "
            f"{'; '.join(changed)}. Resume with the same ones, or pass --overwrite-output-dir instead."
        )
    return results


def main(argv=None) -> dict:
    args = parse_args(argv)
    results = start_or_resume(args)  # fail before training, not after it
    repo_ids = hub_repo_ids(args)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    experiment = Experiment(args, load_data(args), results, repo_ids, output_dir)
    experiment.save_results()

    # Every variant from the plain ViT's initial weights of the seed, wherever the shapes coincide: the variants
    # differ by design only.
    runs = [Run(variant, args.seed, (("fraction", f),)) for variant in args.variants for f in args.fractions]
    run_paired(runs, experiment.build, experiment.train_run, finished=experiment.finished)

    results["complete"] = True
    experiment.save_results()
    (output_dir / "results.md").write_text(markdown(results, args))
    print((output_dir / "results.md").read_text())
    return results


@dataclass
class EigenData:
    """The (capped) training set and the test images and labels, decoded once for every evaluation."""

    train_full: Dataset
    image_column: str
    label_column: str
    names: list[str]
    test_images: list
    test_labels: torch.Tensor


def load_data(args) -> EigenData:
    dataset = load_image_dataset(args.dataset, args.dataset_config)
    image_col, label_col = image_and_label_columns(dataset)
    label_col = args.label_column or label_col
    train_full = subset(get_split(dataset, args.train_split), args.max_train_samples, seed=args.seed)
    test = subset(get_split(dataset, args.eval_split), args.max_eval_samples, seed=args.seed)
    names = test.features[label_col].names
    test_images = [image.convert("RGB") for image in test[image_col]]
    return EigenData(train_full, image_col, label_col, names, test_images, torch.tensor(test[label_col]))


class Experiment:
    """Trains, scores and records one run (a variant on a fraction of the training set) at a time, for `run_paired`;
    `results` (written to `<output_dir>/results.json` after every run) holds what the finished runs gave."""

    def __init__(self, args, data: EigenData, results: dict, repo_ids: dict[str, str], output_dir: Path):
        self.args, self.data, self.results, self.repo_ids, self.output_dir = args, data, results, repo_ids, output_dir
        self.model_config = dict(drop_path_rate=args.drop_path_rate)
        if args.num_hidden_layers:
            self.model_config["num_hidden_layers"] = args.num_hidden_layers
        size = self.build(BASELINE).config.image_size_2d
        self.processor = ViTImageProcessorPil(size={"height": size[0], "width": size[1]})
        self.train_transform = image_transform(
            self.processor,
            data.image_column,
            data.label_column,
            augment=not args.no_augment,
            crop_padding=recipes.CIFAR_CROP_PADDING,
        )
        self.largest = max(args.fractions)

    def build(self, variant: str) -> torch.nn.Module:
        return image_classifier(
            variant, self.args.preset, self.data.names, eigenvalue_range=self.args.eigenvalue_range, **self.model_config
        )

    def save_results(self) -> None:
        (self.output_dir / "results.json").write_text(json.dumps(self.results, indent=2))

    def finished(self, run: Run) -> bool:  # before the run was interrupted
        return any(
            r["variant"] == run.variant and r["fraction"] == run.get("fraction")
            for r in self.results["data_efficiency"]
        )

    def train_run(self, run: Run, model: torch.nn.Module, initial_weights: str) -> None:
        variant, fraction = run.variant, run.get("fraction")
        train = subset(self.data.train_full, fraction if fraction < 1 else None, seed=self.args.seed)
        run_dir = self.output_dir / f"{variant}_{int(round(fraction * 100))}pct"
        checkpoint = self.checkpoint_to_resume(run_dir)
        trainer = HubTrainer(
            model=model,
            args=self.training_arguments(run_dir, variant),
            train_dataset=train.with_transform(self.train_transform),
            data_collator=collate_images,
            processing_class=self.processor,
        )
        trainer.train(resume_from_checkpoint=checkpoint)
        clean = self.clean_accuracy(model) if fraction != self.largest else self.robustness(model, variant)
        print(f"[{variant} {fraction:.0%}] clean test accuracy {clean:.4f}")
        if fraction == self.largest:
            self.spectral(model, variant)
            if variant in self.repo_ids:
                self.push(trainer, variant, clean, len(train))
        self.results["data_efficiency"].append(
            {"variant": variant, "fraction": fraction, "accuracy": clean, "initial_weights_sha256": initial_weights}
        )
        self.save_results()  # this run is finished: a resumed run skips it
        for stale in run_dir.glob("checkpoint-*"):
            shutil.rmtree(stale)

    def checkpoint_to_resume(self, run_dir: Path) -> str | None:
        """The run's last checkpoint when the experiment resumes and the run left one, else None (and the folder's
        checkpoints, an earlier experiment's, are removed)."""
        resume = resume_requested(self.args.resume_from_checkpoint)
        if resume and run_dir.is_dir() and any(run_dir.glob("checkpoint-*")):
            return resolve_checkpoint(run_dir, LAST_CHECKPOINT)
        refuse_to_overwrite(run_dir, overwrite_output_dir=True)  # an earlier run's checkpoints
        return None

    def training_arguments(self, run_dir: Path, variant: str) -> TrainingArguments:
        args = self.args
        return TrainingArguments(
            output_dir=str(run_dir),
            num_train_epochs=args.epochs,
            max_steps=args.max_steps,
            per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=2 * args.batch_size,
            learning_rate=args.learning_rate,
            weight_decay=args.weight_decay,
            warmup_steps=args.warmup if args.warmup < 1 else int(args.warmup),
            lr_scheduler_type="cosine",
            label_smoothing_factor=args.label_smoothing,
            bf16=args.bf16,
            logging_steps=max(1, args.max_steps // 10) if args.max_steps > 0 else 50,
            save_strategy="epoch",
            save_total_limit=1,  # what --resume-from-checkpoint continues from
            report_to=[],
            dataloader_pin_memory=has_accelerator(),  # torch warns about pinning without one
            remove_unused_columns=False,
            dataloader_num_workers=args.num_workers,
            **pairing_arguments(args.seed),
            hub_model_id=self.repo_ids.get(variant),
            hub_private_repo=args.hub_private_repo,
            hub_token=args.hub_token,  # read by trainer.push_to_hub
        )

    def clean_accuracy(self, model: torch.nn.Module) -> float:
        pixel_values = self.processor(self.data.test_images, return_tensors="pt")["pixel_values"]
        return accuracy(model, pixel_values, self.data.test_labels)

    def robustness(self, model: torch.nn.Module, variant: str) -> float:
        """Records the mean accuracy over the corruptions at every severity; returns the clean accuracy, severity 0
        of that evaluation (on the same images) where it was asked for."""
        args = self.args
        by_severity = corruption_accuracy(
            model,
            self.processor,
            self.data.test_images,
            self.data.test_labels,
            args.corruptions,
            args.severities,
            seed=args.seed,
        )
        for severity, per_corruption in by_severity.items():
            mean = float(np.mean(list(per_corruption.values())))
            self.results["robustness"].append(
                {"variant": variant, "severity": int(severity), "accuracy": mean, "per_corruption": per_corruption}
            )
            print(f"[{variant}] severity {severity}: mean accuracy {mean:.4f}")
        return by_severity["0"]["none"] if "0" in by_severity else self.clean_accuracy(model)

    def spectral(self, model: torch.nn.Module, variant: str) -> None:
        """Records the share of smoothing- and sharpening-dominated cases on the first test images."""
        pixel_values = self.processor(self.data.test_images[: self.args.spectral_samples], return_tensors="pt")
        spectral = spectral_dominance(model.to("cpu").float(), pixel_values["pixel_values"])
        self.results["spectral"][variant] = spectral.to_dict()["overall"]
        print(f"[{variant}] dominating eigenvalue on test images:\n{spectral}")

    def push(self, trainer: HubTrainer, variant: str, clean: float, training_images: int) -> None:
        """The model, with its clean and corrupted accuracies in the card, to the variant's repository."""
        robustness = {
            f"accuracy_severity_{r['severity']}": r["accuracy"]
            for r in self.results["robustness"]
            if r["variant"] == variant and r["severity"] > 0
        }
        args = self.args
        trainer.push_to_hub(
            dataset=args.dataset,
            dataset_config=args.dataset_config,
            dataset_split=args.eval_split,
            results={"accuracy": clean, **robustness},
            training={"training images": training_images, "variant": variant},
        )


def markdown(results: dict, args) -> str:
    lines = [f"# EigenViT experiments on `{args.dataset}` ({args.preset})", ""]
    lines += ["## Data efficiency: test accuracy (%) by fraction of the training set kept", ""]
    lines += ["| model | " + " | ".join(f"{f:.0%}" for f in args.fractions) + " |"]
    lines += ["|---" * (len(args.fractions) + 1) + "|"]
    for variant in args.variants:
        row = {r["fraction"]: r["accuracy"] for r in results["data_efficiency"] if r["variant"] == variant}
        lines.append(f"| {variant} | " + " | ".join(f"{100 * row[f]:.2f}" for f in args.fractions) + " |")
    lines += ["", f"## Robustness: mean test accuracy (%) over {len(args.corruptions)} corruptions, by severity", ""]
    lines += ["| model | " + " | ".join(map(str, args.severities)) + " |", "|---" * (len(args.severities) + 1) + "|"]
    for variant in args.variants:
        row = {r["severity"]: r["accuracy"] for r in results["robustness"] if r["variant"] == variant}
        lines.append(f"| {variant} | " + " | ".join(f"{100 * row[s]:.2f}" for s in args.severities) + " |")
    lines += ["", "## Dominating eigenvalue (share of layer × input × head cases, trained models)", ""]
    lines += ["| model | smoothing | sharpening | other | tie |", "|---|---|---|---|---|"]
    for variant, shares in results["spectral"].items():
        lines.append(f"| {variant} | " + " | ".join(f"{100 * shares[c]:.2f}%" for c in shares) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_script(main)
