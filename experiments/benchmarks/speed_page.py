"""The speed-and-memory pages (docs/benchmarks.md, the GPU tier's docs/benchmarks-gpu.md), rendered from the
benchmarks' JSON: each table with its machine and command, each ratio checked against its target. Lines are at most
120 characters: prose is wrapped, and a table too wide for that is split into column groups that repeat its leading
key columns."""

import json
from pathlib import Path

from hf_neutreno.markdown import markdown_table, wrap_markdown

from .common import format_cell

WIDTH = 120
# How far apart two host-time runs of one row on one machine fell (docs/benchmarks.md's notes): a row within this of
# its op ratio spends about native's host time per kernel.
HOST_TIME_SPREAD = 0.05

# The pages each tier writes into --docs: (speed and memory, reproductions).
PAGES = {"gpu": ("benchmarks-gpu.md", "results-gpu.md")}
DEFAULT_PAGES = ("benchmarks.md", "results.md")


class Except(tuple):
    """A target's row filter value that matches any value but these."""

    def __str__(self) -> str:
        return "not " + ", ".join(map(str, self))


# What each table is checked against: (row filter, column, comparison, target). Training runs at 0.98 of its native
# counterpart on a CPU and 0.97 on a GPU (`TRAIN` stands for the page's one), inference and generation at 0.97 and
# 0.95, memory within 3 %.
TRAIN, INFER = "training", 0.97
TRAINING_TARGET = {"cpu": 0.98, "gpu": 0.97}
HELD_VALUE_PATHS = {"attention calls": 1, "model": Except(("value embeddings",))}
TARGETS = {
    "vit": [
        ({"mode": "train"}, "throughput ratio", ">=", TRAIN),
        ({"mode": "infer"}, "throughput ratio", ">=", INFER),
        (None, "total memory ratio", "<=", 1.03),
        ({"mode": "train"}, "step peak ratio", "<=", 1.03),
    ],
    "eigen_vit": [
        ({"model": "EigenViT (ViT⁻)"}, "train ratio", ">=", TRAIN),
        ({"model": "EigenViT (ViT⁻)"}, "infer ratio", ">=", 0.98),
        ({"model": "EigenViT (ViT⁻) → to_neutreno_vit()"}, "infer ratio", ">=", 0.98),
    ],
    "gpt": [
        ({"shape": "paper"}, "train throughput ratio", ">=", TRAIN),
        ({"shape": "gpt2-small"}, "train throughput ratio", ">=", TRAIN),
        ({"shape": "paper"}, "total memory ratio", "<=", 1.03),
        ({"shape": "gpt2-small"}, "total memory ratio", "<=", 1.03),
        ({"shape": "paper"}, "generate throughput ratio", ">=", 0.95),
        ({"shape": "gpt2-small"}, "generate throughput ratio", ">=", 0.95),
    ],
    "gpt_scaling": [(None, "train throughput ratio", ">=", TRAIN), (None, "total memory ratio", "<=", 1.03)],
    "diagnostics": [({"mode": "hidden"}, "× inference", "<=", 1.5)],
    "generation": [(None, "ratio to native", ">=", 0.95), (None, "ratio to same layout", ">=", 0.95)],
    "segmenter": [
        (None, "throughput ratio", ">=", TRAIN),  # its one row is a training step
        (None, "total memory ratio", "<=", 1.03),
        (None, "step peak ratio", "<=", 1.03),
    ],
    "host_time": [  # bench_host_time.TARGETS: fixed coefficients and the NeuTRENO models, learnable ones and gates
        ({"kind": "fixed"}, "host time ratio", "<=", 1.15),
        ({"kind": "learnable"}, "host time ratio", "<=", 1.30),
    ],
    # Training steps. Twicing's second attention call per layer is its method, and value embeddings' tables (with
    # their optimizer state) are theirs: reported, not held.
    "value_path": [
        (HELD_VALUE_PATHS, "throughput ratio", ">=", TRAIN),
        (HELD_VALUE_PATHS, "total memory ratio", "<=", 1.03),
        (HELD_VALUE_PATHS, "step peak ratio", "<=", 1.03),
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
        "one QR batched over layers and heads in every forward (when this table was measured, forwards without "
        "gradients reused them while Θ and ψ were unchanged: the reading above says why that stopped). "
        "`→ to_neutreno_vit()` is its export with those weights stored (timed at inference only). Ratios are to "
        "the native ViT.",
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
        "`experiments/benchmarks/count_ops.py`: exact, the same on every CPU. `per layer` is the slope over depth, "
        "(count at 4 layers − count at 2) / 2; `per step` the rest. `+` columns are differences to the "
        "native counterpart (transformers' GPT-2 or ViT of the same shape); a negative `+ per step` is "
        "layer 0, which has no term. On small GPU shapes each kernel's launch sets the step time. "
        "tests/test_op_counts.py holds each count under its ceiling.",
    ),
    "host_time": (
        "Host time per layer of a training step",
        "At the kernel counts' shape (batch 1, 8 tokens or a 16 px image, width 32, one thread), where kernels "
        "cost almost nothing, a training step's time is the host's: Python, autograd and the dispatcher, what "
        "sets a small model's step time on a GPU. `µs per layer` is the slope over depth, (time at 4 layers − "
        "time at 2) / 2, of the process's CPU time, for the native model and for the row's; the four run "
        "interleaved, and `host time ratio` is the median of the rounds' own ratios (above 1: more host time), "
        "with its sign-test interval. `kind`: fixed coefficients and the NeuTRENO models are held to 1.15, "
        "learnable coefficients and the gate to 1.30; twicing calls attention twice per layer and is reported. "
        "`op ratio` is the row's training kernels per layer over native's, from the count table above: a row "
        "whose host time ratio is at or below it spends no more host time per kernel than native does, so only "
        "fewer kernels (fused ones: docs/benchmarks-gpu.md's compiled column) would lower it. `meets target`: yes; "
        f'"at its op ratio" (no, but within {HOST_TIME_SPREAD}, the spread between two runs, of its op ratio); or no. '
        "`instruction ratio` (where the run counted them, `--instructions`) is the same slope in instructions "
        "executed, counted by valgrind's callgrind for the four models one after the other: the same, to about "
        "0.002, from one run of the command to the next (not between commands that count other rows), so it "
        "resolves a cut of a few Python calls that the timing cannot, but it is work, not time (a cache miss or an "
        "atomic reference count costs time and few instructions), and the targets are on time. "
        "`experiments/benchmarks/bench_host_time.py`; a timing, so it differs between CPUs and runs, unlike the counts "
        "above.",
    ),
    "generation": (
        "Time per generated token with the KV cache",
        "GPT-2-small shape, batch 1: the forward of one new token after 128 and after 2,048 cached tokens, "
        "for the native `GPT2LMHeadModel`, the NeuTRENO GPT converted from it (λ = 0.4, and λ = 0 without "
        "the term) and the native model with `apply_value_path` NeuTRENO (λ = 0.4) and value residual "
        "(α = ½). Each method's extra work per new token is O(d) per layer (only the new token's values), "
        "so a ratio must not fall as the cache grows. GPT-2 stores its projection weights as (in, out), "
        "the NeuTRENO GPT as `nn.Linear` does, (out, in) (`layout`); `native GPT-2, nn.Linear layout` is "
        "GPT-2 with its weights moved into `nn.Linear` layers, and `ratio to same layout` is each row's "
        "ratio to the native model of its own layout: the method's cost apart from the layout's.",
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
        "A GPT-2-small-shaped `GPT2LMHeadModel` (context 256) and a ViT-tiny-shaped "
        "`ViTForImageClassification` (224 px), at the table's batch, randomly initialised, as built (`unmodified`) "
        "and with each value path applied to the same weights: NeuTRENO (λ = 0.4) and the value residual "
        "(α = ½), fixed and learnable, in layers 1-11; where the table has them, also the value residual with "
        "its gate, and twicing (c = 1) in all 12 layers, which calls attention twice per layer (`attention "
        "calls`; the targets apply to the others). A training step is forward + backward + AdamW. The "
        "candidates run interleaved round by round in rotating order, medians reported; on a CPU with one "
        "thread, timed by the process's CPU time (a shared CPU drifts: two runs of this benchmark there, 11 and "
        "15 rounds, differed by up to 0.06 in a throughput ratio). `step peak` is "
        "the memory allocated during a step above what was allocated before it; `total` adds weights and "
        "optimizer state. SDPA keeps its own output (and its values) for the backward pass; the adapter "
        "rebuilds them there from the output with the NeuTRENO term (and from V_ℓ, V_0 and a learnable α) "
        "instead of keeping a second copy per layer (docs/value-path.md, Cost).",
    ),
}


