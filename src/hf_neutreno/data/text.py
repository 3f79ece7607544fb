"""Word-level WikiText pipeline: text from the Hub or a local folder, the standard tokenizer, contiguous blocks.

WikiText-103 (and WikiText-2) are already tokenised: words are separated by spaces, rare words are `<unk>`. The
standard preprocessing (Merity et al. 2016; Transformer-XL) splits each line on whitespace and appends `<eos>` at
its end, empty lines included; the token counts then equal the published ones (WikiText-2 train: 2,088,628).
`train_word_tokenizer` builds exactly that with the `tokenizers` library, as a `PreTrainedTokenizerFast` that
`save_pretrained` writes next to the model and `AutoTokenizer` reloads without this package.
"""

import os
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import torch
from datasets import Dataset, DatasetDict
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from .loading import load_dataset_splits

WIKITEXT_HUB_NAME = "Salesforce/wikitext"
WIKITEXT103_CONFIG = "wikitext-103-v1"
PAD_TOKEN, UNK_TOKEN, EOS_TOKEN = "<pad>", "<unk>", "<eos>"
TEXT_COLUMN = "text"


def load_wikitext(
    name_or_dir: str | os.PathLike = WIKITEXT_HUB_NAME, config_name: str | None = WIKITEXT103_CONFIG
) -> DatasetDict:
    """Every split of a WikiText dataset: a Hub name (`Salesforce/wikitext` with `config_name`, e.g.
    `wikitext-103-v1`), or a folder of Parquet files with the Hub's schema (one `text` row per line), such as
    a local copy of `Salesforce/wikitext`'s `wikitext-2-v1` (`hf_neutreno.data.loading.load_dataset_splits`)."""
    return load_dataset_splits(name_or_dir, config_name)


def _lines(texts: Dataset | Iterable[str], text_column: str = TEXT_COLUMN, batch_size: int = 10_000) -> Iterator[str]:
    if isinstance(texts, Dataset):
        for start in range(0, len(texts), batch_size):
            yield from texts[start : start + batch_size][text_column]
    else:
        yield from texts


def train_word_tokenizer(
    texts: Dataset | Iterable[str],
    max_vocab_size: int | None = None,
    min_frequency: int = 1,
    text_column: str = TEXT_COLUMN,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on `texts` (lines, or a dataset with a `text` column).

    Whitespace split (punctuation stays as the corpus wrote it), `<eos>` appended to every encoded line, `<unk>`
    for unknown words, `<pad>` for batching. Ids are `<pad>`=0, `<eos>`=1, then words by decreasing
    training frequency (`<unk>` among them, as the corpus writes it), which is the order an adaptive softmax's
    cutoffs assume. Use `max_vocab_size` (the number of tokens, `<pad>`, `<eos>` and `<unk>` included: `<unk>` takes
    the last place where the corpus does not rank it among the words kept) or `min_frequency` to cap the vocabulary
    (WikiText-103 has about 267k word types and needs neither).

    Prompts for generation should be encoded with `add_special_tokens=False`, or they end with `<eos>` (a line
    break in WikiText).
    """
    if max_vocab_size is not None and max_vocab_size < 4:
        raise ValueError(f"`max_vocab_size` must be >= 4 (the 3 special tokens and a word), got {max_vocab_size}.")
    if min_frequency < 1:
        raise ValueError(f"`min_frequency` must be >= 1, got {min_frequency}.")
    # `<unk>` is an ordinary (frequent) word of WikiText: let the trainer rank it by frequency with the others, and
    # add it at the end only for corpora that never write it. (Listing it as a special token as well leaves a
    # dangling id behind.)
    counter = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    counter.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # not Whitespace(): it would split "@-@" and "U.S."
    trainer = trainers.WordLevelTrainer(
        vocab_size=max_vocab_size or 2**31 - 1, min_frequency=min_frequency, special_tokens=[PAD_TOKEN, EOS_TOKEN]
    )
    counter.train_from_iterator(_lines(texts, text_column), trainer=trainer)
    vocab = counter.get_vocab()
    if UNK_TOKEN not in vocab:  # a corpus that never writes it (or ranks it below the cap): `<unk>` takes the last id
        if max_vocab_size is not None and len(vocab) >= max_vocab_size:
            del vocab[max(vocab, key=vocab.get)]  # the least frequent word kept, to stay within the cap
        vocab[UNK_TOKEN] = len(vocab)

    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # words joined by single spaces
    tokenizer.add_special_tokens([PAD_TOKEN, EOS_TOKEN])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}",
        special_tokens=[(EOS_TOKEN, vocab[EOS_TOKEN])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        model_input_names=["input_ids", "attention_mask"],
    )


def tokenize_lines(
    dataset: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str = TEXT_COLUMN,
    num_proc: int | None = None,
) -> Dataset:
    """One row of `input_ids` per line (with the tokenizer's `<eos>`), keeping the corpus order."""
    return dataset.map(
        lambda batch: tokenizer(batch[text_column], return_attention_mask=False),
        batched=True,
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        desc="Tokenizing",
    )


def _flat_ids(tokenized: Dataset) -> pa.Array:
    """All `input_ids` of a tokenised dataset, concatenated in row order, without Python lists."""
    if tokenized._indices is not None:  # a select/shuffle view: materialise the row order first
        tokenized = tokenized.flatten_indices()
    column = tokenized.data.column("input_ids")
    return pc.list_flatten(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)


def token_stream(
    dataset: Dataset, tokenizer: PreTrainedTokenizerBase, text_column: str = TEXT_COLUMN, max_tokens: int | None = None
) -> torch.Tensor:
    """The whole split as one 1-D tensor of token ids (the stream the paper's evaluation slides over)."""
    stream = torch.from_numpy(_flat_ids(tokenize_lines(dataset, tokenizer, text_column)).to_numpy().astype("int64"))
    return stream if max_tokens is None else stream[:max_tokens]


def group_into_blocks(
    dataset: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    block_size: int,
    text_column: str = TEXT_COLUMN,
    num_proc: int | None = None,
) -> Dataset:
    """Contiguous, non-overlapping blocks of `block_size` tokens of the concatenated corpus (an `input_ids` column).

    Block ``k`` holds tokens ``[k·block_size, (k+1)·block_size)`` of the stream `token_stream` returns; the tail
    shorter than a block is dropped. Use `DataCollatorForLanguageModeling(tokenizer, mlm=False)`, which sets
    `labels = input_ids` (the model shifts them), so each block trains `block_size - 1` predictions.
    """
    if block_size < 2:
        raise ValueError(f"`block_size` must be >= 2 (a token and its successor), got {block_size}.")
    flat = _flat_ids(tokenize_lines(dataset, tokenizer, text_column, num_proc))
    usable = len(flat) // block_size * block_size
    blocks = pa.FixedSizeListArray.from_arrays(flat.slice(0, usable), block_size)
    return Dataset(pa.table({"input_ids": blocks}))


__all__ = [
    "EOS_TOKEN",
    "PAD_TOKEN",
    "UNK_TOKEN",
    "WIKITEXT103_CONFIG",
    "WIKITEXT_HUB_NAME",
    "group_into_blocks",
    "load_wikitext",
    "token_stream",
    "tokenize_lines",
    "train_word_tokenizer",
]
