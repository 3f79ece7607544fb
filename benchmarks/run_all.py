#!/usr/bin/env python
"""Rerun every benchmark and reproduction, then render the pages that report them.

    python benchmarks/run_all.py --quick                 # everything at a toy size: < 10 min on 2 CPU cores
    python benchmarks/run_all.py --docs docs             # the papers' budgets (reproduce.py's `full`), bf16: days
    python benchmarks/run_all.py --budget gpu --docs docs   # the GPU tier: ~40 min, one H100
    python benchmarks/run_all.py --budget gpu --smoke      # its code path on a CPU: minutes
    python benchmarks/run_all.py --render --out benchmarks/results --docs docs   # only re-render the pages

Speed and memory (`bench_vit.py`, `bench_eigen_vit.py`, `bench_gpt.py`, `bench_diagnostics.py`,
`bench_segmenter.py`) write one JSON each into --out; the reproductions (`evidence/reproduce.py`) write theirs
into --out/reproduce (the GPU tier's default: evidence/results/reproduce-gpu). With --docs, the pages
`benchmarks.md` (speed and memory, rendered here from the JSON, each table with its machine and command, each ratio
checked against its target) and `results.md` (the reproductions, rendered by `reproduce.py`) are written there.
A hand-written `notes.md` in --out is included in `benchmarks.md` as the reading of those numbers.

The GPU tier (`--budget gpu`) writes into benchmarks/results/gpu (its reproductions into
evidence/results/reproduce-gpu) and, with --docs, the pages `benchmarks-gpu.md` and `results-gpu.md` (the CPU pages
stay as they are), each naming the GPU, dtype and library versions. It runs every
benchmark at GPU batch sizes in bf16 with sdpa attention (flash kernels on an H100 in bf16), and reproduce.py's
`gpu` budget: the four CIFAR-10 ViT variants for 25 epochs and the WikiText-2 LMs to early stopping, 3 seeds, 4 units
at a time on the one GPU. docs/benchmarks.md ("The GPU tier") gives the time estimate and how it was made. A run cut
off resumes where it stopped when rerun. `--smoke` runs the same code path (the same scripts, bf16, sdpa, every table
and page) on a CPU with toy models, steps and batches: a check of the code, not a measurement.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EVIDENCE = HERE.parent / "evidence"  # the reproductions: their script, page generator and results

# Each benchmark's flags per tier. quick: every table at a size 2 CPU cores run in a few minutes. full: bf16 at the
# scripts' GPU batch sizes. gpu: bf16 at batch sizes that keep an H100 busy (the ViTs' 197 and 577 tokens fill it at
# 256 images; the NeuTRENO term is per token, so the ratios need no larger batch). gpu-smoke: the gpu tier's tables on
# a CPU with toy sizes (`--smoke`).
BENCHMARKS = {
    "vit": (
        "bench_vit.py",
        {
            "quick": ["--quick", "--image-sizes", "224", "--rounds", "3"],
            "full": ["--dtype", "bf16"],
            "gpu": ["--dtype", "bf16", "--batch-size", "256", "--rounds", "20"],
            "gpu-smoke": ["--dtype", "bf16", "--image-sizes", "32", "--batch-size", "2", "--rounds", "1"],
        },
    ),
    "eigen_vit": (
        "bench_eigen_vit.py",
        {
            "quick": ["--quick", "--rounds", "3"],
            "full": ["--dtype", "bf16"],
            "gpu": ["--dtype", "bf16", "--batch-size", "256", "--rounds", "20"],
            "gpu-smoke": ["--dtype", "bf16", "--preset", "vit-tiny", "--batch-size", "2", "--rounds", "1"],
        },
    ),
    "gpt": (
        "bench_gpt.py",
        {
            "quick": ["--quick", "--shapes", "paper", "--scaling-contexts", "256", "1024", "--rounds", "3"],
            "full": ["--dtype", "bf16", "--as-trained"],
            "gpu": [
                "--dtype",
                "bf16",
                "--batch-size",
                "32",
                "--gen-batch-size",
                "16",
                "--rounds",
                "10",
                "--as-trained",
            ],
            "gpu-smoke": [
                "--dtype",
                "bf16",
                "--shapes",
                "paper",
                "--context",
                "32",
                "--scaling-contexts",
                "32",
                "64",
                "--batch-size",
                "1",
                "--gen-batch-size",
                "1",
                "--prompt-len",
                "4",
                "--new-tokens",
                "2",
                "--rounds",
                "1",
            ],
        },
    ),
    "diagnostics": (
        "bench_diagnostics.py",
        {
            "quick": ["--quick"],
            "full": [],
            "gpu": ["--dtype", "bf16", "--batch-size", "125"],
            "gpu-smoke": [
                "--dtype",
                "bf16",
                "--sizes",
                "4",
                "8",
                "--batch-size",
                "4",
                "--image-size",
                "32",
                "--repeats",
                "1",
                "--modes",
                "inference",
                "hidden",
            ],
        },
    ),
    # The setting is a CPU one (512 px, batch 2): one thread and the process's CPU time at both sizes.
    "segmenter": (
        "bench_segmenter.py",
        {
            "quick": ["--quick", "--threads", "1", "--clock", "cpu"],
            "full": ["--threads", "1", "--clock", "cpu"],
            "gpu": ["--dtype", "bf16", "--batch-size", "8", "--rounds", "20"],
            "gpu-smoke": ["--dtype", "bf16", "--quick", "--batch-size", "1", "--rounds", "1"],
        },
    ),
    # Exact on every CPU, so one count serves every tier that runs on a CPU.
    "op_counts": ("count_ops.py", {"quick": [], "full": []}),
    "generation": (
        "bench_generation.py",
        {
            "quick": ["--quick", "--threads", "1", "--clock", "cpu", "--num-hidden-layers", "4", "--rounds", "5"],
            "full": ["--threads", "1", "--clock", "cpu"],
            "gpu": ["--dtype", "bf16", "--rounds", "30"],
            "gpu-smoke": ["--dtype", "bf16", "--contexts", "8", "16", "--vocab-size", "512", "--rounds", "1"],
        },
    ),
    # The setting is a CPU one (GPT-2-small and ViT-tiny shapes): one thread and the process's CPU time.
    "value_path": (
        "bench_value_path.py",
        {
            "quick": ["--quick", "--threads", "1", "--clock", "cpu", "--context", "64", "--rounds", "3"],
            "full": ["--threads", "1", "--clock", "cpu"],
            "gpu": ["--dtype", "bf16", "--batch-size", "32", "--rounds", "20"],
            "gpu-smoke": [
                "--dtype",
                "bf16",
                "--batch-size",
                "1",
                "--context",
                "16",
                "--vocab-size",
                "512",
                "--image-size",
                "32",
                "--rounds",
                "1",
            ],
        },
    ),
}
# reproduce.py per tier: its budget and flags (`--workers`: below).
REPRODUCE = {
    "quick": ["--quick"],
    "full": ["--budget", "full", "--bf16"],
    "gpu": ["--budget", "gpu"],
    # The gpu budget with toy sizes: 1 seed, 2-layer models, a few images and tokens, 2 steps each (bf16 on the CPU).
    "gpu-smoke": [
        "--budget",
        "gpu",
        "--seeds",
        "0",
        "--main-claim-seeds",
        "0",
        "--vit-layers",
        "2",
        "--lm-layers",
        "2",
        "--train-samples",
        "16",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--test-samples",
        "12",
        "--corruption-samples",
        "4",
        "--oversmoothing-samples",
        "6",
        "--spectral-samples",
        "3",
        "--lm-steps",
        "4",
        "--lm-batch-size",
        "1",
        "--lm-warmup-steps",
        "0",
        "--lm-eval-steps",
        "2",
        "--lm-patience",
        "1",
        "--lm-curve-tokens",
        "520",
        "--sliding-tokens",
        "259",
        "--block-tokens",
        "520",
        "--dataloader-workers",
        "1",
    ],
}
# The pages each tier writes into --docs: (speed and memory, reproductions).
PAGES = {"gpu": ("benchmarks-gpu.md", "results-gpu.md")}
DEFAULT_PAGES = ("benchmarks.md", "results.md")

# What each table is checked against: (row filter, column, comparison, target).
TARGETS = {
    "vit": [
        (None, "throughput ratio", ">=", 0.97),
        (None, "total memory ratio", "<=", 1.03),
        ({"mode": "train"}, "step peak ratio", "<=", 1.03),
    ],
    "eigen_vit": [
        ({"model": "EigenViT (ViT⁻)"}, "train ratio", ">=", 0.97),
        ({"model": "EigenViT (ViT⁻)"}, "infer ratio", ">=", 0.98),
        ({"model": "EigenViT (ViT⁻) → to_neutreno_vit()"}, "infer ratio", ">=", 0.98),
    ],
    "gpt": [
        ({"shape": "paper"}, "train throughput ratio", ">=", 0.97),
        ({"shape": "gpt2-small"}, "train throughput ratio", ">=", 0.97),
        ({"shape": "paper"}, "total memory ratio", "<=", 1.03),
        ({"shape": "gpt2-small"}, "total memory ratio", "<=", 1.03),
        ({"shape": "paper"}, "generate throughput ratio", ">=", 0.95),
        ({"shape": "gpt2-small"}, "generate throughput ratio", ">=", 0.95),
    ],
    "gpt_scaling": [(None, "train throughput ratio", ">=", 0.97), (None, "total memory ratio", "<=", 1.03)],
    "diagnostics": [({"mode": "hidden"}, "× inference", "<=", 1.5)],
    "generation": [(None, "ratio to native", ">=", 0.95)],
    "segmenter": [
        (None, "throughput ratio", ">=", 0.97),
        (None, "total memory ratio", "<=", 1.03),
        (None, "step peak ratio", "<=", 1.03),
    ],
    "value_path": [
        (None, "throughput ratio", ">=", 0.97),
        (None, "total memory ratio", "<=", 1.03),
        (None, "step peak ratio", "<=", 1.03),
    ],
}
# The paper's GPT shape (dim 128) is too small to keep a GPU busy: its GPU target is 0.90.
GPU_TARGETS = {
    ("gpt", str({"shape": "paper"}), "train throughput ratio"): 0.90,
    ("gpt_scaling", str(None), "train throughput ratio"): 0.90,
}
SECTIONS = {  # JSON file -> (heading, what it measures)
    "vit": (
        "NeuTRENO ViT vs the native ViT",
        "DeiT-tiny shape, λ = 0.6 in layers 1-11, against `transformers`' `ViTForImageClassification` of the "
        "same shape and attention kernel. A training step is forward + backward + AdamW; inference is a forward "
        "under `torch.inference_mode`. `step peak` is the memory allocated during a step above what was allocated "
        "before it; `total` adds weights and optimizer state.",
    ),
    "eigen_vit": (
        "EigenViT vs the NeuTRENO ViT and the native ViT",
        "vit-tiny-224 shape. EigenViT makes the value and output weights of all its layers from Θ, ψ with "
        "one QR batched over layers and heads in every forward with gradients; without gradients it makes "
        "them once and reuses them while Θ and ψ are unchanged. `→ to_neutreno_vit()` is its export with "
        "those weights stored (timed at inference only). Ratios are to the native ViT.",
    ),
    "gpt": (
        "NeuTRENO GPT vs the native GPT-2",
        "The NeuTRENO model is `gpt2_to_neutreno(native, λ = 0.4)`: the same weights and architecture (the λ = 0 "
        "column checks they give the same logits). Training on Zipf-distributed token ids; generation is greedy "
        "`generate` with the KV cache. `as-trained` (informational) is the paper's preset with its tied adaptive "
        "softmax over 267,735 words against GPT-2 of the same dimensions with a full softmax.",
    ),
    "gpt_scaling": (
        "Context scaling of the NeuTRENO GPT",
        "The paper's shape at contexts 256 → 2048 with the same number of tokens per step (the batch "
        "shrinks as the context grows): the NeuTRENO term is O(N·d), so the ratio should stay flat while "
        "attention's O(N²) share grows in both models.",
    ),
    "diagnostics": (
        "Cost of `measure_oversmoothing`",
        "DeiT-tiny (NeuTRENO, λ = 0.6) on real CIFAR-10 test images resized to 224 px: time relative to "
        "plain inference over the same images, and the peak memory of a fresh process at two numbers of "
        "images (it must not grow with them). `hidden`: the default hidden-state metrics (cosine "
        "similarity, HFC/LFC, distance to rank one); `hidden+erank`: those and the effective rank, "
        "measured only when asked for by name; `default`: the default metric set, attention metrics "
        "included; `all`: every metric.",
    ),
    "op_counts": (
        "Kernels per training step and per generated token",
        "Every ATen operation that launches a kernel (views, detaches and uninitialised allocations "
        "excluded) in one forward and backward pass (`training`), one forward without gradients "
        "(`inference`) or one new token's forward with the KV cache (`generation`), counted on a CPU by "
        "`benchmarks/count_ops.py`: exact, the same on every CPU. `per layer` is the slope over depth, "
        "(count at 4 layers − count at 2) / 2; `per step` the rest. `+` columns are differences to the "
        "native counterpart (transformers' GPT-2 or ViT of the same shape); a negative `+ per step` is "
        "layer 0, which has no term. On small GPU shapes each kernel's launch sets the step time. "
        "tests/test_op_counts.py holds each count under its ceiling.",
    ),
    "generation": (
        "Time per generated token with the KV cache",
        "GPT-2-small shape, batch 1: the forward of one new token after 128 and after 2,048 cached tokens, "
        "for the native `GPT2LMHeadModel`, the NeuTRENO GPT converted from it (λ = 0.4) and the native "
        "model with `apply_value_path` NeuTRENO (λ = 0.4) and value residual (α = ½). Each method's extra "
        "work per new token is O(d) per layer (only the new token's values), so a ratio must not fall as "
        "the cache grows.",
    ),
    "segmenter": (
        "NeuTRENO Segmenter vs the λ = 0 Segmenter",
        "The `segmenter-deit-tiny` preset (DeiT-tiny encoder, 2-block mask transformer, 150 classes) with "
        "λ = 0.6 in the encoder and in the decoder (its own V_0), against the same model and initial "
        "weights with λ = 0 in both. A training step is forward + loss on 512 × 512 labels + backward + "
        "SGD with momentum 0.9 (Segmenter's optimizer). `step peak` is the memory allocated during a step "
        "above what was allocated before it; `total` adds weights and momentum buffers.",
    ),
    "value_path": (
        "Value paths on native models (`apply_value_path`)",
        "A GPT-2-small-shaped `GPT2LMHeadModel` (context 256, batch 2) and a ViT-tiny-shaped "
        "`ViTForImageClassification` (224 px, batch 8), randomly initialised, as built (`unmodified`) and "
        "with each value path applied to the same weights: NeuTRENO (λ = 0.4) and the value residual "
        "(α = ½), fixed and learnable, in layers 1-11. A training step is forward + backward + AdamW. On "
        "a CPU the five models run with one thread, timed by the process's CPU time, interleaved round by "
        "round in rotating order, medians reported: the machine that produced this page shares its 2 "
        "cores with a long-running job, so wall times drift and single rounds are noisy (two runs of this "
        "benchmark there, 11 and 15 rounds, differed by up to 0.06 in a throughput ratio). `step peak` is "
        "the memory allocated during a step above what was allocated before it; `total` adds weights and "
        "optimizer state. SDPA keeps its own output (and its values) for the backward pass; the adapter "
        "rebuilds them there from the output with the NeuTRENO term (and from V_ℓ, V_0 and a learnable α) "
        "instead of keeping a second copy per layer (docs/value-path.md, Cost).",
    ),
}


def run(command: list[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


SMOKE_NOTE = (
    "Scaled-down smoke run (`run_all.py --budget gpu --smoke`): the GPU tier's code path with toy models, "
    "steps and batches on whatever device ran it. It checks the code; none of its numbers is a measurement."
)


def run_everything(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evidence = Path(args.evidence)
    if args.smoke:  # every page of a smoke run says so, as its notes
        for folder in (out, evidence):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "notes.md").write_text(SMOKE_NOTE + "\n")
    start = time.perf_counter()
    for name, (script, flags) in BENCHMARKS.items():
        if args.tier not in flags:
            continue
        extra = ["--data-dir", args.data] if name == "diagnostics" and args.data else []
        if args.smoke:  # two layers: the NeuTRENO term (layers 1 on) runs, at a fraction of the models' cost
            extra += ["--num-hidden-layers", "2"]
        run([sys.executable, str(HERE / script), *flags[args.tier], *extra, "--out", str(out / f"{name}.json")])
    reproduce = [
        sys.executable,
        str(EVIDENCE / "reproduce.py"),
        *REPRODUCE[args.tier],
        "--out",
        str(evidence),
        "--workers",
        str(args.workers),
    ] + (["--data", args.data] if args.data else [])
    page = PAGES.get(args.budget, DEFAULT_PAGES)[1]
    run(reproduce + (["--docs", str(Path(args.docs) / page)] if args.docs else []))
    print(f"\nEverything ran in {(time.perf_counter() - start) / 60:.1f} min.")


# ---------------------------------------------------------------------------------------------------------------
# benchmarks.md


def _matches(row: dict, where: dict | None) -> bool:
    return where is None or all(row.get(k) == v for k, v in where.items())


def check_targets(name: str, rows: list[dict], budget: str = "full") -> list[str]:
    """One line per target: the worst value among the rows it applies to, and whether it meets the target."""
    lines = []
    targets = TARGETS.get(name, [])
    if budget == "gpu":  # where the GPU tier's target differs: (row filter, column) -> target
        targets = [(w, c, op, GPU_TARGETS.get((name, str(w), c), t)) for w, c, op, t in targets]
    for where, column, op, target in targets:
        values = [row[column] for row in rows if _matches(row, where) and column in row]
        if not values:
            continue
        worst = min(values) if op == ">=" else max(values)
        met = worst >= target if op == ">=" else worst <= target
        scope = ", ".join(f"{k} {v}" for k, v in (where or {}).items()) or "every row"
        verdict = "met" if met else "not met"
        lines.append(f"- {column} ({scope}): worst {worst:.3f}, target {op} {target}: **{verdict}**")
    return lines


def table(rows: list[dict]) -> list[str]:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in columns) + " |")
    return lines


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def _machine_line(machine: dict) -> str:
    keep = (
        "device",
        "cpu_threads",
        "torch",
        "transformers",
        "dtype",
        "attn",
        "clock",
        "batch",
        "rounds",
        "generate",
        "images",
    )
    parts = [f"{k.replace('_', ' ')} {machine[k]}" for k in keep if k in machine]
    return f"Machine and settings: {', '.join(parts)}. Command: `{machine.get('command', '?')}`."


def render(out: Path, docs: Path, budget: str = "full") -> str:
    """The speed-and-memory page of the tier `budget` (benchmarks.md; the GPU tier's benchmarks-gpu.md) in `docs`."""
    paths = {name: out / f"{name}.json" for name in SECTIONS}
    found = {name: json.loads(path.read_text()) for name, path in paths.items() if path.exists()}
    title = "# Speed and memory on a GPU" if budget == "gpu" else "# Speed and memory"
    lines = [
        title,
        "",
        "Generated by `benchmarks/run_all.py --render` from the JSON in `" + str(out) + "`; do not edit by hand. "
        "Every comparison runs its models side by side in one process, interleaved round by round in rotating "
        "order, and reports medians and ratios to the baseline (ratios above 1 mean faster, or more memory). "
        "Memory on a CPU is read from the profiler's allocation timeline (exact), on a GPU from the allocator.",
        "",
    ]
    if budget == "gpu" and found:
        machines = [data["machine"] for data in found.values()]
        devices = sorted({m["device"] for m in machines})
        dtypes = sorted({m["dtype"] for m in machines if "dtype" in m})
        attn = sorted({m["attn"] for m in machines if "attn" in m})
        lines += [
            f"**Device**: {', '.join(devices)}; autocast {', '.join(dtypes)}, attention {', '.join(attn)}; "
            f"torch {machines[0]['torch']}, transformers {machines[0]['transformers']}.",
            "",
        ]
    notes = out / "notes.md"
    if notes.exists():
        lines += ["## Reading these numbers", "", notes.read_text().strip(), ""]
    for name, data in found.items():
        heading, description = SECTIONS[name]
        lines += [f"## {heading}", "", description, "", *table(data["rows"]), "", _machine_line(data["machine"]), ""]
        checks = check_targets(name, data["rows"], budget)
        if checks:
            lines += ["Targets:", "", *checks, ""]
    for path in sorted(out.glob("profile*.json")):  # each profiled run
        lines += profile_section(path)
    lines += [
        "## Rerun",
        "",
        "```bash",
        "python benchmarks/run_all.py --quick   # every benchmark and reproduction at a toy size (CPU)",
        "python benchmarks/run_all.py --docs docs   # the full size (GPU, bf16) and these pages",
        "# the GPU tier (~40 min on one H100): benchmarks-gpu.md and results-gpu.md",
        "python benchmarks/run_all.py --budget gpu --docs docs",
        "```",
        "",
        "Each benchmark script also runs alone; its docstring gives its options.",
        "",
    ]
    text = "\n".join(lines)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / PAGES.get(budget, DEFAULT_PAGES)[0]).write_text(text)
    return text


