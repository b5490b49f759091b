"""Other people's functions run in a process of their own, and the judge in one they never reached.

A function under test may call ``sys.exit(0)`` or ``os._exit(0)``, crash the interpreter, hang -- or,
when its module is imported, patch ``F.scaled_dot_product_attention``, ``torch.allclose`` or attnlab
itself so that PyTorch's answer agrees with it. So the function and the judge never share a process:

* ``attnlab verify --impl pkg.mod:fn`` (:func:`verify_elsewhere`) and ``attnlab lab check`` keep the
  judge in the command's own process, which never imports the function's module; the function is
  loaded once, from its source, in a judged process (:mod:`.worker`), and only its outputs and
  gradients come back, as tensors (:mod:`.remote`, :mod:`.wire`);
* :mod:`attnlab.testing`, called inside the user's own test run where their code is already
  imported, starts the judge in a fresh process instead (:func:`judge_apart`) and answers its
  requests with the function from here.

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

from attnlab.judge import remote, served, wire
from attnlab.judge.cases import Case
from attnlab.judge.judge import Row
from attnlab.judge.loader import LoadError, import_function  # noqa: F401 -- the names callers use
from attnlab.judge.remote import LoadFailed  # noqa: F401 -- the name cli/verify.py catches


def verify_elsewhere(spec: str, cases: list[Case], *, seed: int = 0, check_dropout: bool = True,
                     timeout: float | None = 10.0, device: str = "cpu",
                     progress: Callable[[str], None] | None = None, api: str | None = None,
                     note: Callable[[str], None] | None = None, **held) -> list[Row]:
    """The rows of ``verify({spec: <the function spec names>}, cases, ...)``, the function in a process of its own
    (LoadFailed in one line when it cannot be loaded there). ``held``: verify's ``backward`` and ``factor``.
    ``note``: told in a line when the function's code left processes running (they are ended with the check)."""
    from attnlab.judge import verify

    with remote.start({"spec": spec, "what": f"--impl {spec}", "api": api}) as fn:
        r = verify.verify({spec: fn}, cases, seed=seed, check_dropout=check_dropout, timeout=timeout, device=device,
                          progress=progress, **held)
    if fn.strays and note is not None:
        note(f"--impl {spec} left processes of its own running (started at import or in a call): they were ended")
    return r.rows


_judge: subprocess.Popen | None = None  # the judge's process for attnlab.testing: one a session, started when needed


def _judge_process() -> subprocess.Popen:
    """The judge's fresh process (see :func:`judge_apart`), started once and kept for the next check: an
    ``assert_case`` per case then costs a case, not an interpreter."""
    global _judge
    if _judge is None or _judge.poll() is not None:
        _judge = subprocess.Popen([sys.executable, "-m", "attnlab.judge.isolate"], stdin=subprocess.PIPE,
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
    if _judge is child:
        _judge = None


def judge_apart(fn: Callable, name: str, cases: list[Case], *, seed: int = 0, check_dropout: bool = True,
                timeout: float | None = None, device: str = "cpu", backward: bool = True, factor: float = 2.0):
    """verify's result for ``fn``, the judge running in a fresh process that has not imported ``fn``'s code; this
    process answers its requests (each under the in-process watchdog when ``timeout`` is given)."""
    from attnlab.judge import mod_cases
    from attnlab.judge.verify import VerifyResult

    job = {"name": name, "cases": [asdict(c) for c in cases], "seed": seed, "check_dropout": check_dropout,
           "timeout": timeout, "device": device, "score_mod": mod_cases.takes_score_mod(fn), "backward": backward,
           "factor": factor}
    child = _judge_process()
    done = False
    try:
        wire.send(child.stdin.fileno(), job)
        end = served.serve(fn, child.stdout.fileno(), child.stdin.fileno(), watch=timeout)
        if "result" not in end:
            child.wait(30)
            raise RuntimeError(f"the judge's process ended ({remote.how(child)}) before its verdict")
        done = True
        return VerifyResult.from_dict(json.loads(end["result"]))
    finally:
        if not done:  # interrupted, or a request left half answered: the next check starts a judge afresh
            _end_judge(child)


def _judge_child() -> None:
    """In the judge's fresh process: for each job, verify the function that the parent serves and send the result;
    end when the parent closes the pipe."""
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from attnlab.judge import verify

    while True:
        try:
            job, _ = wire.receive(rfd)
        except wire.Closed:
            return
        fn = remote.Remote(rfd, wfd, {"name": job["name"], "score_mod": job["score_mod"]})
        cases = [served.case_of(c) for c in job["cases"]]
        r = verify.verify({job["name"]: fn}, cases, seed=job["seed"], check_dropout=job["check_dropout"],
                          timeout=job["timeout"], device=job["device"], backward=job["backward"], factor=job["factor"])
        wire.send(wfd, {"result": json.dumps(r.to_dict())})


if __name__ == "__main__":
    _judge_child()
