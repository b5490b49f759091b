"""Results are data: every experiment's result serialises to JSON with the machine and versions."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch

from .machine import machine, versions  # noqa: F401 -- every result carries them


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
