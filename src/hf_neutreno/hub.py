"""Publish models to the Hugging Face Hub: one folder with weights, code, processor or tokenizer and a model card.

`save_for_hub(folder, model, ...)` writes exactly the folder a push uploads; `push_to_hub(model, repo_id, ...)` writes
it to a temporary directory and uploads it with one `upload_folder` call, so the repository moves from its old state
to the complete new one in a single commit. Nothing remote happens before the Hub has been reached and the folder
is complete; with `HF_HUB_OFFLINE=1` a push fails before anything is written.

The model card is rendered with `huggingface_hub.ModelCard.from_template` from the templates in `model_cards/` (one
per model type, shipped inside the package): metadata with the `custom_code` tag, datasets and `eval_results`, the
measured per-layer over-smoothing curve, how to load with `trust_remote_code`, the papers' own numbers marked as
such, and both papers' BibTeX.

    from hf_neutreno.hub import push_to_hub
    push_to_hub(model, "me/neutreno-deit-tiny", processor=processor, dataset="uoft-cs/cifar10",
                results={"accuracy": 0.81}, oversmoothing=report)
"""

import itertools
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import validate_repo_id

logger = logging.getLogger(__name__)

# model_type -> template file in model_cards/. A new model type adds one line here and one template.
CARD_TEMPLATES = {
    "neutreno_vit": "neutreno_deit_tiny_imagenet.md",
    "neutreno_gpt": "neutreno_gpt_wikitext103.md",
    "eigen_vit": "eigenvit_ti_cifar100.md",
}
CITATIONS_FILE = "citations.bib"
OVERSMOOTHING_PLOT = "oversmoothing.png"
# The over-smoothing metrics a card shows from an `OversmoothingReport` (those of them it has): the paper's token
# cosine similarity (Fig. 1) and the poster's HFC/LFC ratio.
CARD_METRICS = ("cosine_similarity", "hfc_lfc_ratio")

# The Auto class a checkpoint is loaded with -> the Hub's pipeline tag and the task of its eval results.
PIPELINE_TAGS = {
    "AutoModelForImageClassification": "image-classification",
    "AutoModelForCausalLM": "text-generation",
}
# Trainer metric keys that describe the run rather than the model.
_NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "total_flos")


# ---------------------------------------------------------------------------------------------------------------
# Model cards
# ---------------------------------------------------------------------------------------------------------------


def template_text(name: str) -> str:
    """The text of a file shipped in the package's `model_cards/` (`neutreno_deit_tiny_imagenet.md`, ...) or of a
    template file at a path."""
    shipped = resources.files("hf_neutreno") / "model_cards" / name
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    if Path(name).is_file():
        return Path(name).read_text(encoding="utf-8")
    known = sorted(set(CARD_TEMPLATES.values()))
    raise ValueError(f"Unknown model card template {name!r}: neither a file nor one of the shipped templates {known}.")


def oversmoothing_curves(oversmoothing: Any) -> dict[str, dict[int, float]]:
    """Per-layer over-smoothing values as ``{metric: {layer index: value}}``.

    Accepts an `OversmoothingReport` (`hf_neutreno.diagnostics`; anything with ``per_layer(metric)``, and
    optionally ``metrics`` and ``layer_indices(metric)``), a mapping ``{metric: [value per layer]}``, or one sequence
    of values (the token cosine similarity). Layer 0 is the embedding output, layer i the output of block i
    (attention metrics start at block 1). From a report the card shows `CARD_METRICS` (those it has).
    """
    if oversmoothing is None:
        return {}
    if hasattr(oversmoothing, "per_layer"):
        available = list(getattr(oversmoothing, "metrics", None) or CARD_METRICS)
        metrics = [m for m in CARD_METRICS if m in available] or available
        layers = getattr(oversmoothing, "layer_indices", None)
        curves = {
            m: dict(zip(layers(m) if layers else itertools.count(), oversmoothing.per_layer(m))) for m in metrics
        }
    elif isinstance(oversmoothing, Mapping):
        curves = {m: dict(enumerate(values)) for m, values in oversmoothing.items()}
    elif isinstance(oversmoothing, Sequence) and not isinstance(oversmoothing, str):
        curves = {"cosine_similarity": dict(enumerate(oversmoothing))}
    else:
        raise ValueError(
            "`oversmoothing` must be an OversmoothingReport (with `per_layer(metric)`), a dict {metric: per-layer "
            f"values}} or a list of per-layer values; got {type(oversmoothing).__name__}."
        )
    out = {}
    for metric, values in curves.items():
        if not values:
            raise ValueError(f"`oversmoothing[{metric!r}]` has no per-layer values.")
        out[str(metric)] = {int(layer): float(value) for layer, value in values.items()}
    return out


