"""Cost of `measure_oversmoothing` relative to plain inference, and its peak memory at two numbers of samples.

DeiT-tiny (NeuTRENO, λ = 0.6, random weights: timing does not depend on them) on real CIFAR-10 test images resized
to the model's input size. Every mode consumes the same batches, made on the fly from the decoded 32×32 images:

    inference      model(pixel_values), nothing else (the baseline)
    hidden         the default hidden-state metrics: cosine similarity, HFC/LFC ratio, distance to rank one
    hidden+erank   those and the effective rank (measured only when asked for by name)
    default        the default metric set (`DEFAULT_METRICS`): hidden and the attention metrics
    all            every metric

Timings are measured side by side in one process, the modes interleaved batch by batch, median of `--repeats`.
Peak memory is measured in a fresh process per (mode, N): peak resident memory on CPU, `torch.cuda.max_memory_allocated`
on CUDA.

    python -m experiments bench-diagnostics --quick          # CPU: 64 and 128 images
    python -m experiments bench-diagnostics                  # 500 and 1000 images
    python -m experiments bench-diagnostics --dtype bf16 --batch-size 125   # GPU
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

from hf_neutreno import NeuTRENOViTConfig, NeuTRENOViTModel
from hf_neutreno.diagnostics import DEFAULT_METRICS, HIDDEN_STATE_METRICS, METRICS, measure_oversmoothing

from .. import in_new_process
from .common import CLOCKS, DTYPES, machine, report

MODES = ("inference", "hidden", "hidden+erank", "default", "all")
METRICS_OF = {
    "hidden": [m for m in DEFAULT_METRICS if m in HIDDEN_STATE_METRICS],
    "hidden+erank": list(HIDDEN_STATE_METRICS),
    "default": None,
    "all": list(METRICS),
}


def default_data_dir() -> Path:
    env = os.environ.get("HF_NEUTRENO_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"


def load_images(data_dir: Path, count: int) -> torch.Tensor:
    """The first `count` CIFAR-10 test images as a uint8 tensor (count, 3, 32, 32) (3 KB each)."""
    import numpy as np
    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(data_dir / "cifar10" / "test-00000-of-00001.parquet", columns=["img"]).slice(0, count)
    if table.num_rows < count:
        raise ValueError(f"CIFAR-10 test has {table.num_rows} images, {count} asked.")
    rows = table.column("img").to_pylist()
    images = [np.asarray(Image.open(io.BytesIO(row["bytes"])).convert("RGB")) for row in rows]
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


class Batches:
    """Normalised, resized batches made on demand: memory does not grow with the number of images."""

    def __init__(self, images: torch.Tensor, batch_size: int, size: int, device: str):
        self.images, self.batch_size, self.size, self.device = images, batch_size, size, device

    def __len__(self) -> int:
        return -(-len(self.images) // self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.images), self.batch_size):
            x = self.images[start : start + self.batch_size].to(self.device).float() / 255
            x = torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
            yield {"pixel_values": (x - 0.5) / 0.5}


def build_model(size: int, device: str, layers: int | None = None):
    torch.manual_seed(0)
    depth = {"num_hidden_layers": layers} if layers else {}
    config = NeuTRENOViTConfig.from_preset("deit-tiny", image_size=size, **depth)
    return NeuTRENOViTModel(config).to(device).eval()


def run_mode(mode: str, model, batches, dtype: str = "fp32") -> None:
    """One pass of `mode` over `batches`, under autocast to `dtype` (the metrics themselves are float32 or float64
    whatever the model's dtype)."""
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=DTYPES[dtype], enabled=dtype != "fp32"):
        if mode == "inference":
            with torch.no_grad():
                for batch in batches:
                    model(**batch)
        else:
            measure_oversmoothing(model, batches, metrics=METRICS_OF[mode], progress=False)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timings(args, images: torch.Tensor) -> dict[str, float]:
    """Seconds per mode over all images. The modes are interleaved batch by batch (in rotating order), so the
    ratios are immune to the drift of a shared machine; each call costs `measure_oversmoothing`'s setup once per
    batch (milliseconds against a forward pass of a batch)."""
    model = build_model(args.image_size, args.device, args.num_hidden_layers)
    batches = Batches(images, args.batch_size, args.image_size, args.device)
    warm = Batches(images[: args.batch_size], args.batch_size, args.image_size, args.device)
    modes = args.modes
    for mode in modes:  # warm-up: kernels, allocator, the probe registration
        run_mode(mode, model, warm, args.dtype)
    seconds = {mode: [] for mode in modes}
    now = time.perf_counter if args.device.startswith("cuda") else CLOCKS[args.clock]
    for _ in range(args.repeats):
        total = dict.fromkeys(modes, 0.0)
        for index, batch in enumerate(batches):
            for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
                synchronize(args.device)
                start = now()
                run_mode(mode, model, [batch], args.dtype)
                synchronize(args.device)
                total[mode] += now() - start
        for mode in modes:
            seconds[mode].append(total[mode])
    return {mode: statistics.median(values) for mode, values in seconds.items()}


