"""Run `examples/run_image_classification.py` in this process (under torchrun, one per rank) and save what the
DDP test compares: this rank's final weights and the losses Trainer logged.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/ddp_example_worker.py OUT_DIR EXAMPLE_ARGS...
"""

import json
import os
import sys
from pathlib import Path

import torch

from examples_loader import load_example


def main() -> None:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    torch.set_num_threads(1)  # one core per rank
    _, trainer = load_example("run_image_classification").main(argv)
    rank = int(os.environ.get("RANK", 0))
    model = trainer.accelerator.unwrap_model(trainer.model)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out / f"weights_rank{rank}.pt")
    log = {
        "world_size": trainer.args.world_size,
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "steps": trainer.state.global_step,
        "wrapped": type(trainer.model_wrapped).__name__,  # DistributedDataParallel, FSDP..., or the model itself
        "distributed_type": str(trainer.accelerator.distributed_type),
        "mixed_precision": trainer.accelerator.mixed_precision,
    }
    (out / f"log_rank{rank}.json").write_text(json.dumps(log))


if __name__ == "__main__":
    main()
