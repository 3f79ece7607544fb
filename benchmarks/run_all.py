#!/usr/bin/env python
"""Rerun every benchmark and reproduction, then render the pages that report them.

    python benchmarks/run_all.py --quick                 # everything at a toy size: < 10 min on 2 CPU cores
    python benchmarks/run_all.py --docs docs             # the full size, for a GPU: bf16, the papers' budgets
    python benchmarks/run_all.py --render --out benchmarks/results --docs docs   # only re-render the pages

Speed and memory (`bench_vit.py`, `bench_eigen_vit.py`, `bench_gpt.py`, `bench_diagnostics.py`,
`bench_segmenter.py`) write one JSON each into --out; the reproductions (`reproduce.py`) write theirs into
--out/reproduce. With --docs, the pages `benchmarks.md` (speed and memory, rendered here from the JSON, each table
with its machine and command, each ratio checked against its target) and `results.md` (the reproductions, rendered
by `reproduce.py`) are written there.
A hand-written `notes.md` in --out is included in `benchmarks.md` as the reading of those numbers.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name: (script, flags of --quick, flags of the full size). The quick flags keep every benchmark (and each of its
# tables) at a size 2 CPU cores run in a few minutes; the full size is what the issues' figures are for: a GPU, bf16.
BENCHMARKS = {
    "vit": ("bench_vit.py", ["--quick", "--image-sizes", "224", "--rounds", "3"], ["--dtype", "bf16"]),
    "eigen_vit": ("bench_eigen_vit.py", ["--quick", "--rounds", "3"], ["--dtype", "bf16"]),
    "gpt": ("bench_gpt.py", ["--quick", "--shapes", "paper", "--scaling-contexts", "256", "1024", "--rounds", "3"],
            ["--dtype", "bf16", "--as-trained"]),
    "diagnostics": ("bench_diagnostics.py", ["--quick"], []),
    # The setting is a CPU one (512 px, batch 2): one thread and the process's CPU time at both sizes.
    "segmenter": ("bench_segmenter.py", ["--quick", "--threads", "1", "--clock", "cpu"],
                  ["--threads", "1", "--clock", "cpu"]),
}
# What each table is checked against (issues 2-5, 13): (row filter, column, comparison, target).
TARGETS = {
    "vit": [(None, "throughput ratio", ">=", 0.97), (None, "total memory ratio", "<=", 1.03),
            ({"mode": "train"}, "step peak ratio", "<=", 1.03)],
    "eigen_vit": [({"model": "EigenViT (ViT⁻)"}, "train ratio", ">=", 0.97),
                  ({"model": "EigenViT (ViT⁻) → to_neutreno_vit()"}, "infer ratio", ">=", 0.98)],
    "gpt": [({"shape": "paper"}, "train throughput ratio", ">=", 0.97),
            ({"shape": "gpt2-small"}, "train throughput ratio", ">=", 0.97),
            ({"shape": "paper"}, "total memory ratio", "<=", 1.03),
            ({"shape": "gpt2-small"}, "total memory ratio", "<=", 1.03),
            ({"shape": "paper"}, "generate throughput ratio", ">=", 0.95),
            ({"shape": "gpt2-small"}, "generate throughput ratio", ">=", 0.95)],
    "gpt_scaling": [(None, "train throughput ratio", ">=", 0.97), (None, "total memory ratio", "<=", 1.03)],
    "diagnostics": [({"mode": "hidden"}, "× inference", "<=", 1.5)],
    "segmenter": [(None, "throughput ratio", ">=", 0.97), (None, "total memory ratio", "<=", 1.03),
                  (None, "step peak ratio", "<=", 1.03)],
}
SECTIONS = {  # JSON file -> (heading, what it measures)
    "vit": ("NeuTRENO ViT vs the native ViT (issue 2)",
            "DeiT-tiny shape, λ = 0.6 in layers 1-11, against `transformers`' `ViTForImageClassification` of the "
            "same shape and attention kernel. A training step is forward + backward + AdamW; inference is a forward "
            "under `torch.inference_mode`. `step peak` is the memory allocated during a step above what was allocated "
            "before it; `total` adds weights and optimizer state."),
    "eigen_vit": ("EigenViT vs the NeuTRENO ViT and the native ViT (issues 4, 13)",
                  "vit-tiny-224 shape. EigenViT makes its value and output weights from Θ, ψ in every forward (one "
                  "batched QR per layer), in training and at inference; `→ to_neutreno_vit()` is its export with "
                  "those weights stored, the inference path (timed at inference only). Ratios are to the native ViT."),
    "gpt": ("NeuTRENO GPT vs the native GPT-2 (issue 3)",
            "The NeuTRENO model is `gpt2_to_neutreno(native, λ = 0.4)`: the same weights and architecture (the λ = 0 "
            "column checks they give the same logits). Training on Zipf-distributed token ids; generation is greedy "
            "`generate` with the KV cache. `as-trained` (informational) is the paper's preset with its tied adaptive "
            "softmax over 267,735 words against GPT-2 of the same dimensions with a full softmax."),
    "gpt_scaling": ("Context scaling of the NeuTRENO GPT (issue 7)",
                    "The paper's shape at contexts 256 → 2048 with the same number of tokens per step (the batch "
                    "shrinks as the context grows): the NeuTRENO term is O(N·d), so the ratio should stay flat while "
                    "attention's O(N²) share grows in both models."),
    "diagnostics": ("Cost of `measure_oversmoothing` (issue 5)",
                    "DeiT-tiny (NeuTRENO, λ = 0.6) on real CIFAR-10 test images resized to 224 px: time relative to "
                    "plain inference over the same images, and the peak memory of a fresh process at two numbers of "
                    "images (it must not grow with them). `hidden`: the default hidden-state metrics (cosine "
                    "similarity, HFC/LFC, distance to rank one); `hidden+erank`: those and the effective rank, "
                    "measured only when asked for by name; `default`: the default metric set, attention metrics "
                    "included; `all`: every metric."),
    "segmenter": ("NeuTRENO Segmenter vs the λ = 0 Segmenter (issue 11)",
                  "The `segmenter-deit-tiny` preset (DeiT-tiny encoder, 2-block mask transformer, 150 classes) with "
                  "λ = 0.6 in the encoder and in the decoder (its own V_0), against the same model and initial "
                  "weights with λ = 0 in both. A training step is forward + loss on 512 × 512 labels + backward + "
                  "SGD with momentum 0.9 (Segmenter's optimizer). `step peak` is the memory allocated during a step "
                  "above what was allocated before it; `total` adds weights and momentum buffers."),
}


def run(command: list[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)


def run_everything(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for name, (script, quick, full) in BENCHMARKS.items():
        run([sys.executable, str(HERE / script), *(quick if args.quick else full), "--out", str(out / f"{name}.json")])
    reproduce = [sys.executable, str(HERE / "reproduce.py"), "--out", str(out / "reproduce"), "--workers",
                 str(args.workers)] + (["--quick"] if args.quick else ["--budget", "full", "--bf16"])
    run(reproduce + (["--docs", str(Path(args.docs) / "results.md")] if args.docs else []))
    print(f"\nEverything ran in {(time.perf_counter() - start) / 60:.1f} min.")


# ---------------------------------------------------------------------------------------------------------------
# benchmarks.md


def _matches(row: dict, where: dict | None) -> bool:
    return where is None or all(row.get(k) == v for k, v in where.items())


def check_targets(name: str, rows: list[dict]) -> list[str]:
    """One line per target: the worst value among the rows it applies to, and whether it meets the target."""
    lines = []
    for where, column, op, target in TARGETS.get(name, []):
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
    keep = ("device", "cpu_threads", "torch", "transformers", "dtype", "attn", "clock", "batch", "rounds", "generate",
            "images")
    parts = [f"{k.replace('_', ' ')} {machine[k]}" for k in keep if k in machine]
    return f"Machine and settings: {', '.join(parts)}. Command: `{machine.get('command', '?')}`."


def render(out: Path, docs: Path) -> str:
    lines = ["# Speed and memory", "",
             "Generated by `benchmarks/run_all.py --render` from the JSON in `" + str(out) + "`; do not edit by hand. "
             "Every comparison runs its models side by side in one process, interleaved round by round in rotating "
             "order, and reports medians and ratios to the baseline (ratios above 1 mean faster, or more memory). "
             "Memory on a CPU is read from the profiler's allocation timeline (exact), on a GPU from the allocator.",
             ""]
    notes = out / "notes.md"
    if notes.exists():
        lines += ["## Reading these numbers", "", notes.read_text().strip(), ""]
    for name, (heading, description) in SECTIONS.items():
        path = out / f"{name}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        lines += [f"## {heading}", "", description, "", *table(data["rows"]), "", _machine_line(data["machine"]), ""]
        checks = check_targets(name, data["rows"])
        if checks:
            lines += ["Targets:", "", *checks, ""]
    lines += ["## Rerun", "", "```bash",
              "python benchmarks/run_all.py --quick   # every benchmark and reproduction at a toy size (CPU)",
              "python benchmarks/run_all.py --docs docs   # the full size (GPU, bf16) and these pages",
              "```", "", "Each benchmark script also runs alone; its docstring gives its options.", ""]
    text = "\n".join(lines)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "benchmarks.md").write_text(text)
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy sizes on a CPU: < 10 min on 2 cores")
    parser.add_argument("--out", default=None, help="results folder (default: runs/all-quick or runs/all-full)")
    parser.add_argument("--docs", default=None, help="write benchmarks.md and results.md into this folder")
    parser.add_argument("--workers", type=int, default=2, help="reproduce.py's parallel training processes")
    parser.add_argument("--render", action="store_true", help="only render benchmarks.md from the JSON in --out")
    args = parser.parse_args(argv)
    args.out = args.out or f"runs/all-{'quick' if args.quick else 'full'}"
    if not args.render:
        run_everything(args)
    if args.docs:
        render(Path(args.out), Path(args.docs))
        print(f"Wrote {Path(args.docs) / 'benchmarks.md'}")


if __name__ == "__main__":
    main()
