"""The tasks `hf-neutreno compare` trains on, once for a preset and for any transformers model: each one turns its
splits into model inputs, names the head that predicts them (`auto_class`) and scores a trained model (`metric`).

    Task                       trainer_arguments, score (accuracy), probe_batches (images)
    ├── ImageClassification    image + label
    ├── TextClassification     text (or a text pair) + label
    ├── CausalLM               text, in blocks; perplexity over the evaluation stream
    ├── MaskedLM               text, in blocks, 15 % masked; perplexity
    └── SemanticSegmentation   image + label map; mean IoU

Where the model, its tokenizer or image processor and the data's columns come from is the other half of a task
object, a source mixed in before the task: `hf_neutreno.engine.preset_tasks.PresetTask` (a preset of this package,
trained from scratch) or `hf_neutreno.engine.model_tasks.ModelTask` (a transformers model). The source picks the splits
and columns (`train`, `eval`, `eval_split`, `processing`, `settings`) and calls the task's `_*_inputs`; `compare` then
uses `train`, `processing`, `trainer_arguments()`, `score(trainer)` and `probe_batches()` alike for every task object.
"""

import math
from collections import Counter

import torch
from datasets.utils.tqdm import tqdm
from torch.utils.data import StackDataset
from transformers import DataCollatorForLanguageModeling, DataCollatorWithPadding, Trainer

from ..data.image_transforms import collate_images
from ..data.lm_eval import block_eval
from ..data.scores import accuracy_metrics
from ..data.segmentation import single_scale_mean_iou
from ..names import TASK_SPECS

EVAL_SPLITS = ("test", "validation")  # the first one the dataset has
MLM_PROBABILITY, MLM_EVAL_SEED = 0.15, 0  # BERT's masking; the evaluation masks are drawn once, for every variant
PREPROCESSED_BYTES = 512 * 2**20  # image inputs up to this size are made once and kept in memory (`_image_inputs`)
PREPROCESSING_CHUNK = 1000  # images decoded and processed at once while they are made


class Task:
    """One task's data, head and metric. `auto_class` loads a model with its head, `processing_class` its tokenizer
    or image processor; `labelled`: the head is sized to the dataset's labels. The `_*_inputs` methods set `train`
    and `eval` (model inputs), `collator`, `sizes` (results.json's `data`) and `summary_data` (the summary line)."""

    name = auto_class = processing_class = metric = ""
    labelled = False

    def trainer_arguments(self) -> dict:
        arguments = {"data_collator": self.collator}
        if self.metric == "accuracy":
            arguments["compute_metrics"] = accuracy_metrics
        return arguments

    def score(self, trainer: Trainer) -> float:
        return float(trainer.evaluate(self.eval)["eval_accuracy"])

    def probe_batches(self) -> list[dict]:
        """The first --probe-samples evaluation inputs, in batches: what the token cosine is measured on."""
        count, size = min(self.settings.probe_samples, len(self.eval)), self.settings.batch_size
        return [{"pixel_values": self.eval[i : min(i + size, count)]["pixel_values"]} for i in range(0, count, size)]

    def _image_inputs(self, transform, label_column: str | None = None) -> None:
        """Both splits made model inputs by `transform` (deterministic: compare does not augment), stacked by
        `collate_images`. Where the inputs of both splits fit in `PREPROCESSED_BYTES`, they are made once and kept as
        tensors, for every variant and seed: decoding and resizing every batch again took a quarter of the main job's
        training time. Larger ones are made on the fly, batch by batch. `label_column`: a classification's labels,
        whose most common class's share of the evaluation split goes into `sizes` (`majority_share`)."""
        majority = majority_share(self.eval[label_column]) if label_column is not None else None
        example = transform(self.train[:1])
        nbytes = sum(tensor[0].nbytes for tensor in example.values()) * (len(self.train) + len(self.eval))
        if nbytes <= PREPROCESSED_BYTES:
            self.train, self.eval = (_made_once(split, transform) for split in (self.train, self.eval))
        else:
            self.train.set_transform(transform)
            self.eval.set_transform(transform)
        self.collator = collate_images
        self.sizes = {"train_images": len(self.train), "eval_images": len(self.eval), "classes": len(self.labels)}
        if majority is not None:
            self.sizes["majority"] = majority
        self.summary_data = (
            f"{len(self.train)} train / {len(self.eval)} {self.eval_split} images, {len(self.labels)} classes"
        )


