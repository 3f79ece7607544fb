"""Deterministic image corruptions at severities 1-5, with PIL and numpy (for robustness evaluations).

The parameters and formulas are those of CIFAR-10-C (Hendrycks & Dietterich, ICLR 2019, `make_cifar_c.py`), tuned
for 32×32 images; the blur's σ scales with the image side (side / 32). Gaussian blur is a true Gaussian, as
`skimage.filters.gaussian` computes it there (separable kernel truncated at 4σ, edges replicated: mode 'nearest');
brightness adds to the value of a float HSV round trip (`skimage.color.rgb2hsv` / `hsv2rgb`); both are written here in
numpy. JPEG compression and pixelation use PIL, as there. Severity 0 returns the image unchanged. Random corruptions
draw from `numpy.random.default_rng(seed)`, so the same (image, name, severity, seed) always gives the same pixels;
pass e.g. ``seed=(base_seed, index)`` to give every image of a dataset its own stream (CIFAR-10-C draws from numpy's
global generator, so its noise differs from ours draw by draw, not in distribution).

One deliberate deviation: the float result is rounded to the nearest uint8 level, where `make_cifar_c.py` casts with
`np.uint8(...)`, which truncates; CIFAR-10-C's own images are therefore half a level darker on average, and ours differ
from them by at most one level per value.

    >>> from hf_neutreno.data.corruptions import corrupt
    >>> noisy = corrupt(image, "gaussian_noise", severity=3, seed=(0, 17))

`corruption_accuracy` scores an image classifier on corrupted copies of a set of images (the poster's Table 3).
"""

import io
from collections.abc import Callable, Sequence

import numpy as np
from PIL import Image

SEVERITIES = (1, 2, 3, 4, 5)

# name: the five per-severity parameters (CIFAR-10-C).
PARAMETERS: dict[str, tuple[float, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std on [0, 1] pixels
    "shot_noise": (500, 250, 100, 75, 50),  # Poisson photon count at full intensity
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # fraction of salt-and-pepper values
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # blur std in pixels at 32×32
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor towards the per-channel mean
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # downscale factor before upscaling back
}
CORRUPTIONS = tuple(PARAMETERS)


def _to_array(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.float64) / 255.0


def _to_image(array: np.ndarray, mode: str) -> Image.Image:
    return Image.fromarray(np.round(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8), mode)


def _gaussian_noise(image, c, rng):
    x = _to_array(image)
    return _to_image(x + rng.normal(scale=c, size=x.shape), image.mode)


def _shot_noise(image, c, rng):
    x = _to_array(image)
    return _to_image(rng.poisson(x * c) / c, image.mode)


def _impulse_noise(image, c, rng):
    x = _to_array(image).copy()
    hit = rng.random(x.shape) < c
    x[hit] = rng.random(int(hit.sum())) < 0.5  # salt (1) or pepper (0), equally likely
    return _to_image(x, image.mode)


def _gaussian_filter(x: np.ndarray, sigma: float, truncate: float = 4.0) -> np.ndarray:
    """`x` (height, width[, channels]) convolved with a Gaussian of std `sigma` pixels along height and width, not
    across channels: `skimage.filters.gaussian(x, sigma, mode="nearest", truncate=4.0)` (`scipy.ndimage.gaussian_filter`
    with σ 0 on the channel axis). Separable: one 1-D kernel exp(−t²/2σ²) over t = −r..r, r = int(truncate·σ + 0.5),
    normalised to sum 1, along each axis in turn; outside the image the edge pixel repeats."""
    radius = int(truncate * sigma + 0.5)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    out = np.asarray(x, dtype=np.float64)
    for axis in (0, 1):
        width = [(0, 0)] * out.ndim
        width[axis] = (radius, radius)
        padded = np.pad(out, width, mode="edge")
        length = out.shape[axis]
        blurred = np.zeros_like(out)
        for shift, weight in enumerate(kernel):
            blurred += weight * np.take(padded, np.arange(shift, shift + length), axis=axis)
        out = blurred
    return out


def _gaussian_blur(image, c, rng):
    return _to_image(_gaussian_filter(_to_array(image), c * min(image.size) / 32), image.mode)


def _contrast(image, c, rng):
    x = _to_array(image)
    mean = x.mean(axis=(0, 1), keepdims=True)
    return _to_image((x - mean) * c + mean, image.mode)


def _rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """RGB in [0, 1], (..., 3), to HSV in [0, 1]: `skimage.color.rgb2hsv`, vectorised. Value is the largest channel,
    saturation the range over the value (0 for grey), hue the sector of the largest channel (blue over green over red
    where they tie, as skimage assigns them) plus the offset within it, in turns (0 for grey)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    value = rgb.max(axis=-1)
    delta = value - rgb.min(axis=-1)
    grey = delta == 0
    safe = np.where(grey, 1.0, delta)
    hue = np.where(
        blue == value,
        4.0 + (red - green) / safe,
        np.where(green == value, 2.0 + (blue - red) / safe, (green - blue) / safe),
    )
    hue = np.where(grey, 0.0, (hue / 6.0) % 1.0)
    saturation = np.where(grey, 0.0, delta / np.where(value == 0, 1.0, value))
    return np.stack([hue, saturation, value], axis=-1)


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """HSV in [0, 1], (..., 3), to RGB: `skimage.color.hsv2rgb`, vectorised (the hexcone's six sectors)."""
    hsv = np.asarray(hsv, dtype=np.float64)
    hue, saturation, value = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    sector = np.floor(hue * 6.0)
    fraction = hue * 6.0 - sector
    p = value * (1.0 - saturation)
    q = value * (1.0 - fraction * saturation)
    t = value * (1.0 - (1.0 - fraction) * saturation)
    sector = sector.astype(np.int64) % 6
    choices = [(value, t, p), (q, value, p), (p, value, t), (p, q, value), (t, p, value), (value, p, q)]
    return np.stack(
        [np.choose(sector, [channels[k] for channels in choices]) for k in range(3)],
        axis=-1,
    )


def _brightness(image, c, rng):
    x = _to_array(image)
    if image.mode != "RGB":  # grey: its value is the intensity itself
        return _to_image(x + c, image.mode)
    hsv = _rgb_to_hsv(x)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0.0, 1.0)
    return _to_image(_hsv_to_rgb(hsv), image.mode)


def _jpeg_compression(image, c, rng):
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=int(c))
    return Image.open(io.BytesIO(buffer.getvalue())).convert(image.mode)


