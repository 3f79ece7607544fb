r"""Train attention variants side by side on the same data and budget, paired over several seeds; compare them.

    hf-neutreno compare                                  # vit-micro on digits, 3 paired seeds, offline, a few minutes
    hf-neutreno compare --model google-bert/bert-base-uncased --dataset stanfordnlp/sst2 \
        --variants softmax,neutreno-learnable,value-residual-learnable     # your model, fine-tuned from its weights
    hf-neutreno compare --model path/to/saved-model --dataset path/to/data --task causal-lm --bf16
    hf-neutreno compare --variants softmax,neutreno,vit-minus    # also ViT⁻ (EigenViT, negative spectrum)
    hf-neutreno compare --dataset uoft-cs/cifar10 --model vit-tiny --epochs 1 --max-train-samples 5000
    hf-neutreno compare --dataset Salesforce/wikitext --dataset-config wikitext-2-v1 --model gpt-micro \
        --max-steps 300 --max-eval-samples 200
    hf-neutreno compare --model segmenter-micro --dataset path/to/segmentation-parquet --max-steps 300

--model is a transformers model (a Hub id or a saved folder with its tokenizer or image processor), fine-tuned from
its weights, or a preset of this package, trained from scratch. For a transformers model the task comes from its
head, else from the dataset's columns (--task overrides): image or text classification, causal or masked language
modelling, semantic segmentation; its variants are the model as loaded (softmax) and the value paths put on the same
weights, whose learnable coefficients start at 0 (the pretrained function) with their own learning rate. The
fine-tuning defaults (learning rate 5e-5, weight decay 0.01, 3 epochs) and the rest are in docs/compare.md.

Variants (--variants, comma-separated): `softmax` (softmax attention, λ = 0: the baseline, always trained),
`neutreno` (λ = --neutreno-lambda), for image classifier presets `vit-minus` and `vit-plus` (the eigen-parameterised
ViT⁻ and ViT⁺ of the same shape), and for image classifier and language-model presets the value paths of
`hf_neutreno.apply_value_path` put on the softmax model: `value-residual` (ResFormer, α = --value-residual-alpha),
`value-residual-learnable` and `neutreno-learnable` (one trainable coefficient per layer, from α or λ), saved like the
others (they load with `trust_remote_code=True` where this package is not installed). They
train once per seed (--seeds of them: --seed, --seed + 1, ...), paired: within a seed each starts from the same
initial weights (softmax's, wherever the shapes coincide), sees the same batches in the same order and trains for
the same budget with `Trainer`. Each is then scored on the test split (else validation): accuracy for an image
classifier preset, perplexity for a language- model preset (non-overlapping blocks of the context length,
`hf_neutreno.data.lm_eval`), mean IoU for a Segmenter preset (`segmenter-*`; on the validation split, else test, resized
to the preset's image size). The mean pairwise token cosine similarity of every layer is measured on one probe set
for all variants: the first --probe-samples evaluation samples.

Segmentation data has scene_parse_150's columns, `image` and `annotation` (a label map). A local folder must name
its classes in an `id2label.json`, as the label maps number them (fashion-scenes: 0 = background); the classes are
not guessed. scene_parse_150 (ADE20K) itself: 0 = "other", ignored, and 1-150 are the 150 classes.

Prints one row per variant: the score and the last-layer cosine as mean ± sample std over the seeds, each with its
paired difference from softmax (mean ± std over seeds) and the seeds where the variant is better ("wins"), and the
training time per seed. Writes to --output-dir: `results.json` (every number of every seed, learning curves, the
summaries), `comparison.png` (training loss of every seed; cosine per layer, mean and seed range, and before
training) and one folder per saved variant with the model of the FIRST seed and its image processor or tokenizer,
which `AutoModelFor<Task>.from_pretrained(folder, trust_remote_code=True)` loads without this package;
`best_variant` in results.json names the verdict's best variant (its paired interval over seeds beyond the tie
tolerance) where its model was saved.

Nothing finished is lost. The run in progress is written to `<output-dir>.incomplete` (results.json rewritten after
each finished run, each model folder complete or absent) and replaces --output-dir only when it is complete, so an
earlier run there stays until then. A run stopped at any moment (Ctrl-C, a killed process) continues with
--resume: the seeds and variants it finished are kept and the others trained, with the numbers an uninterrupted run
gives. Without --resume an interrupted run is refused rather than overwritten; a folder holding anything but a
compare run is refused before anything is trained. The same from Python: `hf_neutreno.engine.compare.run_comparison`.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from ..engine.compare.output import INCOMPLETE, PLOT_FILE, RESULTS_FILE
from ..engine.compare.settings import FINE_TUNING, FROM_SCRATCH, CompareSettings, checked_common
from ..engine.variants import PRESET_VARIANTS, PRETRAINED_LEARNABLE_START, PRETRAINED_VARIANTS, VARIANTS
from ..models.value_path_defaults import DEFAULT_COEFFICIENTS
from ..names import IMAGE_MODELS, SEGMENTATION_MODELS, TASK_SPECS, TEXT_MODELS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for add in (_model_and_data_arguments, _variant_arguments, _training_arguments, _run_arguments):
        add(parser)
    parser.set_defaults(**dataclasses.asdict(CompareSettings()))  # one set of defaults: the library's


def _model_and_data_arguments(parser: argparse.ArgumentParser) -> None:
    """What trains on what: the model (a preset or a transformers model), its task and data."""
    parser.add_argument(
        "--model",
        metavar="PRESET_OR_MODEL",
        help=f"a transformers model, fine-tuned from its weights: a Hub id (owner/name) or a local folder of a saved "
        f"model with its tokenizer or image processor; or a preset of this package, trained from scratch: image "
        f"classifiers {IMAGE_MODELS}, segmentation {SEGMENTATION_MODELS}, language models {TEXT_MODELS} (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--task",
        choices=list(TASK_SPECS),
        help="for a transformers model: the task, when its head (config.architectures) and the dataset's columns "
        "do not decide it",
    )
    parser.add_argument(
        "--from-scratch",
        action="store_true",
        help="for a transformers model: re-initialise its weights (its config's shape) instead of fine-tuning them",
    )
    parser.add_argument("--text-column", help="the text column, or two comma-separated for a text pair (guessed)")
    parser.add_argument("--label-column", help="the label column (guessed: the ClassLabel column, else `label`)")
    parser.add_argument("--image-column", help="the image column (guessed: the first Image column)")
    parser.add_argument(
        "--max-length",
        type=int,
        help="for a transformers model: tokens per example; text is truncated to it (classification) or cut into "
        "blocks of it (language modelling) (default: 128, or the model's positions if fewer)",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME_OR_DIR",
        help="'digits' (bundled with scikit-learn, no download; the default), a Hub dataset name or a "
        "local folder (Parquet files named as on the Hub, or an imagefolder tree); its kind must "
        "match --model's",
    )
    parser.add_argument("--dataset-config", help="configuration name of a Hub dataset")


def _variant_arguments(parser: argparse.ArgumentParser) -> None:
    """The variants and their coefficients."""
    parser.add_argument(
        "--variants",
        type=_variants,
        metavar="NAME,NAME",
        help=f"the variants to train, comma-separated, of {list(VARIANTS)}; softmax (the baseline) "
        f"is always among them; vit-minus for image classifier presets (default: {','.join(PRESET_VARIANTS)} for a "
        f"preset or --from-scratch; {','.join(PRETRAINED_VARIANTS)} for a pretrained model, the learnable "
        "coefficients from 0: the pretrained function)",
    )
    parser.add_argument(
        "--vit-minus",
        action="store_true",
        help="deprecated: the same as adding vit-minus to --variants (--variants softmax,neutreno,vit-minus)",
    )
    parser.add_argument(
        "--neutreno-lambda",
        type=float,
        help="λ of the neutreno variants, also in a Segmenter's decoder (default: a preset's own, 0.6 for images, "
        f"0.4 for text; {DEFAULT_COEFFICIENTS['neutreno']} for a transformers model, where neutreno-learnable "
        f"starts at {PRETRAINED_LEARNABLE_START:g}, the pretrained function)",
    )
    parser.add_argument(
        "--value-residual-alpha",
        type=float,
        help=f"α of the value-residual variants (ResFormer: V_0's weight in the mix; default "
        f"{DEFAULT_COEFFICIENTS['value_residual']}; value-residual-learnable on a pretrained model starts at "
        f"{PRETRAINED_LEARNABLE_START:g})",
    )


# Flags passed to `TrainingArguments` under their own names.
_TRAINER_FLAGS = (
    ("max_steps", int, "train for this many steps instead of --epochs"),
    ("gradient_accumulation_steps", int, "batches per optimizer step (default: %(default)s)"),
    ("lr_scheduler_type", str, "Trainer's learning-rate schedule after the warm-up (default: %(default)s)"),
    ("warmup_ratio", float, "fraction of the steps spent warming up (default: %(default)s)"),
)


def _training_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the results go, and the training settings passed to `Trainer`."""
    parser.add_argument(
        "--output-dir",
        help="results, plot and the first seed's models (default: %(default)s); an earlier compare "
        "run there is replaced once this one is complete, any other content is refused",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run of the same command (in <output-dir>.incomplete) with "
        "the seeds and variants it has not finished",
    )
    parser.add_argument(
        "--epochs",
        type=float,
        help=f"training epochs (default: {FROM_SCRATCH['epochs']} for a preset, {FINE_TUNING['epochs']} to "
        "fine-tune a transformers model)",
    )
    parser.add_argument("--batch-size", type=int, help="batch size per device (default: %(default)s)")
    for field, kind, text in _TRAINER_FLAGS:
        parser.add_argument("--" + field.replace("_", "-"), type=kind, help=text)
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"AdamW peak learning rate (default: {FINE_TUNING['learning_rate']:g} to fine-tune a transformers "
        "model; from scratch 3e-3 for image classifier presets, 1e-3 for the others, whose post-LN softmax "
        "baseline diverges at 3e-3)",
    )
    parser.add_argument(
        "--coefficient-learning-rate",
        type=float,
        help="learning rate of a value path's own parameters, its learnable coefficients, gates and value-embedding "
        "tables (no weight decay) (default: "
        f"{FINE_TUNING['coefficient_learning_rate']:g} when fine-tuning, else --learning-rate)",
    )
    parser.add_argument(
        "--weight-decay",
        type=float,
        help=f"AdamW weight decay (default: {FROM_SCRATCH['weight_decay']} from scratch, "
        f"{FINE_TUNING['weight_decay']} when fine-tuning)",
    )
    parser.add_argument("--bf16", action="store_true", help="train in bfloat16 mixed precision (a GPU or recent CPU)")


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """Samples, seeds, threads and what is printed."""
    parser.add_argument(
        "--max-train-samples",
        type=int,
        help="train on a seeded random subset of this many samples (images, or blocks of text)",
    )
    parser.add_argument(
        "--max-eval-samples",
        type=int,
        help="evaluate on a seeded random subset of this many images, or the first blocks of text",
    )
    parser.add_argument(
        "--probe-samples",
        type=int,
        help="evaluation samples the token cosine similarity is measured on (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="the first seed, which also draws the --max-*-samples subsets "
        "(the same for every seed) (default: %(default)s)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        help="number of seeds, --seed, --seed + 1, ...: each gives the initial weights and the data "
        "order of one paired run of every variant; the saved models are the first seed's (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: %(default)s; the micro presets train fastest on one core)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bars: each run's training bar (and --verbose's)"
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print Trainer's logs (loss, learning rate, ...) and the bars of evaluation, measurement, data "
        "preparation and saving; by default each run shows one progress bar, then the table",
    )


