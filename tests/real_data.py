"""Where the tests find the real datasets: the local mirror, else the same datasets from the Hub, else a skip.

The mirror (`HF_NEUTRENO_DATA`, by default a `shared/data` folder beside the repository) holds Parquet files laid out as
`<folder>/<split>-00000-of-00001.parquet`, with the Hub datasets' columns. A clone without it fetches those datasets
from the Hub once, by name (and builds `fashion-scenes`, which is not on the Hub, from Fashion-MNIST as the mirror
did), into the same layout under `HF_NEUTRENO_TEST_DATA` (default `~/.cache/hf-neutreno/test-data`), in a child
process: the tests themselves always run offline. Whether the Hub answers is asked first, with a short timeout, so that
a machine without a network skips at once instead of waiting on the fetch. Where the Hub cannot be reached, or the
user set HF_HUB_OFFLINE=1, the tests that need data skip with the reason.

    python tests/real_data.py FOLDER     # the fetch itself (what the tests run in the child process)
"""

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

REPO_ROOT = Path(__file__).resolve().parents[1]
MIRROR_NAMED = bool(os.environ.get("HF_NEUTRENO_DATA"))  # by the user (else the default beside the repository)
MIRROR = Path(os.environ.get("HF_NEUTRENO_DATA") or REPO_ROOT.parent / "shared" / "data")
CACHE = Path(os.environ.get("HF_NEUTRENO_TEST_DATA", Path.home() / ".cache" / "hf-neutreno" / "test-data"))
# Mirror folder: (Hub dataset, configuration).
HUB_DATASETS = {
    "cifar10": ("uoft-cs/cifar10", None),
    "fashion_mnist": ("zalando-datasets/fashion_mnist", None),
    "wikitext-2-v1": ("Salesforce/wikitext", "wikitext-2-v1"),
}
# Mirror folders that are not on the Hub: built from a fetched one, exactly as the mirror's own script built them.
DERIVED = {"fashion-scenes": "fashion_mnist"}
FASHION_SCENES = {"train": 4000, "validation": 1000}  # scenes per split, as in the mirror
FETCH_TIMEOUT = 1800  # seconds: three datasets, about 120 MB
REACH_TIMEOUT = 5  # seconds the Hub has to answer before the machine counts as offline
FASHION_NAMES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def _offline(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "on", "yes", "true")


def fetch(folder: Path, load: Callable | None = None) -> None:
    """Write every Hub dataset of `HUB_DATASETS` into `folder` in the mirror's layout (skipping those already
    there); `load` is `datasets.load_dataset` (a parameter so that a test can stand in for the Hub)."""
    if load is None:
        from datasets import load_dataset as load
    for name, (repo, config) in HUB_DATASETS.items():
        target = folder / name
        if target.is_dir() and any(target.glob("*.parquet")):
            continue
        dataset = load(repo, config)
        partial = folder / f".{name}.partial"
        partial.mkdir(parents=True, exist_ok=True)
        for split, data in dataset.items():
            data.to_parquet(str(partial / f"{split}-00000-of-00001.parquet"))
        partial.rename(target)  # complete or absent: an interrupted fetch is redone
    for name, source in DERIVED.items():
        if not (folder / name).is_dir():
            partial = folder / f".{name}.partial"
            make_fashion_scenes(folder / source, partial)
            partial.rename(folder / name)


