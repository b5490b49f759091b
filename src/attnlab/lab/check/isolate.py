"""Other people's functions run in a child process: whatever they do, the verdict is verify's.

A function under test may call ``sys.exit(0)``, ``os._exit(0)``, crash the interpreter or hang --
at import or inside a case. Run in verify's own process, ``os._exit(0)`` would end it with exit code
0 and no output, which a CI job reads as a pass. So ``attnlab verify --impl pkg.mod:fn`` imports and
calls each such function in a child process of its own, which sends back one JSON line per event
on its original stdout (the function's own prints go to stderr):

    {"loaded": name}    {"start": label}    {"row": {...}}    {"done": true}    {"load_error": message}

The parent judges from those lines alone. A child that ends before ``done`` turns the case it was
running into an ERROR row that says how it ended (and its remaining cases into skipped ones); a
case that sends nothing within its time limit is a FAIL row and the child is killed -- a real
timeout, where an in-process watchdog can only stop waiting. The exit code of the command comes
from the rows, never from the child.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from attnlab.lab.check.cases import Case
from attnlab.lab.check.judge import Row, row
from attnlab.lab.check.watchdog import case_limit

LOAD_SECONDS = 120.0  # importing the function's module (and torch) in the child


class LoadFailed(ValueError):
    """The child could not load the function (the message says why, in one line)."""


class LoadError(ValueError):
    """A ``package.module:function`` that names nothing usable."""


def import_function(spec: str) -> Callable:
    """The function ``package.module:function`` names, imported as ``python -m`` would (the current directory
    first on the path). Run in the child process, where the function's module may do anything at import."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise LoadError(f"--impl {spec!r} must look like package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        raise LoadError(f"cannot import module {mod_name!r} for --impl {spec!r}: {type(e).__name__}: {e}") from None
    except SystemExit as e:
        raise LoadError(f"module {mod_name!r} called sys.exit({e.code!r}) when imported for --impl {spec!r}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoadError(f"module {mod_name!r} has no attribute {attr!r} (from --impl {spec!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoadError(f"--impl {spec!r} names a {type(obj).__name__}, not a function")
    return obj


def verify_elsewhere(spec: str, cases: list[Case], *, seed: int = 0, check_dropout: bool = True,
                     timeout: float | None = 10.0, device: str = "cpu",
                     progress: Callable[[str], None] | None = None) -> list[Row]:
    """The rows of ``verify({spec: <the function spec names>}, cases, ...)``, run in a child process."""
    job = {"spec": spec, "cases": [asdict(c) for c in cases], "seed": seed, "check_dropout": check_dropout,
           "device": device}
    child = subprocess.Popen([sys.executable, "-m", "attnlab.lab.check.isolate", json.dumps(job)],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = _Lines(child)
    try:
        first = lines.next(LOAD_SECONDS)
        if first is None or "load_error" in first:
            raise LoadFailed(_load_failure(spec, first, child, lines))
        rows: list[Row] = []
        running = None
        while len(rows) < len(cases):
            case = cases[len(rows)]
            limit = None if running is None or timeout is None else case_limit(case, timeout)
            msg = lines.next(limit if limit is not None else LOAD_SECONDS * 10)
            if msg is None:  # no word within the limit, or the child is gone
                rows += _lost(spec, cases[len(rows):], child, lines.timed_out, limit, timeout)
                break
            if "start" in msg:
                running = msg["start"]
                if progress:
                    progress(msg["start"])
            elif "row" in msg:
                rows.append(Row.from_dict(msg["row"]))
                running = None
        return rows
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _load_failure(spec: str, first: dict | None, child: subprocess.Popen, lines) -> str:
    if first is not None:
        return first["load_error"]
    if lines.timed_out:
        return f"loading --impl {spec} took more than {LOAD_SECONDS:.0f} s"
    child.wait()
    return f"loading --impl {spec} ended the process ({_how(child)}) before the function was found"


def _lost(spec, left: list[Case], child, timed_out: bool, limit, timeout) -> list[Row]:
    """The case that was running when the child went quiet or ended, and the ones it never reached."""
    first, rest = left[0], left[1:]
    if timed_out:
        child.kill()
        child.wait()
        from attnlab.lab.check.verify import timed_out as words

        first_row = row(spec, first, "fail", words(limit, timeout))
        why = f"not run: case {first.label!r} timed out"
    else:
        child.wait()
        first_row = row(spec, first, "error", f"the process ended ({_how(child)}) while running this case: the "
                        "function, or something it called, ended it (sys.exit, os._exit, a crash)")
        why = f"not run: the process ended during case {first.label!r}"
    return [first_row] + [row(spec, c, "skipped", why) for c in rest]


def _how(child: subprocess.Popen) -> str:
    code = child.returncode
    return f"exit code {code}" if code is None or code >= 0 else f"signal {-code}"


class _Lines:
    """JSON lines from the child's stdout, each within a deadline."""

    def __init__(self, child: subprocess.Popen):
        self.child, self.buf, self.timed_out = child, b"", False
        self.sel = selectors.DefaultSelector()
        self.sel.register(child.stdout, selectors.EVENT_READ)

    def next(self, seconds: float) -> dict | None:
        """The next message, or None when the child ends first or ``seconds`` pass (then ``timed_out``)."""
        end = time.monotonic() + seconds
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return None
            if not self.sel.select(left):
                continue
            chunk = os.read(self.child.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _child(job: dict) -> None:
    """In the child: load the function, verify it case by case, one JSON line per event on the original stdout."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the function's own prints (Python's and C's) go to stderr, not into the messages
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    from attnlab.lab.check import verify

    try:
        name, fn = job["spec"], import_function(job["spec"])
    except LoadError as e:
        send({"load_error": str(e)})
        return
    send({"loaded": name})
    cases = [Case(**{**c, "batch": tuple(c["batch"])}) for c in job["cases"]]
    verify.verify({name: fn}, cases, seed=job["seed"], check_dropout=job["check_dropout"], timeout=None,
                  device=job["device"], progress=lambda label: send({"start": label}),
                  report=lambda r: send({"row": r.to_dict()}))
    send({"done": True})


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
