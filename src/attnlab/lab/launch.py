"""Run one function in W local processes that form a torch.distributed process group.

This is what ``torchrun`` does on one machine, cut down to what the lab needs, with two promises:

* **no hang.** The process group gets an explicit timeout, so a transfer that can never finish
  (a peer died) becomes an error in the ranks that wait for it; and the whole launch has a
  deadline, after which every rank still running is terminated.
* **every rank accounted for.** Each rank returns a result or an error message; a rank that exits
  without either (killed, ``os._exit``) is reported with its exit code.

The ranks talk over gloo on the loopback address 127.0.0.1 on a free port. Processes are started
with ``forkserver`` where the platform has it -- the server imports torch once and every rank is
forked from it, which saves seconds per rank -- and with ``spawn`` elsewhere.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

PRELOAD = ["torch", "torch.distributed", "attnlab.kernels.ring"]


@dataclass(frozen=True)
class Outcome:
    """What one rank ended with."""

    rank: int
    exitcode: int | None  # None: still running at the deadline, then terminated
    result: object = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.error is None


class LaunchError(RuntimeError):
    """One or more ranks failed; the message has one line per failed rank."""

    def __init__(self, outcomes: list[Outcome]):
        self.outcomes = outcomes
        lines = [f"rank {o.rank}: {o.error}" for o in outcomes if not o.ok]
        super().__init__(f"{len(lines)} of {len(outcomes)} ranks failed -- " + "; ".join(lines))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_interface() -> str | None:
    names = {name for _, name in socket.if_nameindex()} if hasattr(socket, "if_nameindex") else set()
    return next((n for n in ("lo", "lo0") if n in names), None)


def _rank_main(rank: int, world: int, port: int, target: Callable, args: tuple, pg_timeout_s: float,
               threads: int, folder: str) -> None:
    """Inside one rank: join the group, run ``target(rank, world, *args)``, leave the outcome in a file."""
    import torch.distributed as dist

    lo = _loopback_interface()
    if lo and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = lo  # gloo talks over the loopback interface, never another address
    torch.set_num_threads(threads)
    path = Path(folder) / f"rank{rank}.pt"
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=pg_timeout_s))
        result = target(rank, world, *args)
    except BaseException as e:  # noqa: BLE001 -- every failure becomes a message for the parent
        last = traceback.extract_tb(e.__traceback__)[-1:]
        where = f" (at {Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        torch.save({"error": f"{type(e).__name__}: {e}{where}"}, path)
        os._exit(1)  # skip tearing down a group whose peers may be gone: that could wait
    torch.save({"result": result}, path)
    try:
        dist.barrier()  # rank 0 hosts the store: it must not leave while others still use the group
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 -- a peer failed after its result was saved; ours stands
        os._exit(0)


def _context():
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # used when the server starts (once per parent process)
        return ctx
    return mp.get_context("spawn")


def launch(target: Callable, world: int, args: tuple = (), *, timeout_s: float = 120.0, pg_timeout_s: float = 30.0,
           threads: int = 1) -> list[Outcome]:
    """Run ``target(rank, world, *args)`` in ``world`` processes; return each rank's :class:`Outcome`.

    ``target`` must be a module-level function (it is pickled by name) and return something
    ``torch.save`` can store. ``pg_timeout_s`` bounds every collective and transfer; ``timeout_s``
    bounds the whole launch. When a rank fails, the others get ``pg_timeout_s`` (plus a little) to
    end by themselves -- usually they fail at once on the broken connection -- before they are stopped.
    """
    for name, x in (("world", world), ("threads", threads)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name} must be a positive integer, got {x!r}")
    for name, x in (("timeout_s", timeout_s), ("pg_timeout_s", pg_timeout_s)):
        if not x > 0:
            raise ValueError(f"{name} must be positive, got {x!r}")
    ctx = _context()
    with tempfile.TemporaryDirectory(prefix="attnlab-ring-") as folder:
        port = free_port()
        procs = [ctx.Process(target=_rank_main, args=(r, world, port, target, args, pg_timeout_s, threads, folder))
                 for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        failed_at = None
        while any(p.is_alive() for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now > failed_at + pg_timeout_s + 5.0):
                break
            time.sleep(0.02)
        stopped = [p.is_alive() for p in procs]
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5.0)
            if p.is_alive():
                p.kill()
                p.join()
        return [_outcome(r, p.exitcode, stopped[r], Path(folder) / f"rank{r}.pt", timeout_s)
                for r, p in enumerate(procs)]


def _outcome(rank: int, code: int | None, stopped: bool, path: Path, timeout_s: float) -> Outcome:
    saved = torch.load(path, weights_only=False) if path.exists() else {}
    if stopped:
        why = saved.get("error") or f"still running after the launch deadline ({timeout_s:g} s) or after " \
                                    "another rank failed, and was stopped"
        return Outcome(rank, None, None, why)
    if "error" in saved:
        return Outcome(rank, code, None, saved["error"])
    if "result" not in saved:
        return Outcome(rank, code, None, f"exited with code {code} without reporting a result")
    return Outcome(rank, code, saved["result"], None if code == 0 else f"exited with code {code}")


def results(outcomes: list[Outcome]) -> list:
    """Each rank's result, in rank order; raises :class:`LaunchError` if any rank failed."""
    if not all(o.ok for o in outcomes):
        raise LaunchError(outcomes)
    return [o.result for o in outcomes]
