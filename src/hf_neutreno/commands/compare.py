r"""Train a baseline and a NeuTRENO model (optionally ViT⁻) on the same data and budget, paired over several seeds;
compare them.

    hf-neutreno compare                                  # vit-micro on digits, 3 paired seeds, offline, a few minutes
    hf-neutreno compare --vit-minus                      # also ViT⁻ (EigenViT, negative spectrum) of the same shape
    hf-neutreno compare --dataset uoft-cs/cifar10 --model vit-tiny --epochs 1 --max-train-samples 5000
    hf-neutreno compare --dataset Salesforce/wikitext --dataset-config wikitext-2-v1 --model gpt-micro \
        --max-steps 300 --max-eval-samples 200
    hf-neutreno compare --model segmenter-micro --dataset path/to/segmentation-parquet --max-steps 300

Variants: `baseline` (softmax attention, λ = 0), `neutreno` (λ = --neutreno-lambda) and, with --vit-minus,
`vit-minus`. They train once per seed (--seeds of them: --seed, --seed + 1, ...), paired: within a seed each starts
from the same initial weights (the baseline's, wherever the shapes coincide), sees the same batches in the same order
and trains for the same budget with `Trainer`. Each is then scored on the test split (else validation): accuracy for
an image classifier preset, perplexity for a language-model preset (non-overlapping blocks of the context length,
`hf_neutreno.lm_eval`), mean IoU for a Segmenter preset (`segmenter-*`; on the validation split, else test, resized to
the preset's image size). The mean pairwise token cosine similarity of every layer is measured on one probe set for
all variants: the first --probe-samples evaluation samples.

Segmentation data has scene_parse_150's columns, `image` and `annotation` (a label map). A local folder's
`id2label.json` names its classes as the label maps number them (fashion-scenes: 0 = background); without one the
label maps follow scene_parse_150 (ADE20K): 0 = "other", ignored, and 1-150 are the 150 classes.

Prints one row per variant: the score and the last-layer cosine as mean ± sample std over the seeds, each with its
paired difference from the baseline (mean ± std over seeds) and the seeds where the variant is better ("wins"), and
the training time per seed. Writes to --output-dir: `results.json` (every number of every seed, learning curves, the
summaries), `comparison.png` (training loss of every seed; cosine per layer, mean and seed range) and one folder per
variant with the model of the FIRST seed and its image processor or tokenizer, which
`AutoModelForImageClassification` / `AutoModelForSemanticSegmentation` / `AutoModelForCausalLM.from_pretrained(folder,
trust_remote_code=True)` loads without this package. A model folder appears only once complete (it is written under
a temporary name, then renamed) and results.json is rewritten after each run, so Ctrl-C leaves the finished runs and
models usable. An earlier compare run in --output-dir is replaced; a folder holding anything else is refused before
anything is trained. The same from Python: `hf_neutreno.compare.run_comparison`.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from ..compare import IMAGE_MODELS, LOADERS, PLOT_FILE, RESULTS_FILE, SEGMENTATION_MODELS, TEXT_MODELS, CompareSettings
from ..compare import format_table, run_comparison


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=IMAGE_MODELS + SEGMENTATION_MODELS + TEXT_MODELS, metavar="PRESET",
                        help=f"image classifier presets {IMAGE_MODELS}, segmentation presets {SEGMENTATION_MODELS}, "
                        f"language-model presets {TEXT_MODELS} (default: %(default)s)")
    parser.add_argument("--dataset", metavar="NAME_OR_DIR",
                        help="'digits' (bundled with scikit-learn, no download; the default), a Hub dataset name or a "
                        "local folder (Parquet files named as on the Hub, or an imagefolder tree); its kind must "
                        "match --model's")
    parser.add_argument("--dataset-config", help="configuration name of a Hub dataset")
    parser.add_argument("--vit-minus", action="store_true",
                        help="also train ViT⁻ (EigenViT with a negative spectrum) of the same shape (image presets)")
    parser.add_argument("--neutreno-lambda", type=float,
                        help="λ of the neutreno variant, also in a Segmenter's decoder (default: the preset's, 0.6 "
                        "for images, 0.4 for text)")
    parser.add_argument("--output-dir",
                        help="results, plot and the first seed's models (default: %(default)s); an earlier compare "
                        "run there is replaced, any other content is refused")
    parser.add_argument("--epochs", type=float, help="training epochs (default: %(default)s)")
    parser.add_argument("--max-steps", type=int, help="train for this many steps instead of --epochs")
    parser.add_argument("--batch-size", type=int, help="training batch size (default: %(default)s)")
    parser.add_argument("--learning-rate", type=float,
                        help="AdamW peak learning rate; 10%% warm-up, then cosine decay (default: 3e-3 for image "
                        "classifiers, 1e-3 for Segmenters and for language models, whose post-LN softmax baseline "
                        "diverges at 3e-3)")
    parser.add_argument("--max-train-samples", type=int,
                        help="train on a seeded random subset of this many samples (images, or blocks of text)")
    parser.add_argument("--max-eval-samples", type=int,
                        help="evaluate on a seeded random subset of this many images, or the first blocks of text")
    parser.add_argument("--probe-samples", type=int,
                        help="evaluation samples the token cosine similarity is measured on (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="the first seed, which also draws the --max-*-samples subsets "
                        "(the same for every seed) (default: %(default)s)")
    parser.add_argument("--seeds", type=int,
                        help="number of seeds, --seed, --seed + 1, ...: each gives the initial weights and the data "
                        "order of one paired run of every variant; the saved models are the first seed's (default: "
                        "%(default)s)")
    parser.add_argument("--threads", type=int,
                        help="CPU threads for torch (default: %(default)s; the micro presets train fastest on one "
                        "core)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(**dataclasses.asdict(CompareSettings()))  # one set of defaults: the library's


def run(args: argparse.Namespace) -> int:
    settings = CompareSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(CompareSettings)})
    if settings.no_progress:  # also the bars of datasets (tokenizing) and transformers (saving)
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    try:
        results = run_comparison(settings)
    except KeyboardInterrupt:
        print(f"\nStopped: {settings.output_dir}/{RESULTS_FILE} lists the variants that finished; their models are "
              "complete.", file=sys.stderr)
        raise  # the CLI exits with 130
    print()
    print(format_table(results))
    _print_usage(Path(settings.output_dir), results)
    return 0


def _print_usage(output_dir: Path, results: dict) -> None:
    folder = str(output_dir / "neutreno")
    auto_class, processing_auto_class = LOADERS[results["task"]]
    is_image = results["task"] != "causal-lm"
    name, remote = ("processor", "") if is_image else ("tokenizer", ", trust_remote_code=True")
    print(
        f"\nWritten to {output_dir}/: {RESULTS_FILE}, {PLOT_FILE} and the models of seed {results['models_from_seed']} "
        f"{', '.join(v + '/' for v in results['variants'])}.\n"
        "Load one anywhere, with or without hf_neutreno installed:\n"
        f"    from transformers import {auto_class}, {processing_auto_class}\n"
        f"    model = {auto_class}.from_pretrained({folder!r}, trust_remote_code=True)\n"
        f"    {name} = {processing_auto_class}.from_pretrained({folder!r}{remote})"
    )
