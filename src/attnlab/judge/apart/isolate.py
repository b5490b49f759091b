"""Other people's functions run in a process of their own, and the judge in one they never reached.

A function under test may call ``sys.exit(0)`` or ``os._exit(0)``, crash the interpreter, hang -- or,
when its module is imported, patch ``F.scaled_dot_product_attention``, ``torch.allclose`` or attnlab
itself so that PyTorch's answer agrees with it. So the function and the judge never share a process:

* ``attnlab verify --impl pkg.mod:fn`` (:func:`verify_elsewhere`) and ``attnlab lab check`` keep the
  judge in the command's own process, which never imports the function's module; the function is
  loaded once, from its source, in a judged process (:mod:`.worker`), and only its outputs and
  gradients come back, as tensors (:mod:`.remote`, :mod:`.wire`);
* :mod:`attnlab.testing`, called inside the user's own test run where their code is already
  imported, starts the judge in a fresh process (:func:`judge_apart`) and runs the function in a third: one the
  judge starts from the function's pickle, or, for a function that does not pickle, a fork of the test runner;
  the test runner itself only waits for the verdict, so nothing the function does can end it.

Either way the oracle, PyTorch's baseline and the limits are computed where the judged code cannot
reach them, and the verdict is made from values it sent. A process that ends during a case turns
that case into an ERROR row that says how it ended (and the rest into skipped ones); one that sends
nothing within the case's limit is killed and the case is a FAIL row. The exit code of the command
comes from the rows, never from the judged process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict

from attnlab.judge.apart import remote, served, wire
from attnlab.judge.apart.loader import LoadError, import_function  # noqa: F401 -- the names callers use
from attnlab.judge.apart.remote import LoadFailed  # noqa: F401 -- the name cli/verify.py catches
from attnlab.judge.cases import Case
from attnlab.judge.judge import Row


def verify_elsewhere(spec: str, cases: list[Case], *, seed: int = 0, check_dropout: bool = True,
                     timeout: float | None = 10.0, device: str = "cpu",
                     progress: Callable[[str], None] | None = None, api: str | None = None,
                     note: Callable[[str], None] | None = None, after: Callable | None = None, **held) -> list[Row]:
    """The rows of ``verify({spec: <the function spec names>}, cases, ...)``, the function in a process of its own
    (LoadFailed in one line when it cannot be loaded there). ``held``: verify's ``backward`` and ``factor``.
    ``note``: told in a line when the function's code left processes running (they are ended with the check).
    ``after(fn, result)``: called with the function (its process still there) and verify's result, before the
    process ends (the reproducers: :func:`attnlab.judge.repro.reproduce`)."""
    from attnlab.judge import verify

    with remote.start({"spec": spec, "what": f"--impl {spec}", "api": api, "threads": verify.JUDGE_THREADS}) as fn:
        r = verify.verify({spec: fn}, cases, seed=seed, check_dropout=check_dropout, timeout=timeout, device=device,
                          progress=progress, **held)
        if after is not None:
            after(fn, r)
    if fn.strays and note is not None:
        note(f"--impl {spec} left processes of its own running (started at import or in a call): they were ended")
    return r.rows


_judge: subprocess.Popen | None = None  # the judge's process for attnlab.testing: one a session, started when needed
_UNPICKLED: set = set()  # functions whose pickle did not load in a process of their own: served from a fork instead
GUARD_SECONDS = 30.0  # beyond the cases' own limits, how long a check may go without a verdict before it is ended


def _judge_process() -> subprocess.Popen:
    """The judge's fresh process (see :func:`judge_apart`), started once and kept for the next check: an
    ``assert_case`` per case then costs a case, not an interpreter."""
    global _judge
    if _judge is None or _judge.poll() is not None:
        _judge = subprocess.Popen([sys.executable, "-m", "attnlab.judge.apart.isolate"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                  start_new_session=True)
        atexit.register(_end_judge, _judge)
    return _judge


def _end_judge(child: subprocess.Popen) -> None:
    global _judge
    for f in (child.stdin, child.stdout):
        with contextlib.suppress(OSError):
            f.close()
    if child.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(5)
        if child.poll() is None:
            child.kill()
            child.wait()
    remote.end_group(child.pid)  # the judged processes it started, should any outlive it
    if _judge is child:
        _judge = None


def guard(cases: list[Case], timeout: float) -> float:
    """Seconds a whole check may take before the test runner stops waiting for its verdict: every case at its
    limit, three times over, the function's loading, and a margin."""
    from attnlab.judge.apart.watchdog import case_limit

    return remote.LOAD_SECONDS + GUARD_SECONDS + sum(3 * case_limit(c, timeout) + 1 for c in cases)


