"""Measure over-smoothing of a model on a dataset: per-layer token similarity, HFC/LFC, rank, J(u), ...

    hf-neutreno diagnose ./my-neutreno-deit --dataset uoft-cs/cifar10 --out report.json --plot report.png
    hf-neutreno diagnose gpt2 --dataset Salesforce/wikitext --dataset-config wikitext-2-v1 --metrics cosine_similarity

    hf-neutreno diagnose gpt2 --dataset ... --variants softmax,neutreno,value-residual --out report.json

MODEL_OR_DIR is a Hub name or a local folder with the model and its image processor or tokenizer. Image datasets
(an Image column other than a segmentation set's `annotation` label maps) go through the model's image processor,
text datasets (a `text` column; empty lines dropped) through its tokenizer, with padding per batch (excluded from
every metric). The samples are a seeded random subset.

--variants measures the model as loaded (`softmax`) and the same weights with a value path applied
(`hf_neutreno.apply_value_path`: `neutreno` at --neutreno-lambda, `value-residual` at --value-residual-alpha; the
`-learnable` variants start at the same values, so before training they measure the same), on the same batches. With
several variants, --out and --plot hold every variant: REPORT-<variant>.json per variant, one curve per variant.
A model saved with a value path is measured as it is (`--variants softmax`, with --trust-remote-code).

--out and --plot never replace an existing file unless --overwrite is given; --plot without an extension writes PNG
to REPORT.png. Every flag is checked, and the files' folders, before the model or the data is loaded.
"""

import argparse
import math
from pathlib import Path

from ..checkpoints import check_source, load_checkpoint
from ..engine.variants import ANY_MODEL_VARIANTS, VARIANTS, default_coefficient
from ..models.value_path_defaults import DEFAULT_COEFFICIENTS
from ..names import ANNOTATION_COLUMN, DEFAULT_METRICS, METRICS, check_metrics
from . import check_output_file

DEFAULT_SPLITS = ("test", "validation", "train")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL_OR_DIR", help="Hub model name or local folder")
    parser.add_argument("--dataset", required=True, metavar="NAME_OR_DIR", help="Hub dataset name or local folder")
    parser.add_argument("--dataset-config", default=None, help="configuration name of a Hub dataset")
    parser.add_argument("--split", default=None, help=f"split to use (default: the first of {list(DEFAULT_SPLITS)})")
    parser.add_argument("--num-samples", type=int, default=1000, help="samples to measure (default: 1000)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256, help="text: tokens per sample (default: 256)")
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        metavar="METRIC",
        help=f"any of {list(METRICS)} (default: {list(DEFAULT_METRICS)}; "
        "effective_rank costs about one more forward pass on CPU)",
    )
    parser.add_argument("--layers", nargs="+", type=int, default=None, help="hidden-state indices (default: all)")
    parser.add_argument("--out", default=None, metavar="REPORT.json", help="write the report as JSON")
    parser.add_argument(
        "--plot", default=None, metavar="REPORT.png", help="write per-layer curves as PNG (no extension: .png added)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing --out and --plot files")
    parser.add_argument(
        "--compare", nargs="+", default=(), metavar="OTHER.json", help="earlier reports to draw and tabulate alongside"
    )
    parser.add_argument(
        "--variants",
        default="softmax",
        metavar="NAME[,NAME...]",
        help=f"comma-separated, any of {list(ANY_MODEL_VARIANTS)} (default: softmax, the model as loaded)",
    )
    parser.add_argument(
        "--neutreno-lambda",
        type=float,
        default=DEFAULT_COEFFICIENTS["neutreno"],
        help="λ of the neutreno variants (default: %(default)s)",
    )
    parser.add_argument(
        "--value-residual-alpha",
        type=float,
        default=DEFAULT_COEFFICIENTS["value_residual"],
        help="α of the value-residual variants (default: %(default)s)",
    )
    parser.add_argument("--trust-remote-code", action="store_true", help="allow code from the model folder or repo")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random subset (default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


class _Batches:
    """Batches made on the fly from a dataset (nothing is preprocessed ahead), with a length for the progress bar."""

    def __init__(self, dataset, batch_size: int, encode):
        self.dataset, self.batch_size, self.encode = dataset, batch_size, encode

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.dataset), self.batch_size):
            yield self.encode(self.dataset[start : start + self.batch_size])


