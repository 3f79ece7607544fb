#!/usr/bin/env python
"""Throughput of EigenViT against the NeuTRENO ViT and transformers' native ViT of the same size, side by side.

Every model is vit-tiny-224 shaped (dim 192, 12 layers, 3 heads, patch 16, 224 px) with the same attention kernel
(`--attn sdpa`). A training step is forward + backward + AdamW step (EigenViT recomputes its QR every step);
inference is an eval-mode forward under `torch.inference_mode` (EigenViT reuses its cached eigenbasis). The models
are timed in interleaved rounds, so drifting machine load hits all of them alike, and the median round is reported
with ratios to the native ViT. Targets for EigenViT (issue 4): training ≥ 0.90 and inference ≥ 0.98 of native.

    python benchmarks/bench_eigen_vit.py --quick                      # CPU
    python benchmarks/bench_eigen_vit.py --dtype bf16 --batch-size 256  # GPU
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import ViTConfig, ViTForImageClassification

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vit import make_step  # noqa: E402
from common import add_common_arguments, interleaved_medians, machine, report, setup  # noqa: E402

from hf_neutreno import (  # noqa: E402
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)


def build_models(preset: str, neutreno_lambda: float, attn: str, device) -> dict[str, torch.nn.Module]:
    shape = dict(EigenViTConfig.presets[preset], num_labels=1000, attn_implementation=attn)
    native = {k: v for k, v in shape.items() if k in ViTConfig.__dataclass_fields__}
    models = {
        "native ViT": ViTForImageClassification(ViTConfig(**native, num_labels=1000, attn_implementation=attn)),
        f"NeuTRENO ViT (λ={neutreno_lambda})": NeuTRENOViTForImageClassification(
            NeuTRENOViTConfig(**shape, neutreno_lambda=neutreno_lambda)
        ),
        "EigenViT (ViT⁻)": EigenViTForImageClassification(EigenViTConfig(**shape, spectrum_sign="negative")),
    }
    return {name: model.to(device) for name, model in models.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--preset", default="vit-tiny-224", choices=sorted(EigenViTConfig.presets))
    parser.add_argument("--neutreno-lambda", type=float, default=0.6)
    args = parser.parse_args()
    device, dtype = setup(args)
    batch = args.batch_size or (8 if args.quick or device.type == "cpu" else 128)
    rounds = args.rounds or (5 if args.quick else 15)
    image_size = EigenViTConfig.presets[args.preset]["image_size"]

    models = build_models(args.preset, args.neutreno_lambda, args.attn, device)
    native = next(iter(models))
    seconds = {}
    for mode in ("train", "infer"):
        steps = {name: make_step(m, batch, image_size, mode, device, dtype)[0] for name, m in models.items()}
        seconds[mode] = interleaved_medians(steps, device, rounds=rounds, clock=args.clock)
    rows = [
        {
            "model": name,
            "train img/s": batch / seconds["train"][name],
            "train ratio": seconds["train"][native] / seconds["train"][name],
            "infer img/s": batch / seconds["infer"][name],
            "infer ratio": seconds["infer"][native] / seconds["infer"][name],
        }
        for name in models
    ]
    meta = machine(args) | {"preset": args.preset, "batch": batch, "rounds": rounds}
    report("EigenViT vs NeuTRENO ViT vs native ViT (same shape)", rows, meta, args.out)


if __name__ == "__main__":
    main()
