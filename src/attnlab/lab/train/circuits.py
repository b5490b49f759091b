"""Which heads of a trained model do a job you can name: measured on repeated random sequences.

Give the model a segment of random characters twice, ``Kq#7v!zR...Kq#7v!zR...``. The first copy
cannot be predicted (the loss is about log of the number of characters); the second can, by a
model that has learned to copy. Two kinds of head do it (see :mod:`attnlab.lab.train.repeats`), and each
is measured on its (T, T) weights w, averaged over the sequences:

    previous   the weight one step back, w[i, i-1], over every query i >= 1
    induction  the weight on the position just after the earlier copy of the query's character,
               w[i, i-n+1], over the queries i of the second copy (n: the segment's length)

A head is named a previous-token head when ``previous >= PREVIOUS_SHARE`` and an induction head
when ``induction >= INDUCTION_SHARE``; the copying is real when the loss on the second copy is at
most ``REPEAT_LOSS_RATIO`` of the first copy's. Nothing here is assumed: a model that did not grow
the heads gets ``found = False`` and the numbers that show it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.lab.results import Result
from attnlab.lab.train import repeats

PREVIOUS_SHARE = 0.5  # a previous-token head puts at least this share of its weight one step back
INDUCTION_SHARE = 0.5  # an induction head puts at least this share on the token after the earlier copy
REPEAT_LOSS_RATIO = 0.5  # "far below": the loss on the repeat is at most this fraction of the first copy's


@dataclass
class HeadScore(Result):
    layer: int
    head: int
    previous: float  # mean weight one step back
    induction: float  # mean weight on the token after the earlier copy (second-copy queries)


@dataclass
class Circuits(Result):
    segment: int  # n: characters in each random segment; the sequences are 2n long
    sequences: int
    seed: int
    example: str  # the first sequence's segment, as text
    heads: list[HeadScore]
    loss_first: float  # mean cross-entropy predicting the first copy (nats per character)
    loss_repeat: float  # the same on the second copy, its first character left out (nothing to copy yet)
    previous_share: float = PREVIOUS_SHARE
    induction_share: float = INDUCTION_SHARE
    loss_ratio: float = REPEAT_LOSS_RATIO

    def best(self, what: str) -> HeadScore:
        """The head with the largest ``what`` ("previous" or "induction")."""
        return max(self.heads, key=lambda h: getattr(h, what))

    @property
    def previous_found(self) -> bool:
        return self.best("previous").previous >= self.previous_share

    @property
    def induction_found(self) -> bool:
        return self.best("induction").induction >= self.induction_share

    @property
    def copies(self) -> bool:
        return self.loss_repeat <= self.loss_ratio * self.loss_first

    @property
    def found(self) -> bool:
        return self.previous_found and self.induction_found and self.copies


@torch.no_grad()
def maps(model, idx: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A GPT's causal attention weights per layer, (B, H, T, T) each, and its logits (B, T, V), for ids (B, T)."""
    was = model.training
    model.eval()
    x = model.wte(idx)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(idx.shape[1], device=idx.device))
    weights = []
    for block in model.blocks:
        weights.append(block.attn.attention_weights(block.ln_1(x)))
        x = block(x)
    logits = model.ln_f(x) @ model.wte.weight.T
    model.train(was)
    return weights, logits


def sequences(chars, count: int, n: int, seed: int) -> torch.Tensor:
    """``count`` rows of a random segment of ``n`` distinct printable characters, written twice: (count, 2n)."""
    ids, g = repeats.pool(chars), torch.Generator().manual_seed(seed)
    n = min(n, len(ids))
    return torch.stack([repeats.segment(ids, n, g).repeat(2) for _ in range(count)])


def score(weights: list[torch.Tensor], n: int) -> list[HeadScore]:
    """Each head's previous-token and induction share on sequences of a segment of length ``n`` written twice."""
    out = []
    T = 2 * n
    i = torch.arange(1, T)
    j = torch.arange(n, T)
    for layer, w in enumerate(weights):  # (B, H, T, T)
        prev = w[:, :, i, i - 1].mean(dim=(0, 2))  # (H,)
        ind = w[:, :, j, j - n + 1].mean(dim=(0, 2))
        out += [HeadScore(layer, h, float(prev[h]), float(ind[h])) for h in range(w.shape[1])]
    return out


def measure(model, chars, n: int = 24, count: int = 16, seed: int = 0) -> Circuits:
    """The heads of ``model`` (an attnlab GPT reading characters ``chars``) on ``count`` repeated random sequences."""
    n = min(n, model.cfg.block_size // 2)
    idx = sequences(chars, count, n, seed + 10_000).to(model.wte.weight.device)  # (count, 2n)
    n = idx.shape[1] // 2
    weights, logits = maps(model, idx)
    nll = -torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, idx[:, 1:, None])[..., 0]  # (count, 2n - 1)
    first, repeat = nll[:, : n - 1].mean(), nll[:, n:].mean()  # targets 1..n-1, and n+1..2n-1
    return Circuits(n, count, seed, "".join(chars[int(t)] for t in idx[0, :n]), score(weights, n), float(first),
                    float(repeat))