def judge_apart(fn: Callable, name: str, cases: list[Case], *, seed: int = 0, check_dropout: bool = True,
                timeout: float = 10.0, device: str = "cpu", backward: bool = True, factor: float = 2.0,
                api: str = "sdpa", max_ratio: float | None = None):
    """verify's result for ``fn``, with neither the judge nor the function in this process (the test runner's).

    The judge runs in a fresh process that never imported ``fn``'s code. The function runs in a process of its
    own: where it pickles (a function of a module, a ``functools.partial`` of one, a module object), the judge
    starts one that loads it by name, as ``attnlab verify --impl`` does, and holds each case to its limit there; a
    function that does not (a lambda, a function defined inside a test) is served from a fork of this process.
    Either way a function that exits, kills its process or hangs ends the check in a verdict, never this
    process. RuntimeError when the judge itself gave none."""
    __tracebackhide__ = True  # a failure reads as the test's, not as this module's frames
    from attnlab.judge import mod_cases, sink_cases
    from attnlab.judge.apart import loader

    if loader.LOADING:  # a module that judges at import, imported to serve its function: it would judge again, and on
        raise RuntimeError(f"attnlab.testing was called while {loader.LOADING[-1]}'s module was imported to be "
                           "judged: call it inside a test function or under `if __name__ == '__main__':`")

    job = {"name": name, "cases": [asdict(c) for c in cases], "seed": seed, "check_dropout": check_dropout,
           "timeout": timeout, "device": device, "backward": backward, "factor": factor, "api": api,
           "max_ratio": max_ratio}
    blob = _pickled(fn)
    if blob is not None and blob not in _UNPICKLED:
        end = _ask_judge({**job, "pickled": blob, "sys_path": list(sys.path), "cwd": os.getcwd()}, cases, timeout)
        if "result" in end:
            return _result(end)
        _UNPICKLED.add(blob)  # e.g. a test module that pytest imported under a name no other process can import
    served = fn if api == "sdpa" else _apis_adapted(fn, api)
    return _served_from_a_fork(served, {**job, "score_mod": mod_cases.takes_score_mod(served),
                                        "sinks": sink_cases.takes_sinks(served)}, cases, timeout)


def _apis_adapted(fn, api: str):
    from attnlab.judge import apis

    return apis.Adapted(fn, api)


def _result(end: dict):
    from attnlab.judge.verify import VerifyResult

    return VerifyResult.from_dict(json.loads(end["result"]))


def _pickled(fn) -> str | None:
    """``fn`` pickled by reference (base64), or None when it cannot be (a lambda, a closure, a local function)."""
    import base64
    import pickle

    try:
        return base64.b64encode(pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)).decode()
    except Exception:  # noqa: BLE001 -- pickle raises many kinds (PicklingError, AttributeError, TypeError)
        return None


def _ask_judge(job: dict, cases: list[Case], timeout: float) -> dict:
    """Send the judge a job whose function it runs itself (pickled) and wait for its answer."""
    __tracebackhide__ = True  # a failure reads as the test's, not as this module's frames
    child = _judge_process()
    done = False
    try:
        wire.send(child.stdin.fileno(), job)
        end, _ = wire.receive(child.stdout.fileno(), guard(cases, timeout))
        done = "result" in end or "load_failed" in end
        return end
    except wire.TimedOut:
        raise RuntimeError(f"the judge gave no verdict within {guard(cases, timeout):.0f} s") from None
    except (wire.Closed, BrokenPipeError):
        child.wait(30)
        raise RuntimeError(f"the judge's process ended ({remote.how(child)}) before its verdict") from None
    finally:
        if not done:
            _end_judge(child)


