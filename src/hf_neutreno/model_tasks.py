"""`hf-neutreno compare` on any transformers model: the task comes from the model's head and the dataset's columns.

    task = model_task(settings)          # checks the model (adaptable? processor?) before any data is loaded
    task.prepare(dataset)                # columns, labels, splits; ValueError naming the flag to set
    model = task.build("value-residual", coefficient=0.5)   # `paired_model` seeds it

Tasks (`TASKS`): image classification (image + label), text classification (text, or a text pair, + label), causal
language modelling (text), masked language modelling (text, a model with an MLM head) and semantic segmentation
(image + annotation map). A pretrained model is fine-tuned from its weights; its classification head is kept when
its labels are the dataset's, else a new one is sized to the dataset's labels, drawn under the run's seed
(`hf_neutreno.experiment.paired_model`), so that every variant of a seed starts from the same head.
"""

import math
from pathlib import Path

import torch
import transformers
from datasets import ClassLabel, Features
from transformers import AutoConfig, DataCollatorForLanguageModeling, DataCollatorWithPadding, Trainer
from transformers.models.auto import modeling_auto

from . import models  # noqa: F401  (registers this package's models: --model may be a folder saved by one)
from .compare_tasks import ANNOTATION_COLUMN, EVAL_SPLITS
from .data import LABELS_FILE, is_local_path, read_id2label, subset
from .image_transforms import collate_images, image_transform
from .lm_eval import block_eval
from .metrics import accuracy_metrics
from .names import TASK_SPECS
from .segmentation import segmentation_transform, single_scale_mean_iou
from .text_data import group_into_blocks, token_stream
from .value_path import _check_adaptable, _refuse_built_in_term
from .variants import VARIANTS, build_variant

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
MLM_PROBABILITY, MLM_EVAL_SEED = 0.15, 0  # BERT's masking; the evaluation masks are drawn once, for every variant
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


def is_model_reference(name: str) -> bool:
    """Whether `--model` names a transformers model (a folder or a Hub id) rather than one of this package's presets."""
    return is_local_path(name) or "/" in name


class ModelTask:
    """A transformers model (`settings.model`: a Hub id or a folder) fine-tuned, or trained from scratch, on a task."""

    preset = None

    def __init__(self, settings):
        self.settings = settings
        self.source = settings.model
        path = Path(settings.model).expanduser()
        if is_local_path(settings.model) and not (path / "config.json").is_file():
            raise ValueError(
                f"--model {settings.model!r}: "
                + ("no such folder." if not path.exists() else "the folder has no config.json (a saved model).")
            )
        try:
            self.config = AutoConfig.from_pretrained(settings.model)
        except Exception as error:  # noqa: BLE001 - not found, offline, a model type this transformers lacks
            raise ValueError(
                f"--model {settings.model!r} could not be loaded ({type(error).__name__}: {str(error).strip()[:300]}). "
                "It must be a preset, a local folder of a saved transformers model, or a Hub model id (owner/name)."
            ) from None
        self.task = settings.task or task_of_architecture(self.config)
        self._check_adaptable()

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
        try:
            _refuse_built_in_term(model)
            _check_adaptable(model)
        except ValueError as error:
            raise ValueError(
                f"--model {self.source!r}: --variants {','.join(paths)} need a value path, which "
                f"{type(model).__name__} cannot take: {error} Supported: transformers models with one stack of "
                "self-attention layers that go through transformers' attention interface (Llama, Qwen2, Mistral "
                "without sliding windows, GPT-2, BERT, RoBERTa, ViT, DeiT, ...)."
            ) from None

    # --- data ---------------------------------------------------------------------------------------------------

    def prepare(self, dataset) -> None:
        """Pick the task (if the model's head did not), the columns and labels, the splits; load the processing."""
        settings = self.settings
        if self.task is None:
            self.task = task_of_columns(dataset["train"].features, self.config)
            if self.task is None:
                raise ValueError(
                    f"--dataset {settings.dataset!r} (columns {_columns(dataset)}) fits no task for the base model "
                    f"{settings.model!r}: give --task, one of {list(TASKS)}."
                )
            self._check_adaptable()
        self.name = self.task
        self.length = self._max_length()
        self.kind_of_task = TASKS[self.task]
        self.auto_class, self.processing_class = self.kind_of_task.auto_class, self.kind_of_task.processing_class
        self.metric = self.kind_of_task.metric
        self.processing = self._load_processing()
        self.train, self.eval, self.eval_split = self._splits(dataset)
        self.kind_of_task.prepare(self)

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
        if self.kind_of_task.labelled and self.task != SemanticSegmentation.name:
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
        train = subset(train, min(settings.max_train_samples or len(train), len(train)), settings.seed)
        evaluation = subset(
            evaluation, min(settings.max_eval_samples or len(evaluation), len(evaluation)), settings.seed
        )
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
        if is_local_path(self.settings.dataset) and (Path(self.settings.dataset) / LABELS_FILE).is_file():
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
    def kind(self) -> str:
        return f"a {self.task} model"

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
        if not self.kind_of_task.labelled:
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
            model = auto_class.from_pretrained(self.source, config=config, ignore_mismatched_sizes=self.new_head())
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
        if variant == "neutreno" and getattr(self, "native_neutreno", False):
            return self._load(coefficient)
        return build_variant(self._load(None), variant, coefficient)

    # --- training and scoring -----------------------------------------------------------------------------------

    def trainer_arguments(self) -> dict:
        arguments = {"data_collator": self.collator}
        if self.metric == "accuracy":
            arguments["compute_metrics"] = accuracy_metrics
        return arguments

    def score(self, trainer: Trainer) -> float:
        return self.kind_of_task.score(self, trainer)

    def probe_batches(self) -> list[dict]:
        """The first --probe-samples evaluation inputs, in batches: what the token cosine is measured on."""
        return self.kind_of_task.probe_batches(self)

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


