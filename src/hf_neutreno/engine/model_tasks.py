"""`hf-neutreno compare` on any transformers model: the task comes from the model's head and the dataset's columns.

    model = CheckedModel(settings)       # checks the model (adaptable? processor?) before any data is loaded
    task = model.prepare(dataset)        # the task object: columns, labels, splits; ValueError naming the flag
    network = task.build("value-residual", coefficient=0.5)   # `paired_model` seeds it

Tasks (`hf_neutreno.engine.tasks.TASKS`): image classification (image + label), text classification (text, or a text
pair, + label), causal language modelling (text), masked language modelling (text, a model with an MLM head) and
semantic segmentation (image + annotation map). A task object is `ModelTask` (the model, its tokenizer or image
processor, the columns, labels and splits) mixed into its task (`MODEL_TASKS`). A pretrained model is fine-tuned from
its weights; its classification head is kept when its labels are the dataset's, else a new one is sized to the dataset's
labels, drawn under the run's seed (`hf_neutreno.engine.experiment.paired_model`), so that every variant of a seed
starts from the same head.
"""

from pathlib import Path

import torch
import transformers
from datasets import ClassLabel, Features
from transformers import AutoConfig
from transformers.models.auto import modeling_auto

from ..auto_classes import register_auto_classes
from ..checkpoints import check_source, is_local, load_checkpoint
from ..data.image_transforms import image_transform
from ..data.loading import LABELS_FILE, capped, read_id2label
from ..data.segmentation import segmentation_transform
from ..data.text import group_into_blocks, token_stream
from ..models.value_path import check_adaptable
from ..names import ANNOTATION_COLUMN
from .tasks import (
    EVAL_SPLITS,
    TASKS,
    CausalLM,
    ImageClassification,
    MaskedLM,
    SemanticSegmentation,
    TextClassification,
)
from .variants import ANY_MODEL_VARIANTS, VARIANTS, build_variant, default_variants

register_auto_classes()  # --model may be a folder saved by one of this package's models

# The head a checkpoint's `architectures` entry names -> its task (a base model takes the task from the data).
HEAD_SUFFIXES = {
    "ForCausalLM": "causal-lm",
    "LMHeadModel": "causal-lm",
    "ForMaskedLM": "masked-lm",
    "ForSequenceClassification": "text-classification",
    "ForImageClassification": "image-classification",
    "ForImageClassificationWithTeacher": "image-classification",
    "ForSemanticSegmentation": "semantic-segmentation",
}
TEXT_PAIRS = (
    ("sentence1", "sentence2"),
    ("premise", "hypothesis"),
    ("question1", "question2"),
    ("question", "sentence"),
)
TEXT_NAMES = ("text", "sentence", "content", "document", "review")
LABEL_NAMES = ("label", "labels", "class", "target")
HELD_OUT_FRACTION, HELD_OUT_SEED = 0.1, 0  # an evaluation split carved from train when the dataset has none
DEFAULT_MAX_LENGTH = 128  # tokens per example or block, unless the model's positions are fewer


def task_of_architecture(config) -> str | None:
    """The task of the head the checkpoint's `architectures` names; None for a base model (or none named)."""
    for architecture in getattr(config, "architectures", None) or ():
        for suffix, task in HEAD_SUFFIXES.items():
            if architecture.endswith(suffix):
                return task
    return None


def task_of_columns(features: dict, config) -> str | None:
    """The task a base model gets from the dataset's columns (`features`: name -> datasets feature)."""
    kinds = {name: type(feature).__name__ for name, feature in features.items()}
    images = [name for name, kind in kinds.items() if kind == "Image"]
    if ANNOTATION_COLUMN in images and len(images) > 1:
        return "semantic-segmentation"
    has_label = any(kind == "ClassLabel" for kind in kinds.values()) or any(name in kinds for name in LABEL_NAMES)
    if images:
        return "image-classification" if has_label else None
    if not any(kind == "Value" and features[name].dtype in ("string", "large_string") for name, kind in kinds.items()):
        return None
    if has_label:
        return "text-classification"
    return "masked-lm" if config.model_type in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES else "causal-lm"


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
MASKED_LM_HEADS = modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES  # model type -> its masked-LM class(es)


def _has_weights(folder: Path) -> bool:
    return any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES)


