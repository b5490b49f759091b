"""Facts about the machine a result was measured on: what it is, the library versions, how busy it was.

Every result carries :func:`machine` and :func:`versions`, so a number read later says where it came
from. :func:`load_average` is the work other programs were doing (noise in a timing), and
:func:`glibc` is the C library when it is glibc, whose ``malloc_trim`` and ``mallopt`` the memory
measurements use (see :mod:`attnlab.measure.memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from functools import lru_cache

import torch

from attnlab.kernels.tuned import processor


def machine() -> dict:
    """Where a result was measured."""
    info = {
        "platform": platform.platform(),
        "cpu": processor(),
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


def cpu_features() -> dict:
    """The processor's vector and matrix units that decide how fast half precision multiplies: the flags
    /proc/cpuinfo lists (None where it cannot be read), and what torch itself detects."""
    flags = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    names = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
    out = {name: (None if flags is None else name in flags) for name in names}
    out["torch_capability"] = torch.backends.cpu.get_cpu_capability()
    for name in ("avx512_bf16", "amx_tile", "amx_fp16"):
        check = getattr(torch.cpu, f"_is_{name}_supported", None)
        out[f"torch_{name}"] = bool(check()) if check is not None else None
    return out


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