def _pixelate(image, c, rng):
    width, height = image.size
    small = image.resize((max(1, int(width * c)), max(1, int(height * c))), Image.Resampling.BOX)
    return small.resize((width, height), Image.Resampling.BOX)


_FUNCTIONS: dict[str, Callable] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "gaussian_blur": _gaussian_blur,
    "contrast": _contrast,
    "brightness": _brightness,
    "jpeg_compression": _jpeg_compression,
    "pixelate": _pixelate,
}


def check_corruption(name: str, severity: int) -> None:
    if name not in PARAMETERS:
        raise ValueError(f"Unknown corruption {name!r}; known corruptions: {list(CORRUPTIONS)}.")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 0 <= severity <= 5:
        raise ValueError(f"`severity` must be an integer in [0, 5] (0: no corruption), got {severity!r}.")


def corrupt(image: Image.Image, name: str, severity: int, seed: int | Sequence[int] = 0) -> Image.Image:
    """Return `image` corrupted by `name` at `severity` (0-5); deterministic for a given `seed`.

    Modes "RGB" and "L" are kept; other modes are converted to RGB first.
    """
    check_corruption(name, severity)
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    if severity == 0:
        return image.copy()
    rng = np.random.default_rng(seed)
    return _FUNCTIONS[name](image, PARAMETERS[name][severity - 1], rng)


def corruption_accuracy(
    model,
    processor,
    images: list[Image.Image],
    labels,
    corruptions: Sequence[str],
    severities: Sequence[int],
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """{severity: {corruption: accuracy}} of an image classifier on `images` corrupted by `corrupt` (image i drawn
    with seed (seed, i), so every model sees the same pixels); severity 0 is the clean accuracy of the same images,
    under the name "none". `processor` turns PIL images into `pixel_values`; `labels` is a tensor of class ids."""
    from .scores import accuracy

    def pixels(batch):
        return processor(batch, return_tensors="pt")["pixel_values"]

    results = {}
    for severity in severities:
        names = corruptions if severity else ["none"]
        results[str(severity)] = {
            name: accuracy(
                model,
                pixels(
                    images
                    if not severity
                    else [corrupt(image, name, severity, seed=(seed, i)) for i, image in enumerate(images)]
                ),
                labels,
            )
            for name in names
        }
    return results


__all__ = ["CORRUPTIONS", "PARAMETERS", "SEVERITIES", "check_corruption", "corrupt", "corruption_accuracy"]
