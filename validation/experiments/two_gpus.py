"""The start-up and the end of this folder's two-GPU experiments: one process a GPU over NCCL
(NVLink multicast off, ``gpumodel.validate.families.collectives.SAFE_ENV``), every rank's
results gathered to rank 0 and written atomically with the run's facts."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any


def spawn(worker: Callable[..., None], args: Any) -> None:
    """``worker(rank, world, port, args)`` in a process per GPU (2), on a free local port."""
    import torch
    import torch.multiprocessing as mp

    world = min(2, torch.cuda.device_count())
    if world < 2:
        sys.exit("needs 2 GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port, args), nprocs=world, join=True)


def start_rank(rank: int, world: int, port: int) -> tuple[Any, Any]:
    """(torch, torch.distributed) with this rank's GPU set and its NCCL group up."""
    from gpumodel.validate.families.collectives import SAFE_ENV

    os.environ.update(SAFE_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))  # fmt: skip
    return torch, dist


def finish(torch: Any, dist: Any, rank: int, world: int, results: list, meta: dict,
           out: str) -> None:  # fmt: skip
    """Gather every rank's ``results`` to rank 0, which writes ``{**meta, the versions, the
    GPU, "ranks": [...]}`` to ``out`` (a temporary file, then renamed); end the group."""
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        import transformers

        meta = {**meta, "torch": torch.__version__, "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(0), "world": world,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({**meta, "ranks": gathered}, f, indent=1)
        os.replace(tmp, out)
    dist.destroy_process_group()
