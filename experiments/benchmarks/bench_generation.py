"""Time per generated token with the KV cache, at a short and a long cached context, against the native GPT-2.

Every method's extra work per new token must be O(d) per layer: the NeuTRENO term and the value residual's mix touch
only the new token's values, never the whole cache. So the ratio to native must not fall as the cache grows. Models
(GPT-2-small shape, randomly initialised, the same weights): the native `GPT2LMHeadModel`, the package's NeuTRENO GPT
converted from it (λ = 0.4, and λ = 0: the same model without the term), and the native model with
`apply_value_path` NeuTRENO (λ = 0.4) and value residual (α = ½). One step: the forward of one new token after
`context` cached tokens, batch `--batch-size`.

GPT-2 stores its projections' weights as (in, out) (its `Conv1D`), the NeuTRENO GPT as (out, in) (`nn.Linear`, as
Llama and most transformers models), which a matrix-vector product on a CPU may read at another speed. So one more
model is GPT-2 with its weights moved into `nn.Linear` layers, and each row's `ratio to same layout` is to the native
model of its own layout: the cost of the method, apart from the layout's.

    python -m experiments bench-generation --threads 1 --clock cpu                  # CPU
    python -m experiments bench-generation --dtype bf16 --rounds 30                 # GPU
"""

import argparse
import copy

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import DynamicCache
from transformers.pytorch_utils import Conv1D

from hf_neutreno import apply_value_path
from hf_neutreno.convert import gpt2_state_dict_to_neutreno, gpt2_to_neutreno

from .common import add_common_arguments, autocast, interleaved_times, machine, medians, paired_ratio, report, setup

NATIVE, NATIVE_LINEAR = "native GPT-2", "native GPT-2, nn.Linear layout"
# The models whose projection weights are laid out as nn.Linear's, (out, in); the others as GPT-2's, (in, out)
LINEAR_LAYOUT = {NATIVE_LINEAR, "NeuTRENO GPT", "NeuTRENO GPT, λ = 0"}


def build(args, device) -> dict[str, torch.nn.Module]:
    """The models, all holding the same weights in the same memory (`assign=True`): a step at batch 1 reads every
    weight once, so it is bound by memory, and where a model's copy of the weights happens to lie shifts its time by
    a few percent, the same in every round."""
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
    native = GPT2LMHeadModel._from_config(config, attn_implementation=args.attn).to(device)

    def gpt2_sharing_weights(state_dict):
        model = GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation=args.attn)
        model.load_state_dict(state_dict, assign=True)
        return model

    linear = gpt2_sharing_weights(native.state_dict())
    linear_names = into_linear_layers(linear)
    models = {NATIVE: native, NATIVE_LINEAR: linear}
    # GPT-2's weights with the (in, out) ones as views of the nn.Linear layers' (out, in) tensors, so that the
    # converter's transpose gives those tensors back: the NeuTRENO GPT shares them
    in_out = {
        name: (weight.t() if name.removesuffix(".weight") in linear_names else weight)
        for name, weight in linear.state_dict().items()
    }
    for label, neutreno_lambda in (("NeuTRENO GPT", 0.4), ("NeuTRENO GPT, λ = 0", 0.0)):
        models[label] = gpt2_to_neutreno(native, neutreno_lambda=neutreno_lambda)
        models[label].load_state_dict(gpt2_state_dict_to_neutreno(in_out, config.n_layer), assign=True)
        models[label].set_attn_implementation(args.attn)
    for label, method in (("GPT-2 + NeuTRENO", "neutreno"), ("GPT-2 + value residual", "value_residual")):
        models[label] = apply_value_path(gpt2_sharing_weights(native.state_dict()), method)
    return {name: model.to(device).eval() for name, model in models.items()}  # buffers too


def into_linear_layers(model: GPT2LMHeadModel) -> set[str]:
    """Replace each `Conv1D` (weight (in, out)) of `model` by the `nn.Linear` (weight (out, in), the same bias) that
    computes the same: the same network in the NeuTRENO GPT's weight layout. Returns the replaced modules' names."""
    names = set()
    for path, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                linear = torch.nn.Linear(*child.weight.shape, device=child.weight.device, dtype=child.weight.dtype)
                linear.weight = torch.nn.Parameter(child.weight.detach().t().contiguous())
                linear.bias = child.bias
                setattr(parent, name, linear)
                names.add(f"{path}.{name}")
    return names


def check_same_network(models: dict[str, torch.nn.Module], device) -> None:
    """The models without a method (the native one in either layout, and the NeuTRENO GPT at λ = 0) must give the
    native logits: a guard that they really share one network."""
    ids = torch.randint(1, models[NATIVE].config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    same = (NATIVE_LINEAR, "NeuTRENO GPT, λ = 0")
    with torch.no_grad():
        logits = {name: models[name](ids.to(device)).logits.float() for name in (NATIVE, *same)}
    for name in same:
        difference = (logits[name] - logits[NATIVE]).abs().max().item()
        if difference > 1e-3:
            raise RuntimeError(f"{name} gives other logits than the native GPT-2 (max |Δ| {difference:.2e}).")


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch_size=1)
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 2048])
    parser.add_argument("--vocab-size", type=int, default=50257)
    args = parser.parse_args(argv)
    device, dtype = setup(args)
    args.rounds = args.rounds or (5 if args.quick else 30)
    models = build(args, device)
    check_same_network(models, device)
    rows = []
    for context in args.contexts:
        steps = {name: decode_step(model, context, args.batch_size, device, dtype) for name, model in models.items()}
        times = interleaved_times(steps, device, rounds=args.rounds, warmup=3, clock=args.clock)
        seconds = medians(times)
        for name in models:
            row = {"context": context, "model": name, "layout": "(out, in)" if name in LINEAR_LAYOUT else "(in, out)"}
            row["ms per token"] = seconds[name] * 1e3
            row["ratio to native"], row["ratio to native interval"] = paired_ratio(times, NATIVE, name)
            same_layout = NATIVE_LINEAR if name in LINEAR_LAYOUT else NATIVE
            row["ratio to same layout"], row["ratio to same layout interval"] = paired_ratio(times, same_layout, name)
            rows.append(row)
    meta = machine(args) | {"batch": args.batch_size, "rounds": args.rounds}
    report("Time per generated token with the KV cache", rows, meta, args.out)
