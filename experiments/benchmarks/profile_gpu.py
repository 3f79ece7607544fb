"""Where a NeuTRENO training step spends its GPU time against the native model, and what torch.compile changes.

For DeiT-tiny (batch 256, 224 px) and the paper's GPT shape (16 layers, dim 128, batch 32 × 256 tokens), native and
NeuTRENO side by side, bf16 autocast, SDPA:

- the CUDA kernels of one training step (forward, backward, AdamW) from the PyTorch profiler: how many, the GPU time
  they take, and which kernels the NeuTRENO model adds (by name, count and time per step);
- the host time per step (the profiler's CPU total) and the wall time per step;
- the throughput ratio NeuTRENO / native, eager and under `torch.compile`, from interleaved rounds; with
  `--cuda-graphs`, also replayed as CUDA graphs (`mode="reduce-overhead"`), which removes the host's launch cost.

    python -m experiments profile-gpu --out profile.json        # on a GPU, a few minutes
    python -m experiments profile-gpu --smoke                   # the code path on a CPU, toy sizes
"""

import argparse
import json
import time
from collections import defaultdict
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile

from .bench_gpt import build_pair, zipf_ids
from .bench_vit import build as build_vit
from .common import adamw_step, interleaved_times, machine, medians


def models_and_inputs(shape: str, args, device):
    if shape == "deit-tiny":
        names = ("native", "neutreno")
        models = {name: build_vit(name, args.image_size, "sdpa", device, args.num_hidden_layers) for name in names}
        pixels = torch.randn(args.vit_batch, 3, args.image_size, args.image_size, device=device)
        labels = torch.randint(0, 1000, (args.vit_batch,), device=device)
        return models, {"pixel_values": pixels, "labels": labels}, args.vit_batch
    models = build_pair("paper", 0.4, "sdpa", device, args.context, args.num_hidden_layers)
    ids = zipf_ids(models["native"].config.vocab_size, (args.gpt_batch, args.context), device)
    return models, {"input_ids": ids, "labels": ids, "use_cache": False}, args.gpt_batch * args.context


def kernel_table(step, device, steps: int) -> tuple[dict, float]:
    """{kernel name: [calls, GPU µs]} per step, and the host (CPU) µs per step."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    kernels = defaultdict(lambda: [0, 0.0])
    host = 0.0
    for event in prof.key_averages():
        if device.type == "cuda" and event.device_type.name == "CUDA":
            kernels[event.key][0] += event.count / steps
            kernels[event.key][1] += event.self_device_time_total / steps
    for event in prof.events():
        if event.device_type.name == "CPU" and event.cpu_parent is None:
            host += event.cpu_time_total / steps  # top-level host events only: each µs counted once
    return dict(kernels), host


def added_kernels(native: dict, other: dict, top: int = 25) -> list[dict]:
    names = set(native) | set(other)
    rows = []
    for name in names:
        calls = other.get(name, [0, 0.0])[0] - native.get(name, [0, 0.0])[0]
        micros = other.get(name, [0, 0.0])[1] - native.get(name, [0, 0.0])[1]
        if abs(calls) > 1e-9 or abs(micros) > 1.0:
            rows.append({"kernel": name[:160], "calls": round(calls, 2), "µs": round(micros, 1)})
    return sorted(rows, key=lambda r: -abs(r["µs"]))[:top]


def plain_term():
    """A context in which the models' NeuTRENO term is plain autograd ops, whose backward pass reads the backend's own
    copy of its output (kept: more memory) instead of rebuilding it, for a comparison."""
    from hf_neutreno.models import neutreno_term

    return mock.patch.object(neutreno_term, "may_recompute_saved", lambda: False)


def cuda_graph_ratio(models: dict, inputs: dict, device, dtype, rounds: int) -> dict:
    """Native against NeuTRENO with `torch.compile(mode="reduce-overhead")`: forward and backward replayed as CUDA
    graphs, which removes the host's launch cost per kernel, so what is left is the GPU work each model adds."""
    steps = {}
    for name, model in models.items():
        step = adamw_step(torch.compile(model, mode="reduce-overhead"), inputs, device, dtype)[0]

        def graphed(step=step):
            torch.compiler.cudagraph_mark_step_begin()  # each step's outputs are dead before the next replay
            step()

        steps[name] = graphed
    start = time.perf_counter()
    try:
        for step in steps.values():
            for _ in range(3):
                step()
    except Exception as error:  # a measurement that cannot run says why, and the others stand
        return {"cuda-graph error": f"{type(error).__name__}: {str(error)[:300]}"}
    seconds = medians(interleaved_times(steps, device, rounds=rounds, warmup=1))
    return {
        "cuda-graph compile s": round(time.perf_counter() - start, 1),
        "cuda-graph wall ms per step": {n: round(s * 1e3, 3) for n, s in seconds.items()},
        "cuda-graph ratio": round(seconds["native"] / seconds["neutreno"], 4),
    }


