"""Corruptions: deterministic, identity at severity 0, stronger with severity, and the CIFAR-10-C formulas.
References: `make_cifar_c.py`'s formulas written out; its blur is `skimage.filters.gaussian`, i.e.
`scipy.ndimage.gaussian_filter` (mode 'nearest', truncate 4, σ 0 across channels), and its brightness a round trip
through HSV, here `colorsys` pixel by pixel."""

import colorsys
import io

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from scipy.ndimage import gaussian_filter

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


def assert_rounds(image: Image.Image, reference: np.ndarray) -> None:
    """Every value of `image` is `reference` (0-255 floats) rounded to the nearest level: within half a level. (Equal
    rounded values would be too strict: where the reference lies on a half level, float noise of 1e-13 between two
    correct computations picks the side.)"""
    error = np.abs(np.asarray(image, dtype=np.float64) - reference)
    assert error.max() <= 0.5 + 1e-9, (error.max(), np.unravel_index(error.argmax(), error.shape))


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_gaussian_blur_is_a_true_gaussian_as_cifar10_c(images, severity):
    """CIFAR-10-C: `gaussian(x / 255, sigma=c, multichannel=True)`, clipped, times 255 (here rounded to uint8)."""
    c = PARAMETERS["gaussian_blur"][severity - 1]
    for image in images[:8]:
        reference = gaussian_filter(pixels(image), sigma=(c, c, 0), mode="nearest", truncate=4.0)
        assert_rounds(corrupt(image, "gaussian_blur", severity), np.clip(reference, 0, 1) * 255)
    # A point of light spreads as the 2-D Gaussian kernel: exp(−(i² + j²)/2σ²) over |i|, |j| ≤ int(4σ + 0.5),
    # normalised; the σ scales with the side (σ = 2c on 64 × 64).
    for side in (32, 64):
        sigma = c * side / 32
        radius = int(4 * sigma + 0.5)
        t = np.arange(-radius, radius + 1)
        kernel = np.exp(-(t[:, None] ** 2 + t[None, :] ** 2) / (2 * sigma**2))
        kernel /= kernel.sum()
        point = np.zeros((side, side), np.uint8)
        point[side // 2, side // 2] = 255
        blurred = np.asarray(corrupt(Image.fromarray(point), "gaussian_blur", severity), dtype=np.float64)
        expected = np.zeros((side, side))
        centre = slice(side // 2 - radius, side // 2 + radius + 1)
        expected[centre, centre] = np.round(kernel * 255)
        np.testing.assert_array_equal(blurred, expected)


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_brightness_adds_to_the_value_of_a_float_hsv_round_trip(images, severity):
    """CIFAR-10-C: `rgb2hsv(x / 255)`, value + c clipped to [0, 1], `hsv2rgb`, times 255: here pixel by pixel with
    `colorsys`, in float (no 8-bit HSV in between)."""
    c = PARAMETERS["brightness"][severity - 1]
    for image in images[:4]:
        x = pixels(image)
        expected = np.empty_like(x)
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                h, s, v = colorsys.rgb_to_hsv(*x[i, j])
                expected[i, j] = colorsys.hsv_to_rgb(h, s, min(1.0, v + c))
        assert_rounds(corrupt(image, "brightness", severity), np.clip(expected, 0, 1) * 255)
    # every hue sector, greys, black and white, and ties between channels
    levels = np.array([0, 1, 64, 127, 128, 200, 254, 255], np.uint8)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(16, 32, 3)
    x = grid / 255.0
    expected = np.array(
        [colorsys.hsv_to_rgb(h, s, min(1.0, v + c)) for h, s, v in (colorsys.rgb_to_hsv(*p) for p in x.reshape(-1, 3))]
    ).reshape(x.shape)
    assert_rounds(corrupt(Image.fromarray(grid), "brightness", severity), np.clip(expected, 0, 1) * 255)


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
