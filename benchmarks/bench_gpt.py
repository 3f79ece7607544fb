#!/usr/bin/env python
"""NeuTRENO GPT against the native `GPT2LMHeadModel` of the same dimensions, side by side in one run.

For each shape the native model is built, and the NeuTRENO model is `gpt2_to_neutreno(native, neutreno_lambda=0.4)`:
the same weights and architecture, so the ratios measure the cost of the implementation plus the NeuTRENO term.
Both use SDPA. Measurements alternate between the two models (A B A B ...) so drifts in machine load hit both alike,
and the medians are compared.

- training tokens/s: forward + backward + AdamW step on (batch, seq_len) blocks of Zipf-distributed ids (like
  words), labels = inputs;
- training peak memory: the peak allocated during one training step above what was allocated before it (weights,
  optimizer state): `torch.cuda.max_memory_allocated` on CUDA, the profiler's allocation timeline on CPU;
- generation tokens/s: greedy `generate` with the KV cache (DynamicCache), fixed prompt and number of new tokens.

Shapes: `paper` (the paper's model dimensions: 16 layers, dim 128, 8 heads, FFN 2048 ReLU, context 256, with a
33,279-word vocabulary (WikiText-2's) and a full softmax, which GPT-2 can represent) and `gpt2-small` (124M).
`--as_trained` adds an informational row: the `wikitext103-small` preset as the paper trains it (post-LN, sinusoidal,
tied adaptive softmax over 267,735 words) against the native GPT-2 of the same dimensions with a full softmax.

    python benchmarks/bench_gpt.py --quick                                   # CPU, about 3 minutes
    python benchmarks/bench_gpt.py --device cuda --dtype bfloat16 --as_trained
"""

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hf_neutreno import NeuTRENOGPTConfig, NeuTRENOGPTForCausalLM  # noqa: E402
from hf_neutreno.convert import gpt2_to_neutreno  # noqa: E402

SHAPES = {
    "paper": dict(n_layer=16, n_embd=128, n_head=8, n_inner=2048, activation_function="relu", n_positions=256,
                  vocab_size=33279),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, n_inner=3072, activation_function="gelu_new",
                       n_positions=1024, vocab_size=50257),
}
WT103_VOCAB = 267735


def build_pair(shape: str, neutreno_lambda: float) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    dims = SHAPES[shape] if shape != "as-trained" else {**SHAPES["paper"], "vocab_size": WT103_VOCAB}
    config = GPT2Config(**dims, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    native = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    if shape == "as-trained":
        preset = NeuTRENOGPTConfig.from_preset(
            "wikitext103-small", embedding_dropout=0.0, hidden_dropout=0.0, activation_dropout=0.0, output_dropout=0.0,
            neutreno_lambda=neutreno_lambda, bos_token_id=0, eos_token_id=0,
        )
        neutreno = NeuTRENOGPTForCausalLM._from_config(preset, attn_implementation="sdpa")
    else:
        neutreno = gpt2_to_neutreno(native, neutreno_lambda=neutreno_lambda)
        neutreno.set_attn_implementation("sdpa")
    return {"native GPT-2": native, "NeuTRENO": neutreno}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


def train_step(model, optimizer, ids, device, dtype) -> None:
    with autocast(device, dtype):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def zipf_ids(vocab: int, shape: tuple[int, int], device) -> torch.Tensor:
    """Word-like token ids (frequency ∝ 1/rank): what an adaptive softmax's shortlist and clusters are built for."""
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    return torch.multinomial(1 / ranks, shape[0] * shape[1], replacement=True).view(shape).to(device)


def time_training(models, args, device, dtype) -> dict[str, float]:
    vocab = next(iter(models.values())).config.vocab_size
    ids = zipf_ids(vocab, (args.batch_size, args.seq_len), device)
    fused = device.type == "cuda"
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=fused) for name, m in models.items()}
    for name, model in models.items():
        model.train()
        for _ in range(args.warmup):
            train_step(model, optimizers[name], ids, device, dtype)
    times = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(args.steps):
                train_step(model, optimizers[name], ids, device, dtype)
            sync(device)
            times[name].append(time.perf_counter() - start)
    tokens = args.batch_size * args.seq_len * args.steps
    memory = {}
    for name, model in models.items():
        if device.type == "cuda":
            sync(device)
            resident = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            train_step(model, optimizers[name], ids, device, dtype)
            sync(device)
            memory[name] = (torch.cuda.max_memory_allocated(device) - resident) / 2**20
        else:
            memory[name] = cpu_step_peak_mb(model, optimizers[name], ids, dtype)
    del optimizers
    return {name: tokens / statistics.median(t) for name, t in times.items()}, memory