def is_model_reference(name: str) -> bool:
    """Whether `--model` names a transformers model (a folder or a Hub id) rather than one of this package's presets."""
    return is_local(name) or "/" in name


class CheckedModel:
    """A transformers model (`settings.model`: a Hub id or a folder), checked before any data is loaded: its config,
    and its task where its head names one (else the dataset's columns will). `prepare(dataset)` builds its task
    object, once."""

    def __init__(self, settings):
        self.settings = settings
        self.native_neutreno = False  # this package's models with λ in their config: set by `_check_adaptable`
        self.source = settings.model
        path = Path(settings.model).expanduser()
        check_source(settings.model, "--model")
        if is_local(settings.model) and not (path / "config.json").is_file():
            raise ValueError(f"--model {settings.model!r}: the folder has no config.json (a saved model).")
        try:
            self.config = AutoConfig.from_pretrained(settings.model)
        except Exception as error:  # noqa: BLE001 - not found, offline, a model type this transformers lacks
            raise ValueError(
                f"--model {settings.model!r} could not be loaded ({type(error).__name__}: {str(error).strip()[:300]}). "
                "It must be a preset, a local folder of a saved transformers model, or a Hub model id (owner/name)."
            ) from None
        self.task = settings.task or task_of_architecture(self.config)
        self._check_head()
        self._check_adaptable()
        if is_local(settings.model) and not settings.from_scratch and not _has_weights(path):
            raise ValueError(
                f"--model {settings.model!r}: the folder has a config.json but no weights (model.safetensors, "
                "pytorch_model.bin or their sharded index). Save the model there with `save_pretrained`, or pass "
                "--from-scratch to train this architecture from random weights."
            )

    def _check_head(self) -> None:
        """The task's head exists for this model in transformers (image data does not reach a text model), and a
        language-model head that the checkpoint lacks is not trained from scratch unless --task asks for it."""
        if self.task is None:
            return
        auto_name = TASKS[self.task].auto_class
        if type(self.config) not in getattr(transformers, auto_name)._model_mapping:
            data = "image" if self.task in ("image-classification", "semantic-segmentation") else "text"
            raise ValueError(
                f"--model {self.source!r} is a {self.config.model_type} model, which has no {self.task} head in "
                f"transformers ({auto_name} does not take it), and the task comes from "
                + ("--task" if self.settings.task else f"the {data} data of --dataset {self.settings.dataset!r}")
                + ". Use a model of that kind, or data for this model's task."
            )
        heads = MASKED_LM_HEADS.get(self.config.model_type, ())
        heads = (heads,) if isinstance(heads, str) else heads
        architectures = getattr(self.config, "architectures", None) or []
        if self.task == "masked-lm" and self.settings.task is None and not set(heads) & set(architectures):
            raise ValueError(
                f"--model {self.source!r} ({', '.join(architectures) or self.config.model_type}) has no masked-LM "
                f"head, and --dataset {self.settings.dataset!r} has text without labels: compare would train a new "
                "head from scratch and score it (perplexities near the vocabulary size), not the remedies. Give a "
                "labelled dataset (text classification), or pass --task masked-lm to train that head anyway."
            )

    def _check_adaptable(self) -> None:
        """Build the model's attention stack on the meta device (no weights, no download) and check that every
        requested value path can be put on it."""
        wanted = [name for name in self.settings.variants if VARIANTS[name].method is not None]
        if not wanted:
            return
        self.native_neutreno = hasattr(self.config, "neutreno_lambda")  # this package's models: λ in the config
        paths = [name for name in wanted if not (self.native_neutreno and name == "neutreno")]
        if not paths:
            return
        auto_class = getattr(transformers, TASKS[self.task].auto_class if self.task else "AutoModel")
        try:
            with torch.device("meta"):
                model = auto_class.from_config(self.config)
        except Exception as error:  # noqa: BLE001
            raise ValueError(
                f"--model {self.source!r} ({type(self.config).__name__}) cannot be built as {auto_class.__name__}: "
                f"{str(error).strip()[:300]}"
            ) from None
        for name in paths:
            if (error := _refusal(model, name, self.native_neutreno)) is None:
                continue
            taken = [other for other in ANY_MODEL_VARIANTS if _refusal(model, other, self.native_neutreno) is None]
            default = tuple(self.settings.variants) == default_variants(pretrained=True)
            given = " (a default for a pretrained model)" if default else ""
            raise ValueError(
                f"--model {self.source!r}: --variants {name}{given} needs a value path, which "
                f"{type(model).__name__} cannot take: {error} "
                + (
                    f"Of the variants, it takes {','.join(taken)}: name them with --variants."
                    if len(taken) > 1
                    else "Supported: transformers models with one stack of self-attention layers that go through "
                    "transformers' attention interface (Llama, Qwen2, Mistral, Gemma, GPT-2, BERT, RoBERTa, ViT, DeiT, "
                    "...); value embeddings on the causal language models among them."
                )
            ) from None

    def prepare(self, dataset) -> "ModelTask":
        """The task object of this model on `dataset`: the task (if the model's head did not pick it) from the
        columns, then its class in `MODEL_TASKS`, built with its processing, splits and inputs."""
        settings = self.settings
        if self.task is None:
            self.task = task_of_columns(dataset["train"].features, self.config)
            if self.task is None:
                raise ValueError(
                    f"--dataset {settings.dataset!r} (columns {_columns(dataset)}) fits no task for the base model "
                    f"{settings.model!r}: give --task, one of {list(TASKS)}."
                )
            self._check_head()
            self._check_adaptable()
        return MODEL_TASKS[self.task](self, dataset)


