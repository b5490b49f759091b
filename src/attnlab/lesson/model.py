"""The model the lesson page runs: its weights packed for the page, and the Python answer to check it.

The page carries a whole GPT (:mod:`attnlab.nn.gpt`) -- the checkpoint ``attnlab train`` left in the
output folder (the 1/sqrt(d) run first), else a *seeded* one: the same architecture with random
weights from a fixed seed, never trained, and labelled so. The page's script runs the forward pass
itself on any text the learner types; :func:`reference` is the same pass in PyTorch, so a test can
hold the two side by side.

Weights travel as one base64 string of little-endian float32 numbers, tensor after tensor, with a
table of names and shapes: a 2-layer, 128-wide model is about 2 MB of page.
"""

from __future__ import annotations

import base64
import string
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attnlab.nn.gpt import GPT, GPTConfig

SEEDED = GPTConfig(vocab_size=1, block_size=64, n_layer=2, n_head=2, d_model=64)  # vocab set from the characters
SEEDED_CHARS = sorted(set(string.printable) - set("\t\n\r\x0b\x0c"))  # what a learner can type on a keyboard


class CannotRead(ValueError):
    """The checkpoint is fine but the page cannot use it: the page falls back to a seeded model and says why."""


@dataclass
class Loaded:
    model: GPT
    chars: list[str]
    source: str  # "trained" or "seeded"
    label: str  # where the model came from, in words
    step: int | None


@dataclass
class PagedModel:
    """What the page embeds: the configuration, the vocabulary and every weight."""

    source: str
    label: str
    config: dict  # GPTConfig.to_dict()
    chars: list[str]
    tensors: list[dict]  # {"name", "shape", "offset"} in float32 numbers from the start of ``blob``
    blob: str  # base64 of the float32 numbers, little-endian

    @property
    def nbytes(self) -> int:
        return len(self.blob)


def find_checkpoint(out: str | Path) -> Path | None:
    """The trained model in ``out/checkpoints``: the 1/sqrt(d) run of ``attnlab train`` first, else any."""
    folder = Path(out) / "checkpoints"
    if not folder.is_dir():
        return None
    for name in ("scale-sqrt.pt", "tie-kv-untied.pt", "tie-kv-tied.pt"):  # the 1/sqrt(d) models first
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob("*.pt"))
    return found[0] if found else None


def seeded(seed: int = 0, why: str = "") -> Loaded:
    """A character-level GPT with random weights from ``seed``: real attention, but nobody taught it anything."""
    cfg = replace(SEEDED, vocab_size=len(SEEDED_CHARS))
    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        model = GPT(cfg).eval()
    label = (f"a seeded model (random weights, seed {seed}, never trained; {cfg.n_layer} layers x {cfg.n_head} heads, "
             f"head width {cfg.head_dim}), one token per character{why}")
    return Loaded(model, list(SEEDED_CHARS), "seeded", label, None)


def trained(path: str | Path) -> Loaded:
    """The model in checkpoint ``path``; CannotRead when it was trained without the 1/sqrt(d) scale."""
    from attnlab.train import checkpoint

    state = checkpoint.load(path, need=checkpoint.MODEL_FIELDS)
    model, chars = checkpoint.build_model(state, path)  # a ValueError naming what is wrong with a bad one
    cfg = model.cfg
    if cfg.scale != "sqrt":  # the walkthrough's "scale" step explains 1/sqrt(d)
        raise CannotRead(f"the model in {path} was trained with scale {cfg.scale!r}, not the 1/sqrt(d) the "
                         "walkthrough explains")
    step = state.get("step")
    when = "its initial weights, not trained yet" if step == 0 else f"step {step}"
    label = (f"the model from attnlab train ({Path(path).name}, {when}, {cfg.n_layer} layer"
             f"{'s' if cfg.n_layer != 1 else ''} x {cfg.n_head} heads, head width {cfg.head_dim}), one token per "
             "character")
    return Loaded(model.eval(), chars, "trained", label, step)


def pack(m: Loaded) -> PagedModel:
    """Every weight of ``m.model`` as float32 in one base64 string, with a table of where each one starts."""
    tensors, parts, offset = [], [], 0
    for name, t in m.model.state_dict().items():
        flat = t.detach().to(torch.float32).contiguous().view(-1)
        tensors.append({"name": name, "shape": list(t.shape), "offset": offset})
        parts.append(flat)
        offset += flat.numel()
    raw = torch.cat(parts).numpy().astype("<f4").tobytes()
    return PagedModel(m.source, m.label, m.model.cfg.to_dict(), m.chars, tensors,
                      base64.b64encode(raw).decode("ascii"))


def unknown(text: str, chars: list[str]) -> list[str]:
    """The characters of ``text`` the model has no token for, each once, in order."""
    seen = set(chars)
    return list(dict.fromkeys(c for c in text if c not in seen))


@torch.no_grad()
def reference(m: Loaded, text: str, scale: str = "sqrt") -> dict:
    """What the page's ``window.attnlab.forward(text)`` must return, computed by PyTorch.

    ``{"tokens": [...], "weights": [layer][head][T][T], "probs": [T][vocab]}`` with the causal mask;
    ``scale`` is "sqrt", "none" or "inv" (the same weights under another scale).
    """
    bad = unknown(text, m.chars)
    if bad:
        raise ValueError(f"the model has no token for {''.join(bad)!r}")
    if not 0 < len(text) <= m.model.cfg.block_size:
        raise ValueError(f"text must have 1 to {m.model.cfg.block_size} characters, got {len(text)}")
    model = m.model
    if scale != model.cfg.scale:
        model = GPT(replace(model.cfg, scale=scale)).eval()
        model.load_state_dict(m.model.state_dict())
    from attnlab.train.circuits import maps

    idx = torch.tensor([[m.chars.index(c) for c in text]])  # (1, T)
    weights, logits = maps(model, idx)  # [layer] (1, H, T, T), (1, T, V)
    return {"tokens": list(text), "weights": [w[0].tolist() for w in weights],
            "probs": torch.softmax(logits[0], -1).tolist()}
