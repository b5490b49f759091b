"""Facts about the machine a result was measured on: what it is, the library versions, how busy it was.

Every result carries :func:`machine` and :func:`versions`, so a number read later says where it came
from. :func:`load_average` is the work other programs were doing (noise in a timing), and
:func:`glibc` is the C library when it is glibc, whose ``malloc_trim`` and ``mallopt`` the memory
measurements use (see :mod:`attnlab.lab.measure.memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from functools import lru_cache

import torch


def machine() -> dict:
    """Where a result was measured."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_bytes"] = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return info


def versions() -> dict:
    from attnlab import __version__

    try:
        import numpy
    except ImportError:  # a core install without the 'lab' extra
        numpy = None
    return {"attnlab": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": numpy.__version__ if numpy else None}


def load_average() -> float | None:
    """Runnable processes over the last minute (others' work is noise in a timing); None where unknown."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


@lru_cache(maxsize=1)
def glibc():
    """The C library when it is glibc (it has ``malloc_trim``), else None."""
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name)
        lib.malloc_trim  # noqa: B018 -- glibc only; other C libraries have no trim
        return lib
    except (OSError, AttributeError, TypeError):
        return None