def _refusal(model, variant: str, native_neutreno: bool) -> ValueError | None:
    """Why `model` (built on the meta device) cannot take `variant`'s value path, or None where it can (softmax, and
    NeuTRENO on this package's models, which have its term built in, need none)."""
    method = VARIANTS[variant].method
    if method is None or (native_neutreno and variant == "neutreno"):
        return None
    try:
        check_adaptable(model, method, VARIANTS[variant].learnable)
    except ValueError as error:
        return error
    return None


class ModelTask:
    """A transformers model fine-tuned, or trained from scratch, on a task: the source half of its task objects
    (`MODEL_TASKS`), built from the `CheckedModel` and the dataset; `_inputs` turns the columns into model inputs."""

    preset = None

    def __init__(self, model: CheckedModel, dataset):
        self.settings, self.source, self.config, self.task = model.settings, model.source, model.config, model.task
        self.native_neutreno = model.native_neutreno
        self.length = self._max_length()
        self.processing = self._load_processing()
        self.train, self.eval, self.eval_split = self._splits(dataset)
        self._inputs()

    # --- data ---------------------------------------------------------------------------------------------------

    def _max_length(self) -> int:
        """--max-length, or `DEFAULT_MAX_LENGTH` capped at the model's positions; more than those raises."""
        positions = getattr(self.config, "max_position_embeddings", None) or getattr(self.config, "n_positions", None)
        given = self.settings.max_length
        if given is None:
            return min(DEFAULT_MAX_LENGTH, positions or DEFAULT_MAX_LENGTH)
        if positions is not None and given > positions:
            raise ValueError(f"--max-length {given} exceeds the {positions} positions of --model {self.source!r}.")
        return given

    def _load_processing(self):
        loader = getattr(transformers, self.processing_class)
        kind = "tokenizer" if self.processing_class == "AutoTokenizer" else "image processor"
        missing = (
            f"--model {self.source!r} has no {kind}: the {kind} comes from the same place as the model; save it "
            f"there (`{kind.replace(' ', '_')}.save_pretrained(folder)`)."
        )
        try:
            processing = loader.from_pretrained(self.source)
        except Exception as error:  # noqa: BLE001 - missing files raise OSError, ValueError, KeyError ...
            raise ValueError(f"{missing} ({type(error).__name__}: {str(error).strip()[:200]})") from None
        # transformers builds a tokenizer with no vocabulary (its special tokens alone) from a folder without one
        if kind == "tokenizer" and len(processing) <= len(set(processing.all_special_ids)):
            raise ValueError(missing)
        if kind == "tokenizer" and processing.pad_token is None:  # GPT-2, Llama: batches need one
            processing.pad_token = processing.eos_token or processing.unk_token
        return processing

    def _splits(self, dataset):
        """(train, eval, eval split name): the dataset's test (else validation) split, or one carved from train."""
        settings = self.settings
        candidates = [split for split in EVAL_SPLITS if split in dataset]
        if self.labelled and self.name != SemanticSegmentation.name:
            # GLUE-style test splits hold no labels (all -1): evaluate on the next split that has them
            column = self._label_column(dataset["train"])
            self.unlabelled_splits = [split for split in candidates if set(dataset[split].unique(column)) <= {-1, None}]
            candidates = [split for split in candidates if split not in self.unlabelled_splits]
        found = candidates[0] if candidates else None
        if found is None:
            carved = dataset["train"].train_test_split(test_size=HELD_OUT_FRACTION, seed=HELD_OUT_SEED)
            train, evaluation = carved["train"], carved["test"]
            self.eval_split = f"held-out {HELD_OUT_FRACTION:.0%} of train (seed {HELD_OUT_SEED})"
        else:
            train, evaluation = dataset["train"], dataset[found]
            self.eval_split = found
        train = capped(train, settings.max_train_samples, settings.seed)
        evaluation = capped(evaluation, settings.max_eval_samples, settings.seed)
        self.split_rows = {"train": len(train), self.eval_split: len(evaluation)}  # rows, before any tokenizing
        return train, evaluation, self.eval_split

    def _column(self, flag: str, value: str | None, guesses, dataset, kind: str) -> str:
        columns = dataset.column_names
        if value is not None:
            if value not in columns:
                raise ValueError(
                    f"--{flag} {value!r} is not a column of --dataset {self.settings.dataset!r}: {columns}."
                )
            return value
        found = next((name for name in guesses if name in columns), None)
        if found is None:
            raise ValueError(
                f"--dataset {self.settings.dataset!r} has no {kind} column that compare recognises (columns: "
                f"{_columns_of(dataset)}): set --{flag}."
            )
        return found

    def _text_columns(self) -> list[str]:
        settings, columns = self.settings, self.train.column_names
        if settings.text_column:
            names = [name.strip() for name in settings.text_column.split(",")]
            missing = [name for name in names if name not in columns]
            if missing or not 1 <= len(names) <= 2:
                raise ValueError(
                    f"--text-column {settings.text_column!r}: one column, or two for a text pair, of {columns}"
                    + (f"; not columns: {missing}." if missing else ".")
                )
            return names
        for pair in TEXT_PAIRS:
            if all(name in columns for name in pair):
                return list(pair)
        strings = [
            name
            for name, feature in self.train.features.items()
            if getattr(feature, "dtype", None) in ("string", "large_string")
        ]
        name = next((name for name in TEXT_NAMES if name in strings), strings[0] if len(strings) == 1 else None)
        if name is None:
            raise ValueError(
                f"--dataset {settings.dataset!r} has no text column that compare recognises (columns: "
                f"{_columns_of(self.train)}): set --text-column (two, comma-separated, for a text pair)."
            )
        return [name]

    def _label_column(self, data) -> str:
        guesses = [name for name, f in data.features.items() if type(f).__name__ == "ClassLabel"]
        return self._column("label-column", self.settings.label_column, [*guesses, *LABEL_NAMES], data, "label")

    def _labels(self) -> None:
        """`label_column`, `labels` (names, in id order) and the id of each row's label; unseen eval labels raise."""
        settings = self.settings
        column = self._label_column(self.train)
        feature = self.train.features[column]
        if type(feature).__name__ == "ClassLabel":
            self.labels = list(feature.names)
            seen = set(self.train.unique(column))
        else:
            seen = set(self.train.unique(column))
            self.labels = [str(value) for value in sorted(seen)]
        unseen = sorted(set(self.eval.unique(column)) - seen, key=str)
        if unseen:
            raise ValueError(
                f"--dataset {settings.dataset!r}: the {self.eval_split} split has labels that training never sees "
                f"({unseen[:10]}); the model could not learn them. Use a larger --max-train-samples, or another split."
            )
        if type(feature).__name__ != "ClassLabel":  # label values -> ids 0..K-1, in sorted order
            index = {value: i for i, value in enumerate(sorted(seen))}
            ids = ClassLabel(names=self.labels)

            def encode(batch):
                return {column: [index[value] for value in batch[column]]}

            self.train, self.eval = (
                data.map(encode, batched=True, features=Features({**data.features, column: ids}), desc="Labels")
                for data in (self.train, self.eval)
            )
        self.label_column = column

    def _refuse_empty_text(self, columns: list[str]) -> None:
        for split, data in (("train", self.train), (self.eval_split, self.eval)):
            for column in columns:
                empty = sum(1 for text in data[column] if text is None or not str(text).strip())
                if empty:
                    raise ValueError(
                        f"--dataset {self.settings.dataset!r}: {empty} rows of the {split} split have empty text in "
                        f"column {column!r}. Remove them (`dataset.filter(...)`) or choose another --text-column."
                    )

    def _lm_text(self) -> str:
        columns = self._text_columns()
        if len(columns) != 1:
            raise ValueError(f"--text-column: a language model trains on one text column, got {columns}.")
        (column,) = columns
        for split, data in (("train", self.train), (self.eval_split, self.eval)):
            if not any(str(text or "").strip() for text in data[column]):
                raise ValueError(f"--dataset {self.settings.dataset!r}: every row of {split}'s {column!r} is empty.")
        return column

    def _image_column(self) -> str:
        images = [name for name, f in self.train.features.items() if type(f).__name__ == "Image"]
        return self._column("image-column", self.settings.image_column, images, self.train, "image")

    def _segmentation_labels(self) -> list[str]:
        if is_local(self.settings.dataset) and (Path(self.settings.dataset) / LABELS_FILE).is_file():
            id2label = read_id2label(Path(self.settings.dataset) / LABELS_FILE, flag="--dataset")
            return [id2label[i] for i in range(len(id2label))]
        id2label = getattr(self.config, "id2label", None) or {}
        if len(id2label) < 2:
            raise ValueError(
                f"--dataset {self.settings.dataset!r}: the classes of its label maps are unknown; put an {LABELS_FILE} "
                '({"0": "background", ...}) in the dataset folder.'
            )
        return [id2label[i] for i in range(len(id2label))]

    # --- models -------------------------------------------------------------------------------------------------

    @property
    def summary(self) -> str:
        start = "trained from scratch" if self.settings.from_scratch else "fine-tuned from its weights"
        skipped = getattr(self, "unlabelled_splits", [])
        note = f"; not {', '.join(skipped)}, which has no labels" if skipped else ""
        return f"{self.source} ({self.task}, {start}) on {self.settings.dataset} ({self.summary_data}{note})"

    @property
    def pretrained(self) -> bool:
        return not self.settings.from_scratch

    def _label_fields(self) -> dict:
        if not self.labelled:
            return {}
        id2label = dict(enumerate(self.labels))
        return {
            "num_labels": len(self.labels),
            "id2label": id2label,
            "label2id": {name: i for i, name in id2label.items()},
        }

    def keeps_head(self) -> bool:
        """Whether the checkpoint's own head fits the dataset's labels (same names, same order)."""
        own = getattr(self.config, "id2label", None) or {}
        return [own.get(i) for i in range(len(own))] == list(self.labels) and task_of_architecture(
            self.config
        ) == self.task

    def new_head(self) -> bool:
        """Whether the model gets a new classification head: a classification task whose labels are not the
        checkpoint's own (same names, same order)."""
        return getattr(self, "labels", None) is not None and not self.keeps_head()

    def _load(self, neutreno_lambda: float | None) -> torch.nn.Module:
        """The model, its weights drawn from the global generator (seeded by the caller) where they are new."""
        auto_class = getattr(transformers, self.auto_class)
        fields = self._label_fields() if self.new_head() else {}
        if neutreno_lambda is not None:
            fields["neutreno_lambda"] = neutreno_lambda
        if self.task == "text-classification" and self.processing.pad_token_id is not None:
            fields["pad_token_id"] = self.processing.pad_token_id  # batches are padded
        config = AutoConfig.from_pretrained(self.source, **fields)
        if self.settings.from_scratch:
            return auto_class.from_config(config)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # the new head's "newly initialized" notice: the summary says it
        try:
            model = load_checkpoint(
                self.source, auto_class, what="--model", config=config, ignore_mismatched_sizes=self.new_head()
            )
        finally:
            transformers.logging.set_verbosity(verbosity)
        prefix = getattr(model, "base_model_prefix", "") + "."
        if self.new_head() and prefix != ".":
            # A head of the same shape as the checkpoint's (2 labels for 2 others) would load its weights: draw it
            # anew, as a new head of another shape is, from a model initialised under the same seed.
            generator = torch.random.get_rng_state()
            fresh = auto_class.from_config(config)
            torch.random.set_rng_state(generator)
            head = {k: v for k, v in fresh.state_dict().items() if not k.startswith(prefix)}
            model.load_state_dict(head, strict=False)
        return model

    def build(self, variant: str, coefficient: float | None) -> torch.nn.Module:
        """The model of `variant`: loaded (or, with --from-scratch, initialised), its new weights drawn from the
        global generator, then given its value path (or, for this package's own models, its λ)."""
        if variant == "neutreno" and self.native_neutreno:
            return self._load(coefficient)
        return build_variant(self._load(None), variant, coefficient)

    def record(self) -> dict:
        """What results.json keeps of the model and the data: enough to rerun it."""
        return {
            "model": self.source,
            "pretrained": self.pretrained,
            "head": "kept"
            if getattr(self, "labels", None) and self.keeps_head()
            else "new"
            if self._label_fields()
            else None,
            "splits": self.split_rows,
            "eval_split_from": "the dataset" if self.eval_split in EVAL_SPLITS else "train",
        }


