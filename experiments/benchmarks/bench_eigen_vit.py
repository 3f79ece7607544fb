"""Throughput of EigenViT against the NeuTRENO ViT and transformers' native ViT of the same size, side by side.

Every model is vit-tiny-224 shaped (dim 192, 12 layers, 3 heads, patch 16, 224 px) with the same attention kernel
(`--attn sdpa`). A training step is forward + backward + AdamW step; inference is an eval-mode forward under
`torch.inference_mode`. EigenViT makes its value and output weights from Θ, ψ with one batched QR for all layers in
each training step, and at inference reuses them while the parameters stay; `to_neutreno_vit()` exports the same
function with those weights stored, timed at inference as its own row. The models are timed in interleaved rounds, so
drifting machine load hits all of them alike, and the median round is reported with ratios to the native ViT. Targets
for EigenViT: training ≥ 0.97 of native, and inference through the export ≥ 0.98.

    python -m experiments bench-eigen-vit --quick                              # CPU
    python -m experiments bench-eigen-vit --clock cpu --threads 1 --rounds 40  # a shared CPU machine
    python -m experiments bench-eigen-vit --dtype bf16 --batch-size 256        # GPU
"""

import argparse
import statistics

import torch

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)

from .bench_vit import make_step, native_vit
from .common import add_common_arguments, interleaved_times, machine, paired_ratio, report, setup

EXPORTED = "EigenViT (ViT⁻) → to_neutreno_vit()"


def build_models(
    preset: str, neutreno_lambda: float, attn: str, device, layers: int | None = None
) -> dict[str, torch.nn.Module]:
    depth = {"num_hidden_layers": layers} if layers else {}
    eigen = EigenViTConfig.from_preset(
        preset, num_labels=1000, attn_implementation=attn, spectrum_sign="negative", **depth
    )
    shape = {k: getattr(eigen, k) for k in eigen.architecture_fields if k in NeuTRENOViTConfig.architecture_fields}
    neutreno = NeuTRENOViTConfig(**shape, num_labels=1000, attn_implementation=attn, neutreno_lambda=neutreno_lambda)
    models = {
        "native ViT": native_vit(eigen, attn),
        f"NeuTRENO ViT (λ={neutreno_lambda})": NeuTRENOViTForImageClassification(neutreno),
        "EigenViT (ViT⁻)": EigenViTForImageClassification(eigen),
    }
    return {name: model.to(device) for name, model in models.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--preset", default="vit-tiny-224", choices=sorted(EigenViTConfig.presets))
    parser.add_argument("--neutreno-lambda", type=float, default=0.6)
    args = parser.parse_args(argv)
    device, dtype = setup(args)
    batch = args.batch_size or (8 if args.quick or device.type == "cpu" else 128)
    rounds = args.rounds or (5 if args.quick else 15)
    image_size = EigenViTConfig.from_preset(args.preset).image_size

    models = build_models(args.preset, args.neutreno_lambda, args.attn, device, args.num_hidden_layers)
    native = next(iter(models))
    times = {}
    steps = {name: make_step(m, batch, image_size, "train", device, dtype)[0] for name, m in models.items()}
    times["train"] = interleaved_times(steps, device, rounds=rounds, clock=args.clock)
    models[EXPORTED] = models["EigenViT (ViT⁻)"].to_neutreno_vit()  # inference only: trained, it is a plain ViT
    steps = {name: make_step(m, batch, image_size, "infer", device, dtype)[0] for name, m in models.items()}
    times["infer"] = interleaved_times(steps, device, rounds=rounds, clock=args.clock)
    rows = []
    for name in models:
        row = {"model": name}
        for mode in ("train", "infer"):
            if name in times[mode]:
                row[f"{mode} img/s"] = batch / statistics.median(times[mode][name])
                row[f"{mode} ratio"], row[f"{mode} ratio interval"] = paired_ratio(times[mode], native, name)
        rows.append(row)
    meta = machine(args) | {"preset": args.preset, "batch": batch, "rounds": rounds}
    report("EigenViT vs NeuTRENO ViT vs native ViT (same shape)", rows, meta, args.out)