def _variants(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def run(args: argparse.Namespace) -> int:
    if args.vit_minus:  # the deprecated spelling of adding vit-minus to --variants
        args.variants = (*(args.variants or PRESET_VARIANTS), "vit-minus")
    settings = CompareSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(CompareSettings)})
    settings = checked_common(settings)  # a bad flag is reported before the training stack loads
    # The training machinery (torch, transformers, datasets) is imported here, not at the top: `--help` needs none.
    from ..engine.compare.report import format_table
    from ..engine.compare.run import run_comparison

    if settings.no_progress or not settings.verbose:  # the bars of datasets (tokenizing) and transformers (saving)
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    try:
        results = run_comparison(settings)
    except KeyboardInterrupt:
        output_dir = Path(settings.output_dir)
        work = output_dir.with_name(output_dir.name + INCOMPLETE)
        print(
            f"\nStopped: {work / RESULTS_FILE} lists the runs that finished (their models are complete); rerun "
            "the command with --resume to continue.",
            file=sys.stderr,
        )
        raise  # the CLI exits with 130
    from accelerate import PartialState

    if PartialState().is_main_process:  # under torchrun / accelerate launch, one process reports
        print()
        print(format_table(results))
        _print_usage(Path(settings.output_dir), results)
    return 0


def _print_usage(output_dir: Path, results: dict) -> None:
    saved = [entry["model_dir"] for entry in results["variants"].values() if entry.get("model_dir")]
    if not saved:
        print(f"\nWritten to {output_dir}/: {RESULTS_FILE}, {PLOT_FILE}.")
        return
    best, named = results.get("best_variant"), results.get("verdict", {}).get("best")
    folder = str(output_dir / (best or saved[0]))
    auto_class, processing_auto_class, _ = TASK_SPECS[results["task"]]
    name = "tokenizer" if processing_auto_class == "AutoTokenizer" else "processor"
    remote = ", trust_remote_code=True" if name == "tokenizer" else ""
    print(
        f"\nWritten to {output_dir}/: {RESULTS_FILE}, {PLOT_FILE} and the models of seed {results['models_from_seed']} "
        f"{', '.join(folder + '/' for folder in saved)}. "
        + (
            f"The best {results['metric']}: {best}."
            if best
            else f"The best {results['metric']}, {named}, could not be saved."
            if named
            else "No variant is best beyond the seeds' spread."
        )
        + "\nLoad one anywhere, with or without hf_neutreno installed:\n"
        f"    from transformers import {auto_class}, {processing_auto_class}\n"
        f"    model = {auto_class}.from_pretrained({folder!r}, trust_remote_code=True)\n"
        f"    {name} = {processing_auto_class}.from_pretrained({folder!r}{remote})"
    )