# --- the task objects: a transformers model mixed into each task of `hf_neutreno.engine.tasks` -----------------------


class ModelImageClassification(ModelTask, ImageClassification):
    def _inputs(self) -> None:
        image_column = self._image_column()
        self._labels()
        self._image_inputs(image_transform(self.processing, image_column, self.label_column), self.label_column)


class ModelTextClassification(ModelTask, TextClassification):
    def _inputs(self) -> None:
        columns = self._text_columns()
        self._refuse_empty_text(columns)
        self._labels()
        self._text_inputs(columns, self.label_column, self.length)


class ModelCausalLM(ModelTask, CausalLM):
    def _inputs(self) -> None:
        column, length = self._lm_text(), self.length
        # Rows are tokenised as they are, each with the tokenizer's special tokens, then concatenated into one stream
        # and cut into blocks, as transformers' run_clm.py does (`tokenizer(texts)`, then `group_texts`): a tokenizer
        # that adds a BOS (Llama, Gemma) starts every row with it, and an empty row adds that BOS alone; one that adds
        # nothing (GPT-2) adds nothing for an empty row; this package's word tokenizer ends every row, empty ones
        # included, with `<eos>` (WikiText's standard counts). Rows are not joined by any other separator.
        train = group_into_blocks(self.train, self.processing, length, text_column=column)
        stream = token_stream(self.eval, self.processing, text_column=column)
        if stream.numel() < length:
            raise ValueError(
                f"The {self.eval_split} text of --dataset {self.settings.dataset!r} has {stream.numel()} "
                f"tokens, fewer than one block of --max-length {length}."
            )
        self._lm_inputs(train, stream, length)


