import os
import subprocess
import sys

import pytest
import torch

# Tests check numbers, not speed: one thread avoids thread hand-off costs on the many tiny tensors here.
torch.set_num_threads(1)


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m attnlab ARGS` in a subprocess; returns CompletedProcess (text)."""

    def run(*args, timeout=300, env=None):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run([sys.executable, "-m", "attnlab", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, cwd=tmp_path, env=e)

    return run
