"""Corruptions: deterministic, identity at severity 0, stronger with severity, and the CIFAR-10-C formulas."""

import io

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from hf_neutreno.data.corruptions import CORRUPTIONS, PARAMETERS, corrupt


@pytest.fixture(scope="module")
def images(data_dir) -> list[Image.Image]:
    table = pq.read_table(data_dir / "cifar10" / "test-00000-of-00001.parquet", columns=["img"]).slice(0, 16)
    return [Image.open(io.BytesIO(row["bytes"])).convert("RGB") for row in table.column("img").to_pylist()]


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float64) / 255.0


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corruption_is_deterministic_identity_at_zero_and_grows_with_severity(images, name):
    clean = [pixels(image) for image in images]
    assert all(np.array_equal(pixels(corrupt(image, name, 0)), x) for image, x in zip(images, clean))
    distances = []
    for severity in range(1, 6):
        outputs = [corrupt(image, name, severity, seed=(7, i)) for i, image in enumerate(images)]
        again = [corrupt(image, name, severity, seed=(7, i)) for i, image in enumerate(images)]
        assert all(np.array_equal(pixels(a), pixels(b)) for a, b in zip(outputs, again)), "not deterministic"
        assert all(o.size == image.size and o.mode == "RGB" for o, image in zip(outputs, images))
        distances.append(np.mean([np.abs(pixels(o) - x).mean() for o, x in zip(outputs, clean)]))
    assert distances[0] > 0.002, distances
    # mean distance to the clean image grows with severity (1 % slack: JPEG and pixelate are not strictly monotone
    # image by image)
    assert all(b >= a * 0.99 for a, b in zip(distances, distances[1:])), distances
    assert distances[-1] > distances[0]


def test_formulas_follow_cifar10_c(images):
    image = images[0]
    x = pixels(image)
    c = PARAMETERS["contrast"][2]
    mean = x.mean(axis=(0, 1), keepdims=True)
    expected = np.round(np.clip((x - mean) * c + mean, 0, 1) * 255)
    np.testing.assert_array_equal(np.asarray(corrupt(image, "contrast", 3)), expected)

    c = PARAMETERS["gaussian_noise"][4]
    noise = np.random.default_rng(3).normal(scale=c, size=x.shape)
    expected = np.round(np.clip(x + noise, 0, 1) * 255)
    np.testing.assert_array_equal(np.asarray(corrupt(image, "gaussian_noise", 5, seed=3)), expected)
    assert not np.array_equal(np.asarray(corrupt(image, "gaussian_noise", 5, seed=4)), expected)

    jpeg = np.asarray(corrupt(image, "jpeg_compression", 5), dtype=np.float64) / 255
    assert 0 < np.abs(jpeg - x).mean() < 0.1


def test_grayscale_images_keep_their_mode(images):
    gray = images[0].convert("L")
    for name in CORRUPTIONS:
        out = corrupt(gray, name, 3, seed=0)
        assert out.mode == "L" and out.size == gray.size


@pytest.mark.parametrize(
    "name, severity, match", [("fog", 1, "fog"), ("contrast", 6, "severity"), ("contrast", -1, "severity")]
)
def test_bad_corruption_arguments_raise(images, name, severity, match):
    with pytest.raises(ValueError, match=match):
        corrupt(images[0], name, severity)