def _oversmoothing_table(curves: dict[str, dict[int, float]]) -> str:
    metrics = list(curves)
    layers = sorted(set().union(*(c.keys() for c in curves.values())))

    def cell(metric: str, layer: int) -> str:
        value = curves[metric].get(layer)
        return "" if value is None else "n/a" if math.isnan(value) else f"{value:.4f}"

    lines = ["| hidden state | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for layer in layers:
        name = "0 (embeddings)" if layer == 0 else str(layer)
        lines.append(f"| {name} | " + " | ".join(cell(m, layer) for m in metrics) + " |")
    return "\n".join(lines)


def plot_oversmoothing(curves: dict[str, dict[int, float]], path: str | os.PathLike, title: str = "") -> bool:
    """Draw the per-layer curves to a PNG; False (and a warning) when matplotlib (the `plots` extra) is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning(
            "matplotlib is not installed (pip install 'hf-neutreno[plots]'): the card gets a table, no plot."
        )
        return False
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.2), squeeze=False)
    for ax, (metric, values) in zip(axes[0], curves.items()):
        layers = sorted(values)
        ax.plot(layers, [values[layer] for layer in layers], marker="o")
        ax.set_xlabel("hidden state (0 = embeddings)")
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _auto_class(model) -> str:
    """The Auto class whose `auto_map` entry names the model's own class (the one to load it with)."""
    auto_map = getattr(model.config, "auto_map", None) or {}
    name = type(model).__name__
    for auto_class, reference in auto_map.items():
        if reference.rsplit(".", 1)[-1] == name and auto_class != "AutoConfig":
            return auto_class
    raise ValueError(
        f"{name} has no `auto_map` entry, so the pushed checkpoint would not load with trust_remote_code. "
        "Import `hf_neutreno` before creating or loading the model (it registers the Auto classes)."
    )


def _is_local_path(name: str) -> bool:
    return os.path.exists(name) or name.startswith((".", "/", "~"))


def _metric_items(results: Mapping[str, float]) -> list[tuple[str, float]]:
    """Metrics -> (metric, value). A Trainer dict (`eval_accuracy`, `train_runtime`, ...) keeps its `eval_`/`test_`
    entries without the prefix; run statistics (runtime, samples per second, epoch, ...) are dropped."""
    prefixes = ("eval_", "test_")
    trainer_style = any(key.startswith(prefixes) for key in results)
    items = []
    for key, value in results.items():
        if trainer_style and not key.startswith(prefixes):
            continue
        name = key.split("_", 1)[1] if key.startswith(prefixes) else key
        if name in _NOT_METRICS or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        items.append((name, float(value)))
    return items


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
    """Render the model card of `model` from its `model_cards/` template.

    Args:
        repo_id: the Hub repository, used in the loading example (default: a placeholder).
        dataset: the Hub id (listed under `datasets:`) or local folder (only its name is recorded) it was evaluated on.
        results: measured metrics, as Trainer returns them (``{"eval_accuracy": 0.81, ...}``; run statistics and the
            ``eval_`` prefix are dropped) or as `EvalResult`s; they become the card's `eval_results`.
        oversmoothing: per-layer over-smoothing values (see `oversmoothing_curves`), shown as a table.
        oversmoothing_plot: file name of the curve's image next to the card (`save_for_hub` draws it).
        training: training settings to list (learning rate, batch size, ...).
        template: a template file path or a shipped template name (default: the one for the model type).
    """
    config = model.config
    template = template or CARD_TEMPLATES.get(config.model_type)
    if template is None:
        raise ValueError(
            f"No model card template for model_type {config.model_type!r}; known: {sorted(CARD_TEMPLATES)}. "
            "Pass `template=` (a path to a Jinja Markdown template)."
        )
    auto_class = _auto_class(model)
    pipeline_tag = PIPELINE_TAGS.get(auto_class)
    model_name = (repo_id or getattr(config, "name_or_path", "") or config.model_type).rstrip("/").split("/")[-1]

    dataset_id = dataset_name = None
    if dataset:
        dataset_name = Path(dataset).name if _is_local_path(dataset) else dataset
        dataset_id = None if _is_local_path(dataset) else dataset
    if results is None:
        eval_results = []
    elif isinstance(results, Mapping):
        if not dataset_name:
            raise ValueError("`results` need the `dataset` they were measured on.")
        eval_results = [
            EvalResult(
                task_type=pipeline_tag or "other",
                dataset_type=dataset_id or dataset_name,
                dataset_name=dataset_name,
                dataset_config=dataset_config,
                dataset_split=dataset_split,
                metric_type=metric,
                metric_name=metric.replace("_", " "),
                metric_value=value,
            )
            for metric, value in _metric_items(results)
        ]
    else:
        eval_results = list(results)

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
    curves = oversmoothing_curves(oversmoothing)
    return ModelCard.from_template(
        card_data,
        template_str=template_text(template),
        model_name=model_name,  # ModelCardData.to_dict() moves it into model-index
        repo_id=repo_id or f"<user>/{model_name}",
        auto_class=auto_class,
        config=config.to_dict(),
        num_parameters=sum(p.numel() for p in model.parameters()),
        results=[
            {"metric": r.metric_name or r.metric_type, "value": r.metric_value, "dataset": r.dataset_name,
             "split": r.dataset_split}
            for r in eval_results
        ],
        dataset_name=dataset_name,
        oversmoothing_table=_oversmoothing_table(curves) if curves else None,
        oversmoothing_plot=oversmoothing_plot,
        training=dict(training or {}),
        citations=template_text(CITATIONS_FILE).strip(),
    )


# ---------------------------------------------------------------------------------------------------------------
# The folder that is pushed
# ---------------------------------------------------------------------------------------------------------------


def save_for_hub(
    folder: str | os.PathLike,
    model,
    processor=None,
    tokenizer=None,
    *,
    card: ModelCard | None = None,
    **card_kwargs,
) -> Path:
    """Write exactly the folder `push_to_hub` uploads: weights, config with `auto_map`, the model's code files, the
    image processor and/or tokenizer, `README.md` (the model card) and the over-smoothing plot.

    The folder is built next to `folder` and renamed into place only when complete; `folder` must not exist or be
    empty. `card_kwargs` go to `model_card`; pass them or a ready `card`, not both.
    """
    if card is not None and card_kwargs:
        raise ValueError(f"Pass either `card` or the arguments to render one ({sorted(card_kwargs)}), not both.")
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"`folder` {str(folder)!r} already holds files; save_for_hub writes a new, empty folder.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    try:
        _write_hub_folder(staging, model, processor, tokenizer, card, card_kwargs)
        if folder.exists():
            folder.rmdir()
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def _write_hub_folder(folder: Path, model, processor, tokenizer, card, card_kwargs) -> None:
    model.save_pretrained(folder)
    for extra in (processor, tokenizer):
        if extra is not None:
            extra.save_pretrained(folder)
    _check_remote_code(folder)
    if card is None:
        curves = oversmoothing_curves(card_kwargs.get("oversmoothing"))
        if curves and plot_oversmoothing(curves, folder / OVERSMOOTHING_PLOT, title=type(model).__name__):
            card_kwargs = {**card_kwargs, "oversmoothing_plot": OVERSMOOTHING_PLOT}
        card = model_card(model, **card_kwargs)
    card.save(folder / "README.md")


def _check_remote_code(folder: Path) -> None:
    """Every module named in config.json's `auto_map` is in the folder (else trust_remote_code cannot load it)."""
    auto_map = json.loads((folder / "config.json").read_text()).get("auto_map") or {}
    missing = sorted({ref.rsplit(".", 1)[0] + ".py" for ref in auto_map.values()} - {p.name for p in folder.iterdir()})
    if not auto_map or missing:
        raise ValueError(
            f"The saved model lacks its remote code (auto_map={auto_map}, missing files {missing}); "
            "import `hf_neutreno` before creating or loading the model."
        )


# ---------------------------------------------------------------------------------------------------------------
# Pushing
# ---------------------------------------------------------------------------------------------------------------


def hub_is_offline() -> bool:
    """`HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) as set now, or as huggingface_hub read it at import."""
    now = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return now.strip().lower() in ("1", "on", "yes", "true") or hub_constants.HF_HUB_OFFLINE


def check_hub_access(repo_id: str, token: str | bool | None = None) -> str:
    """Fail early, before anything is written, if a push to `repo_id` cannot work: offline mode, an invalid repo id,
    no token, an unreachable Hub. Reads only (`whoami`). Returns the account name."""
    if hub_is_offline():
        raise OfflineModeIsEnabled(
            f"Cannot push to {repo_id!r}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE=1). Nothing was "
            "written, locally or on the Hub. Unset HF_HUB_OFFLINE to push, or write the folder with "
            "`hf_neutreno.hub.save_for_hub(folder, ...)` and upload it later with `hf upload REPO_ID FOLDER`."
        )
    validate_repo_id(repo_id)
    api = HfApi(token=token)
    try:
        return api.whoami()["name"]
    except (LocalTokenNotFoundError, HfHubHTTPError):
        raise  # their messages say how to log in
    except Exception as error:  # the transport's errors (connection refused, DNS, timeout)
        raise ConnectionError(
            f"Cannot reach the Hugging Face Hub at {api.endpoint} to push to {repo_id!r} ({error}). "
            "Nothing was written."
        ) from error


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
    """Push `model` (weights, config, code), its processor and/or tokenizer and its model card to `repo_id`.

    Checks the Hub can be reached first (`check_hub_access`), prepares the folder locally with `save_for_hub`, then
    creates the repository if needed and uploads the folder in ONE commit: readers see the old state or the complete
    new one. The temporary folder is removed in every case. `card_kwargs` go to `model_card`. Returns the
    `CommitInfo`.
    """
    check_hub_access(repo_id, token)
    if card is None:
        card_kwargs.setdefault("repo_id", repo_id)
    with tempfile.TemporaryDirectory(prefix="hf-neutreno-push-") as tmp:
        folder = save_for_hub(Path(tmp) / "upload", model, processor, tokenizer, card=card, **card_kwargs)
        api = HfApi(token=token)
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        return api.upload_folder(
            repo_id=repo_id, folder_path=folder, commit_message=commit_message, revision=revision, create_pr=create_pr
        )


# ---------------------------------------------------------------------------------------------------------------
# Trainer scripts (examples/)
# ---------------------------------------------------------------------------------------------------------------


def prepare_trainer_push(args) -> str | None:
    """For `--push_to_hub` in a Trainer script: check the push can work BEFORE training, and take it over.

    Trainer's own pushes during training copy only weights and config into the repository, not the code files a
    `trust_remote_code` checkpoint needs, so the examples push once, at the end, with `push_trainer_model`
    (complete folder, model card, one commit). Returns the repo id, or None without `--push_to_hub`.
    """
    if not args.push_to_hub:
        return None
    strategy = str(getattr(args.hub_strategy, "value", args.hub_strategy))
    if strategy not in ("every_save", "end"):
        raise ValueError(
            f"--hub_strategy {strategy!r} is not supported here: the examples push the finished model once, with its "
            "code and model card. Use --hub_strategy end (or every_save), and resume from local checkpoints."
        )
    repo_id = args.hub_model_id or Path(args.output_dir).absolute().name
    check_hub_access(repo_id, args.hub_token)
    args.push_to_hub = False  # no Trainer pushes during training
    return repo_id


def push_trainer_model(trainer, repo_id: str, **card_kwargs):
    """Push the trainer's model, its processing class and a model card (with the training settings) to `repo_id`,
    from the main process only. `card_kwargs` go to `model_card` (dataset, results, oversmoothing, ...)."""
    if not trainer.is_world_process_zero():
        return None
    from transformers import PreTrainedTokenizerBase

    args = trainer.args
    model = trainer.accelerator.unwrap_model(trainer.model)
    processing = trainer.processing_class
    is_tokenizer = isinstance(processing, PreTrainedTokenizerBase)
    world = max(args.world_size, 1)
    training = {
        "steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0, 2),
        "global batch size": args.per_device_train_batch_size * args.gradient_accumulation_steps * world,
        "learning rate": args.learning_rate,
        "schedule": f"{getattr(args.lr_scheduler_type, 'value', args.lr_scheduler_type)}, warm-up {args.warmup_steps}",
        "optimizer": f"{getattr(args.optim, 'value', args.optim)}, weight decay {args.weight_decay}",
        "mixed precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "no",
        "processes": world,
        "seed": args.seed,
    }
    card_kwargs["training"] = {**training, **card_kwargs.get("training", {})}
    return push_to_hub(
        model,
        repo_id,
        processor=None if is_tokenizer else processing,
        tokenizer=processing if is_tokenizer else None,
        private=args.hub_private_repo,
        token=args.hub_token,
        revision=args.hub_revision,
        commit_message="End of training",
        **card_kwargs,
    )


__all__ = [
    "CARD_TEMPLATES",
    "check_hub_access",
    "model_card",
    "oversmoothing_curves",
    "plot_oversmoothing",
    "prepare_trainer_push",
    "push_to_hub",
    "push_trainer_model",
    "save_for_hub",
]


# ---------------------------------------------------------------------------------------------------------------
# `hf-neutreno push`
# ---------------------------------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("model_dir", help="A saved hf-neutreno model (save_pretrained or a Trainer output_dir).")
    parser.add_argument("repo_id", help="The Hub repository, `name` or `namespace/name`.")
    parser.add_argument("--dataset", help="Hub id or local folder the results were measured on.")
    parser.add_argument("--dataset-config", help="Hub dataset configuration.")
    parser.add_argument("--split", default="test", help="Split the results were measured on (default: test).")
    parser.add_argument("--results", help="JSON of metrics (default: MODEL_DIR/all_results.json or eval_results.json "
                        "as Trainer writes them, if present).")
    parser.add_argument("--oversmoothing", help="JSON of per-layer over-smoothing values: an OversmoothingReport "
                        "(hf_neutreno.diagnostics) or {metric: [value per hidden state]}.")
    parser.add_argument("--base-model", help="Hub id of the checkpoint this model was fine-tuned from.")
    parser.add_argument("--template", help="Model card template file (default: the one for the model type).")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--token", help="Hub token (default: the logged-in one).")
    parser.add_argument("--save-to", metavar="FOLDER",
                        help="Write the folder that would be pushed to FOLDER instead of pushing.")


def run(args) -> int:
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"model_dir {str(model_dir)!r} has no config.json: not a saved model.")
    if not args.save_to:
        check_hub_access(args.repo_id, args.token)  # before loading anything
    model, processor, tokenizer = load_saved(model_dir)
    results_path = args.results or next(
        (str(p) for p in (model_dir / "all_results.json", model_dir / "eval_results.json") if p.is_file()), None)
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
    if args.save_to:
        folder = save_for_hub(args.save_to, model, processor, tokenizer, repo_id=args.repo_id, **card_kwargs)
        print(f"Wrote {folder}: {sorted(p.name for p in folder.iterdir())}")
        return 0
    commit = push_to_hub(model, args.repo_id, processor, tokenizer, private=args.private or None, token=args.token,
                         **card_kwargs)
    print(f"Pushed to {getattr(commit, 'commit_url', args.repo_id)}")
    return 0


def load_saved(model_dir: Path):
    """A saved hf-neutreno model with its image processor and/or tokenizer (None where the folder has none)."""
    import hf_neutreno
    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    name = (config.architectures or [None])[0]
    model_class = getattr(hf_neutreno, name, None) if name else None
    if model_class is None:
        raise ValueError(
            f"{str(model_dir)!r} holds a {name or config.model_type!r} model; `hf-neutreno push` publishes the "
            f"models of this package: {sorted(hf_neutreno.__all__)}."
        )
    model = model_class.from_pretrained(model_dir)
    has_processor = (model_dir / "preprocessor_config.json").is_file()
    processor = AutoImageProcessor.from_pretrained(model_dir) if has_processor else None
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if (model_dir / "tokenizer_config.json").is_file() else None
    return model, processor, tokenizer


def _load_oversmoothing(path: str):
    """An `OversmoothingReport` JSON (it has "values") or a plain ``{metric: [value per hidden state]}``."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, Mapping) and "values" in data:
        from hf_neutreno.diagnostics import OversmoothingReport

        return OversmoothingReport.from_dict(data)
    return data