# --- the tasks: data, model head, metric ------------------------------------------------------------------------


class _Task:
    """What one task does with a `ModelTask`'s splits: `prepare` turns them into model inputs (and sets `collator`,
    `sizes`, `summary_data`), `score` scores a trained model, `probe_batches` gives the inputs the token cosine is
    measured on. `auto_class` loads the model with its head, `processing_class` its tokenizer or image processor;
    `labelled`: the head is sized to the dataset's labels."""

    name = auto_class = processing_class = metric = ""
    labelled = False

    @staticmethod
    def probe_batches(task) -> list[dict]:
        rows = [task.eval[i] for i in range(min(task.settings.probe_samples, len(task.eval)))]
        size = task.settings.batch_size
        return [{"pixel_values": collate_images(rows[i : i + size])["pixel_values"]} for i in range(0, len(rows), size)]


def _image_splits(task, transform) -> None:
    """What the image tasks share: both splits transformed on the fly, stacked by `collate_images`."""
    task.train.set_transform(transform)
    task.eval.set_transform(transform)
    task.collator = collate_images
    task.sizes = {"train_images": len(task.train), "eval_images": len(task.eval)}
    task.summary_data = (
        f"{len(task.train)} train / {len(task.eval)} {task.eval_split} images, {len(task.labels)} classes"
    )


class ImageClassification(_Task):
    name = "image-classification"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True

    @staticmethod
    def prepare(task) -> None:
        image_column = task._image_column()
        task._labels()
        _image_splits(task, image_transform(task.processing, image_column, task.label_column))

    @staticmethod
    def score(task, trainer: Trainer) -> float:
        return float(trainer.evaluate(task.eval)["eval_accuracy"])


class TextClassification(_Task):
    name = "text-classification"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True

    @staticmethod
    def prepare(task) -> None:
        columns = task._text_columns()
        task._refuse_empty_text(columns)
        task._labels()
        tokenizer, label, length = task.processing, task.label_column, task.length

        def encode(batch):
            encoded = tokenizer(*(batch[c] for c in columns), truncation=True, max_length=length)
            encoded["labels"] = batch[label]
            return encoded

        remove = task.train.column_names
        task.train = task.train.map(encode, batched=True, remove_columns=remove, desc="Tokenizing")
        task.eval = task.eval.map(encode, batched=True, remove_columns=remove, desc="Tokenizing")
        task.collator = DataCollatorWithPadding(tokenizer)
        task.sizes = {"train_examples": len(task.train), "eval_examples": len(task.eval), "max_length": length}
        task.summary_data = (
            f"{len(task.train)} train / {len(task.eval)} {task.eval_split} examples of {' + '.join(columns)}, "
            f"{len(task.labels)} classes, at most {length} tokens"
        )

    score = ImageClassification.score

    @staticmethod
    def probe_batches(task) -> list[dict]:
        rows = [task.eval[i] for i in range(min(task.settings.probe_samples, len(task.eval)))]
        pad, size = DataCollatorWithPadding(task.processing), task.settings.batch_size
        keep = ("input_ids", "attention_mask")  # the padding mask: the cosine leaves padding out
        return [
            dict(pad([{k: v for k, v in row.items() if k in keep} for row in rows[start : start + size]]))
            for start in range(0, len(rows), size)
        ]


