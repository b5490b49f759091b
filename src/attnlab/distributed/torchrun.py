"""Ring attention under torchrun: the same experiment, one process per rank, on one machine or many.

``torchrun`` starts the processes and tells each one, through its environment, who it is
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and where the group meets (``MASTER_ADDR`` and
``MASTER_PORT``, settled by its rendezvous). :func:`run` joins that group -- NCCL with one GPU per
process when CUDA is present, gloo on CPUs otherwise -- runs the very per-rank case that the local
launcher runs (:func:`attnlab.distributed.ring.rank_case`), and gathers every rank's shards on rank 0,
which checks them against one process and measures single-process flash. Only rank 0 reports.
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from attnlab.distributed import ring


def under_torchrun() -> bool:
    """True when this process was started by torchrun (or anything that sets RANK, WORLD_SIZE and MASTER_ADDR)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ)


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


def run(cfg: ring.RingConfig) -> ring.RingResult | None:
    """Join the group torchrun describes, run one rank's case, and on rank 0 return the gathered result."""
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    cfg = dataclasses.replace(cfg, world=world_size(), device="cuda" if cuda else "cpu").validate()
    if cuda:
        torch.cuda.set_device(local)  # one GPU per process on each machine
    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.pg_timeout_s))
    try:
        mine = ring.rank_case(rank, cfg.world, cfg)
        every = [None] * cfg.world if rank == 0 else None
        dist.gather_object(mine, every, dst=0)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    single = ring.flash_case(0, 1, cfg) if cfg.measure else None  # this process exits next: see memory.exact_heap
    return ring.finish(cfg, every, single, t0, f"{backend} via torchrun")
