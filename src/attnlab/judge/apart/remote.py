"""The judged function in a process of its own, seen by the judge as a function it can call.

The judge (oracle, PyTorch's baseline, the tolerance rule, the diagnoses) must be out of reach of the
code it judges: a module that patches ``F.scaled_dot_product_attention``, ``torch.allclose`` or
attnlab itself when it is imported would otherwise move the goalposts. So other people's code runs
in another process, and the two talk in messages of plain values and tensors (:mod:`.wire`):

* :class:`Remote` is the judge's side: a stand-in for the function whose :meth:`Remote.run` sends a
  case's inputs and gets back the output, the gradients and what broke PyTorch's contract -- values
  the judge then holds to the rule itself. Every request has a deadline; a process that hangs is
  killed, one that ends (``sys.exit``, ``os._exit``, a kill, a crash, out of memory) is said so,
  and nothing more is asked of it (:attr:`Remote.lost`).
* :func:`attnlab.judge.apart.served.serve` is the judged side: it runs the requests on the real
  function, in the process that holds it (:mod:`.worker` for ``verify --impl`` and ``lab check``;
  the test's own process for :mod:`attnlab.testing`, whose judge then runs in a fresh process,
  :func:`attnlab.judge.apart.isolate.judge_apart`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from dataclasses import asdict
from pathlib import Path

from attnlab.judge.apart import pace, wire

LOAD_SECONDS = 120.0  # importing the function's module (and torch) in its process
QUIET_SECONDS = 600.0  # a request without a deadline of its own still ends


class LoadFailed(ValueError):
    """The judged process could not load the function (the message says why, in one line)."""


def message(e: BaseException) -> str:
    """``str(e)``; for an exception whose ``__str__`` itself raises, a message that says so. The judged function's
    exceptions are its own classes: one that cannot be told must still be a row that names it, not a traceback."""
    try:
        return str(e)
    except Exception as inner:  # noqa: BLE001 -- whatever its __str__ raises
        return f"(its message cannot be read: str() of it raised {type(inner).__name__})"


def told(e: BaseException) -> str:
    """``Type: message`` of an exception, the message as :func:`message` reads it."""
    text = message(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Raised(Exception):
    """The judged function raised (or called sys.exit); ``text`` is what a row says of it."""

    def __init__(self, info: dict):
        super().__init__(info.get("message", ""))
        self.info = info
        kind, msg, where = info.get("type", "Exception"), info.get("message", ""), info.get("where")
        if kind == "SystemExit":
            self.text = f"called sys.exit({info.get('exit')!r}) while running the case"
        else:
            self.text = f"{kind}: {msg}" if msg else kind
        if where:
            self.text += f" ({where})"


class Lost(Exception):
    """The judged process is gone (ended, or killed after a hang): nothing more can be asked of it. ``timed_out``:
    it was killed because it gave no answer in time (not because it ended by itself)."""

    def __init__(self, message: str = "", timed_out: bool = False, spent=None):
        super().__init__(message)
        self.timed_out = timed_out
        self.spent = spent  # how it ran out of time (attnlab.judge.apart.pace.Spent), where it did

    @property
    def busy(self) -> bool:
        """It ran out of time because the machine was busy (:attr:`attnlab.judge.apart.pace.Spent.busy`)."""
        return self.timed_out and self.spent is not None and self.spent.busy


def described(e: BaseException) -> str:
    """What a row says of an exception the judged function raised."""
    return e.text if isinstance(e, Raised) else str(e) if isinstance(e, Lost) else told(e)


class Remote:
    """The judged function, as the judge sees it. ``info``: what its side said when it loaded it (``name``,
    ``score_mod``: takes a ``score_mod=`` keyword, ``sinks``: takes sinks, ``form`` for the lab). ``deadline``:
    seconds the next request may take (None: :data:`QUIET_SECONDS`)."""

    def __init__(self, rfd: int, wfd: int, info: dict, process: subprocess.Popen | None = None):
        self.rfd, self.wfd, self.info, self.process = rfd, wfd, info, process
        self.deadline: float | None = None
        self.lost: str | None = None  # why no more can be asked
        self.timed_out = False
        self.strays = False  # processes the judged code started were still running at the end (and were ended)
        self.tag: str | None = None  # the judged process's environment tag (start), which its descendants inherit
        self.basis = ""  # how deadline was set, said with it when the machine held the function back past it
        self.spent = None  # what its last request cost, where it was waited for (attnlab.judge.apart.pace.Spent)
        self.started = None  # (job, cwd, module, environment) it was started with, to start it again (restart)
        self.asked = False  # a request was sent and its answer not read: the process is busy with it (an interrupt)

    def __repr__(self) -> str:
        return f"Remote({self.info.get('name')!r})"

    @property
    def takes_score_mod(self) -> bool:
        return bool(self.info.get("score_mod"))

    @property
    def takes_sinks(self) -> bool:
        """Its signature names ``sinks`` (or an API's ``learnable_sink``): it is given the sink cases."""
        return bool(self.info.get("sinks"))

    def request(self, header: dict, tensors=(), seconds: float | None = None, basis: str | None = None
                ) -> tuple[dict, list]:
        """The reply to one request. One that runs out of time is asked once more of a fresh process (the machine
        may have been busy for a moment) before :class:`Lost` says it timed out; :attr:`spent` says how it ran
        out (:class:`attnlab.judge.apart.pace.Spent`: its own budget used, a wait, or a busy machine). ``basis``:
        how ``seconds`` was set, said with it (default: :attr:`basis`, how :attr:`deadline` was)."""
        try:
            return self._request(header, tensors, seconds, basis)
        except Lost as e:
            if not e.timed_out or self.started is None or self.spent is None:
                raise
        first = self.spent
        try:
            self.restart()
        except LoadFailed:
            raise Lost(self.lost, True, first) from None
        try:
            return self._request(header, tensors, seconds, basis)
        except Lost as e:
            if e.timed_out and self.spent is not None and first.busy and not self.spent.busy:
                self.spent = first  # (said as busy when either try was held back by the machine)
            raise Lost(self.lost, e.timed_out, self.spent) from None

    def _request(self, header: dict, tensors=(), seconds: float | None = None, basis: str | None = None
                 ) -> tuple[dict, list]:
        if self.lost is not None:
            raise Lost(self.lost, self.timed_out, self.spent)
        limit = seconds if seconds is not None else self.deadline if self.deadline is not None else QUIET_SECONDS
        if self.process is None:  # the serving side keeps the time (its watchdog answers "hung"): wait a little longer
            limit += 30.0
        try:
            self.asked = True
            wire.send(self.wfd, header, tensors)
            if self.process is not None:  # its own time, not the machine's (see pace)
                ready, self.spent = pace.wait(self.rfd, limit, self.process.pid)
                self.spent.basis = basis if basis is not None else self.basis if seconds is None else ""
                if not ready:
                    raise wire.TimedOut("no answer within its own time")
                limit = max(limit, 60.0)  # the answer has begun: the rest of it is on its way
            reply, got = wire.receive(self.rfd, limit)
            self.asked = False
        except (wire.TimedOut, TimeoutError):
            spent = self.spent
            self._end(f"no answer after {limit:.1f} s" if spent is None or self.process is None else
                      f"no answer after {spent.wall:.1f} s: {spent.words()}")
            self.timed_out = True
            raise Lost(self.lost, True, self.spent) from None
        except (wire.Closed, BrokenPipeError, OSError, ValueError) as e:
            self._end(None if isinstance(e, (wire.Closed, BrokenPipeError)) else f"a message it sent was not ours: {e}")
            raise Lost(self.lost) from None
        if "hung" in reply:  # the serving side's own watchdog (attnlab.testing)
            self.lost, self.timed_out = f"no answer after {reply['hung']:.1f} s", True
            raise Lost(self.lost, True)
        if "raised" in reply:
            from attnlab import kernels

            if reply["raised"].get("unsupported"):
                raise kernels.Unsupported(reply["raised"].get("message", ""))
            raise Raised(reply["raised"])
        return reply, got

    @property
    def busy(self) -> bool:
        """Its last request ran out of time because the machine was busy, not because of the function."""
        return self.timed_out and self.spent is not None and self.spent.busy

    def restart(self) -> None:
        """The same function in a fresh process (after one that timed out or ended): loaded as it was at
        :func:`start`, everything it had lost forgotten."""
        job, cwd, module, env = self.started
        fresh = start(job, cwd, module, env)
        self.rfd, self.wfd, self.info, self.process = fresh.rfd, fresh.wfd, fresh.info, fresh.process
        self.tag, self.lost, self.timed_out, self.asked = fresh.tag, None, False, False

    def run(self, case, seed: int, q, k, v, m, grad_out, p: float, fresh, layout: bool, backward: bool = True,
            inference: bool = False, sinks=None):
        """:func:`attnlab.judge.judge.run` on the function's side: (out, gradients..., the inference path's outputs)
        or None, and the problems. A sink case's sinks travel last."""
        _, ts = fresh(device=q.device) if fresh is not None else (None, [])
        head = {"op": "run", "case": asdict(case), "seed": seed, "p": p, "layout": layout, "mask": mask_word(m),
                "backward": backward, "inference": inference, "sinks": sinks is not None}
        dense = m if head["mask"] == "tensor" else None
        reply, got = self.request(head, [q, k, v, dense, grad_out, *ts, *([sinks] if sinks is not None else [])])
        return (tuple(got) if reply.get("mine") else None), list(reply.get("problems", []))

    def call(self, q, k, v, m, case, p: float = 0.0):
        """The function's output on these inputs, without gradients (:func:`attnlab.judge.judge.call`)."""
        import torch

        head = {"op": "call", "case": asdict(case), "p": p, "mask": mask_word(m), "seed": torch.initial_seed()}
        reply, got = self.request(head, [q, k, v, m if head["mask"] == "tensor" else None])
        if not reply.get("tensor"):
            raise Raised({"type": "TypeError", "message": f"returned {reply.get('returned')}, not a tensor"})
        return got[0]

    def ask(self, op: str, seconds: float | None = None, basis: str | None = None, **fields) -> dict:
        """An operation of the serving side that answers with plain values (the lab's timing and memory); ``basis``:
        how ``seconds`` was set."""
        return self.request({"op": op, **fields}, (), seconds, basis)[0]

    def close(self) -> None:
        """End the process: asked to close where it waits for a request, killed where it is still busy with one (a
        Ctrl-C or an error reached the judge while the function ran: it would read the request to close only once the
        function returned -- never, for one that hangs)."""
        if self.process is None:
            return
        if self.lost is None and self.process.poll() is None and not self.asked:
            try:
                wire.send(self.wfd, {"op": "close"})
                self.process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._end("closed")

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _end(self, why: str | None) -> None:
        """Kill the process (if it is still there) and say how it ended."""
        p = self.process
        if p is not None:
            if p.poll() is None:
                p.kill()
            p.wait()
            self.strays = end_group(p.pid) or self.strays
            self.strays = end_tagged(self.tag) or self.strays
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()
        if self.lost is None:
            self.lost = why or (f"the process ended ({how(p)})" if p is not None else "the other side ended")


def end_group(pgid: int) -> bool:
    """Kill what is left of the process group ``pgid`` (the judged process's session: whatever the judged code
    started, at import or in a call, and left running); True when something was."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(pgid, signal.SIGKILL)
    return True


TAG = "ATTNLAB_JUDGED"  # in the environment of a judged process, and so of every process its code starts


def end_tagged(tag: str | None) -> bool:
    """Kill every process whose environment carries ``TAG=tag``: what the judged code started and that left its
    process group (``setsid()``, a daemon's double fork) or lost its parent, which :func:`end_group` cannot reach.
    True when something was. It returns once none of them runs (a few seconds at most): each pass finds what the
    last one's processes forked before they died, and waits for the killed ones to be gone (a process that is
    ending shows no environment, but still runs)."""
    if not tag:
        return False
    needle, killed, end = f"{TAG}={tag}".encode() + b"\0", set(), time.monotonic() + 5.0
    while time.monotonic() < end:
        new = []
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError):
                if int(entry.name) != os.getpid() and needle in (entry / "environ").read_bytes() + b"\0":
                    new.append(int(entry.name))
        for pid in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= set(new)
        if not new and not any(_runs(pid) for pid in killed):
            break
        time.sleep(0.01)
    return bool(killed)


def _runs(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, which only waits to be reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def mask_word(m) -> object:
    """How a mask argument travels: None, "tensor", or the CausalBias it is (which holds no values to send)."""
    if m is None:
        return None
    from attnlab.judge import oracle

    variant = oracle.causal_variant(m)
    if variant is not None:
        return {"causal_bias": "lower" in str(variant).lower(), "L": int(m.seq_len_q), "S": int(m.seq_len_kv)}
    return "tensor"


def how(p: subprocess.Popen | None) -> str:
    """How a process ended, in words: "exit code 0", "signal 9, SIGKILL: out of memory, or killed"."""
    return how_code(None if p is None else p.returncode)


def how_code(code: int | None) -> str:
    """:func:`how` for a return code as subprocess gives it (negative: the signal that ended the process)."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    why = {"SIGKILL": ": out of memory, or killed", "SIGSEGV": ": a crash", "SIGABRT": ": aborted"}.get(name, "")
    return f"signal {-code}, {name}{why}"


def start(job: dict, cwd: str | None = None, module: str = "attnlab.judge.apart.worker", env: dict | None = None
          ) -> Remote:
    """A judged process for ``job`` (see :mod:`.worker`; ``module``: a room's own worker; ``env``: its environment,
    default this process's), loaded: LoadFailed in one line when it cannot be."""
    # A session of its own: a Ctrl-C at the terminal is the judge's to handle (it ends this process), and never
    # reaches the judged process halfway through its imports.
    # And a tag in its environment, which every process its code starts inherits: ended with it (end_tagged); a
    # process started again (restart) gets a tag of its own.
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    env.pop(TAG, None)
    tag = uuid.uuid4().hex
    child = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd,
                             env={**env, TAG: tag}, start_new_session=True)
    r = Remote(child.stdout.fileno(), child.stdin.fileno(), {}, child)
    r.tag, r.started = tag, (job, cwd, module, env)
    try:
        wire.send(r.wfd, job)
        reply, _ = wire.receive(r.rfd, LOAD_SECONDS)
    except wire.TimedOut:
        r._end("timed out")
        raise LoadFailed(f"loading {job.get('what')} took more than {LOAD_SECONDS:.0f} s") from None
    except (wire.Closed, BrokenPipeError):
        r._end(None)
        raise LoadFailed(f"loading {job.get('what')} ended the process ({how(child)}) before the function was found: "
                         "the module, or something it imported, ended it (sys.exit, os._exit, a crash)") from None
    except BaseException:
        r._end("interrupted")
        raise
    if "load_error" in reply:
        r._end("did not load")
        raise LoadFailed(reply["load_error"])
    r.info = reply["loaded"]
    return r


