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

from pathlib import Path

import torch

FORMAT = "attnlab-train-1"


def path_of(out: str | Path, kind: str, variant: str) -> Path:
    """Where variant ``variant`` of experiment ``kind`` keeps its checkpoint in the output folder ``out``."""
    return Path(out) / "checkpoints" / f"{kind}-{variant}.pt"


def resume_points(out: str | Path, kind: str, variants: list[str]) -> dict[str, tuple[Path, int | None]]:
    """Each variant's checkpoint and the step it holds (None: there is none yet, that variant starts at 0).
    ValueError when no variant has one, or when one cannot be read."""
    paths = {name: path_of(out, kind, name) for name in variants}
    folder = Path(out) / "checkpoints"
    if not any(p.is_file() for p in paths.values()):
        raise ValueError(f"--resume: no checkpoint in {folder} (looked for {', '.join(p.name for p in paths.values())})"
                         "; train without --resume first, or pass the --out of the run to continue")
    return {name: (p, load(p)["step"] if p.is_file() else None) for name, p in paths.items()}


def save(path: str | Path, state: dict) -> Path:
    """Write a checkpoint whole or not at all (:func:`attnlab.lab.files.write_file`)."""
    from .files import write_file

    return write_file(path, lambda f: torch.save({"format": FORMAT, **state}, f))


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