def make_fashion_scenes(fashion_mnist: Path, out: Path) -> None:
    """The mirror's `fashion-scenes` (its make_fashion_scenes.py, seed 0): 64×64 scenes of 1-4 tinted Fashion-MNIST
    items on a smooth random colour field, with `scene_parse_150`'s columns (`annotation`: 0 = background, 1 +
    class inside an item's silhouette, later items on top); `FASHION_SCENES` training scenes from the training
    split, and validation scenes from the test split."""
    import io
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image
    from scipy.ndimage import binary_fill_holes

    def load(split):
        table = pq.read_table(fashion_mnist / f"{split}-00000-of-00001.parquet").to_pydict()
        return (
            np.stack([np.array(Image.open(io.BytesIO(image["bytes"]))) for image in table["image"]]),
            np.array(table["label"]),
        )

    def png(array, mode):
        buffer = io.BytesIO()
        Image.fromarray(array, mode).save(buffer, format="PNG", optimize=True)
        return {"bytes": buffer.getvalue(), "path": None}

    def scenes(images, labels, count, rng, size=64):
        rows = {"image": [], "annotation": []}
        for _ in range(count):
            low = rng.uniform(10, 90, (8, 8, 3)).astype(np.uint8)
            canvas = np.array(Image.fromarray(low).resize((size, size), Image.BICUBIC), np.float32)
            annotation = np.zeros((size, size), np.uint8)
            for _ in range(rng.integers(1, 5)):
                k = rng.integers(len(images))
                item, label = images[k].astype(np.float32), int(labels[k])
                y, x = rng.integers(0, size - 28 + 1, 2)
                mask = binary_fill_holes(item > 24)
                tint = rng.uniform(0.35, 1.0, 3)
                canvas[y : y + 28, x : x + 28][mask] = item[mask][:, None] * tint[None, :]
                annotation[y : y + 28, x : x + 28][mask] = label + 1
            rows["image"].append(png(canvas.astype(np.uint8), "RGB"))
            rows["annotation"].append(png(annotation, "L"))
        return rows

    rng = np.random.default_rng(0)
    splits = {
        "train": (*load("train"), FASHION_SCENES["train"]),
        "validation": (*load("test"), FASHION_SCENES["validation"]),
    }
    out.mkdir(parents=True, exist_ok=True)
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"image": {"_type": "Image"}, "annotation": {"_type": "Image"}}
    schema = pa.schema(
        [("image", image), ("annotation", image)],
        metadata={b"huggingface": json.dumps({"info": {"features": features}}).encode()},
    )
    for split, (images, labels, count) in splits.items():
        table = pa.Table.from_pydict(scenes(images, labels, count, rng), schema=schema)
        pq.write_table(table, out / f"{split}-00000-of-00001.parquet")
    id2label = {0: "background"} | {i + 1: name for i, name in enumerate(FASHION_NAMES)}
    (out / "id2label.json").write_text(json.dumps(id2label, indent=1))


def hub_unreachable(endpoint: str | None = None, timeout: float = REACH_TIMEOUT) -> str:
    """ "" if the Hub (`HF_ENDPOINT`, else huggingface.co) answers an HTTP request within `timeout` seconds (any status:
    it answered), else why not, in a few words."""
    if endpoint is None:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:  # a status other than 2xx: still an answer
        return ""
    except (OSError, ValueError) as error:  # no network, DNS, refused, timed out, a malformed endpoint
        reason = getattr(error, "reason", None) or error
        return f"{endpoint} did not answer within {timeout:g} s: {reason}"
    return ""


def resolve(
    mirror: Path = MIRROR,
    cache: Path = CACHE,
    user_offline: str | None = None,
    run_fetch: Callable[[Path], None] | None = None,
    check_hub: Callable[[], str] = hub_unreachable,
    mirror_named: bool = MIRROR_NAMED,
) -> tuple[Path | None, str]:
    """(the data folder, "") or (None, the one-line reason the tests skip)."""
    if mirror.is_dir():
        return mirror, ""

    def complete() -> bool:
        return all((cache / name).is_dir() for name in (*HUB_DATASETS, *DERIVED))

    if complete():
        return cache, ""
    # The reason names the user's own settings only: the default folder beside the repository is this project's.
    missing = (
        f"the real datasets are not in HF_NEUTRENO_DATA ({mirror})"
        if mirror_named
        else "the real datasets are not on this machine (HF_NEUTRENO_DATA is not set)"
    )
    fetch_once = f"to fetch them from the Hub once (about 120 MB, into {cache}), or set HF_NEUTRENO_DATA to a copy"
    if _offline(user_offline):
        return None, f"{missing} and HF_HUB_OFFLINE=1 is set in your environment: unset it {fetch_once}"
    unreachable = check_hub()
    if unreachable:
        return (
            None,
            f"{missing} and the Hugging Face Hub cannot be reached ({unreachable}): connect to a network {fetch_once}",
        )
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / ".fetch.lock")):  # parallel test workers (pytest -n): one fetches, the others wait
        if complete():  # another worker fetched it while this one waited
            return cache, ""
        try:
            (run_fetch or _fetch_in_child)(cache)
        except Exception as error:  # a timeout, a failing download
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            return None, f"{missing} and fetching them from the Hub failed ({reason[:200]})"
    return cache, ""


def _fetch_in_child(cache: Path) -> None:
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    proc = subprocess.run(
        [sys.executable, __file__, str(cache)], env=env, capture_output=True, text=True, timeout=FETCH_TIMEOUT
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"exit status {proc.returncode}")


if __name__ == "__main__":
    fetch(Path(sys.argv[1]))
