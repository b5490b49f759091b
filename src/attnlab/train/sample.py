"""Generate text from a training checkpoint, one character at a time through the KV cache."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnlab.nn import GPT
from attnlab.results import Result
from attnlab.train import checkpoint as ckpt
from attnlab.train.corpus import UNKNOWN

# The most characters one call generates: their ids are held in memory as the text grows (8 bytes each), and a
# million take this CPU minutes to hours; a number with no bound (--tokens 10**20) would run until killed.
MAX_TOKENS = 1_000_000


@dataclass
class SampleResult(Result):
    checkpoint: str
    variant: str
    step: int
    prompt: str
    text: str  # the continuation only
    tokens: int
    seconds: float
    seed: int


def load_model(path, impl: str | None = None) -> tuple[GPT, list[str], dict]:
    """(model in eval mode, vocabulary, checkpoint metadata) from a checkpoint written by ``attnlab train``."""
    state = ckpt.load(path, need=ckpt.MODEL_FIELDS)
    model, chars = ckpt.build_model(state, path, impl)  # a bad checkpoint: one ValueError naming what is wrong
    meta = {"variant": str(state.get("variant", "?")), "step": state["step"], "corpus": state.get("corpus")}
    return model, chars, meta


def encode(prompt: str, chars: list[str]) -> torch.Tensor:
    index = {c: i for i, c in enumerate(chars)}
    unk = index.get(UNKNOWN)
    missing = sorted({c for c in prompt if c not in index})
    if missing and unk is None:
        raise ValueError(f"prompt has characters the model never saw: {''.join(missing)!r}")
    return torch.tensor([[index.get(c, unk) for c in prompt]], dtype=torch.int64)  # (1, T)


def sample(path, prompt: str = "def ", tokens: int = 200, temperature: float = 0.8, top_k: int | None = None,
           seed: int = 0, impl: str | None = None, on_text: Callable[[str], None] | None = None) -> SampleResult:
    """Continue ``prompt`` by ``tokens`` characters; ``on_text(char)`` hears each one as soon as it is drawn."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("prompt must be a non-empty string")
    if not (isinstance(tokens, int) and 0 <= tokens <= MAX_TOKENS):
        raise ValueError(f"tokens must be a whole number from 0 to {MAX_TOKENS:,} (the most one run generates), "
                         f"got {tokens!r}; run again with another --seed for more text")
    if not (isinstance(temperature, int | float) and 0 < temperature < math.inf):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    model, chars, meta = load_model(path, impl)
    idx = encode(prompt, chars)
    gen = torch.Generator().manual_seed(seed)
    stream = None if on_text is None else (lambda nxt: on_text(chars[int(nxt[0, 0])]))
    t0 = time.perf_counter()
    out = model.generate(idx, tokens, temperature=temperature, top_k=top_k, generator=gen,
                         on_token=stream)  # (1, T + tokens)
    seconds = time.perf_counter() - t0
    text = "".join(chars[int(i)] for i in out[0, idx.shape[1]:])
    return SampleResult(checkpoint=str(path), variant=meta["variant"], step=meta["step"], prompt=prompt, text=text,
                        tokens=tokens, seconds=seconds, seed=seed)
