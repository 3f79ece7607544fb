"""The NeuTRENO Segmenter vs the λ = 0 Segmenter: training-step throughput and memory, side by side.

    python -m experiments bench-segmenter --threads 1 --clock cpu   # CPU (the issue's setting: 512 px, batch 2)
    python -m experiments bench-segmenter --dtype bf16 --batch-size 8   # GPU

Both models are the `segmenter-deit-tiny` preset (DeiT-tiny encoder, 2-block mask transformer, 150 classes, drop
path 0.1, decoder dropout 0.1) with the same initial weights, attention kernel (`--attn sdpa` by default), batch and
optimizer; the only difference is λ: 0.6 in the encoder's layers 1-11 and in the decoder's second block (its own
V_0), against 0 in both. A training step is forward + loss (logits upsampled to the 512 × 512 labels) + backward +
SGD with momentum 0.9 (Segmenter's optimizer). Memory: the peak allocated during a step above what was allocated
before it (`step peak`), and the same plus weights and momentum buffers (`total`). Targets: ≥ 0.97 of
the λ = 0 throughput, ≤ 1.03 of its memory.
"""

import argparse

import torch

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForSemanticSegmentation

from .common import add_common_arguments, machine, report, setup, side_by_side, train_step

LAMBDAS = {"plain": 0.0, "neutreno": 0.6}


def build(
    name: str, image_size: int, attn: str, device: torch.device, layers: int | None = None
) -> NeuTRENOViTForSemanticSegmentation:
    torch.manual_seed(0)  # the same initial weights for both (λ has no parameters)
    lam = LAMBDAS[name]
    depth = {"num_hidden_layers": layers} if layers else {}
    config = NeuTRENOViTConfig.from_preset(
        "segmenter-deit-tiny",
        image_size=image_size,
        neutreno_lambda=lam,
        decoder_neutreno_lambda=lam,
        attn_implementation=attn,
        **depth,
    )
    return NeuTRENOViTForSemanticSegmentation(config).to(device).train()


def make_step(model, batch: int, image_size: int, device, dtype):
    """(a closure running one training step, the optimizer)."""
    generator = torch.Generator().manual_seed(1)
    pixels = torch.randn(batch, 3, image_size, image_size, generator=generator).to(device)
    labels = torch.randint(0, model.config.num_labels, (batch, image_size, image_size), generator=generator).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return train_step(model, optimizer, {"pixel_values": pixels, "labels": labels}, device, dtype), optimizer


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--image-size", type=int, default=512)
    args = parser.parse_args(argv)
    device, dtype = setup(args)
    batch = args.batch_size or 2
    image_size = 128 if args.quick else args.image_size
    args.rounds = args.rounds or (3 if args.quick else 10)

    models = {name: build(name, image_size, args.attn, device, args.num_hidden_layers) for name in LAMBDAS}
    steps = {name: make_step(model, batch, image_size, device, dtype) for name, model in models.items()}
    rows = [
        {"image_size": image_size, "mode": "train"}
        | side_by_side(steps, models, {"plain": "λ=0", "neutreno": "NeuTRENO"}, batch, "img/s", device, args)
    ]
    meta = machine(args) | {"batch": batch, "rounds": args.rounds}
    report("NeuTRENO Segmenter (λ = 0.6, encoder and decoder) vs the λ = 0 Segmenter", rows, meta, args.out)
