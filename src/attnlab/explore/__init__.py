"""Things to try, as experiments you can run: ``attnlab explore NAME``.

Each experiment is one small file with a ``run(seed=...)`` function that returns a result
dataclass (JSON-serialisable, with the machine and versions) and a ``finding(result)`` that says
what it showed in a sentence or two, with the numbers:

* ``no-mask``        -- the encoder's map beside the decoder's: without the causal mask the upper triangle fills in;
* ``same-token``     -- without position information the same token gives the same query, key and output;
* ``inv-scale``      -- scaling by 1/d instead of 1/sqrt(d) flattens the softmax as heads get wider;
* ``trust``          -- attention has no trust boundary: only an explicit mask keeps untrusted text out;
* ``online-softmax`` -- the flash algorithm's running max, normaliser and rescale, one key tile at a time;
* ``sinks``          -- the tiny GPT trained with and without a learned sink per head: where attention goes.

All but ``sinks`` take a second or less; ``sinks`` trains two models (a minute or two: ``trains``), and its
``run`` takes more (:mod:`attnlab.explore.sinks`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Experiment:
    name: str
    module: str  # file in this package
    summary: str
    trains: bool = False  # it trains models: minutes, an estimate and progress (the CLI's), checkpoints to resume

    def load(self):
        return importlib.import_module(f"{__name__}.{self.module}")

    def run(self, seed: int = 0):
        return self.load().run(seed=seed)

    def finding(self, result) -> str:
        return self.load().finding(result)

    def from_dict(self, data: dict):
        """Rebuild the result dataclass from its JSON (as ``write_json`` wrote it)."""
        return self.load().RESULT.from_dict(data)


EXPERIMENTS = {e.name: e for e in (
    Experiment("no-mask", "no_mask", "the encoder (no mask) map beside the causal map: the upper triangle fills in"),
    Experiment("same-token", "same_token", "one word at two positions: identical without positions, not with RoPE"),
    Experiment("inv-scale", "inv_scale", "1/d instead of 1/sqrt(d): peak weight and entropy against head width"),
    Experiment("trust", "trust", "attention has no trust boundary: untrusted text reaches every later position"),
    Experiment("online-softmax", "online_softmax", "flash, tile by tile: running max, normaliser, rescale"),
    Experiment("sinks", "sinks", "train with and without learned sinks: first-token share against the sink's",
               trains=True),
)}


def quick() -> list[str]:
    """The experiments that run in a second or so (every one that does not train)."""
    return [n for n, e in EXPERIMENTS.items() if not e.trains]


def get(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
