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


@pytest.fixture
def round_trip():
    """Check that a result survives JSON through its class: ``round_trip(result)`` or ``round_trip(data, cls)``.

    A result: ``from_dict`` of its JSON equals it, and writes the same JSON back. JSON a command wrote:
    read through ``cls``, it writes the same JSON back (NaN was written as null and reads back as NaN).
    Returns the result read back.
    """
    import json

    def check(result, cls=None):
        if cls is not None:
            back = cls.from_dict(result)
            assert back.to_dict() == result
            return back
        data = json.loads(json.dumps(result.to_dict()))
        back = type(result).from_dict(data)
        assert back == result and back.to_dict() == data
        return back

    return check
