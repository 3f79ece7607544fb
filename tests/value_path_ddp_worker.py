"""One rank of `test_ddp_gradients_equal_one_process`: an adapted tiny Llama under DistributedDataParallel (gloo),
half of the batch per rank; rank 0 saves the all-reduced gradients to argv[1]."""

import sys

import torch

from hf_neutreno import apply_value_path
from tiny_models import tiny_inputs, tiny_model


def adapted_model():
    return apply_value_path(tiny_model("llama"), "value_residual", learnable=True).train()


def batch() -> dict:
    return {"input_ids": tiny_inputs("llama", batch=4)["input_ids"]}


if __name__ == "__main__":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(adapted_model())
    input_ids = batch()["input_ids"].chunk(2)[rank]
    model(input_ids=input_ids, labels=input_ids).loss.backward()  # DDP averages the two half-batch means
    if rank == 0:
        torch.save({name: p.grad for name, p in model.module.named_parameters()}, sys.argv[1])
    # Both ranks done before gloo is torn down: a rank that tore it down while the other still saved aborted at
    # exit ("terminate called without an active exception") in about one run of four on a loaded 2-core machine.
    del model
    dist.barrier()
    dist.destroy_process_group()
