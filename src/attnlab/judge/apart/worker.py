"""The judged process: it loads one function and answers the judge's requests with it, nothing more.

Started by :func:`attnlab.judge.apart.remote.start` as ``python -m attnlab.judge.apart.worker``. The first
message names what to load; the reply is ``{"loaded": ...}`` or ``{"load_error": line}``. Then it
serves (:func:`attnlab.judge.apart.served.serve`) until the judge closes the pipe. It never sees the
oracle, PyTorch's answers or the limits, so nothing it imports can change them.

Its messages go out on the stdout it was given; the function's own prints (Python's and C's) go to
stderr. Ctrl-C is the judge's to handle (it ends this process), and the process ends by itself if
the judge is killed outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path


def _end_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (elsewhere the closed pipe ends it at its next read)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def load(job: dict):
    """(the function to serve, what to tell the judge, the user's roots for the lines of errors)."""
    from attnlab.judge import mod_cases, sink_cases
    from attnlab.judge.apart import loader

    if "pickled" in job:  # attnlab.testing: a function of the test's own, by reference (its module imported here)
        fn, roots, name = _unpickled(job), (), job.get("name", "function")
    elif "spec" in job:
        fn, roots = loader.import_function(job["spec"]), ()
        name = job["spec"]
    else:
        path = Path(job["file"])
        fn, roots = loader.load_file(path, job["function"]), (str(path.resolve()),)
        name = job["function"]
    info = {"name": name, "score_mod": mod_cases.takes_score_mod(fn), "sinks": sink_cases.takes_sinks(fn)}
    if job.get("api") not in (None, "sdpa"):  # a function written to another API, called through its adapter
        from attnlab.judge import apis

        fn = apis.Adapted(fn, job["api"])
    return fn, info, roots


def _unpickled(job: dict):
    """The test's function, from its pickle: with the test runner's import path and folder, so that its module
    imports here as it did there."""
    import base64
    import pickle

    from attnlab.judge.apart import loader

    sys.path[:0] = [p for p in job.get("sys_path", []) if p not in sys.path]
    with contextlib.suppress(OSError):
        os.chdir(job.get("cwd") or ".")
    loader.LOADING.append(job.get("name", "function"))  # a judge call its module makes on import is refused
    try:
        return pickle.loads(base64.b64decode(job["pickled"]))
    except Exception as e:  # noqa: BLE001 -- a module that cannot be imported here, by any error
        raise loader.LoadError(f"{job.get('name')} cannot be loaded in a process of its own: "
                               f"{loader.told(e)}") from None


def main(prepare=None, extra=None) -> None:
    """``prepare(fn, job, info) -> fn``: a room's own wrapping of the loaded function (the lab's (q, k, v) form);
    ``extra``: the room's own requests (see :func:`attnlab.judge.apart.served.answer`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the function's own prints go to stderr, not into the messages
    sys.stdout = sys.stderr
    from attnlab.judge.apart import loader, served, wire

    job, _ = wire.receive(rfd)
    if job.get("threads"):  # the judge's own count (attnlab.judge.verify.one_thread): two processes share the cores
        import torch

        torch.set_num_threads(job["threads"])
    state = served.baseline()  # before the judged code runs: what its import sets is undone before each request
    try:
        fn, info, roots = load(job)
        if prepare is not None:
            fn = prepare(fn, job, info)
    except loader.LoadError as e:
        wire.send(wfd, {"load_error": str(e)})
        return
    wire.send(wfd, {"loaded": info})
    served.serve(fn, rfd, wfd, roots=roots, extra=extra, state=state)


if __name__ == "__main__":
    main()
