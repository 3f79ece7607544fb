"""Image classification data for `Trainer`: PIL images to `pixel_values` (with the CIFAR recipe's random flips and
padded crops), and the collator that stacks them."""

import random

import torch
from PIL import Image, ImageOps


def image_transform(processor, image_column: str, label_column: str, augment: bool = False, crop_padding: int = 0):
    """A `Dataset.set_transform` function: PIL images -> `pixel_values` (+ `labels`).

    With `augment`, each image is randomly flipped horizontally and, with `crop_padding` > 0, randomly cropped
    from a zero-padded copy (the CIFAR recipe); the processor then resizes and normalises.
    """

    def transform(batch: dict) -> dict:
        images = [image.convert("RGB") for image in batch[image_column]]
        if augment:
            images = [_augment(image, crop_padding) for image in images]
        out = processor(images, return_tensors="pt")
        out = {"pixel_values": out["pixel_values"]}
        if label_column in batch:
            out["labels"] = torch.as_tensor(batch[label_column])
        return out

    return transform


def _augment(image: Image.Image, crop_padding: int) -> Image.Image:
    if random.random() < 0.5:
        image = ImageOps.mirror(image)
    if crop_padding > 0:
        width, height = image.size
        padded = ImageOps.expand(image, border=crop_padding, fill=0)
        left, top = random.randint(0, 2 * crop_padding), random.randint(0, 2 * crop_padding)
        image = padded.crop((left, top, left + width, top + height))
    return image


def collate_images(examples: list[dict]) -> dict[str, torch.Tensor]:
    batch = {"pixel_values": torch.stack([e["pixel_values"] for e in examples])}
    if "labels" in examples[0]:
        batch["labels"] = torch.stack([torch.as_tensor(e["labels"]) for e in examples])
    return batch


__all__ = ["collate_images", "image_transform"]
