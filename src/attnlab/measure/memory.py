"""Peak memory of one call, measured -- never computed from shapes.

What we want is the *extra* memory a call needs at its worst moment, over what was already in use
(its inputs): for the matrix form that is the L x S matrices of scores and weights, for a tiled
form only a few tiles. Counting bytes from the shapes would only repeat what we believe the code
does; measuring catches the temporaries we forgot.

**On the CPU (Linux)** the kernel keeps, for every process, its resident set (VmRSS: the pages of
memory it really occupies) and the high-water mark of it (VmHWM), both in ``/proc/self/status``.
Writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark to the current resident set.
So, around the call:

1. collect garbage and ask the C allocator to give its free pages back to the system
   (``malloc_trim``), so the call cannot quietly reuse memory freed earlier;
2. reset the high-water mark and read the resident set: the baseline, inputs included;
3. run the call, read the high-water mark: ``peak - baseline`` is the call's extra peak.

The resident set counts whole pages (4 KiB) and everything the process does, so a little noise
comes with it: a few pages from Python's own bookkeeping, or a code path touched for the first
time. :func:`noise_floor` measures it on this machine: it runs an empty call and a tensor of known
size several times and takes four times the worst deviation, and never less than 64 KiB. A peak
below the floor says "too small to tell", not a number. Run the call once before measuring it, so
that loading code is not counted.

What this counts is what the operating system sees, and that includes blocks the C allocator
keeps after the program freed them. Tensors from about 128 KiB to 32 MiB come from the allocator's
heap, and a freed one may stay resident while the next is placed elsewhere: the matrix form at
T = 512 (8 MiB score matrices) then reads as about five matrices where three are alive at once.
Tensors above 32 MiB always get their own pages and are counted exactly. To count live tensors
exactly at every size, start Python with ``MALLOC_MMAP_THRESHOLD_=65536`` (every block of 64 KiB
or more gets its own pages and goes back when freed); that costs time in page faults, so do it
for memory runs, not for timing ones.

**On CUDA** PyTorch's allocator keeps the count itself: ``torch.cuda.max_memory_allocated`` after
``torch.cuda.reset_peak_memory_stats``, minus what was allocated before. It is exact to the
allocator's rounding, so the floor there is one 512-byte block.

Elsewhere (macOS, Windows) there is no way to reset the high-water mark, and peak memory is
reported as unavailable rather than guessed.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable
from functools import lru_cache

import torch

from attnlab.results.host import glibc

CLEAR_REFS = "/proc/self/clear_refs"
STATUS = "/proc/self/status"
MIN_FLOOR = 64 * 1024  # bytes: below this a CPU peak is "too small to tell" whatever calibration says
CALIBRATION_BYTES = 4 * 2**20


def _is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    with open(STATUS) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024  # the file speaks in kB
    return out


@lru_cache(maxsize=1)
def _clear_refs_works() -> bool:
    try:
        with open(CLEAR_REFS, "w") as f:
            f.write("5")
        return {"VmRSS", "VmHWM"} <= set(_status())
    except OSError:
        return False


def method(device="cpu") -> str | None:
    """How peak memory is measured on ``device``, or None when it cannot be."""
    if _is_cuda(device):
        return "torch.cuda.max_memory_allocated"
    if _clear_refs_works():
        trim = " after malloc_trim" if glibc() is not None else ""
        exact = os.environ.get("MALLOC_MMAP_THRESHOLD_")
        exact = f", MALLOC_MMAP_THRESHOLD_={exact}" if exact else ""
        return f"process peak resident set (VmHWM reset by /proc/self/clear_refs){trim}{exact}"
    return None


def measure_peak(fn: Callable[[], object], device="cpu", collect: bool = True) -> int | None:
    """Extra peak bytes in use while ``fn()`` runs, over what was in use just before; None if unmeasurable.

    ``collect=False`` skips the garbage collection first (it takes a tenth of a second with torch loaded).
    """
    if _is_cuda(device):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        del out
        return max(0, peak - base)
    if not _clear_refs_works():
        return None
    if collect:
        gc.collect()
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
    with open(CLEAR_REFS, "w") as f:
        f.write("5")  # VmHWM := VmRSS
    base = _status()["VmRSS"]
    out = fn()
    peak = _status()["VmHWM"]
    del out
    return max(0, peak - base)


@contextlib.contextmanager
def older_objects_set_aside():
    """Inside the block, :func:`measure_peak`'s garbage collection looks only at objects made in it.

    A full collection walks every object the process holds -- with torch loaded, 0.14 s, four times a measured
    length: level 4's measurement (five lengths) spent 2.7 of its 16.5 s collecting. What it is for is garbage the
    measured calls leave in reference cycles, and all of that is made inside the block. So the process is collected
    once on entering, and what is still alive then -- none of it the calls' garbage -- is set aside
    (:func:`gc.freeze`). Every collection in the block still frees every cycle the calls made, in a few
    milliseconds; on leaving, the set-aside objects are collected as before (any of them dropped in the block is
    freed then, and until then stays in the baseline a peak is read over, as any live object does).
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def noise_floor(device="cpu", trials: int = 5) -> int | None:
    """The smallest peak this machine can tell from noise, in bytes (see the module notes)."""
    if _is_cuda(device):
        return 512
    if not _clear_refs_works():
        return None
    n = CALIBRATION_BYTES // 4

    def known():
        return torch.ones(n, dtype=torch.float32, device=device)

    measure_peak(known)  # load the code paths once: first touches are not noise we want to count
    worst = 0
    for _ in range(trials):
        worst = max(worst, measure_peak(lambda: None, collect=False))
        worst = max(worst, abs(measure_peak(known, collect=False) - CALIBRATION_BYTES))
    return max(MIN_FLOOR, 4 * worst)


def available_bytes(device="cpu") -> int | None:
    """Memory free for a new allocation now: MemAvailable on Linux, free device memory on CUDA."""
    if _is_cuda(device):
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def exact_heap(device: str, exact: bool = True) -> bool:
    """Make the CPU's resident high-water mark follow the live tensors (glibc): True if it did.

    By default glibc serves a freed large block's size from its heap from then on, and a fragmented
    heap keeps pages resident that no tensor uses: peaks then depend on the order of allocations more
    than on the tensors. A fixed mmap threshold of 64 KiB gives every larger block its own mapping,
    returned when freed. It costs page faults, so the process switches back (``exact=False``: blocks
    up to 32 MiB from the heap again) before it is timed.
    """
    if torch.device(device).type != "cpu":
        return False  # CUDA's allocator counts exactly
    libc = glibc()
    try:
        return libc is not None and bool(libc.mallopt(-3, 64 * 1024 if exact else 32 * 2**20))  # M_MMAP_THRESHOLD
    except (AttributeError, TypeError):
        return False
