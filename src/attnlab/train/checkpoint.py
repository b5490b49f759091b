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

import dataclasses
from pathlib import Path

import torch

from attnlab.kernels.argcheck import is_int

FORMAT = "attnlab-train-1"
MODEL_FIELDS = ("model_config", "model", "chars", "step")  # what a model is built from (sample, lesson)
RESUME_FIELDS = (*MODEL_FIELDS, "train_config", "optimizer", "data_rng", "torch_rng", "log")  # what a resume needs


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
    return {name: (p, load(p, need=RESUME_FIELDS)["step"] if p.is_file() else None) for name, p in paths.items()}


def save(path: str | Path, state: dict) -> Path:
    """Write a checkpoint whole or not at all (:func:`attnlab.results.files.write_file`)."""
    from attnlab.results.files import write_file

    return write_file(path, lambda f: torch.save({"format": FORMAT, **state}, f))


def load(path: str | Path, need: tuple[str, ...] = ()) -> dict:
    """Read a checkpoint written by :func:`save`; ValueError naming the path when it is not one, or when it
    lacks one of the fields ``need`` names."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {path} " + ("is a folder, not a file" if path.is_dir() else "does not exist"))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: torch raises many kinds, some with pages of advice
        raise ValueError(f"checkpoint {path} cannot be read: it is not a file `attnlab train` wrote, or it is "
                         f"damaged ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not an attnlab training checkpoint")
    missing = [k for k in need if k not in state]
    if missing:
        raise ValueError(f"checkpoint {path} has no {', '.join(missing)}: it is not a whole checkpoint of "
                         "`attnlab train` (cut short, edited, or written by another program)")
    return state


def build_model(state: dict, path: str | Path, impl: str | None = None, finite: bool = True):
    """(GPT in eval mode, vocabulary) from a checkpoint's state, or a ValueError that names what is wrong:
    a setting this attnlab does not know or cannot take, a weight missing, extra or of the wrong shape, a
    vocabulary that does not cover the model's tokens, or (``finite``) weights that are NaN or infinite.
    ``impl`` overrides the form of attention the model was trained with."""
    from attnlab.nn.gpt import GPT, GPTConfig

    if not is_int(state["step"]) or state["step"] < 0:
        raise ValueError(f"checkpoint {path}: step should be a count of steps, got {state['step']!r}")
    fields = state["model_config"]
    if not isinstance(fields, dict):
        raise ValueError(f"checkpoint {path}: model_config should be a table of settings, got "
                         f"{type(fields).__name__}")
    known = {f.name for f in dataclasses.fields(GPTConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"checkpoint {path}: model_config has settings this attnlab does not know: "
                         f"{', '.join(map(str, unknown))} (written by another version?)")
    try:
        cfg = GPTConfig(**{**fields, **({"impl": impl} if impl is not None else {})})
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint {path}: model_config: {e}") from None
    model = GPT(cfg)
    check_weights(state["model"], model, path, finite, state.get("log"))
    model.load_state_dict(state["model"])
    chars = state["chars"]
    if not isinstance(chars, list | tuple) or not all(isinstance(c, str) and len(c) == 1 for c in chars):
        raise ValueError(f"checkpoint {path}: chars should be the vocabulary, a list of single characters")
    if len(chars) != cfg.vocab_size:
        raise ValueError(f"checkpoint {path} has a vocabulary of {len(chars)} characters for a model of "
                         f"{cfg.vocab_size} tokens: each token needs its one character")
    return model.eval(), list(chars)


def check_weights(weights, model: torch.nn.Module, path: str | Path, finite: bool = True, log=None) -> None:
    """ValueError naming the first weight of ``weights`` that ``model`` lacks, misses or has in another shape;
    with ``finite``, the first that holds NaN or infinity (and the step the run diverged at, from ``log``)."""
    if not isinstance(weights, dict) or not all(isinstance(t, torch.Tensor) for t in weights.values()):
        raise ValueError(f"checkpoint {path}: model should hold the weights, a table of tensors")
    want = model.state_dict()
    for name in want:
        if name not in weights:
            raise ValueError(f"checkpoint {path} has no weight {name} ({len(weights)} weights where the model "
                             f"its model_config describes has {len(want)})")
    extra = [n for n in weights if n not in want]
    if extra:
        raise ValueError(f"checkpoint {path} has weights its model_config does not describe: "
                         f"{', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
    for name, t in want.items():
        if tuple(weights[name].shape) != tuple(t.shape):
            raise ValueError(f"checkpoint {path}: weight {name} has shape {tuple(weights[name].shape)}, but the "
                             f"model its model_config describes has {tuple(t.shape)}")
    if finite:
        bad = next((n for n, t in weights.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())),
                   None)
        if bad is not None:
            at = log.get("diverged_at") if isinstance(log, dict) else None
            why = f"the run diverged at step {at}" if at is not None else "the file is damaged or the run diverged"
            raise ValueError(f"checkpoint {path}: weight {bad} holds NaN or infinite values ({why}); train again, "
                             "or take another checkpoint")


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
