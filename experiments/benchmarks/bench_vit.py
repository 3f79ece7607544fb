"""NeuTRENO DeiT-tiny vs the native transformers ViT of the same size: throughput and peak memory, side by side.

    python -m experiments bench-vit --quick                    # CPU, a few minutes
    python -m experiments bench-vit --dtype bf16 --batch-size 256   # GPU

Both models use the same attention kernel (`--attn sdpa` by default), shape, batch and optimizer (AdamW); the only
difference is the NeuTRENO term (λ = 0.6 in layers 1-11). A training step is forward + backward + AdamW step; an
inference step is a forward under `torch.inference_mode`. Images of 224 and 384 px show that the cost grows like the
baseline's. Memory: the peak allocated during a step above what was allocated before it (`step peak`), and the same
plus weights and optimizer state (`total`). Targets: ≥ 0.97 of native throughput, ≤ 1.03 of its memory.
"""

import argparse

import torch
from transformers import ViTConfig, ViTForImageClassification

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification

from .common import adamw_step, add_common_arguments, autocast, compiled_ratio, machine, report, setup, side_by_side

LABELS = {"native": "native", "neutreno": "NeuTRENO"}


def native_vit(config: NeuTRENOViTConfig, attn: str) -> ViTForImageClassification:
    """transformers' ViT in `config`'s shape: every architecture field the two configs share."""
    shape = {k: getattr(config, k) for k in config.architecture_fields if k in ViTConfig.__dataclass_fields__}
    return ViTForImageClassification(ViTConfig(**shape, num_labels=config.num_labels, attn_implementation=attn))


def build(name: str, image_size: int, attn: str, device: torch.device, layers: int | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    depth = {"num_hidden_layers": layers} if layers else {}
    config = NeuTRENOViTConfig.from_preset(
        "deit-tiny", image_size=image_size, num_labels=1000, neutreno_lambda=0.6, attn_implementation=attn, **depth
    )
    model = native_vit(config, attn) if name == "native" else NeuTRENOViTForImageClassification(config)
    return model.to(device)


def make_step(model, batch: int, image_size: int, mode: str, device, dtype):
    """(a closure running one training step or one inference forward, the optimizer or None)."""
    pixels = torch.randn(batch, 3, image_size, image_size, device=device)
    if mode == "train":
        labels = torch.randint(0, 1000, (batch,), device=device)
        return adamw_step(model, {"pixel_values": pixels, "labels": labels}, device, dtype)
    model.eval()

    def infer():
        with torch.inference_mode(), autocast(device, dtype):
            model(pixel_values=pixels)

    return infer, None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--image-sizes", type=int, nargs="+", default=[224, 384])
    args = parser.parse_args(argv)
    device, dtype = setup(args)
    batch = args.batch_size or (8 if args.quick or device.type == "cpu" else 128)
    args.rounds = args.rounds or (5 if args.quick else 15)

    rows = []
    for image_size in args.image_sizes:
        models = {name: build(name, image_size, args.attn, device, args.num_hidden_layers) for name in LABELS}
        for mode in ("train", "infer"):
            steps = {name: make_step(m, batch, image_size, mode, device, dtype) for name, m in models.items()}
            rows.append(
                {"image_size": image_size, "mode": mode}
                | side_by_side(steps, models, LABELS, batch, "img/s", device, args)
                | compiled_ratio(
                    lambda m: make_step(m, batch, image_size, mode, device, dtype), models, LABELS, device, args
                )
            )
    meta = machine(args) | {"batch": batch, "rounds": args.rounds}
    report("NeuTRENO DeiT-tiny (λ = 0.6) vs native ViT of the same shape", rows, meta, args.out)
