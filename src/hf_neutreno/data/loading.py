"""Datasets: one loader that resolves where a dataset comes from, and the image-classification helpers.

`load_dataset_splits` is the one place that tells a Hub dataset name from a local folder of Parquet files (named as
on the Hub), an `imagefolder` tree and the built-in `digits`; `load_image_dataset` (images) and
`hf_neutreno.data.text.load_wikitext` (text) load through it.
"""

import json
import os
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, load_dataset
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

from ..checkpoints import check_source
from ..names import (
    BUILTIN_DIGITS,  # the default dataset of `hf-neutreno compare`, shown without importing datasets
)

LABELS_FILE = "id2label.json"  # a local dataset folder's class names: {label id: name}


def load_dataset_splits(name_or_dir: str | os.PathLike, config_name: str | None = None) -> DatasetDict:
    """Every split of a dataset of any kind.

    `name_or_dir` is `"digits"` (scikit-learn's bundled 8×8 handwritten digits, no download), a local folder of
    Parquet files named like the Hub's (`train-00000-of-00001.parquet`, at the top or one level down) or of CSV or
    JSON-lines files named by split (`train.csv`, `test.jsonl`), a local `imagefolder` tree (`train/<label>/*.png`),
    or a Hub dataset name (with `config_name`). A local name that is not a folder (`checkpoints.is_local`: the one
    rule for models and datasets), and a folder without data files (a loading script is not run), raise `ValueError`.
    """
    if str(name_or_dir) == BUILTIN_DIGITS:
        return load_digits()
    path = Path(name_or_dir)
    if path.is_dir():
        builder = _local_builder(path)
        if builder is None:
            scripts = sorted(file.name for file in path.glob("*.py"))
            found = f"only a loading script ({', '.join(scripts)}), which is not run" if scripts else "no data files"
            raise ValueError(
                f"Dataset folder {str(name_or_dir)!r} holds {found}. A dataset folder holds the data itself: Parquet "
                "files named as on the Hub (train-00000-of-00001.parquet, test-...), CSV or JSON-lines files named by "
                "split (train.csv, test.jsonl), or an image folder (train/<label>/*.png)."
            )
        return load_dataset(builder, data_dir=str(path))
    check_source(name_or_dir, "dataset")  # a local name that is not a folder: said here, not by the Hub client
    return load_dataset(str(name_or_dir), config_name)


def _local_builder(path: Path) -> str | None:
    """The `datasets` builder of a local folder's data files (at the top or one level down), None if it has none.
    Parquet first, then images (an image folder may hold metadata.csv/.jsonl), then CSV, then JSON lines."""

    def has(*suffixes: str) -> bool:
        files = (file for levels in ("*", "*/*") for file in path.glob(levels))
        return any(file.suffix.lower() in suffixes and file.name != LABELS_FILE for file in files)

    if has(".parquet"):
        return "parquet"
    images = set(ImageFolder.EXTENSIONS)  # the image files `imagefolder` reads
    if any(file.suffix.lower() in images for file in path.rglob("*")):
        return "imagefolder"
    return "csv" if has(".csv") else "json" if has(".jsonl", ".json") else None


def load_image_dataset(name_or_dir: str | os.PathLike, config_name: str | None = None) -> DatasetDict:
    """Every split of an image dataset (classification or segmentation): a Hub name (`uoft-cs/cifar10`), a folder of
    Parquet files with the Hub's columns, an `imagefolder` tree, or `"digits"` (see `load_dataset_splits`)."""
    return load_dataset_splits(name_or_dir, config_name)


def read_id2label(path: str | os.PathLike, flag: str = "--id2label-file") -> dict[int, str]:
    """A segmentation dataset's class names, {label id: name} for ids 0, 1, ..., K − 1 (K >= 2), from a JSON file;
    a malformed one raises `ValueError` naming `flag` and the path."""
    try:
        id2label = {int(k): str(v) for k, v in json.loads(Path(path).read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{flag} {str(path)!r} is not a readable JSON object of label id -> name ({error}).") from None
    if sorted(id2label) != list(range(len(id2label))) or len(id2label) < 2:
        raise ValueError(
            f"{flag} {str(path)!r} must name the classes 0, 1, ..., K - 1 (K >= 2); it has keys "
            f"{sorted(id2label)[:12]}."
        )
    return id2label


def get_split(dataset: DatasetDict, split: str) -> Dataset:
    if split not in dataset:
        raise ValueError(f"Unknown split {split!r}; the dataset has {sorted(dataset)}.")
    return dataset[split]


def image_and_label_columns(dataset: Dataset | DatasetDict) -> tuple[str, str]:
    """The first `Image` column and the first `ClassLabel` column (`img`/`label` for CIFAR-10)."""
    features = next(iter(dataset.values())).features if isinstance(dataset, DatasetDict) else dataset.features
    image = next((name for name, f in features.items() if isinstance(f, Image)), None)
    label = next((name for name, f in features.items() if isinstance(f, ClassLabel)), None)
    if image is None or label is None:
        raise ValueError(
            "An image-classification dataset needs an Image column and a ClassLabel column; "
            f"this one has {dict((n, type(f).__name__) for n, f in features.items())}."
        )
    return image, label


def label_names(dataset: Dataset | DatasetDict) -> list[str]:
    features = next(iter(dataset.values())).features if isinstance(dataset, DatasetDict) else dataset.features
    _, label = image_and_label_columns(dataset)
    return list(features[label].names)


def subset(dataset: Dataset, fraction_or_count: float | int | None, seed: int = 0) -> Dataset:
    """A seeded random subset: a fraction in (0, 1] or a number of rows; None keeps everything."""
    if fraction_or_count is None:
        return dataset
    n = len(dataset)
    count = int(round(fraction_or_count * n)) if isinstance(fraction_or_count, float) else int(fraction_or_count)
    if not 0 < count <= n:
        raise ValueError(f"Cannot take {fraction_or_count} rows of a dataset of {n}.")
    return dataset.shuffle(seed=seed).select(range(count)) if count < n else dataset


def capped(dataset: Dataset, count: int | None, seed: int = 0) -> Dataset:
    """At most `count` rows (`subset`'s seeded choice when there are more); None keeps everything."""
    return subset(dataset, None if count is None else min(count, len(dataset)), seed)


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> DatasetDict:
    """scikit-learn's 1,797 8×8 digit images (it ships them) as a `DatasetDict` with the Hub's image schema."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as err:
        raise ImportError("The built-in `digits` dataset comes from scikit-learn: pip install scikit-learn") from err
    import numpy as np
    from PIL import Image as PILImage

    digits = sklearn_digits()
    images = [PILImage.fromarray((image * (255 / 16)).astype(np.uint8), mode="L") for image in digits.images]
    features = Features({"image": Image(), "label": ClassLabel(names=[str(i) for i in range(10)])})
    full = Dataset.from_dict({"image": images, "label": digits.target.tolist()}, features=features)
    split = full.train_test_split(test_size=test_fraction, seed=seed, stratify_by_column="label")
    return DatasetDict(train=split["train"], test=split["test"])
