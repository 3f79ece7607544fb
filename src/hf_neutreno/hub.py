"""Publish models to the Hugging Face Hub with this package's model card.

    from hf_neutreno.hub import push_to_hub
    push_to_hub(model, "me/neutreno-deit-tiny", processor=processor, dataset="uoft-cs/cifar10",
                results={"accuracy": 0.81}, oversmoothing=report)

`push_to_hub` checks the card's inputs (nothing is created before), then `create_repo` plus ONE `upload_folder` of the
folder `save_for_hub` writes. In Trainer scripts, `HubTrainer` (or `ModelCardMixin`) makes `Trainer.push_to_hub`
publish the same card. The card is rendered by
`huggingface_hub.ModelCard.from_template` from the model type's template in `model_cards/` (shipped in the package):
the `custom_code` tag, datasets and `eval_results`, the over-smoothing table and plot of an `OversmoothingReport`, how
to load with `trust_remote_code`, the papers' own numbers marked as such, and both papers' BibTeX.
"""

import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, is_offline_mode
from huggingface_hub.errors import OfflineModeIsEnabled
from transformers import Trainer
from transformers.modelcard import extract_hyperparameters_from_trainer

from .diagnostics.report import OversmoothingReport

logger = logging.getLogger(__name__)

# model_type -> template file in model_cards/. A new model type adds one line here and one template; a task of a
# model type with a card of its own is keyed (model_type, pipeline tag) and chosen before the model type's.
CARD_TEMPLATES = {
    "neutreno_vit": "neutreno_deit_tiny_imagenet.md",
    "neutreno_gpt": "neutreno_gpt_wikitext103.md",
    "eigen_vit": "eigenvit_ti_cifar100.md",
    ("neutreno_vit", "image-segmentation"): "neutreno_segmenter_ade20k.md",
}
CITATIONS_FILE = "citations.bib"
OVERSMOOTHING_PLOT = "oversmoothing.png"
# The over-smoothing metrics a card shows (those the report has): the paper's token cosine similarity (Fig. 1) and
# the poster's HFC/LFC ratio. A report with neither shows all of its metrics.
CARD_METRICS = ("cosine_similarity", "hfc_lfc_ratio")
# The Auto class a checkpoint is loaded with -> the Hub's pipeline tag and the task of its eval results.
PIPELINE_TAGS = {
    "AutoModelForImageClassification": "image-classification",
    "AutoModelForCausalLM": "text-generation",
    "AutoModelForSemanticSegmentation": "image-segmentation",
}
# Trainer metric keys that describe the run rather than the model.
_NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "total_flos")
# The prefixes of metric keys that name the split they were measured on: Trainer's `train_` (statistics of the run),
# `eval_` (evaluate(): the split its caller names) and `test_` (predict()), and this package's `<split>_` keys of
# language-model evaluation (`validation_sliding_perplexity`, `test_block_loss`, ...).
SPLIT_PREFIXES = ("train", "eval", "validation", "test")


def template_text(name: str) -> str:
    """The text of a file shipped in `model_cards/` (`neutreno_deit_tiny_imagenet.md`, ...) or of a file at a path."""
    shipped = resources.files("hf_neutreno") / "model_cards" / name
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    if Path(name).is_file():
        return Path(name).read_text(encoding="utf-8")
    known = sorted(set(CARD_TEMPLATES.values()))
    raise ValueError(f"Unknown model card template {name!r}: neither a file nor one of the shipped templates {known}.")


def oversmoothing_report(oversmoothing: Any) -> OversmoothingReport | None:
    """`oversmoothing` as an `OversmoothingReport`: a report itself, ``{metric: [value per hidden state]}``, or one
    list of per-hidden-state token cosine similarities."""
    if oversmoothing is None or isinstance(oversmoothing, OversmoothingReport):
        return oversmoothing
    if isinstance(oversmoothing, Sequence) and not isinstance(oversmoothing, str):
        oversmoothing = {"cosine_similarity": oversmoothing}
    if not isinstance(oversmoothing, Mapping):
        raise ValueError(
            "`oversmoothing` must be an OversmoothingReport, a dict {metric: per-layer values} or a list "
            f"of per-layer values; got {type(oversmoothing).__name__}."
        )
    return OversmoothingReport.from_values(oversmoothing)


def _card_metrics(report: OversmoothingReport) -> list[str]:
    return [metric for metric in CARD_METRICS if metric in report.values] or report.metrics