class ModelMaskedLM(ModelTask, MaskedLM):
    def _inputs(self) -> None:
        column, length = self._lm_text(), self.length
        if self.processing.mask_token is None:
            raise ValueError(f"--task masked-lm: the tokenizer of {self.source!r} has no mask token.")
        train = group_into_blocks(self.train, self.processing, length, text_column=column)
        blocks = group_into_blocks(self.eval, self.processing, length, text_column=column)
        if len(blocks) == 0:
            raise ValueError(f"The {self.eval_split} text is shorter than one block of --max-length {length}.")
        self._mlm_inputs(train, blocks, length)


class ModelSemanticSegmentation(ModelTask, SemanticSegmentation):
    def _inputs(self) -> None:
        if ANNOTATION_COLUMN not in self.train.column_names:
            raise ValueError(
                f"--task semantic-segmentation needs an `{ANNOTATION_COLUMN}` label-map column; --dataset "
                f"{self.settings.dataset!r} has {_columns_of(self.train)}."
            )
        image_column = self._image_column()
        self.labels = self._segmentation_labels()
        self._image_inputs(segmentation_transform(self.processing, image_column, ANNOTATION_COLUMN))


# task name -> the class of its task objects for a transformers model
MODEL_TASKS = {
    task.name: task
    for task in (
        ModelImageClassification,
        ModelTextClassification,
        ModelCausalLM,
        ModelMaskedLM,
        ModelSemanticSegmentation,
    )
}


def _columns_of(data) -> dict[str, str]:
    return {name: type(feature).__name__ for name, feature in data.features.items()}


def _columns(dataset) -> dict[str, str]:
    return _columns_of(dataset["train"])


__all__ = [
    "MODEL_TASKS",
    "TASKS",
    "CheckedModel",
    "ModelTask",
    "is_model_reference",
    "task_of_architecture",
    "task_of_columns",
]
