#!/usr/bin/env python
"""Time per generated token with the KV cache, at a short and a long cached context, against the native GPT-2.

Every method's extra work per new token must be O(d) per layer: the NeuTRENO term and the value residual's mix touch
only the new token's values, never the whole cache. So the ratio to native must not fall as the cache grows. Models
(GPT-2-small shape, randomly initialised, the same weights): the native `GPT2LMHeadModel`, the package's NeuTRENO GPT
converted from it (λ = 0.4), and the native model with `apply_value_path` NeuTRENO (λ = 0.4) and value residual
(α = ½). One step: the forward of one new token after `context` cached tokens, batch `--batch-size`.

    python benchmarks/bench_generation.py --threads 1 --clock cpu --rounds 15      # CPU
    python benchmarks/bench_generation.py --dtype bf16 --rounds 30                 # GPU
"""

import argparse
import copy

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import DynamicCache

from common import add_common_arguments, autocast, interleaved_times, machine, medians, report, setup
from hf_neutreno import apply_value_path
from hf_neutreno.convert import gpt2_to_neutreno

NATIVE = "native GPT-2"


def build(args, device) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=args.num_hidden_layers or 12,
        n_embd=768,
        n_head=12,
        n_positions=max(args.contexts) + 8,
        vocab_size=args.vocab_size,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    native = GPT2LMHeadModel._from_config(config, attn_implementation=args.attn)
    models = {NATIVE: native, "NeuTRENO GPT": gpt2_to_neutreno(native, neutreno_lambda=0.4)}
    models["NeuTRENO GPT"].set_attn_implementation(args.attn)
    for label, method in (("GPT-2 + NeuTRENO", "neutreno"), ("GPT-2 + value residual", "value_residual")):
        adapted = GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation=args.attn)
        adapted.load_state_dict(native.state_dict())
        models[label] = apply_value_path(adapted, method)
    return {name: model.to(device).eval() for name, model in models.items()}


def decode_step(model, context: int, batch: int, device, dtype):
    """A closure: the forward of one new token after `context` cached tokens (the cache is cut back after it)."""
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, model.config.vocab_size, (batch, context), generator=generator).to(device)
    token = prompt[:, -1:]
    position = torch.full((batch, 1), context, device=device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode(), autocast(device, dtype):
        model(input_ids=prompt, cache=cache, use_cache=True)

    def step():
        with torch.inference_mode(), autocast(device, dtype):
            model(input_ids=token, cache=cache, use_cache=True, position_ids=position)
        cache.crop(-1)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch_size=1)
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 2048])
    parser.add_argument("--vocab-size", type=int, default=50257)
    args = parser.parse_args()
    device, dtype = setup(args)
    args.rounds = args.rounds or (5 if args.quick else 20)
    models = build(args, device)
    rows = []
    for context in args.contexts:
        steps = {name: decode_step(model, context, args.batch_size, device, dtype) for name, model in models.items()}
        seconds = medians(interleaved_times(steps, device, rounds=args.rounds, warmup=3, clock=args.clock))
        for name in models:
            rows.append(
                {
                    "context": context,
                    "model": name,
                    "ms per token": seconds[name] * 1e3,
                    "ratio to native": seconds[NATIVE] / seconds[name],
                }
            )
    meta = machine(args) | {"batch": args.batch_size, "rounds": args.rounds}
    report("Time per generated token with the KV cache", rows, meta, args.out)


if __name__ == "__main__":
    main()