def _auto_class(model) -> str:
    """The Auto class the model's class is registered for: `save_pretrained` then writes `auto_map` and copies the
    code files, so the checkpoint loads with trust_remote_code."""
    auto_class = getattr(type(model), "_auto_class", None)
    if auto_class is None:
        raise ValueError(
            f"{type(model).__name__} is not registered with an Auto class, so its checkpoint would not load with "
            "trust_remote_code. Import `hf_neutreno.models` before creating or loading the model (it registers them)."
        )
    return auto_class


def split_metrics(results: Mapping[str, float], dataset_split: str) -> list[tuple[str, float]]:
    """The metrics of `results` measured on `dataset_split`, as (metric, value).

    Keys named by a split (`validation_perplexity`, `test_accuracy`: the split's name, then `_`; `SPLIT_PREFIXES`)
    give the metrics of that split: those of `dataset_split` are kept, without the prefix, and a `dataset_split` the
    results do not have is refused, naming the splits they have. Trainer's `eval_` keys are measured on the split its
    caller names, `dataset_split`: they are kept when no key names `dataset_split`. A dict without such prefixes is
    all of `dataset_split`. Run statistics (`train_` keys, runtime, samples per second, epoch, ...) are dropped, and
    so is NaN, which is no result (e.g. the IoU of a class neither labelled nor predicted)."""
    named: dict[str, dict[str, Any]] = {}  # split -> its metrics
    plain = {}  # keys without a split's prefix
    for key, value in results.items():
        split, _, metric = key.partition("_")
        if split in SPLIT_PREFIXES and metric:
            named.setdefault(split, {})[metric] = value
        else:
            plain[key] = value
    named.pop("train", None)  # statistics of the training run, not results
    if dataset_split in named:
        results = named[dataset_split]
    elif "eval" in named:
        results = named["eval"]
    elif named:
        present = sorted(named)
        raise ValueError(
            f"The results hold no metrics of the split {dataset_split!r}: their keys name the splits {present} "
            f"({', '.join(f'`{split}_*`' for split in present)}). Give the split they were measured on, one of "
            f"{present}."
        )
    else:
        results = plain
    return [
        (name, float(value))
        for name, value in results.items()
        if name not in _NOT_METRICS
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    ]


def model_card(
    model,
    *,
    repo_id: str | None = None,
    dataset: str | None = None,
    dataset_config: str | None = None,
    dataset_split: str = "test",
    results: Mapping[str, float] | Sequence[EvalResult] | None = None,
    oversmoothing: Any = None,
    oversmoothing_plot: str | None = None,
    training: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    template: str | None = None,
    license: str = "apache-2.0",
    tags: Sequence[str] = (),
) -> ModelCard:
    """Render the model card of `model` from its `model_cards/` template (or `template`, a file or shipped name).

    `repo_id` goes into the loading example; `dataset` is a Hub id (listed under `datasets:`) or a local folder (only
    its name is recorded); `results` are metrics as Trainer returns them (``{"eval_accuracy": 0.81, ...}``: those of
    `dataset_split`, see `split_metrics`) or `EvalResult`s, the card's `eval_results`; `oversmoothing`
    (see `oversmoothing_report`) gives the table, `oversmoothing_plot` names its image next to the card (`write_card`
    draws it); `training` lists training settings.
    """
    config = model.config
    auto_class = _auto_class(model)
    pipeline_tag = PIPELINE_TAGS.get(auto_class)
    template = _template_for(config.model_type, pipeline_tag, template)
    model_name = (repo_id or getattr(config, "name_or_path", "") or config.model_type).rstrip("/").split("/")[-1]
    dataset_id, dataset_name = _dataset_names(dataset)
    eval_results = _card_results(results, pipeline_tag, dataset_id, dataset_name, dataset_config, dataset_split)
    report = oversmoothing_report(oversmoothing)

    card_data = ModelCardData(
        model_name=model_name,
        license=license,
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        tags=list(dict.fromkeys(["custom_code", "hf-neutreno", config.model_type.replace("_", "-"), *tags])),
        datasets=[dataset_id] if dataset_id else None,
        base_model=base_model,
        eval_results=eval_results or None,
    )
    return ModelCard.from_template(
        card_data,
        template_str=template_text(template),
        model_name=model_name,  # ModelCardData.to_dict() moves it into model-index
        repo_id=repo_id or f"<user>/{model_name}",
        auto_class=auto_class,
        config=config.to_dict(),
        num_parameters=sum(p.numel() for p in model.parameters()),
        results=eval_results,
        dataset_name=dataset_name,
        oversmoothing_table=report.markdown_table(_card_metrics(report)) if report else None,
        oversmoothing_plot=oversmoothing_plot,
        training=dict(training or {}),
        citations=template_text(CITATIONS_FILE).strip(),
    )