def with_op_ratio(host_rows: list[dict], count_rows: list[dict]) -> list[dict]:
    """The host-time rows with `op ratio` (the count table's training kernels per layer over native's, for the
    same model) before `target`, and after it `meets target`: yes; "at its op ratio" (no, but its host time per
    kernel is native's, within the spread between runs, so only fewer kernels would lower it); or no. Recomputed
    from the JSON at every render."""
    counts = {row["model"]: row for row in count_rows if row["mode"] == "training"}
    rows = []
    for row in host_rows:
        count = counts.get(row["model"])
        items = list(row.items())
        at = next((i for i, (key, _) in enumerate(items) if key == "target"), len(items))
        op_ratio = count["per layer"] / count["native per layer"] if count is not None else None
        if op_ratio is not None:
            items.insert(at, ("op ratio", op_ratio))
        if "target" in row:
            ratio = row["host time ratio"]
            if ratio <= row["target"]:
                verdict = "yes"
            elif op_ratio is not None and ratio <= op_ratio + HOST_TIME_SPREAD:
                verdict = "at its op ratio"
            else:
                verdict = "no"
            items.append(("meets target", verdict))
        rows.append(dict(items))
    return rows


def _matches(row: dict, where: dict | None) -> bool:
    """Whether `row` is one a target applies to; a row without a filtered column (one recorded before the column
    existed) is not excluded by it."""
    if where is None:
        return True
    return all(row.get(k) not in v if isinstance(v, Except) else row.get(k, v) == v for k, v in where.items())