def raised(e: BaseException, roots: tuple[str, ...] = ()) -> dict:
    """An exception as the judge is told it: its type, message, whether it is a refusal, and the user's line."""
    from attnlab import kernels

    info = {"type": type(e).__name__, "message": message(e)[:2000], "unsupported": isinstance(e, kernels.Unsupported)}
    if isinstance(e, SystemExit):
        info["exit"] = e.code if isinstance(e.code, (int, str, type(None))) else repr(e.code)
    frame = user_frame(e.__traceback__, roots)
    if frame is not None:
        info["where"] = f"{Path(frame.filename).name}, line {frame.lineno}"
    return info


def user_frame(tb, roots: tuple[str, ...] = ()):
    """The last frame of a traceback in the user's own code: in one of ``roots`` if given, else outside attnlab,
    torch and the standard library."""
    import torch

    skip = tuple(str(Path(m.__file__).resolve().parent) for m in (torch, os))
    skip += (str(Path(__file__).resolve().parents[3]),)  # the folder that holds attnlab
    frames = traceback.extract_tb(tb)
    for f in reversed(frames):
        path = str(Path(f.filename).resolve())
        if roots and any(path.startswith(str(Path(r).resolve())) for r in roots):
            return f
        if not roots and not path.startswith(skip) and not f.filename.startswith("<"):
            return f
    return None