def _dataset_names(dataset: str | None) -> tuple[str | None, str | None]:
    """(Hub id, name shown) of `dataset`: a local folder has no Hub id and is shown by its name only."""
    local = bool(dataset) and (os.path.exists(dataset) or dataset.startswith((".", "/", "~")))
    return (None if local else dataset), (Path(dataset).name if local else dataset)


def _card_results(results, pipeline_tag, dataset_id, dataset_name, dataset_config, dataset_split) -> list[EvalResult]:
    """The card's `eval_results`: `results` as given, or Trainer's metrics made `EvalResult`s of the dataset."""
    if isinstance(results, Mapping):
        if not dataset_name:
            raise ValueError("`results` need the `dataset` they were measured on.")
        results = _eval_results(
            results,
            task_type=pipeline_tag or "other",
            dataset_type=dataset_id or dataset_name,
            dataset_name=dataset_name,
            dataset_config=dataset_config,
            dataset_split=dataset_split,
        )
    return list(results or [])


def _template_for(model_type: str, pipeline_tag: str | None, template: str | None) -> str:
    """The given template, else the shipped one of (model type, pipeline tag), else of the model type."""
    template = template or CARD_TEMPLATES.get((model_type, pipeline_tag)) or CARD_TEMPLATES.get(model_type)
    if template is None:
        known = sorted(key for key in CARD_TEMPLATES if isinstance(key, str))
        raise ValueError(
            f"No model card template for model_type {model_type!r}; known: {known}. Pass "
            "`template=` (a path to a Jinja Markdown template)."
        )
    return template


def _eval_results(metrics, **dataset) -> list[EvalResult]:
    """Trainer's metrics of the split `dataset["dataset_split"]` (`split_metrics`) as the card's `EvalResult`s, each
    with the `dataset` fields (`EvalResult`'s task and dataset keywords)."""
    return [
        EvalResult(**dataset, metric_type=metric, metric_name=metric.replace("_", " "), metric_value=value)
        for metric, value in split_metrics(metrics, dataset["dataset_split"])
    ]


def write_card(folder: str | os.PathLike, model, **card_kwargs) -> Path:
    """Write `README.md` (the model card, `card_kwargs` go to `model_card`) into `folder`, with the over-smoothing
    plot next to it when `oversmoothing` is given and matplotlib is installed. Returns the card's path."""
    folder = Path(folder)
    report = oversmoothing_report(card_kwargs.get("oversmoothing"))
    if report is not None:
        try:
            report.plot(folder / OVERSMOOTHING_PLOT, labels=[type(model).__name__], metrics=_card_metrics(report))
            card_kwargs = {**card_kwargs, "oversmoothing_plot": OVERSMOOTHING_PLOT}
        except ImportError as error:  # matplotlib is an extra: the card keeps its table
            logger.warning("%s The model card gets the over-smoothing table, no plot.", error)
    model_card(model, **{**card_kwargs, "oversmoothing": report}).save(folder / "README.md")
    return folder / "README.md"


def save_for_hub(
    folder: str | os.PathLike, model, processor=None, tokenizer=None, *, card: ModelCard | None = None, **card_kwargs
) -> Path:
    """Write exactly the folder `push_to_hub` uploads: `save_pretrained` of the model (weights, config with
    `auto_map`, code files) and of the image processor and/or tokenizer, the model card and its plot.

    The folder is built next to `folder` and renamed into place only when complete; `folder` must not exist or be
    empty. `card_kwargs` go to `model_card`; pass them or a ready `card`, not both.
    """
    if card is not None and card_kwargs:
        raise ValueError(f"Pass either `card` or the arguments to render one ({sorted(card_kwargs)}), not both.")
    folder = Path(folder)
    if folder.is_symlink():  # a link to a folder: write that folder (renaming onto the link itself would fail)
        folder = folder.resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"`folder` {str(folder)!r} already holds files; save_for_hub writes a new, empty folder.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Removed on any failure; once complete, renamed to `folder` (the cleanup then finds nothing to remove).
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.partial-", dir=folder.parent) as staging:
        for part in (model, processor, tokenizer):
            if part is not None:
                part.save_pretrained(staging)
        if card is None:
            write_card(staging, model, **card_kwargs)
        else:
            card.save(Path(staging) / "README.md")
        if folder.exists():
            folder.rmdir()
        os.replace(staging, folder)
    return folder


@contextmanager
def _reaching_the_hub(api: HfApi, repo_id: str):
    """The HTTP client's transport errors (connection refused, DNS, timeout: its own classes, not OSError) become a
    `ConnectionError` that names the endpoint; the Hub's answers (HfHubHTTPError, ...) pass unchanged."""
    try:
        yield
    except (OSError, ValueError):
        raise
    except Exception as error:
        message = f"Cannot reach the Hugging Face Hub at {api.endpoint} to push to {repo_id!r} ({error})."
        raise ConnectionError(message) from error


