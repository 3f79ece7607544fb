#!/usr/bin/env python
"""Throughput of EigenViT against the NeuTRENO ViT and transformers' native ViT of the same size, side by side.

Every model is vit-tiny-224 shaped (dim 192, 12 layers, 3 heads, patch 16, 224 px) with SDPA attention. One training
step is forward + backward + AdamW step (EigenViT recomputes its QR every step); inference is an eval-mode forward
under `torch.inference_mode` (EigenViT reuses its cached eigenbasis). Models are timed in interleaved rounds, so
drifting machine load hits all of them alike, and the median round is reported with ratios to the native ViT.
Targets for EigenViT: training >= 0.90 and inference >= 0.98 of native.

    python benchmarks/bench_eigen_vit.py --quick                                   # CPU smoke run
    python benchmarks/bench_eigen_vit.py --device cuda --dtype bfloat16 --batch_size 256
"""

import argparse
import statistics
import time

import torch
from transformers import ViTConfig, ViTForImageClassification

from hf_neutreno import (
    EigenViTConfig,
    EigenViTForImageClassification,
    NeuTRENOViTConfig,
    NeuTRENOViTForImageClassification,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_models(args) -> dict[str, torch.nn.Module]:
    shape = dict(EigenViTConfig.presets[args.preset], num_labels=1000)
    native = ViTConfig(
        **{k: v for k, v in shape.items() if k in ViTConfig.__dataclass_fields__},
        num_labels=1000,
        attn_implementation="sdpa",
    )
    models = {
        "native ViT": ViTForImageClassification(native),
        f"NeuTRENO ViT (λ={args.neutreno_lambda})": NeuTRENOViTForImageClassification(
            NeuTRENOViTConfig(**shape, neutreno_lambda=args.neutreno_lambda, attn_implementation="sdpa")
        ),
        "EigenViT (ViT⁻)": EigenViTForImageClassification(
            EigenViTConfig(**shape, spectrum_sign="negative", attn_implementation="sdpa")
        ),
    }
    return {name: model.to(args.device) for name, model in models.items()}


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_step(model, args, pixel_values, labels, train: bool):
    autocast = torch.autocast(device_type=args.device.split(":")[0], dtype=DTYPES[args.dtype],
                              enabled=args.dtype != "float32")
    if train:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            with autocast:
                loss = model(pixel_values, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    else:
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                model(pixel_values)
    return step


def timed(step, iterations: int, device: str) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / iterations


def bench(models, args, train: bool) -> dict[str, float]:
    """Median seconds per step over interleaved rounds."""
    size = EigenViTConfig.presets[args.preset]["image_size"]
    batch = args.batch_size
    pixel_values = torch.randn(batch, 3, size, size, device=args.device)
    labels = torch.randint(0, 1000, (batch,), device=args.device)
    steps = {name: make_step(model, args, pixel_values, labels, train) for name, model in models.items()}
    for step in steps.values():
        timed(step, args.warmup, args.device)
    rounds = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, step in steps.items():
            rounds[name].append(timed(step, args.iterations, args.device))
    return {name: statistics.median(times) for name, times in rounds.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="autocast dtype (weights stay fp32)")
    p.add_argument("--preset", default="vit-tiny-224", choices=sorted(EigenViTConfig.presets))
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--neutreno_lambda", type=float, default=0.6)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iterations", type=int, default=10, help="steps per model per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for CPU runs")
    p.add_argument("--quick", action="store_true", help="CPU smoke run: batch 8, 3 rounds of 2 steps")
    args = p.parse_args(argv)
    if args.quick:
        args.batch_size, args.rounds, args.iterations, args.warmup = 8, 3, 2, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = build_models(args)
    print(f"device={args.device} dtype={args.dtype} preset={args.preset} batch={args.batch_size} "
          f"rounds={args.rounds}×{args.iterations} threads={torch.get_num_threads()} torch={torch.__version__}")
    results = {"training": bench(models, args, train=True), "inference": bench(models, args, train=False)}
    native = "native ViT"
    print(f"{'model':<26}{'train img/s':>12}{'ratio':>8}{'infer img/s':>13}{'ratio':>8}")
    for name in models:
        train, infer = results["training"][name], results["inference"][name]
        print(
            f"{name:<26}{args.batch_size / train:>12.1f}{results['training'][native] / train:>8.3f}"
            f"{args.batch_size / infer:>13.1f}{results['inference'][native] / infer:>8.3f}"
        )
    print("targets for EigenViT: training >= 0.90, inference >= 0.98 of native")


if __name__ == "__main__":
    main()
