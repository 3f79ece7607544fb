#!/usr/bin/env python
"""NeuTRENO DeiT-tiny vs the native transformers ViT of the same size: throughput and peak memory, side by side.

    python benchmarks/bench_vit.py --quick                      # CPU, a few minutes
    python benchmarks/bench_vit.py --device cuda --dtype bf16   # GPU

Both models use the same attention kernel (`--attn sdpa` by default), shape, batch and optimizer (AdamW); the only
difference is the NeuTRENO term (λ = 0.6 in layers 1-11). Images 224 and 384 px show that the cost grows like the
baseline's. Targets (issue 2): ≥ 0.97 of native throughput, ≤ 1.03 of its peak memory.
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import ViTConfig, ViTForImageClassification

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_medians, machine, peak_bytes, report  # noqa: E402

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTForImageClassification  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def build(name: str, image_size: int, attn: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    shape = NeuTRENOViTConfig.presets["deit-tiny"] | {"image_size": image_size, "num_labels": 1000}
    if name == "native":
        model = ViTForImageClassification(ViTConfig(**shape, attn_implementation=attn))
    else:
        model = NeuTRENOViTForImageClassification(
            NeuTRENOViTConfig(**shape, neutreno_lambda=0.6 if name == "neutreno" else 0.0, attn_implementation=attn)
        )
    return model.to(device=device, dtype=dtype)


def steps(model, batch: int, image_size: int, mode: str, device, dtype):
    """A closure running one training step (forward, backward, AdamW) or one inference forward."""
    pixels = torch.randn(batch, 3, image_size, image_size, device=device, dtype=dtype)
    labels = torch.randint(0, 1000, (batch,), device=device)
    if mode == "train":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train_step():
            model(pixel_values=pixels, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return train_step
    model.eval()

    def infer():
        with torch.inference_mode():
            model(pixel_values=pixels)

    return infer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    parser.add_argument("--attn", default="sdpa", help="attention kernel for both models: sdpa, eager, flash_attention_2")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--image-sizes", type=int, nargs="+", default=[224, 384])
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="small batch and few rounds (CPU)")
    parser.add_argument("--out", default=None, help="write the results as JSON")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    batch = args.batch or (8 if args.quick or device.type == "cpu" else 128)
    rounds = args.rounds or (5 if args.quick else 15)

    rows, closures = [], []
    for image_size in args.image_sizes:  # all timing first: the CPU memory probe slows allocations afterwards
        models = {name: build(name, image_size, args.attn, device, dtype) for name in ("native", "neutreno")}
        for mode in ("train", "infer"):
            fns = {name: steps(m, batch, image_size, mode, device, dtype) for name, m in models.items()}
            seconds = interleaved_medians(fns, device, rounds=rounds)
            closures.append(fns)
            rows.append({
                "image_size": image_size,
                "mode": mode,
                "native_img_per_s": batch / seconds["native"],
                "neutreno_img_per_s": batch / seconds["neutreno"],
                "throughput_ratio": seconds["native"] / seconds["neutreno"],
            })
    for row, fns in zip(rows, closures):
        peak = {name: peak_bytes(fn, device) for name, fn in fns.items()}  # steady state: after warm-up steps
        row.update(
            native_peak_MiB=peak["native"] / 2**20,
            neutreno_peak_MiB=peak["neutreno"] / 2**20,
            memory_ratio=peak["neutreno"] / peak["native"],
        )
    meta = machine() | {"device": str(device), "dtype": args.dtype, "attn": args.attn, "batch": batch,
                        "rounds": rounds, "command": " ".join(sys.argv)}
    report("NeuTRENO DeiT-tiny vs native ViT (same shape)", rows, meta, args.out)


if __name__ == "__main__":
    main()