def majority_share(labels) -> float:
    """The share of the most common label: the accuracy of always predicting it, chance on imbalanced data."""
    labels = list(labels)
    return max(Counter(labels).values()) / len(labels) if labels else 0.0


def _made_once(split, transform) -> StackDataset:
    """`transform` over all of `split`, a chunk of images at a time (what is decoded at once stays bounded), as one
    dataset of tensors. The bar is datasets' own: it shows where datasets' bars do (compare: with --verbose)."""
    parts = []
    with tqdm(total=len(split), desc="Preparing images", unit="image") as bar:
        for start in range(0, len(split), PREPROCESSING_CHUNK):
            parts.append(transform(split[start : start + PREPROCESSING_CHUNK]))
            bar.update(min(PREPROCESSING_CHUNK, len(split) - start))
    return StackDataset(**{key: torch.cat([part[key] for part in parts]) for key in parts[0]})


class ImageClassification(Task):
    name = "image-classification"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True


class TextClassification(Task):
    name = "text-classification"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True

    def _text_inputs(self, columns: list[str], label_column: str, length: int) -> None:
        """Both splits tokenized: the text of `columns` (one, or a pair) truncated to `length` tokens, and labels."""
        tokenizer = self.processing

        def encode(batch):
            encoded = tokenizer(*(batch[c] for c in columns), truncation=True, max_length=length)
            encoded["labels"] = batch[label_column]
            return encoded

        majority = majority_share(self.eval[label_column])
        remove = self.train.column_names
        self.train = self.train.map(encode, batched=True, remove_columns=remove, desc="Tokenizing")
        self.eval = self.eval.map(encode, batched=True, remove_columns=remove, desc="Tokenizing")
        self.collator = DataCollatorWithPadding(tokenizer)
        self.sizes = {
            "train_examples": len(self.train),
            "eval_examples": len(self.eval),
            "max_length": length,
            "classes": len(self.labels),
            "majority": majority,
        }
        self.summary_data = (
            f"{len(self.train)} train / {len(self.eval)} {self.eval_split} examples of {' + '.join(columns)}, "
            f"{len(self.labels)} classes, at most {length} tokens"
        )

    def probe_batches(self) -> list[dict]:
        rows = [self.eval[i] for i in range(min(self.settings.probe_samples, len(self.eval)))]
        pad, size = DataCollatorWithPadding(self.processing), self.settings.batch_size
        keep = ("input_ids", "attention_mask")  # the padding mask: the cosine leaves padding out
        return [
            dict(pad([{k: v for k, v in row.items() if k in keep} for row in rows[start : start + size]]))
            for start in range(0, len(rows), size)
        ]


