"""`hf_neutreno.data.loading.load_dataset_splits`, the one place that resolves where a dataset comes from: the built-in
`digits`, a folder of Parquet files named as on the Hub, an imagefolder tree, a missing folder; and `read_id2label`."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import ClassLabel, Image
from PIL import Image as PILImage

from hf_neutreno.data.loading import load_dataset_splits, load_image_dataset, read_id2label
from hf_neutreno.data.text import load_wikitext


def test_each_kind_of_source_resolves_to_its_loader(tmp_path):
    digits = load_dataset_splits("digits")
    assert sorted(digits) == ["test", "train"] and len(digits["train"]) + len(digits["test"]) == 1797

    parquet = tmp_path / "text"
    parquet.mkdir()
    for split, lines in (("train", ["a b", ""]), ("validation", ["c"])):
        pq.write_table(pa.table({"text": lines}), parquet / f"{split}-00000-of-00001.parquet")
    text = load_wikitext(parquet)  # text loads through the same resolver
    assert text["train"]["text"] == ["a b", ""] and text["validation"]["text"] == ["c"]

    tree = tmp_path / "images"
    for label in ("cat", "dog"):
        (tree / "train" / label).mkdir(parents=True)
        PILImage.new("RGB", (4, 4), "white" if label == "dog" else "black").save(tree / "train" / label / "0.png")
    images = load_image_dataset(tree)
    assert isinstance(images["train"].features["image"], Image)
    assert images["train"].features["label"] == ClassLabel(names=["cat", "dog"])

    for missing in (tmp_path / "nowhere", "./nowhere", "data.parquet"):
        with pytest.raises(ValueError, match="does not exist"):
            load_dataset_splits(missing)


def test_read_id2label_names_the_flag_and_the_path(tmp_path):
    path = tmp_path / "id2label.json"
    path.write_text(json.dumps({"1": "item", "0": "background"}))
    assert read_id2label(path) == {0: "background", 1: "item"}
    path.write_text(json.dumps({"0": "background", "2": "item"}))
    with pytest.raises(ValueError, match=rf"--id2label-file '{path}' must name the classes 0, 1, ..., K - 1"):
        read_id2label(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"--dataset '{path}' is not a readable JSON object"):
        read_id2label(path, flag="--dataset")