class CausalLM(_Task):
    name = "causal-lm"
    auto_class, processing_class, metric = TASK_SPECS[name]

    @staticmethod
    def prepare(task) -> None:
        column, length = task._lm_text(), task.length
        # Rows are concatenated into one stream and cut into blocks: an empty row adds no tokens (as WikiText's
        # paragraph breaks), so nothing is dropped.
        task.train = group_into_blocks(task.train, task.processing, length, text_column=column)
        task.stream = token_stream(task.eval, task.processing, text_column=column)
        if task.stream.numel() < length:
            raise ValueError(
                f"The {task.eval_split} text of --dataset {task.settings.dataset!r} has {task.stream.numel()} "
                f"tokens, fewer than one block of --max-length {length}."
            )
        task.collator = DataCollatorForLanguageModeling(task.processing, mlm=False)
        task.sizes = {"train_blocks": len(task.train), "block_size": length, "eval_tokens": task.stream.numel()}
        task.summary_data = (
            f"{len(task.train)} train blocks of {length} tokens, {task.stream.numel()} {task.eval_split} tokens"
        )

    @staticmethod
    def score(task, trainer: Trainer) -> float:
        progress = task.settings.verbose and not task.settings.no_progress  # the training bar is the run's one bar
        return block_eval(trainer.model, task.stream, task.length, task.settings.batch_size, progress).perplexity

    @staticmethod
    def probe_batches(task) -> list[dict]:
        blocks = min(task.settings.probe_samples, task.stream.numel() // task.length)
        ids = task.stream[: blocks * task.length].view(blocks, task.length)
        return [{"input_ids": batch} for batch in ids.split(task.settings.batch_size)]


class MaskedLM(_Task):
    name = "masked-lm"
    auto_class, processing_class, metric = TASK_SPECS[name]

    @staticmethod
    def prepare(task) -> None:
        column, length = task._lm_text(), task.length
        if task.processing.mask_token is None:
            raise ValueError(f"--task masked-lm: the tokenizer of {task.source!r} has no mask token.")
        task.train = group_into_blocks(task.train, task.processing, length, text_column=column)
        blocks = group_into_blocks(task.eval, task.processing, length, text_column=column)
        if len(blocks) == 0:
            raise ValueError(f"The {task.eval_split} text is shorter than one block of --max-length {length}.")
        task.collator = DataCollatorForLanguageModeling(task.processing, mlm=True, mlm_probability=MLM_PROBABILITY)
        with torch.random.fork_rng(devices=[]):  # one draw of masks, the same for every variant and seed
            torch.manual_seed(MLM_EVAL_SEED)
            masked = task.collator([{"input_ids": ids} for ids in blocks["input_ids"]])
        task.eval = [{"input_ids": ids, "labels": labels} for ids, labels in zip(masked["input_ids"], masked["labels"])]
        task.sizes = {"train_blocks": len(task.train), "block_size": length, "eval_blocks": len(task.eval)}
        task.summary_data = (
            f"{len(task.train)} train blocks of {length} tokens, {len(task.eval)} {task.eval_split} blocks with "
            f"{MLM_PROBABILITY:.0%} of tokens masked (seed {MLM_EVAL_SEED})"
        )

    @staticmethod
    def score(task, trainer: Trainer) -> float:
        return math.exp(trainer.evaluate(task.eval)["eval_loss"])

    @staticmethod
    def probe_batches(task) -> list[dict]:
        rows = task.eval[: task.settings.probe_samples]
        size = task.settings.batch_size
        return [
            {"input_ids": torch.stack([row["input_ids"] for row in rows[i : i + size]])}
            for i in range(0, len(rows), size)
        ]


class SemanticSegmentation(_Task):
    name = "semantic-segmentation"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True

    @staticmethod
    def prepare(task) -> None:
        if ANNOTATION_COLUMN not in task.train.column_names:
            raise ValueError(
                f"--task semantic-segmentation needs an `{ANNOTATION_COLUMN}` label-map column; --dataset "
                f"{task.settings.dataset!r} has {_columns_of(task.train)}."
            )
        image_column = task._image_column()
        task.labels = task._segmentation_labels()
        _image_splits(task, segmentation_transform(task.processing, image_column, ANNOTATION_COLUMN))

    @staticmethod
    def score(task, trainer: Trainer) -> float:
        return single_scale_mean_iou(trainer.model, task.eval, task.settings.batch_size)


TASKS = {
    task.name: task for task in (ImageClassification, TextClassification, CausalLM, MaskedLM, SemanticSegmentation)
}


def _columns_of(data) -> dict[str, str]:
    return {name: type(feature).__name__ for name, feature in data.features.items()}


def _columns(dataset) -> dict[str, str]:
    return _columns_of(dataset["train"])


__all__ = [
    "TASKS",
    "CausalLM",
    "ImageClassification",
    "MaskedLM",
    "ModelTask",
    "SemanticSegmentation",
    "TextClassification",
    "is_model_reference",
    "task_of_architecture",
    "task_of_columns",
]