def check_targets(name: str, rows: list[dict], budget: str = "full") -> list[str]:
    """One line per target: the worst value among the rows it applies to, and whether it meets the target."""
    lines = []
    device = "gpu" if budget == "gpu" else "cpu"
    for where, column, op, target in TARGETS.get(name, []):
        target = TRAINING_TARGET[device] if target == TRAIN else target
        if device == "gpu":  # where the GPU tier's target differs: (row filter, column) -> target
            target = GPU_TARGETS.get((name, str(where), column), target)
        applies = [row for row in rows if _matches(row, where) and column in row]
        if not applies:
            continue
        pick = min if op == ">=" else max
        worst_row = pick(applies, key=lambda row: row[column])
        worst = worst_row[column]
        met = worst >= target if op == ">=" else worst <= target
        scope = ", ".join(f"{k} {v}" for k, v in (where or {}).items()) or "every row"
        line = f"- {column} ({scope}): worst {worst:.3f}"
        interval = worst_row.get(
            f"{column} interval"
        )  # a timing's interval (experiments/benchmarks/common.py, paired_ratio)
        if interval is not None:
            low, high = interval
            line += f" (interval {format_cell(interval)}"
            line += ", which includes the target)" if low <= target <= high else ")"
        lines.append(f"{line}, target {op} {target}: **{'met' if met else 'not met'}**")
    return lines