def profile_section(path: Path) -> list[str]:
    """The page's section from `profile_gpu.py`'s JSON, if there is one: per shape, the kernels and GPU time of a
    training step, the throughput ratios eager, with the term as plain autograd ops and compiled, and the kernels the
    NeuTRENO model adds."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    columns = [
        "shape",
        "native kernels per step",
        "neutreno kernels per step",
        "native GPU ms per step",
        "neutreno GPU ms per step",
        "eager ratio",
        "eager ratio, term as plain autograd ops",
        "compiled ratio",
    ]
    rows = [{c: shape.get(c, "") for c in columns} for shape in data["shapes"]]
    lines = [
        f"## Where the time goes: a profiled training step (`profile_gpu.py`, {path.name})",
        "",
        "One training step (forward, backward, fused AdamW; bf16 autocast, SDPA) of DeiT-tiny at batch 256 and "
        "of the paper's GPT shape at 32 × 256 tokens, native and NeuTRENO, under the PyTorch profiler: the CUDA "
        "kernels per step and their GPU time; then throughput ratios NeuTRENO / native from interleaved rounds: "
        "eager, eager with the NeuTRENO projection's memory-saving autograd function replaced by plain autograd "
        "ops (which keep the projection's input), and both models under `torch.compile`.",
        "",
        *table(rows),
        "",
        _machine_line(data["machine"]),
        "",
    ]
    for shape in data["shapes"]:
        added = [
            {"kernel": row["kernel"][:90], "calls per step": row["calls"], "µs per step": row["µs"]}
            for row in shape["added kernels"][:6]
        ]
        lines += [f"The kernels that change most, NeuTRENO − native ({shape['shape']}):", "", *table(added), ""]
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--budget",
        choices=("quick", "full", "gpu"),
        default="full",
        help="quick: toy sizes on a CPU (< 10 min on 2 cores); full: the papers' budgets (GPU, bf16); "
        "gpu: the GPU tier, about 40 minutes on one H100 (bf16, sdpa), its own pages",
    )
    parser.add_argument("--quick", action="store_const", const="quick", dest="budget", help="same as --budget quick")
    parser.add_argument(
        "--smoke", action="store_true", help="with --budget gpu: the same code path at toy sizes on a CPU (minutes)"
    )
    parser.add_argument(
        "--data",
        default=os.environ.get("HF_NEUTRENO_DATA"),
        metavar="DIR",
        help="local datasets (DIR/cifar10, DIR/wikitext-2-v1), for reproduce.py and the diagnostics "
        "benchmark (default: $HF_NEUTRENO_DATA if set, else the Hub)",
    )
    parser.add_argument(
        "--out", default=None, help="results folder (default: runs/all-<budget>; gpu: benchmarks/results/gpu)"
    )
    parser.add_argument(
        "--docs",
        default=None,
        help="write the pages into this folder: benchmarks.md and results.md "
        "(gpu: benchmarks-gpu.md and results-gpu.md)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="reproduce.py's parallel training processes (default 2; gpu: 4 on the one GPU; smoke: 1)",
    )
    parser.add_argument("--render", action="store_true", help="only render the speed-and-memory page from --out")
    args = parser.parse_args(argv)
    if args.smoke and args.budget != "gpu":
        parser.error(f"--smoke scales down the GPU tier: use it with --budget gpu, not --budget {args.budget}")
    args.tier = f"{args.budget}-smoke" if args.smoke else args.budget
    default_out = "benchmarks/results/gpu" if args.tier == "gpu" else f"runs/all-{args.tier}"
    # The GPU tier's evidence goes beside the other runs' (evidence/results), its speed results into benchmarks/.
    default_evidence = EVIDENCE / "results" / "reproduce-gpu" if args.tier == "gpu" else None
    args.evidence = (args.out is None and default_evidence) or Path(args.out or default_out) / "reproduce"
    args.out = args.out or default_out
    # The GPU tier trains 4 units at a time on the one GPU: a small model leaves it idle while Python launches kernels,
    # and the other processes fill those gaps (16 cores: 4 units, each with 3 data-loading workers).
    args.workers = args.workers or {"gpu": 4, "gpu-smoke": 1}.get(args.tier, 2)
    if not args.render:
        run_everything(args)
    if args.docs:
        render(Path(args.out), Path(args.docs), args.budget)
        print(f"Wrote {Path(args.docs) / PAGES.get(args.budget, DEFAULT_PAGES)[0]}")


if __name__ == "__main__":
    main()