def _image_encoder(args, column: str):
    from transformers import AutoImageProcessor

    try:
        processor = AutoImageProcessor.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError) as error:
        reason = error
        if Path(args.model).is_dir() and not (Path(args.model) / "preprocessor_config.json").is_file():
            reason = "the folder has no preprocessor_config.json"
        raise ValueError(
            f"MODEL_OR_DIR {args.model!r} has no image processor ({reason}), which turns the dataset's images into the "
            "model's inputs: save the model's image processor in the folder (`processor.save_pretrained(folder)`)."
        ) from None

    def encode(rows):
        return dict(processor([image.convert("RGB") for image in rows[column]], return_tensors="pt"))

    return encode


def _text_encoder(args):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError) as error:
        raise ValueError(f"No tokenizer found for {args.model!r} ({error}).") from None
    if tokenizer.pad_token is None:  # GPT-2 and Llama have none; padding is masked out anyway
        if tokenizer.eos_token is None:
            raise ValueError(f"The tokenizer of {args.model!r} has neither a pad nor an eos token to pad batches with.")
        tokenizer.pad_token = tokenizer.eos_token

    def encode(rows):
        # Padding on the right, whatever the tokenizer's own side: a real token's state is then the same as without
        # padding for causal and bidirectional models alike, while left padding shifts the positions a model with
        # absolute positions (GPT-2, BERT) gives the real tokens, so the result would depend on --batch-size.
        batch = tokenizer(
            rows["text"],
            padding=True,
            padding_side="right",
            truncation=True,
            max_length=args.max_length,
            return_tensors="pt",
        )
        mask = batch.get("attention_mask", batch["input_ids"].new_ones(batch["input_ids"].shape))
        lengths = mask.sum(-1).tolist()
        empty = [text for text, length in zip(rows["text"], lengths) if length == 0]
        if empty:  # a model cannot run on no tokens (a reshape error deep in its forward)
            raise ValueError(
                f"--dataset {args.dataset!r}: {len(empty)} text sample(s) of a batch give 0 tokens with the "
                f"tokenizer of {args.model!r} (the first: {empty[0][:60]!r}); every sample needs at least 1."
            )
        return dict(batch)

    return encode


def _dataset(args):
    from datasets import Image
    from datasets.exceptions import DatasetGenerationError

    from ..data.loading import get_split, load_image_dataset, subset

    # `load_image_dataset` reads any Hub name, Parquet folder or imagefolder; nothing in it is image-specific.
    try:
        dataset = load_image_dataset(args.dataset, args.dataset_config)
    except DatasetGenerationError as error:  # e.g. a Parquet file with no rows
        raise ValueError(f"Dataset {args.dataset!r} could not be read: {error.__cause__ or error}") from None
    if args.split is None:
        split = next((s for s in DEFAULT_SPLITS if s in dataset), None) or next(iter(dataset))
    else:
        split = args.split
    data = get_split(dataset, split)
    # The images, not a segmentation set's label maps (scene_parse_150's `annotation`, an Image column too), whatever
    # the columns' order.
    image_column = next(
        (name for name, f in data.features.items() if isinstance(f, Image) and name != ANNOTATION_COLUMN), None
    )
    if image_column is None and "text" not in data.features:
        raise ValueError(
            f"{args.dataset!r} has neither an Image column nor a `text` column (columns: {list(data.features)})."
        )
    if image_column is None:
        data = data.filter(lambda text: bool(text.strip()), input_columns="text")
    if len(data) == 0:
        raise ValueError(f"Split {split!r} of {args.dataset!r} has no samples to measure.")
    data = subset(data, min(args.num_samples, len(data)), seed=args.seed)
    return data, split, image_column


def _variants(args) -> dict[str, dict | None]:
    """--variants as {name: apply_value_path keyword arguments (None: the model as loaded)}, checked."""
    names = [name.strip() for name in args.variants.split(",")]
    unknown = [name for name in names if name not in ANY_MODEL_VARIANTS]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"`--variants` takes distinct names from {list(ANY_MODEL_VARIANTS)}, got {args.variants!r}.")
    coefficients = {"neutreno": args.neutreno_lambda, "value_residual": args.value_residual_alpha}
    variants = {}
    for name in names:
        variant = VARIANTS[name]
        variants[name] = variant.method and {
            "method": variant.method,
            "learnable": variant.learnable,
            "coefficient": _given_or_default(coefficients.get(variant.method), name),
        }
    return variants


def _given_or_default(given: float | None, name: str) -> float:
    """The flag's coefficient, else the variant's default (`apply_value_path`'s), so that each report records it."""
    return given if given is not None else default_coefficient(name)


def _variant_path(path: str, variant: str, several: bool) -> str:
    if not several:
        return path
    path = Path(path)
    return str(path.with_name(f"{path.stem}-{variant}{path.suffix}"))


def _plot_path(path: str) -> str:
    """--plot's file: matplotlib writes a name without an extension as PNG, with `.png` added."""
    return path if Path(path).suffix else path + ".png"