def _served_from_a_fork(fn, job: dict, cases: list[Case], timeout: float):
    """The judge's verdict on ``fn`` served from a fork of this process, which alone holds the function: whatever
    the function does to its process (exit, a signal, a hang) ends the fork, and this process says so."""
    __tracebackhide__ = True  # a failure reads as the test's, not as this module's frames
    child = _judge_process()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: serve the judge, hand the verdict back, and end without running anything of the parent's
        code = 0
        try:
            os.close(rfd)
            import torch

            torch.set_num_threads(1)  # a fork of a process whose thread pool it cannot use
            wire.send(child.stdin.fileno(), job)
            end = served.serve(fn, child.stdout.fileno(), child.stdin.fileno(), watch=timeout)
            wire.send(wfd, end if "result" in end else {"ended": True})
        except BaseException:  # noqa: BLE001 -- nothing of a failure here may reach the test runner's code
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    done = False
    try:
        try:
            end, _ = wire.receive(rfd, guard(cases, timeout))
        except wire.TimedOut:
            os.kill(pid, 9)
            raise AssertionError(f"{job['name']}: no verdict within {guard(cases, timeout):.0f} s: the function "
                                 "hung where its process could not be watched; it was ended") from None
        except wire.Closed:
            end = {}
        if "result" in end:
            done = True
            return _result(end)
        status = _reap(pid)
        raise AssertionError(f"{job['name']} ended the process it was judged in ({status}) before the verdict: "
                             "sys.exit, os._exit, a signal or a crash inside the function")
    finally:
        os.close(rfd)
        _reap(pid)
        if not done:  # a request left half answered: the next check starts a judge afresh
            _end_judge(child)


def _reap(pid: int) -> str:
    """Wait for the fork ``pid`` to end; how it ended, in words."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "already reaped"
    return remote.how_code(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _judge_child() -> None:
    """In the judge's fresh process: for each job, verify the function -- loaded in a process of its own from its
    pickle, or served by the parent's fork -- and send the result; end when the parent closes the pipe."""
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from attnlab.judge import verify

    workers: dict = {}  # pickle -> the Remote loaded from it, kept while it lives (one a time)
    try:
        while True:
            try:
                job, _ = wire.receive(rfd)
            except wire.Closed:
                return
            cases = [served.case_of(c) for c in job["cases"]]
            if "pickled" in job:
                fn = workers.get(job["pickled"])
                if fn is None or fn.lost is not None:
                    for old in workers.values():
                        old.close()
                    workers.clear()
                    try:
                        fn = remote.start({"pickled": job["pickled"], "sys_path": job["sys_path"], "cwd": job["cwd"],
                                           "what": job["name"], "name": job["name"], "api": job["api"],
                                           "threads": verify.JUDGE_THREADS})
                    except remote.LoadFailed as e:
                        wire.send(wfd, {"load_failed": str(e)})
                        continue
                    workers[job["pickled"]] = fn
                fn.info["name"] = job["name"]
            else:
                fn = remote.Remote(rfd, wfd, {"name": job["name"], "score_mod": job["score_mod"],
                                              "sinks": job.get("sinks", False)})
            r = verify.verify({job["name"]: fn}, cases, seed=job["seed"], check_dropout=job["check_dropout"],
                              timeout=job["timeout"], device=job["device"], backward=job["backward"],
                              factor=job["factor"], max_ratio=job.get("max_ratio"))
            try:
                wire.send(wfd, {"result": json.dumps(r.to_dict())})
            except BrokenPipeError:  # the test runner stopped waiting (the function ended its fork): nothing to tell
                return
    finally:
        for w in workers.values():
            w.close()


if __name__ == "__main__":
    _judge_child()
