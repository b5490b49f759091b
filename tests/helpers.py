"""What the tests share: one seeded query, key and value (and output gradient) builder, a full device, and the
command line run as a user runs it, ``python -m attnlab ARGS`` in a process of its own."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def qkv(N, H, Hkv, L, S, E, Ev=None, dtype=torch.float64, seed=0, grad_out=False, generator=None):
    """Seeded normal q (N, H, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev), drawn in that order.

    N is a batch size or a tuple of batch dims (``()`` for none); Ev defaults to E. With ``grad_out``
    an output gradient (N, H, L, Ev) is drawn last and returned fourth. ``generator`` continues a
    generator the test already draws from (then ``seed`` is not used).
    """
    g = torch.Generator().manual_seed(seed) if generator is None else generator
    batch = tuple(N) if isinstance(N, tuple | list) else (N,)
    Ev = E if Ev is None else Ev
    shapes = [(*batch, H, L, E), (*batch, Hkv, S, E), (*batch, Hkv, S, Ev)] + ([(*batch, H, L, Ev)] if grad_out else [])
    return tuple(torch.randn(*s, generator=g, dtype=dtype) for s in shapes)


def full_device(folder: Path) -> Path:
    """A path whose every write fails with the kernel's own ENOSPC: /dev/full, or a node of that device in ``folder``.

    Some containers have no /dev/full; there a write to it creates a plain file that takes anything, and a test
    of a full disk would pass a command that ignores one. Such a machine gets the device (major 1, minor 7) made
    in ``folder`` where this process may (root); elsewhere the test is skipped.
    """
    if stat.S_ISCHR(os.stat("/dev/full").st_mode if os.path.exists("/dev/full") else 0):
        return Path("/dev/full")
    node = Path(folder) / "full-device"
    if not node.exists():
        try:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        except (OSError, AttributeError):
            pytest.skip("no full device: /dev/full is missing and this process cannot make one")
    return node


def cli(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Run ``python -m attnlab ARGS`` (text); ``env`` adds to this process's environment."""
    return subprocess.run([sys.executable, "-m", "attnlab", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, **(env or {})})


def named(diagnoses) -> list:
    """The keys of a function's diagnosis lines that name a cause (or say what its failing cases share): its
    measured differences -- facts a probe read, ``measured:<kind>`` -- left out."""
    return [d.key for d in diagnoses if not d.key.startswith("measured:")]
