"""Many command lines through ``python -m attnlab`` in one child process: the entry point's seam, proven once.

Each command line a test would run as ``python -m attnlab ARGS`` pays an interpreter and torch's import (~2 s of
CPU). Where what is tested is the command's one line on stderr and its exit code -- not what a process does when
it is killed or interrupted, which tests/cli keeps in processes of their own -- :func:`run_all` runs every command
line in one child: ``attnlab/__main__.py`` executed as ``python -m attnlab`` executes it (``runpy``, with ``sys.argv``
set), its stdout and stderr taken at the file descriptors (C-level writes too), its exit code from ``SystemExit``.
An exception that escapes ``main`` is reported as the traceback a user would see.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_all(commands: list[list[str]], cwd, timeout: float = 300) -> list[dict]:
    """``[{"code", "stdout", "stderr"}]``, one per command line (a list of arguments), run in one child process in
    ``cwd``."""
    child = subprocess.run([sys.executable, "-m", "tests.cli_batch"], input=json.dumps(
        {"cwd": str(cwd), "commands": [[str(a) for a in c] for c in commands]}), capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    if child.returncode != 0:
        raise RuntimeError(f"the batch of command lines ended with {child.returncode}: {child.stderr[-2000:]}")
    return json.loads(child.stdout.splitlines()[-1])


def _one(argv: list[str]) -> dict:
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        code = _run(argv, fout, ferr, saved)
        out = []
        for f in (fout, ferr):
            f.seek(0)
            out.append(f.read().decode(errors="replace"))
    return {"code": code, "stdout": out[0], "stderr": out[1]}


def _run(argv: list[str], fout, ferr, saved) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fout.fileno(), 1)
    os.dup2(ferr.fileno(), 2)
    code = 0
    try:
        sys.argv = ["attnlab", *argv]
        runpy.run_module("attnlab", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 -- what escapes main is what the user would see: a traceback, exit 1
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    return code


def _exit_by_raising(code: int) -> None:
    """What ``attnlab lab`` does when it is done -- end its process at once (attnlab.cli._clock.end) -- as a
    SystemExit here: this child runs the next command line after it, and its output is flushed as the real end
    flushes it."""
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


def main() -> None:
    from attnlab.cli import _clock

    _clock.end = _exit_by_raising
    job = json.loads(sys.stdin.read())
    os.chdir(job["cwd"])
    results = [_one(argv) for argv in job["commands"]]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