class CausalLM(Task):
    name = "causal-lm"
    auto_class, processing_class, metric = TASK_SPECS[name]

    def _lm_inputs(self, train_blocks, stream: torch.Tensor, block_size: int) -> None:
        """`train_blocks` to train on; scored on `stream`, the evaluation text as one token stream, in blocks."""
        self.train, self.stream, self.block_size = train_blocks, stream, block_size
        self.collator = DataCollatorForLanguageModeling(self.processing, mlm=False)
        self.sizes = {
            "train_blocks": len(self.train),
            "block_size": block_size,
            "eval_tokens": stream.numel(),
            "vocabulary": len(self.processing),
        }
        self.summary_data = (
            f"{len(self.train)} train blocks of {block_size} tokens, {stream.numel()} {self.eval_split} tokens"
        )

    def score(self, trainer: Trainer) -> float:
        progress = self.settings.verbose and not self.settings.no_progress  # the training bar is the run's one bar
        return block_eval(trainer.model, self.stream, self.block_size, self.settings.batch_size, progress).perplexity

    def probe_batches(self) -> list[dict]:
        count = min(self.settings.probe_samples, self.stream.numel() // self.block_size)
        blocks = self.stream[: count * self.block_size].view(count, self.block_size)
        return [{"input_ids": batch} for batch in blocks.split(self.settings.batch_size)]


class MaskedLM(Task):
    name = "masked-lm"
    auto_class, processing_class, metric = TASK_SPECS[name]

    def _mlm_inputs(self, train_blocks, eval_blocks, block_size: int) -> None:
        """`train_blocks` masked afresh each step; `eval_blocks` masked once (`MLM_EVAL_SEED`), for every variant."""
        self.train = train_blocks
        self.collator = DataCollatorForLanguageModeling(self.processing, mlm=True, mlm_probability=MLM_PROBABILITY)
        with torch.random.fork_rng(devices=[]):  # one draw of masks, the same for every variant and seed
            torch.manual_seed(MLM_EVAL_SEED)
            masked = self.collator([{"input_ids": ids} for ids in eval_blocks["input_ids"]])
        self.eval = [{"input_ids": ids, "labels": labels} for ids, labels in zip(masked["input_ids"], masked["labels"])]
        self.sizes = {
            "train_blocks": len(self.train),
            "block_size": block_size,
            "eval_blocks": len(self.eval),
            "vocabulary": len(self.processing),
        }
        self.summary_data = (
            f"{len(self.train)} train blocks of {block_size} tokens, {len(self.eval)} {self.eval_split} blocks with "
            f"{MLM_PROBABILITY:.0%} of tokens masked (seed {MLM_EVAL_SEED})"
        )

    def score(self, trainer: Trainer) -> float:
        """Perplexity of the masked tokens: exp(summed negative log-likelihood / number of masked tokens) over every
        evaluation block, each masked token weighted once, as `block_eval` weights the tokens of a stream.
        (`trainer.evaluate`'s `eval_loss` is a mean of per-batch means: a batch with few masked tokens would weigh as
        much as one with many.)"""
        model = trainer.model
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        nll, masked = 0.0, 0
        size = self.settings.batch_size
        try:
            with torch.no_grad():
                for start in range(0, len(self.eval), size):
                    rows = self.eval[start : start + size]
                    input_ids = torch.stack([row["input_ids"] for row in rows]).to(device)
                    labels = torch.stack([row["labels"] for row in rows]).to(device)
                    logits = model(input_ids=input_ids).logits.float()
                    nll += torch.nn.functional.cross_entropy(
                        logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
                    ).item()
                    masked += int((labels != -100).sum())
        finally:
            model.train(was_training)
        if not masked:
            raise ValueError(f"The {self.eval_split} blocks have no masked token to score.")
        return math.exp(nll / masked)

    def probe_batches(self) -> list[dict]:
        rows = self.eval[: self.settings.probe_samples]
        size = self.settings.batch_size
        return [
            {"input_ids": torch.stack([row["input_ids"] for row in rows[i : i + size]])}
            for i in range(0, len(rows), size)
        ]


class SemanticSegmentation(Task):
    name = "semantic-segmentation"
    auto_class, processing_class, metric = TASK_SPECS[name]
    labelled = True

    def score(self, trainer: Trainer) -> float:
        """Mean IoU over the evaluation images at the model's input size (single scale)."""
        return single_scale_mean_iou(trainer.model, self.eval, self.settings.batch_size)


TASKS = {
    task.name: task for task in (ImageClassification, TextClassification, CausalLM, MaskedLM, SemanticSegmentation)
}

__all__ = [
    "TASKS",
    "CausalLM",
    "ImageClassification",
    "MaskedLM",
    "SemanticSegmentation",
    "Task",
    "TextClassification",
]
