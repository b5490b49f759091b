"""Run one function in W local processes that form a torch.distributed process group.

This is what ``torchrun`` does on one machine, cut down to what the lab needs, with two promises:

* **no hang.** The process group gets an explicit timeout, so a transfer that can never finish
  (a peer died) becomes an error in the ranks that wait for it; and the whole launch has a
  deadline, after which every rank still running is terminated.
* **every rank accounted for.** Each rank returns a result or an error message; a rank that exits
  without either (killed, ``os._exit``) is reported with its exit code.

And two courtesies: a rank can say what it is doing (:func:`progress`), which the parent passes
to ``on_progress`` while it waits; and the ranks' own output goes to files, not the terminal --
Ctrl-C reaches only the parent, which stops every rank, and a failure is the first failing rank's
reason in one line, not pages of tracebacks and C++ frames from every process. A rank also ends
by itself when the parent is gone (killed outright, or interrupted before it learned the rank's
pid), rather than wait for its peers until the process group's timeout.

The ranks talk over gloo on the loopback address 127.0.0.1 on a free port. Processes are started
with ``forkserver`` where the platform has it -- the server imports torch once and every rank is
forked from it, which saves seconds per rank -- and with ``spawn`` elsewhere. A command wraps its
launches in :func:`attnlab.distributed.servers.session`, so that the fork server and the resource
tracker end with it too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from attnlab.distributed import servers
from attnlab.kernels.argcheck import positive_int

PRELOAD = ["torch", "torch.distributed", "attnlab.kernels.ring"]
POLL_S = 0.02  # how often the parent looks at its ranks
PROGRESS_S = 0.5  # how often it reads what they are doing
_progress_file: Path | None = None  # inside a rank: where progress() writes


@dataclass(frozen=True)
class Outcome:
    """What one rank ended with."""

    rank: int
    exitcode: int | None  # None: still running at the deadline, then terminated
    result: object = None
    error: str | None = None  # why it failed, in one line (for a raise: type, first line, and where)
    failed_s: float | None = None  # when the parent saw it fail, seconds after the start
    raised: str | None = None  # the class name of the exception it raised, e.g. "CannotWrite" (None: no raise)
    message: str | None = None  # that exception's first line alone

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.error is None


# What a rank says when its own failure is another's (a peer gone mid-transfer): never the first reason while a
# rank failed for a reason of its own, however the two exits fell within one poll.
LOST_PEER = "lost another rank"


class LaunchError(RuntimeError):
    """One or more ranks failed. The message is the first failing rank's reason (the others usually
    fail because of it: a peer that is gone breaks their transfers), and how many others failed. A rank that
    says it lost a peer (LOST_PEER) comes after every rank that failed for a reason of its own."""

    def __init__(self, outcomes: list[Outcome]):
        self.outcomes = outcomes
        bad = sorted((o for o in outcomes if not o.ok),
                     key=lambda o: (LOST_PEER in (o.error or ""), o.failed_s is None, o.failed_s or 0, o.rank))
        self.first = bad[0] if bad else None
        msg = f"rank {self.first.rank} of {len(outcomes)}: {self.first.error}" if bad else "no rank failed"
        if len(bad) > 1:
            others = f"{len(bad) - 1} other rank" + ("s" if len(bad) > 2 else "")
            msg += f" (then {others} failed or {'were' if len(bad) > 2 else 'was'} stopped)"
        super().__init__(msg)

    @property
    def by_ctrl_c(self) -> bool:
        """Whether the first rank that ended badly was ended by Ctrl-C (SIGINT, exit 130 or a KeyboardInterrupt it
        raised): the learner's stop, which the command says as stopped, never as failed."""
        o = self.first
        return o is not None and (o.exitcode in (130, -signal.SIGINT) or o.raised == "KeyboardInterrupt")


def progress(text: str) -> None:
    """Inside a rank started by :func:`launch`: say what it is doing now (elsewhere: nothing happens)."""
    if _progress_file is None:
        return
    tmp = _progress_file.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, _progress_file)  # the parent never reads half a line


