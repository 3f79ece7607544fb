"""Push a saved model to the Hugging Face Hub: weights, code, image processor or tokenizer and a model card.

    hf-neutreno push runs/neutreno-cifar10 me/neutreno-cifar10 --dataset uoft-cs/cifar10
    hf-neutreno push runs/neutreno-cifar10 me/neutreno-cifar10 --dataset uoft-cs/cifar10 --save-to upload/

MODEL_DIR is a folder written by `save_pretrained` or a Trainer's output_dir; the results Trainer saved there
(all_results.json or eval_results.json) go into the card unless --results names another file. The push is one
commit (`hf_neutreno.hub.push_to_hub`); --save-to writes the same folder locally instead.
"""

import argparse
import json
import re
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..checkpoints import load_checkpoint
from . import check_new_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", help="A saved hf-neutreno model (save_pretrained or a Trainer output_dir).")
    parser.add_argument("repo_id", help="The Hub repository, `name` or `namespace/name`.")
    parser.add_argument("--dataset", help="Hub id or local folder the results were measured on.")
    parser.add_argument("--dataset-config", help="Hub dataset configuration.")
    parser.add_argument(
        "--split",
        default="test",
        help="The split whose results go into the card (default: test): keys that name a split (validation_*, "
        "test_*) are that split's; Trainer's eval_* keys are labelled with this one.",
    )
    parser.add_argument(
        "--results",
        help="JSON of metrics (default: MODEL_DIR/all_results.json or eval_results.json "
        "as Trainer writes them, if present).",
    )
    parser.add_argument(
        "--oversmoothing",
        help="JSON of per-layer over-smoothing values: an OversmoothingReport "
        "(hf_neutreno.diagnostics) or {metric: [value per hidden state]}.",
    )
    parser.add_argument("--base-model", help="Hub id of the checkpoint this model was fine-tuned from.")
    parser.add_argument("--template", help="Model card template file (default: the one for the model type).")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--token", help="Hub token (default: the logged-in one).")
    parser.add_argument(
        "--save-to", metavar="FOLDER", help="Write the folder that would be pushed to FOLDER instead of pushing."
    )


def run(args: argparse.Namespace) -> int:
    check_repo_id(args.repo_id)  # it goes into the model card and the Hub's URLs: checked before anything is written
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"model_dir {str(model_dir)!r} has no config.json: not a saved model.")
    if args.save_to:
        check_new_folder(args.save_to, "--save-to")
    # transformers and torch are imported here and in the helpers it calls, not at the top: `--help` and the checks
    # above need neither.
    from ..hub import create_repo, push_to_hub, save_for_hub, split_metrics, template_text

    results_path = args.results or next(
        (str(p) for p in (model_dir / "all_results.json", model_dir / "eval_results.json") if p.is_file()), None
    )
    card_kwargs = dict(
        dataset=args.dataset,
        dataset_config=args.dataset_config,
        dataset_split=args.split,
        results=json.loads(Path(results_path).read_text()) if results_path else None,
        oversmoothing=_load_oversmoothing(args.oversmoothing) if args.oversmoothing else None,
        base_model=args.base_model,
        template=args.template,
    )
    if card_kwargs["results"] and not args.dataset:
        raise ValueError(f"--dataset is needed to record the results in {results_path}.")
    if args.template:
        template_text(args.template)  # an unknown template raises here, before the repository is created
    # The results' checks, before the repository is created: a JSON object of metrics, with those of --split.
    if results_path and not isinstance(card_kwargs["results"], Mapping):
        kind = type(card_kwargs["results"]).__name__
        raise ValueError(f"{results_path} holds a JSON {kind}; the results are an object {{metric: value}}.")
    if card_kwargs["results"]:
        try:
            split_metrics(card_kwargs["results"], args.split)
        except ValueError as error:
            raise ValueError(f"{results_path}: {error} Pass it with --split.") from None
    if not args.save_to:  # offline mode, no token, no Hub: fail before loading the model (push_to_hub finds it made)
        create_repo(args.repo_id, token=args.token, private=args.private or None)
    model, processor, tokenizer = load_saved(model_dir)
    if args.save_to:
        folder = save_for_hub(args.save_to, model, processor, tokenizer, repo_id=args.repo_id, **card_kwargs)
        print(f"Wrote {folder}: {sorted(p.name for p in folder.iterdir())}")
        return 0
    commit = push_to_hub(
        model, args.repo_id, processor, tokenizer, private=args.private or None, token=args.token, **card_kwargs
    )
    print(f"Pushed to {getattr(commit, 'commit_url', args.repo_id)}")
    return 0


def check_repo_id(repo_id: str) -> None:
    """The Hub's own rule for a repository id (`huggingface_hub.utils.validate_repo_id`), as one line naming it."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        rule = re.sub(r": '.*'\.?$", "", str(error), flags=re.S).rstrip(".")  # without the id, written raw
        raise ValueError(
            f"repo_id {repo_id!r} is not a Hub repository id (`name` or `namespace/name`): {rule}."
        ) from None


def load_saved(model_dir: Path):
    """A saved hf-neutreno model with its image processor and/or tokenizer (None where the folder has none)."""
    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    import hf_neutreno

    from ..auto_classes import register_auto_classes

    register_auto_classes()  # a folder of this package's models loads with the Auto classes

    config = AutoConfig.from_pretrained(model_dir)
    name = (config.architectures or [None])[0]
    model_class = getattr(hf_neutreno, name, None) if name else None
    if model_class is None:
        raise ValueError(
            f"{str(model_dir)!r} holds a {name or config.model_type!r} model; `hf-neutreno push` publishes the "
            f"models of this package: {sorted(hf_neutreno.__all__)}."
        )
    model = load_checkpoint(model_dir, model_class, what="model_dir")
    has_processor = (model_dir / "preprocessor_config.json").is_file()
    processor = AutoImageProcessor.from_pretrained(model_dir) if has_processor else None
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if (model_dir / "tokenizer_config.json").is_file() else None
    return model, processor, tokenizer


def _load_oversmoothing(path: str):
    """An `OversmoothingReport` JSON (it has "values") or a plain ``{metric: [value per hidden state]}``."""
    from ..diagnostics import OversmoothingReport
    from ..hub import oversmoothing_report

    data = json.loads(Path(path).read_text())
    return (
        OversmoothingReport.from_dict(data)
        if isinstance(data, Mapping) and "values" in data
        else (oversmoothing_report(data))
    )