def create_repo(repo_id: str, *, token: str | bool | None = None, private: bool | None = None) -> str:
    """Create the repository `repo_id` if it does not exist; returns its full id. This is a push's first Hub request:
    offline mode, a missing or read-only token, an invalid id or an unreachable Hub fail here, before anything else."""
    if is_offline_mode():
        raise OfflineModeIsEnabled(
            f"Cannot push to {repo_id!r}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE=1). Nothing was "
            "written, locally or on the Hub. Unset HF_HUB_OFFLINE to push, or write the folder with "
            "`hf_neutreno.hub.save_for_hub(folder, ...)` and upload it later with `hf upload REPO_ID FOLDER`."
        )
    api = HfApi(token=token)
    with _reaching_the_hub(api, repo_id):
        return api.create_repo(repo_id, private=private, exist_ok=True).repo_id


def push_to_hub(
    model,
    repo_id: str,
    processor=None,
    tokenizer=None,
    *,
    card: ModelCard | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str = "Upload model with hf-neutreno",
    **card_kwargs,
):
    """Push `model` (weights, config, code), its processor and/or tokenizer and its model card to `repo_id`: the card
    rendered once to check its inputs (a bad one raises before anything is created or written), `create_repo` (the
    first Hub request, which fails fast), `save_for_hub` into a temporary folder (always removed), then ONE
    `upload_folder` commit, so readers see the old repository or the complete new one. `card_kwargs` go to
    `model_card`."""
    if card is not None and card_kwargs:
        raise ValueError(f"Pass either `card` or the arguments to render one ({sorted(card_kwargs)}), not both.")
    if card is None:  # the card names the full id `create_repo` returns, so it is rendered again after it
        model_card(model, **{"repo_id": repo_id, **card_kwargs})
    repo_id = create_repo(repo_id, token=token, private=private)
    if card is None:
        card_kwargs.setdefault("repo_id", repo_id)
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="hf-neutreno-push-") as tmp:
        folder = save_for_hub(Path(tmp) / "upload", model, processor, tokenizer, card=card, **card_kwargs)
        with _reaching_the_hub(api, repo_id):
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message,
                revision=revision,
                create_pr=create_pr,
            )


class ModelCardMixin:
    """For a `transformers.Trainer` class (`class MyTrainer(ModelCardMixin, Trainer)`): `Trainer.push_to_hub`, after
    `save_model` wrote the weights and (through `save_pretrained`) the code files, writes this package's card in place
    of the Trainer's draft: `trainer.push_to_hub(dataset=..., results=..., oversmoothing=...)` (see `model_card`)."""

    def create_model_card(self, model_name: str | None = None, **card_kwargs) -> None:
        # `model_name` is the Trainer's name for the repository; the card takes its name from `repo_id`, the same one.
        if not self.is_world_process_zero():
            return
        training = {**extract_hyperparameters_from_trainer(self), **(card_kwargs.pop("training", None) or {})}
        card_kwargs.setdefault("repo_id", self.hub_model_id)
        write_card(self.args.output_dir, self.accelerator.unwrap_model(self.model), training=training, **card_kwargs)


class HubTrainer(ModelCardMixin, Trainer):
    """`transformers.Trainer` whose `push_to_hub` publishes this package's model card (see `ModelCardMixin`)."""


def prepare_trainer_push(args) -> bool:
    """For `--push_to_hub` in a Trainer script, before any training: create the repository (offline mode, a missing
    token or an unreachable Hub stop the script now) and leave the push to one `trainer.push_to_hub(**card_kwargs)` at
    the end, on a `ModelCardMixin` trainer. Trainer's own pushes are turned off: during training they upload weights
    without the code files, and `save_model` would push a card without results. Returns whether to push."""
    if not args.push_to_hub:
        return False
    strategy = str(getattr(args.hub_strategy, "value", args.hub_strategy))
    if strategy not in ("every_save", "end"):
        raise ValueError(
            f"--hub_strategy {strategy!r} is not supported here: the finished model is pushed once, with "
            "its code and card. Use --hub_strategy end (or every_save); resume from local checkpoints."
        )
    create_repo(
        args.hub_model_id or Path(args.output_dir).absolute().name, token=args.hub_token, private=args.hub_private_repo
    )
    args.push_to_hub = False
    return True


__all__ = [
    "CARD_TEMPLATES",
    "HubTrainer",
    "ModelCardMixin",
    "create_repo",
    "model_card",
    "oversmoothing_report",
    "prepare_trainer_push",
    "push_to_hub",
    "save_for_hub",
    "write_card",
]