def first_line(e: BaseException) -> str:
    """An exception's first line, without C++ frames ("" when it says nothing)."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return next((x for x in lines if not x.startswith(("Exception raised from", "frame #"))), "")


def reason(e: BaseException) -> str:
    """One line for an exception: its type and first line, without C++ frames, at most 300 characters."""
    first = first_line(e)
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_interface() -> str | None:
    names = {name for _, name in socket.if_nameindex()} if hasattr(socket, "if_nameindex") else set()
    return next((n for n in ("lo", "lo0") if n in names), None)


def _rank_main(rank: int, world: int, port: int, target: Callable, args: tuple, pg_timeout_s: float,
               threads: int, folder: str, show_rank0: bool = False) -> None:
    """Inside one rank: join the group, run ``target(rank, world, *args)``, leave the outcome in a file."""
    global _progress_file
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops every rank
    if hasattr(signal, "pthread_sigmask"):  # held off while the fork server started (servers.start_server_deaf): a
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # target may install its own handler
    _end_with_launcher()
    try:
        log = os.open(Path(folder) / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    except OSError:  # the launch is over (Ctrl-C while this rank was being started): nobody waits for it
        os._exit(1)
    if not (show_rank0 and rank == 0):  # rank 0 may keep the terminal for what it reports as it goes
        os.dup2(log, 1)
    os.dup2(log, 2)  # what the rank and its libraries complain of (c10d warnings, C++ frames) goes to a file
    _progress_file = Path(folder) / f"rank{rank}.progress"
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
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
        traceback.print_exc()  # in full, to the rank's log
        last = traceback.extract_tb(e.__traceback__)[-1:]
        where = f" (at {Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        torch.save({"error": reason(e) + where, "raised": type(e).__name__, "message": first_line(e)}, path)
        os._exit(1)  # skip tearing down a group whose peers may be gone: that could wait
    torch.save({"result": result}, path)
    try:
        dist.barrier()  # rank 0 hosts the store: it must not leave while others still use the group
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 -- a peer failed after its result was saved; ours stands
        os._exit(0)


def _end_with_launcher() -> None:
    """Inside a rank: end when the process that launched it is gone.

    The launcher stops its ranks itself, but it cannot when it is killed outright (SIGKILL, the
    out-of-memory killer), nor stop a rank whose start a Ctrl-C cut short after the fork server had
    forked it; such a rank would wait for its peers until the process group's timeout. multiprocessing
    gives every child a sentinel of its parent, ready once the parent's end of their pipe is closed.
    """
    parent = mp.parent_process()
    if parent is None:
        return

    def watch():
        parent.join()  # returns when the launcher has gone (or dropped this rank)
        os._exit(1)

    threading.Thread(target=watch, name="attnlab-launcher-watch", daemon=True).start()


def launch(target: Callable, world: int, args: tuple = (), *, timeout_s: float = 120.0, pg_timeout_s: float = 30.0,
           threads: int = 1, on_progress: Callable[[dict[int, str]], None] | None = None,
           show_rank0: bool = False) -> list[Outcome]:
    """Run ``target(rank, world, *args)`` in ``world`` processes; return each rank's :class:`Outcome`.

    ``target`` must be a module-level function (it is pickled by name) and return something
    ``torch.save`` can store. ``pg_timeout_s`` bounds every collective and transfer; ``timeout_s``
    bounds the whole launch. When a rank fails, the others get ``pg_timeout_s`` (plus a little) to
    end by themselves -- usually they fail at once on the broken connection -- before they are stopped.
    ``on_progress({rank: text})`` is called about twice a second with what each rank last said
    (:func:`progress`). A KeyboardInterrupt in the parent stops every rank, then propagates.
    ``show_rank0=True`` leaves rank 0's standard output on the terminal (a rank that reports as it
    goes, as training does); its errors and every other rank's output still go to files.
    """
    positive_int("world", world)
    positive_int("threads", threads)
    for name, x in (("timeout_s", timeout_s), ("pg_timeout_s", pg_timeout_s)):
        if not x > 0:
            raise ValueError(f"{name} must be positive, got {x!r}")
    procs: list = []
    try:
        return _run(servers.context(PRELOAD), procs, target, world, args, timeout_s, pg_timeout_s, threads,
                    on_progress, show_rank0)
    except KeyboardInterrupt:
        if not (procs and all(p.pid is not None for p in procs)):
            servers.stop_server()  # before every rank had started: the fork server may still be importing torch
        raise


def _run(ctx, procs: list, target, world, args, timeout_s, pg_timeout_s, threads, on_progress,
         show_rank0) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="attnlab-ring-") as folder:
        port = free_port()
        procs += [ctx.Process(target=_rank_main, args=(r, world, port, target, args, pg_timeout_s, threads, folder,
                                                             show_rank0))
                  for r in range(world)]
        start = time.monotonic()
        failed: dict[int, float] = {}  # rank -> when it was seen to fail
        try:
            for p in procs:
                p.start()
            _watch(procs, start, failed, timeout_s, pg_timeout_s, on_progress, folder)
            stopped = [p.is_alive() for p in procs]
        finally:  # also on Ctrl-C: no rank outlives the launch
            _stop(procs)
        now = time.monotonic() - start
        failed.update({r: now for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in failed})
        return [_outcome(r, p.exitcode, stopped[r], Path(folder) / f"rank{r}.pt", timeout_s, failed.get(r))
                for r, p in enumerate(procs)]


def _watch(procs: list, start: float, failed: dict[int, float], timeout_s: float, pg_timeout_s: float,
           on_progress: Callable[[dict[int, str]], None] | None, folder: str) -> None:
    """Wait while any rank runs: until all have ended, the launch's time is up, or ``pg_timeout_s`` (plus a
    little) after the first failure. Notes in ``failed`` when each rank was seen to fail; hands
    ``on_progress`` what the ranks last said every PROGRESS_S."""
    shown = 0.0
    while any(p.is_alive() for p in procs):
        now = time.monotonic()
        failed.update({r: now - start for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in failed})
        if now - start > timeout_s or (failed and now - start > min(failed.values()) + pg_timeout_s + 5.0):
            return
        if on_progress is not None and now - shown >= PROGRESS_S:
            shown = now
            on_progress(_progress(folder, len(procs)))
        time.sleep(POLL_S)


def _stop(procs: list) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:
            continue  # never started
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join()


def _progress(folder: str, world: int) -> dict[int, str]:
    said = {}
    for r in range(world):
        try:
            said[r] = (Path(folder) / f"rank{r}.progress").read_text()
        except OSError:
            said[r] = "starting"
    return said


def _outcome(rank: int, code: int | None, stopped: bool, path: Path, timeout_s: float,
             failed_s: float | None = None) -> Outcome:
    try:
        saved = torch.load(path, weights_only=False) if path.exists() else {}
    except Exception:  # noqa: BLE001 -- a rank killed while it saved
        saved = {}
    if stopped:
        why = saved.get("error") or f"still running after the launch deadline ({timeout_s:g} s) or after " \
                                    "another rank failed, and was stopped"
        return Outcome(rank, None, None, why, failed_s, saved.get("raised"), saved.get("message"))
    if "error" in saved:
        return Outcome(rank, code, None, saved["error"], failed_s, saved.get("raised"), saved.get("message"))
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        hint = " (the system may have run out of memory)" if -code == signal.SIGKILL else ""
        return Outcome(rank, code, None, f"killed by {name}{hint}", failed_s)
    if "result" not in saved:
        return Outcome(rank, code, None, f"exited with code {code} without reporting a result", failed_s)
    return Outcome(rank, code, saved["result"], None if code == 0 else f"exited with code {code}", failed_s)


def results(outcomes: list[Outcome]) -> list:
    """Each rank's result, in rank order; raises :class:`LaunchError` if any rank failed."""
    if not all(o.ok for o in outcomes):
        raise LaunchError(outcomes)
    return [o.result for o in outcomes]