def table(rows: list[dict]) -> list[str]:
    """A Markdown table of `rows` (`markdown_table`: split into column groups where too wide), whose key columns are
    those before the first number."""
    columns = list(dict.fromkeys(c for row in rows for c in row))
    keys = next((i for i, c in enumerate(columns) if any(isinstance(row.get(c), float) for row in rows)), 1)
    cells = [[_escape(format_cell(row.get(c, ""))) for c in columns] for row in rows]
    return markdown_table([_escape(c) for c in columns], cells, keys=max(keys, 1))


def _escape(text: str) -> str:
    return text.replace("|", "\\|")  # a "|" in a cell ("max |Δlogit|") would end it


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
    if "host_time" in found and "op_counts" in found:
        found["host_time"]["rows"] = with_op_ratio(found["host_time"]["rows"], found["op_counts"]["rows"])
    title = "# Speed and memory on a GPU" if budget == "gpu" else "# Speed and memory"
    lines = [
        title,
        "",
        "Generated by `python -m experiments all --render` from the JSON in `" + str(out) + "`; do not edit by hand. "
        "Every comparison runs its models side by side in one process, interleaved round by round in rotating "
        "order, and reports medians and ratios to the baseline (ratios above 1 mean faster, or more memory). "
        "Where a table has an `interval` column, its throughput ratio is the median of the rounds' own ratios, "
        "and the interval covers that median with at least 95 % probability from 6 rounds on (the sign test; "
        "fewer rounds give their whole range); tables without it give the ratio of the medians. "
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
        "python -m experiments all --quick   # every benchmark and reproduction at a toy size (CPU)",
        "python -m experiments all --docs docs   # the full size (GPU, bf16) and these pages",
        "# the GPU tier (~40 min on one H100): benchmarks-gpu.md and results-gpu.md",
        "python -m experiments all --budget gpu --docs docs",
        "# its speed page alone, most wanted first, stopped after 9 minutes (a GPU for a few minutes)",
        "python -m experiments all --budget gpu --speed-only --time-limit 540 --docs docs",
        "```",
        "",
        "Each benchmark also runs alone, as `python -m experiments bench-vit` and the other commands that `python -m "
        "experiments` lists; `--help` gives its options.",
        "",
    ]
    text = wrap_markdown("\n".join(lines))
    docs.mkdir(parents=True, exist_ok=True)
    (docs / PAGES.get(budget, DEFAULT_PAGES)[0]).write_text(text)
    return text


def profile_section(path: Path) -> list[str]:
    """The page's section from `profile_gpu.py`'s JSON, if there is one: per shape, the kernels and GPU time of a
    training step, the throughput ratios eager, with the term as plain autograd ops, compiled and replayed as CUDA
    graphs, and the kernels the NeuTRENO model adds."""
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
        "cuda-graph ratio",
    ]
    rows = [{c: shape.get(c, "") for c in columns} for shape in data["shapes"]]
    lines = [
        f"## Where the time goes: a profiled training step (`profile_gpu.py`, {path.name})",
        "",
        "One training step (forward, backward, fused AdamW; bf16 autocast, SDPA) of each shape the run profiled, "
        "DeiT-tiny at batch 256 and the paper's GPT shape at 32 × 256 tokens, native and NeuTRENO, under the "
        "PyTorch profiler: the CUDA "
        "kernels per step and their GPU time; then throughput ratios NeuTRENO / native from interleaved rounds: "
        "eager, eager with the NeuTRENO term as plain autograd ops (the backend's output kept instead of rebuilt "
        "in the backward pass: more memory), both models under `torch.compile`, and (where the run had "
        '`--cuda-graphs`) both compiled with `mode="reduce-overhead"`, whose CUDA graphs remove the host\'s cost '
        "per kernel launch.",
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
        if added:
            lines += [f"The kernels that change most, NeuTRENO − native ({shape['shape']}):", "", *table(added), ""]
        elif shape.get("native kernels per step"):
            lines += [f"NeuTRENO launches the native model's kernels ({shape['shape']}).", ""]
        else:  # a run on a CPU profiles no CUDA kernels
            lines += [f"No CUDA kernels were profiled ({shape['shape']}): the run had no GPU.", ""]
    return lines
