"""Results are data: every experiment's result serialises to JSON with the machine and versions."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
from pathlib import Path

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


def _clean(x):
    """Make a value JSON-safe: tuples -> lists, NaN/inf -> None, tensors -> lists."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _clean(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, torch.Tensor):
        return _clean(x.detach().cpu().tolist())
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _clean(x.item())
    return x


def to_dict(result) -> dict:
    return _clean(result)


def write_json(result, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(to_dict(result), indent=2) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file
    return path