def profile_shape(shape: str, args, device, dtype) -> dict:
    models, inputs, items = models_and_inputs(shape, args, device)
    steps = {}
    for name, model in models.items():
        steps[name] = adamw_step(model, inputs, device, dtype)[0]
    for step in steps.values():
        for _ in range(3):
            step()
    result = {"shape": shape, "items per step": items}
    tables = {}
    for name, step in steps.items():
        tables[name], host = kernel_table(step, device, args.profile_steps)
        result[f"{name} kernels per step"] = round(sum(c for c, _ in tables[name].values()), 1)
        result[f"{name} GPU ms per step"] = round(sum(t for _, t in tables[name].values()) / 1e3, 3)
        result[f"{name} host ms per step"] = round(host / 1e3, 3)
    result["added kernels"] = added_kernels(tables["native"], tables["neutreno"])
    seconds = medians(interleaved_times(steps, device, rounds=args.rounds, warmup=1))
    result["eager wall ms per step"] = {n: round(s * 1e3, 3) for n, s in seconds.items()}
    result["eager ratio"] = round(seconds["native"] / seconds["neutreno"], 4)
    # The same NeuTRENO model with the term as plain autograd ops (keeps the backend's output too: more memory).
    with plain_term():
        seconds = medians(interleaved_times(steps, device, rounds=args.rounds, warmup=1))
    result["eager ratio, term as plain autograd ops"] = round(seconds["native"] / seconds["neutreno"], 4)
    if args.compile:
        compiled = {}
        for name, model in models.items():
            compiled[name] = adamw_step(torch.compile(model), inputs, device, dtype)[0]
        start = time.perf_counter()
        for step in compiled.values():
            for _ in range(3):
                step()
        result["compile s"] = round(time.perf_counter() - start, 1)
        seconds = medians(interleaved_times(compiled, device, rounds=args.rounds, warmup=1))
        result["compiled wall ms per step"] = {n: round(s * 1e3, 3) for n, s in seconds.items()}
        result["compiled ratio"] = round(seconds["native"] / seconds["neutreno"], 4)
    if args.cuda_graphs and device.type == "cuda":
        result.update(cuda_graph_ratio(models, inputs, device, dtype, args.rounds))
    del models, steps
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["deit-tiny", "gpt-paper"])
    parser.add_argument("--vit-batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--gpt-batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--num-hidden-layers", type=int, default=None, help="depth (default: the shape's)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="also time both models under torch.compile(mode='reduce-overhead') (CUDA graphs; GPU only)",
    )
    parser.add_argument("--smoke", action="store_true", help="toy sizes on a CPU: checks the code path")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16
    if args.smoke:
        args.vit_batch, args.image_size, args.gpt_batch, args.context, args.num_hidden_layers = 2, 32, 1, 16, 2
        args.rounds, args.profile_steps, args.compile = 2, 1, False
    torch.manual_seed(0)
    results = {"machine": machine(), "dtype": "bf16", "attn": "sdpa", "shapes": []}
    for shape in args.shapes:
        results["shapes"].append(profile_shape(shape, args, device, dtype))
        print(json.dumps(results["shapes"][-1], indent=1, ensure_ascii=False), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1, ensure_ascii=False)