def _check_arguments(args: argparse.Namespace, variants: dict) -> tuple[list[str], str | None]:
    """Every check that needs no download, so that a typo does not cost one; returns the report and plot files."""
    for name, value in (
        ("--num-samples", args.num_samples),
        ("--batch-size", args.batch_size),
        ("--max-length", args.max_length),
    ):
        if value < 1:
            raise ValueError(f"`{name}` must be at least 1, got {value}.")
    several = len(variants) > 1
    outs = (
        [check_output_file(_variant_path(args.out, v, several), "--out", args.overwrite) for v in variants]
        if args.out
        else []
    )
    plot = check_output_file(_plot_path(args.plot), "--plot", args.overwrite) if args.plot else None
    for name, settings in variants.items():
        if settings is not None:  # the coefficient's range, before any model is loaded (2 layers stand for any)
            from ..models.value_path import check_settings  # the value path's own rules (this imports transformers)

            try:
                check_settings(settings["method"], settings["coefficient"], settings["learnable"], None, 2)
            except ValueError as error:
                flag = "--neutreno-lambda" if settings["method"] == "neutreno" else "--value-residual-alpha"
                raise ValueError(f"{flag} (variant {name!r}): {error}") from None
    check_source(args.model, "MODEL_OR_DIR")
    return outs, plot


def _check_saved_value_path(args: argparse.Namespace, model, variants: dict) -> None:
    """A model saved with a value path is measured as saved, with its value path (`load_checkpoint` refuses one that
    loads plain), and never gets a second one."""
    saved_value_path = getattr(getattr(model, "config", None), "value_path", None)
    adding = [name for name, settings in variants.items() if settings is not None]
    if saved_value_path is not None and adding:
        raise ValueError(
            f"--variants {args.variants!r}: {args.model!r} already has a value path ({saved_value_path}), and "
            f"{adding} would put another on it. Measure it as saved with `--variants softmax` (the default), or give "
            "MODEL_OR_DIR the plain model it was adapted from to compare the variants."
        )


def _measure_variant(args, model, variant: str, settings: dict | None, batches, several: bool, metrics):
    """One variant's report: the value path put on `model` for the measurement and taken off afterwards."""
    from ..diagnostics import measure_oversmoothing
    from ..models.value_path import apply_value_path, remove_value_path

    if settings is not None:
        apply_value_path(model, **settings)
    try:
        report = measure_oversmoothing(
            model,
            batches,
            metrics=metrics,
            layers=args.layers,
            progress=not args.no_progress,
            # A value path is named even alone: the report (and a later --compare) must not pass for the model as
            # loaded.
            model_name=f"{args.model} [{variant}]" if several or settings is not None else args.model,
        )
    finally:
        if settings is not None:
            remove_value_path(model)
    missing = [metric for metric in metrics or () if metric not in report.values]
    if missing:  # every layer asked for has no value of these: an empty column is not a measurement
        raise ValueError(
            f"--metrics {missing} have no value at --layers {args.layers}: attention metrics are per block, at "
            "layers 1..L (attention_map_similarity at 2..L), and layer 0 is the embedding output."
        )
    return report


def run(args: argparse.Namespace) -> int:
    metrics = check_metrics(args.metrics) if args.metrics is not None else None
    variants = _variants(args)
    outs, plot = _check_arguments(args, variants)
    # torch, transformers and datasets are imported here and in the helpers above, not at the top: `--help` and a
    # bad flag need none.
    import torch

    from ..diagnostics import OversmoothingReport

    others = [OversmoothingReport.from_json(path) for path in args.compare]

    data, split, image_column = _dataset(args)
    encode = _image_encoder(args, image_column) if image_column else _text_encoder(args)
    model = load_checkpoint(args.model, what="MODEL_OR_DIR", trust_remote_code=args.trust_remote_code)
    _check_saved_value_path(args, model, variants)
    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    reports = []
    for variant, settings in variants.items():
        batches = _Batches(data, args.batch_size, encode)  # the same seeded subset, in the same order, every time
        report = _measure_variant(args, model, variant, settings, batches, len(variants) > 1, metrics)
        report.metadata.update(
            dataset=args.dataset,
            dataset_config=args.dataset_config,
            split=split,
            seed=args.seed,
            variant=variant,
            value_path=settings,
        )
        reports.append(report)
    print(reports[0].table([*reports[1:], *others]))
    for path, report in zip(outs, reports):
        report.to_json(path)
        print(f"Report written to {path}")
    if plot is not None:
        reports[0].plot(plot, others=[*reports[1:], *others])
        print(f"Plot written to {plot}")
    return 0
