"""Every Python snippet in the README runs, each in a fresh interpreter, exactly as written.

A snippet that starts a torch.distributed process group is run the way the README says to run
it, under torchrun (two processes). Printed output is shown with -s.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def _id(code: str) -> str:
    first = code.strip().splitlines()[0]
    return re.sub(r"\W+", "_", first)[:40]


def test_the_readme_has_python_snippets():
    assert len(SNIPPETS) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("code", SNIPPETS, ids=[_id(c) for c in SNIPPETS])
def test_readme_snippet_runs(code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if "init_process_group" in code:
        torchrun = Path(sys.executable).parent / "torchrun"
        cmd = [str(torchrun), "--standalone", "--nproc_per_node=2", str(script)]
    else:
        cmd = [sys.executable, str(script)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stderr[-3000:]