def peak_memory_worker(args) -> None:
    """Run one mode once in this (fresh) process and print its peak memory in MiB as JSON."""
    images = load_images(args.data_dir, args.num_images)
    model = build_model(args.image_size, args.device, args.num_hidden_layers)
    batches = Batches(images, args.batch_size, args.image_size, args.device)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    run_mode(args.worker, model, batches, args.dtype)
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        status = Path("/proc/self/status").read_text()
        peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024
    print(json.dumps({"peak_mib": peak}))


def peak_memory(args, mode: str, num_images: int) -> float:
    command, environment = in_new_process(
        "bench-diagnostics",
        "--worker",
        mode,
        "--num-images",
        str(num_images),
        "--batch-size",
        str(args.batch_size),
        "--image-size",
        str(args.image_size),
        "--device",
        args.device,
        "--data-dir",
        str(args.data_dir),
        "--threads",
        str(args.threads),
        "--dtype",
        args.dtype,
        *(["--num-hidden-layers", str(args.num_hidden_layers)] if args.num_hidden_layers else []),
    )
    result = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_mib"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CPU-sized run: 64 and 128 images, 2 repeats")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs=2,
        default=None,
        metavar=("N1", "N2"),
        help="numbers of images (timing at N2, memory at both; default 500 1000)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per mode (default 3; quick: 2)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="fp32", help="autocast dtype of every mode (GPU: bf16)")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="modes to time and measure (default: all); inference, the baseline, is always one",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--num-hidden-layers",
        type=int,
        default=None,
        help="depth of the model (default: DeiT-tiny's 12); a smaller one only checks the code",
    )
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="wall",
        help="wall time, or the process's CPU time (with --threads 1 on a shared CPU machine)",
    )
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--out", "--json", default=None, help="also write the results as JSON here")
    parser.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--num-images", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    if args.worker:
        peak_memory_worker(args)
        return
    args.modes = [mode for mode in MODES if mode in args.modes or mode == "inference"]  # in the table's order

    sizes = args.sizes or ((64, 128) if args.quick else (500, 1000))
    args.repeats = args.repeats or (2 if args.quick else 3)
    images = load_images(args.data_dir, sizes[1])
    seconds = timings(args, images)
    memory = {mode: [peak_memory(args, mode, n) for n in sizes] for mode in args.modes}
    report_results(args, sizes, seconds, memory)


def report_results(args, sizes: tuple[int, int], seconds: dict[str, float], memory: dict[str, list[float]]) -> None:
    """The table: each mode's seconds, its ratio to plain inference and its peak memory at both numbers of images."""
    rows = [
        {
            "mode": mode,
            "seconds": seconds[mode],
            "× inference": seconds[mode] / seconds["inference"],
            f"peak MiB @ {sizes[0]} images": memory[mode][0],
            f"peak MiB @ {sizes[1]} images": memory[mode][1],
        }
        for mode in args.modes
    ]
    peak = "CUDA allocated" if args.device.startswith("cuda") else "resident (VmHWM)"
    meta = machine() | {
        "dtype": args.dtype,
        "clock": args.clock,
        "batch": args.batch_size,
        "images": f"{sizes[1]} timed (median of {args.repeats}), {args.image_size} px; peak {peak} of "
        f"a fresh process at {sizes[0]} and {sizes[1]}",
    }
    report("measure_oversmoothing vs plain inference, DeiT-tiny (NeuTRENO, λ = 0.6)", rows, meta, args.out)
