"""`apply_value_path` vs the unmodified model: training throughput and memory, side by side.

    python -m experiments bench-value-path --quick --threads 1 --clock cpu   # CPU, one thread: ~10 min
    python -m experiments bench-value-path --dtype bf16 --batch-size 16       # GPU

Two shapes of native transformers models, randomly initialised (timing does not depend on the weights): a
GPT-2-small-shaped `GPT2LMHeadModel` (768 wide, 12 layers, 12 heads, 50,257 tokens, context 256) and a ViT-tiny-shaped
`ViTForImageClassification` (192 wide, 12 layers, 3 heads, 224 px, 1000 classes). Each is measured as built and with
each value path applied to the same weights: NeuTRENO (λ = 0.4) and the value residual (α = ½), fixed and learnable (the
value residual also with its gate), in layers 1-11, twicing (c = 1) in every layer, which calls attention twice per
layer (reported, not held to the targets), XSA (s = 1) in every layer, and on GPT-2 value embeddings (g = 1; their
tables add parameters and optimizer state by design: reported, not held). A training step is forward + backward + AdamW
step. Every model uses the same attention kernel (`--attn`, sdpa by default); the adapted ones wrap it. `step peak` is
the memory allocated during a step above what was allocated before it; `total` adds weights and optimizer state.
Targets: ≥ 0.97 of the unmodified model's throughput, ≤ 1.03 of its memory.
"""

import argparse
import statistics

import torch
from transformers import GPT2Config, GPT2LMHeadModel, ViTConfig, ViTForImageClassification

from hf_neutreno import apply_value_path

from .common import (
    adamw_step,
    add_common_arguments,
    interleaved_times,
    machine,
    paired_ratio,
    peak_bytes,
    report,
    resident_bytes,
    setup,
)

# label -> apply_value_path arguments (None: the model as built)
VARIANTS = {
    "unmodified": None,
    "NeuTRENO": dict(method="neutreno", coefficient=0.4),
    "NeuTRENO, learnable λ": dict(method="neutreno", coefficient=0.4, learnable=True),
    "value residual": dict(method="value_residual", coefficient=0.5),
    "value residual, learnable α": dict(method="value_residual", coefficient=0.5, learnable=True),
    "value residual, gate": dict(method="value_residual", coefficient=0.5, learnable="gate"),
    "twicing": dict(method="twicing", coefficient=1.0),  # every layer: a second attention call in each
    "XSA": dict(method="xsa", coefficient=1.0),  # every layer
    # nanochat's layers (every other one, ending with the last): a table of 50,257 × 768 in each, trained with AdamW
    "value embeddings": dict(method="value_embedding", coefficient=1.0),
}
SHAPES = ("gpt2-small", "vit-tiny")
CAUSAL_ONLY = ("value embeddings",)  # a table looked up by token id: the language model only


def build(shape: str, args, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights for every variant of a shape
    depth = args.num_hidden_layers or 12
    if shape == "gpt2-small":
        config = GPT2Config(
            vocab_size=args.vocab_size,
            n_embd=768,
            n_layer=depth,
            n_head=12,
            n_positions=1024,
            attn_implementation=args.attn,
        )
        return GPT2LMHeadModel(config).to(device)
    config = ViTConfig(
        hidden_size=192,
        num_hidden_layers=depth,
        num_attention_heads=3,
        intermediate_size=768,
        image_size=args.image_size,
        patch_size=16,
        num_labels=1000,
        attn_implementation=args.attn,
    )
    return ViTForImageClassification(config).to(device)


def inputs_for(shape: str, batch: int, args, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(0)
    if shape == "gpt2-small":
        ids = torch.randint(0, args.vocab_size, (batch, args.context), generator=generator).to(device)
        return {"input_ids": ids, "labels": ids}
    pixels = torch.randn(batch, 3, args.image_size, args.image_size, generator=generator).to(device)
    return {"pixel_values": pixels, "labels": torch.randint(0, 1000, (batch,), generator=generator).to(device)}


def measure(shape: str, args, device: torch.device, dtype: torch.dtype) -> list[dict]:
    batch = args.batch_size or (2 if shape == "gpt2-small" else 8)
    inputs = inputs_for(shape, batch, args, device)
    variants = {k: v for k, v in VARIANTS.items() if shape == "gpt2-small" or k not in CAUSAL_ONLY}
    models, steps = {}, {}
    for label, settings in variants.items():
        model = build(shape, args, device)
        models[label] = model if settings is None else apply_value_path(model, **settings)
        steps[label] = adamw_step(models[label], inputs, device, dtype)
    times = interleaved_times(
        {label: fn for label, (fn, _) in steps.items()}, device, rounds=args.rounds, clock=args.clock
    )
    peak = {label: peak_bytes(fn, device) for label, (fn, _) in steps.items()}  # after warm-up: steady state
    total = {label: peak[label] + resident_bytes(models[label], opt) for label, (_, opt) in steps.items()}
    unit = "tokens/s" if shape == "gpt2-small" else "img/s"
    per_step = batch * (args.context if shape == "gpt2-small" else 1)
    base = "unmodified"
    ratios = {label: paired_ratio(times, base, label) for label in variants}
    return [
        {
            "shape": shape,
            "model": label,
            "attention calls": 2 if (variants[label] or {}).get("method") == "twicing" else 1,  # per layer
            "batch": batch,
            unit: per_step / statistics.median(times[label]),
            "throughput ratio": ratios[label][0],
            "throughput ratio interval": ratios[label][1],
            "step peak MiB": peak[label] / 2**20,
            "step peak ratio": peak[label] / peak[base],
            "total memory ratio": total[label] / total[base],
        }
        for label in variants
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--context", type=int, default=256, help="GPT-2: tokens per sequence (default: 256)")
    parser.add_argument("--vocab-size", type=int, default=50257, help="GPT-2: vocabulary size (default: 50257)")
    parser.add_argument("--image-size", type=int, default=224, help="ViT: image size in pixels (default: 224)")
    args = parser.parse_args(argv)
    device, dtype = setup(args)
    args.rounds = args.rounds or (5 if args.quick else 11)
    rows = [row for shape in args.shapes for row in measure(shape, args, device, dtype)]
    meta = machine(args) | {
        "rounds": args.rounds,
        "context": args.context,
        "vocab_size": args.vocab_size,
        "image_size": args.image_size,
    }
    report("Value paths (apply_value_path) vs the unmodified model", rows, meta, args.out)
