"""Checkpoints that let a training run stop and continue as if it never had.

Continuing *exactly* -- the same losses to the last bit -- needs everything that decides the next
step: the weights, the optimizer's moments, the position in the data (the state of the generator
that draws batches), PyTorch's own random state (dropout), and the step counter. A checkpoint
holds all of them, plus the configuration it was trained with, the vocabulary (so ``attnlab
sample`` can turn ids back into text) and the log so far.

Files are written to a temporary name and then renamed, so an interrupted save never leaves half
a checkpoint behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

FORMAT = "attnlab-train-1"


def save(path: str | Path, state: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"format": FORMAT, **state}, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | Path) -> dict:
    """Read a checkpoint written by :func:`save`; ValueError naming the path when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: torch raises many kinds, some with pages of advice
        raise ValueError(f"checkpoint {path} cannot be read: it is not a file `attnlab train` wrote, or it is "
                         f"damaged ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not an attnlab training checkpoint")
    return state


def differences(saved: dict, now: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """'name: saved -> now' for every setting that differs between two configuration dicts."""
    keys = sorted(set(saved) | set(now))
    return [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in keys if k not in ignore and saved.get(k) != now.get(k)]


def rng_state(device: torch.device) -> dict:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