def time_generation(models, args, device, dtype) -> dict[str, float]:
    vocab = next(iter(models.values())).config.vocab_size
    prompt = torch.randint(1, vocab, (args.gen_batch_size, args.prompt_len), device=device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, use_cache=True,
                  pad_token_id=0, eos_token_id=None)
    times = {name: [] for name in models}
    with torch.no_grad():
        for model in models.values():
            model.eval()
            with autocast(device, dtype):
                model.generate(prompt, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
        for _ in range(args.repeats):
            for name, model in models.items():
                sync(device)
                start = time.perf_counter()
                with autocast(device, dtype):
                    out = model.generate(prompt, **kwargs)
                sync(device)
                times[name].append(time.perf_counter() - start)
                assert out.shape[1] == args.prompt_len + args.new_tokens
    return {name: args.gen_batch_size * args.new_tokens / statistics.median(t) for name, t in times.items()}


def cpu_step_peak_mb(model, optimizer, ids, dtype: torch.dtype) -> float:
    """Peak allocated CPU memory of one training step above what was allocated before it (MB), from the profiler's
    allocation timeline: exact and deterministic, unlike the process RSS."""
    import tempfile
    import warnings

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        train_step(model, optimizer, ids, torch.device("cpu"), dtype)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of a CUDA-only API
        prof.export_memory_timeline(f"{tmp}/timeline.json", device="cpu")
        _, sizes = json.loads(Path(f"{tmp}/timeline.json").read_text())
    totals = [sum(row) for row in sizes]
    return (max(totals) - totals[0]) / 2**20


def check_equivalence(models, device) -> float:
    """λ = 0 must reproduce the native logits: a guard that the two models really are the same network."""
    native, neutreno = models["native GPT-2"], models["NeuTRENO"]
    if not isinstance(neutreno, NeuTRENOGPTForCausalLM) or neutreno.config.adaptive_softmax_cutoffs:
        return float("nan")
    ids = torch.randint(0, native.config.vocab_size, (1, 32), device=device)
    attentions = [layer.self_attn for layer in neutreno.model.layers]
    lambdas = [attn.neutreno_lambda for attn in attentions]
    for attn in attentions:
        attn.neutreno_lambda = 0.0
    with torch.no_grad():
        diff = (native.eval()(ids).logits.float() - neutreno.eval()(ids).logits.float()).abs().max().item()
    for attn, lam in zip(attentions, lambdas):
        attn.neutreno_lambda = lam
    return diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="Autocast dtype (weights and optimizer stay fp32).")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--as_trained", action="store_true", help="Add the paper's preset with its adaptive softmax.")
    parser.add_argument("--neutreno_lambda", type=float, default=0.4)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10, help="Training steps per timed block.")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="Timed blocks per model, interleaved.")
    parser.add_argument("--gen_batch_size", type=int, default=4)
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads.")
    parser.add_argument("--quick", action="store_true", help="Small CPU settings (batch 2, 128 tokens, 3 steps).")
    parser.add_argument("--json", default=None, help="Also write the results here.")
    args = parser.parse_args()
    if args.quick:
        args.batch_size, args.seq_len, args.steps, args.warmup, args.repeats = 2, 128, 3, 1, 3
        args.gen_batch_size, args.new_tokens = 1, 32
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    if device.type == "cpu" and dtype != torch.float32:
        print("note: CPU autocast in", args.dtype)

    machine = (torch.cuda.get_device_name(device) if device.type == "cuda"
               else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"torch {torch.__version__}, {machine}, dtype {args.dtype}, λ = {args.neutreno_lambda}, "
          f"train batch {args.batch_size}×{args.seq_len}, "
          f"generate {args.gen_batch_size}×({args.prompt_len}+{args.new_tokens})")
    shapes = list(args.shapes) + (["as-trained"] if args.as_trained else [])
    results = {}
    for shape in shapes:
        models = {name: m.to(device) for name, m in build_pair(shape, args.neutreno_lambda).items()}
        diff = check_equivalence(models, device)
        train, memory = time_training(models, args, device, dtype)
        generate = time_generation(models, args, device, dtype)
        results[shape] = dict(train_tokens_per_s=train, train_peak_memory_mb=memory, generate_tokens_per_s=generate,
                              lambda0_max_logit_diff=diff)
        native, ours = "native GPT-2", "NeuTRENO"
        print(f"\n{shape}: {sum(p.numel() for p in models[ours].parameters()) / 1e6:.1f}M parameters "
              f"(native {sum(p.numel() for p in models[native].parameters()) / 1e6:.1f}M); λ=0 max |Δlogit| {diff:.1e}")
        print(f"  {'':28}{native:>14}{ours:>14}{'ratio':>9}")
        rows = [("train tokens/s", train), ("train step peak MB", memory), ("generate tokens/s (cache)", generate)]
        for label, values in rows:
            print(f"  {label:28}{values[native]:14.1f}{values[ours]:14.1f}{values[ours] / values[native]:9.3f}")
        del models
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), machine=machine, results=results), indent=2))


if __name__ == "__main__":
    main()
