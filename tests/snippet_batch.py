"""Run Python snippets as scripts, one after another, in one fresh interpreter (tests/test_readme.py).

Each snippet runs as ``python snippet.py`` would run it: compiled from its own file, ``__name__ == "__main__"``,
in a folder of its own (its current directory), with its own globals; what it prints is kept, and an exception that
escapes it is its failure (the traceback, as the interpreter would print it). One interpreter for all of them costs
one start and one import of torch, where a process a snippet costs each one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_all(codes: list[str], folder, timeout: float = 900) -> list[dict]:
    """``[{"output": ..., "error": ""}]`` for each snippet, run in ``folder``/snippet-N."""
    child = subprocess.run([sys.executable, "-m", "tests.snippet_batch"], input=json.dumps(
        {"folder": str(folder), "codes": codes}), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    if child.returncode != 0:
        raise RuntimeError(f"the snippets' interpreter ended with {child.returncode}: {child.stderr[-3000:]}")
    return json.loads(child.stdout.splitlines()[-1])


def main() -> None:
    job = json.loads(sys.stdin.read())
    results = []
    for n, code in enumerate(job["codes"]):
        here = Path(job["folder"]) / f"snippet-{n}"
        here.mkdir(parents=True, exist_ok=True)
        script = here / "snippet.py"
        script.write_text(code)
        out = io.StringIO()
        error = ""
        os.chdir(here)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as e:
                if e.code not in (None, 0):
                    error = f"exited with {e.code!r}"
            except BaseException:  # noqa: BLE001 -- a snippet's failure is its traceback
                error = traceback.format_exc()[-3000:]
        results.append({"output": out.getvalue(), "error": error})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
