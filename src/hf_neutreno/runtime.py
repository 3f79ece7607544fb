"""Small runtime helpers that the library and the example scripts share; this module imports nothing of the package."""

import torch


def has_accelerator() -> bool:
    """Whether torch sees an accelerator (CUDA, MPS, XPU, ...): where pinned DataLoader memory can help."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
