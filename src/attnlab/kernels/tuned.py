"""Tile sizes for this processor: measured by ``attnlab tune``, cached, read by the flash form.

How large a tile of scores should be is a trade ([P5] in :mod:`attnlab.kernels.flash`): every tile costs a
dozen tensor calls whatever its size, so small tiles spend their time in Python and dispatch; large ones
leave the cache, and at short lengths leave few tiles to share the work. Where the balance lies depends on
the processor -- its caches, its vector units, its matmul library's blocking -- so it is measured there, not
written down once: ``attnlab tune`` (:mod:`attnlab.measure.tune`) times candidate sizes side by side with
the defaults and keeps one only where it is faster by a margin.

This module is the kernels' side of it: :class:`Sizes` (what was chosen), and :func:`current`, the sizes
cached for this processor, thread count and torch version, or the defaults where none are. The cache is a
JSON file, ``~/.cache/attnlab/tiles.json``, one entry per key; the environment variable ``ATTNLAB_TILES``
names another file, or is ``off`` to ignore any (the test suite sets it: its numbers must not depend on what
a developer's machine measured). A size passed to a form by hand always wins.
"""

from __future__ import annotations

import json
import os
import platform
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import torch

from . import flash_band

SHORT = 3072  # [P5] query lengths up to this take the short tiles (measured at 2048), longer ones the long tiles
DEFAULT_BLOCK_Q = 256  # [P5] in attnlab.kernels.flash: the dense tiles' query rows and keys where nothing is tuned
DEFAULT_BLOCK_K = 256
# What `attnlab tune` times, the default first: a cache entry outside these was edited by hand, and is refused (a 1 x 1
# tile ran a T = 512 bench in 14 s instead of 14 ms).
TILES = [(DEFAULT_BLOCK_Q, DEFAULT_BLOCK_K), (128, 256), (512, 256), (512, 512), (256, 512), (1024, 256)]
BANDS = [(flash_band.BAND_BLOCK_Q, flash_band.BATCH_SCORES), (32, 1 << 20), (128, 1 << 20), (64, 1 << 18),
         (64, 1 << 22), (32, 1 << 22), (128, 1 << 22)]


class RefusedSizes(UserWarning):
    """A tile cache holds sizes the tuner never measures: they are not used (the message names the file)."""


@dataclass(frozen=True)
class Sizes:
    """Tile sizes; None leaves the module's default (flash.DEFAULT_BLOCK_Q / _K, flash_band.BAND_BLOCK_Q /
    BATCH_SCORES). ``source`` says where they came from: "default", or the measurement (processor, date)."""

    short_q: int | None = None  # dense tiles at L <= SHORT: block_q, block_k
    short_k: int | None = None
    long_q: int | None = None  # ... at L > SHORT
    long_k: int | None = None
    band_rows: int | None = None  # the bands' query rows (flash_band.BAND_BLOCK_Q)
    band_batch: int | None = None  # the bands' scores per head and batch (flash_band.BATCH_SCORES)
    source: str = "default"

    def tiles(self, L: int) -> tuple[int | None, int | None]:
        """(block_q, block_k) for L queries, None where the default holds."""
        return (self.short_q, self.short_k) if L <= SHORT else (self.long_q, self.long_k)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Sizes:
        """The sizes an entry holds; a size that is not a positive integer (a file edited by hand) is left to the
        default, so that a bad cache never fails a flash call."""
        def size(x):
            return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else None

        names = {f.name for f in fields(cls)} - {"source"}
        return cls(**{k: size(v) for k, v in d.items() if k in names}, source=str(d.get("source", "default")))


    def outside(self) -> list[str]:
        """The pairs of sizes that are none of the tuner's candidates (:data:`TILES`, :data:`BANDS`), in words."""
        def pair(a, b, candidates, default):
            return (default[0] if a is None else a, default[1] if b is None else b) in candidates

        out = []
        for name, a, b in (("short tiles", self.short_q, self.short_k), ("long tiles", self.long_q, self.long_k)):
            if (a, b) != (None, None) and not pair(a, b, TILES, TILES[0]):
                out.append(f"{name} {a} x {b}")
        if (self.band_rows, self.band_batch) != (None, None) and not pair(self.band_rows, self.band_batch, BANDS,
                                                                           BANDS[0]):
            out.append(f"bands of {self.band_rows} rows, {self.band_batch} scores")
        return out

    def within(self) -> Sizes:
        """These sizes, each pair outside the candidates left to the default."""
        bad = self.outside()
        return Sizes(**{**asdict(self),
                        **({"short_q": None, "short_k": None} if any(b.startswith("short") for b in bad) else {}),
                        **({"long_q": None, "long_k": None} if any(b.startswith("long") for b in bad) else {}),
                        **({"band_rows": None, "band_batch": None} if any(b.startswith("bands") for b in bad)
                           else {})})


DEFAULT = Sizes()
_LOADED: dict = {}  # (path, key) -> Sizes: the file is read once per process and key
_USING: ContextVar = ContextVar("attnlab_tiles_using", default=None)  # the innermost :func:`using` block's sizes


@lru_cache(maxsize=1)
def processor() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return name


def key(threads: int | None = None) -> str:
    """What a measurement holds for: the processor, the thread count and torch's version."""
    return f"{processor()} | {threads or torch.get_num_threads()} threads | torch {torch.__version__}"


def cache_path() -> Path | None:
    """The cache file, or None when ``ATTNLAB_TILES=off``."""
    env = os.environ.get("ATTNLAB_TILES", "")
    if env.lower() == "off":
        return None
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab" / "tiles.json"


@contextmanager
def using(sizes: Sizes):
    """Within the block, :func:`current` is ``sizes`` (how ``attnlab tune`` times a candidate)."""
    token = _USING.set(sizes)
    try:
        yield sizes
    finally:
        _USING.reset(token)


def current() -> Sizes:
    """The sizes measured for this processor, thread count and torch version, or the defaults."""
    if _USING.get() is not None:
        return _USING.get()
    path, k = cache_path(), key()
    if path is None:
        return DEFAULT
    if (str(path), k) not in _LOADED:
        entry = read(path).get(k)
        sizes = Sizes.from_dict(entry) if isinstance(entry, dict) else DEFAULT
        if sizes.outside():  # once per file and key: the process reads it once
            warnings.warn(f"the tile cache {path} holds sizes attnlab tune never measures "
                          f"({'; '.join(sizes.outside())}): refused, the defaults are used instead; run "
                          "`attnlab tune` again or delete the entry", RefusedSizes, stacklevel=2)
            sizes = sizes.within()
        _LOADED[(str(path), k)] = sizes
    return _LOADED[(str(path), k)]


def read(path: Path) -> dict:
    """Every entry of a cache file ({} when it is missing or unreadable: the defaults, never an error)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(sizes: Sizes, threads: int | None = None, path: Path | None = None) -> Path:
    """Write ``sizes`` as this machine's entry (other entries kept); the next :func:`current` reads it."""
    path = Path(path) if path is not None else cache_path()
    if path is None:
        raise ValueError("ATTNLAB_TILES=off: no cache file to write the tile sizes to")
    data = read(path)
    data[key(threads)] = sizes.as_dict()
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)  # whole or not at all: a reader never sees half a file
    finally:
        tmp.unlink(missing_ok=True)
    _LOADED.clear()
    return path


def unwritable(path: Path) -> str | None:
    """Why the cache file ``path`` could not be written, or None when it can (checked before a measurement)."""
    if path.is_dir():
        return "it is a folder"
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return "it is not writable"
    return None
