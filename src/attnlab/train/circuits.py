"""Which heads of a trained model do a job you can name: measured on the text a reader types to test them.

Give the model a run of random letters twice, ``qhbxkqzm...qhbxkqzm...``. The first copy cannot be
predicted (the loss is about log 26); the second can, by a model that has learned to copy. Two kinds
of head do it (see :mod:`attnlab.train.repeats`), and each is measured on its (T, T) weights w:

    previous   the weight one step back, w[i, i-1], averaged over every query i >= 1
    induction  the weight on the keys right after the earlier copies of the query's character,
               sum of w[i, j] over j < i with token[j-1] == token[i] (:func:`after_copies`),
               averaged over the queries whose character appeared before

These are the head view's definitions (attnlab.lesson.heads), and the page's copy box uses the
same. The text is the reader's kind, not the training format: random lowercase letters drawn with
repeats (so a letter may have several earlier copies, and all of them count), at every length from
10 to 30 (:data:`LENGTHS`), each written twice; a head's score is its mean over the sequences, and
``by_length`` keeps the best induction head's score at each length. A head is named a
previous-token head when ``previous >= PREVIOUS_SHARE`` and an induction head when
``induction >= INDUCTION_SHARE``; the copying is real when the loss on the second copy is at most
``REPEAT_LOSS_RATIO`` of the first copy's. Nothing here is assumed: a model that did not grow the
heads gets ``found = False`` and the numbers that show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.results import Result
from attnlab.train import repeats

PREVIOUS_SHARE = 0.5  # a previous-token head puts at least this share of its weight one step back
INDUCTION_SHARE = 0.5  # an induction head puts at least this share on the token after the earlier copy
REPEAT_LOSS_RATIO = 0.5  # "far below": the loss on the repeat is at most this fraction of the first copy's
LENGTHS = tuple(range(10, 31, 2))  # the letters in each sequence before it is written again: 10, 12, ..., 30


@dataclass
class HeadScore(Result):
    layer: int
    head: int
    previous: float  # mean weight one step back
    induction: float  # mean weight on the tokens right after the earlier copies (queries with an earlier copy)


@dataclass
class Circuits(Result):
    segment: int  # the longest n: letters in a sequence before it is written again (sequences are 2n long)
    sequences: int
    seed: int
    example: str  # the first sequence's letters, as text
    heads: list[HeadScore]
    loss_first: float  # mean cross-entropy predicting the first copy (nats per character)
    loss_repeat: float  # the same on the second copy, its first character left out (nothing to copy yet)
    previous_share: float = PREVIOUS_SHARE
    induction_share: float = INDUCTION_SHARE
    loss_ratio: float = REPEAT_LOSS_RATIO
    lengths: list[int] = field(default_factory=list)  # every n measured (LENGTHS)
    by_length: list[float] = field(default_factory=list)  # the best induction head's score at each n
    alphabet: str = "random lowercase letters, repeats allowed"  # what the sequences are made of

    def describe(self) -> str:
        """What was measured, in words: "22 sequences of random lowercase letters, repeats allowed, 10 to 30 long,
        each written twice"."""
        lengths = self.lengths or [self.segment]
        span = f"{min(lengths)} to {max(lengths)}" if len(lengths) > 1 else f"{lengths[0]}"
        return f"{self.sequences} sequences of {self.alphabet}, {span} long, each written twice"

    def lowest(self) -> float:
        """The best induction head's lowest score at any one length (its mean when lengths were not kept)."""
        return min(self.by_length) if self.by_length else self.best("induction").induction

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


def after_copies(tokens) -> dict[int, list[int]]:
    """The induction share's keys: for each query i whose token appeared before, the keys j < i right after those
    earlier copies (tokens[j-1] == tokens[i]). The one definition, for the head view, the copy box and the
    training's measurement (attnlab.train.circuits); the page's script writes it line for line."""
    out = {}
    for i in range(2, len(tokens)):
        after = [j for j in range(1, i) if tokens[j - 1] == tokens[i]]
        if after:
            out[i] = after
    return out



def sequences(chars, count: int, n: int, seed: int) -> torch.Tensor:
    """``count`` rows of ``n`` random lowercase letters (repeats allowed), each written twice: (count, 2n)."""
    ids, g = repeats.letters(chars), torch.Generator().manual_seed(seed)
    return torch.stack([repeats.drawn(ids, n, g).repeat(2) for _ in range(count)])


def score(weights: list[torch.Tensor], ids: torch.Tensor) -> list[HeadScore]:
    """Each head's previous-token and induction share, averaged over the sequences ``ids`` (B, T) whose weights
    per layer are ``weights`` (B, H, T, T)."""
    B, T = ids.shape
    keys = torch.zeros(B, T, T)  # 1 on the keys right after an earlier copy of each query's token
    asked = torch.zeros(B, T, dtype=torch.bool)  # the queries whose token appeared before
    for b in range(B):
        for i, after in after_copies(ids[b].tolist()).items():
            keys[b, i, after], asked[b, i] = 1.0, True
    i = torch.arange(1, T)
    out = []
    for layer, w in enumerate(weights):  # (B, H, T, T)
        prev = w[:, :, i, i - 1].mean(dim=2)  # (B, H)
        share = (w.float() * keys[:, None]).sum(-1)  # (B, H, T)
        ind = (share * asked[:, None]).sum(-1) / asked.sum(-1).clamp(min=1)[:, None]  # (B, H)
        prev, ind = prev.mean(0), ind.mean(0)
        out += [HeadScore(layer, h, float(prev[h]), float(ind[h])) for h in range(w.shape[1])]
    return out


def _losses(logits: torch.Tensor, idx: torch.Tensor, n: int) -> tuple[float, float]:
    """Mean nats per character on the first copy (targets 1..n-1) and the repeat (targets n+1..2n-1)."""
    nll = -torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, idx[:, 1:, None])[..., 0]  # (B, 2n - 1)
    return float(nll[:, : n - 1].mean()), float(nll[:, n:].mean())


def measure(model, chars, lengths=LENGTHS, per_length: int = 2, seed: int = 0) -> Circuits:
    """The heads of ``model`` (an attnlab GPT reading characters ``chars``) on ``per_length`` sequences of random
    letters written twice at each length of ``lengths`` (those that fit its context)."""
    fits = [n for n in lengths if 2 * n <= model.cfg.block_size] or [model.cfg.block_size // 2]
    runs = []  # per length: its heads, losses
    for k, n in enumerate(fits):
        idx = sequences(chars, per_length, n, seed + 10_000 + k).to(model.wte.weight.device)  # (per_length, 2n)
        weights, logits = maps(model, idx)
        runs.append((n, idx, score([w.cpu() for w in weights], idx.cpu()), _losses(logits, idx, n)))
    heads = [HeadScore(h.layer, h.head, *(sum(getattr(r[2][k], what) for r in runs) / len(runs)
                                          for what in ("previous", "induction")))
             for k, h in enumerate(runs[0][2])]
    best = max(range(len(heads)), key=lambda k: heads[k].induction)
    first = sum(r[3][0] for r in runs) / len(runs)
    repeat = sum(r[3][1] for r in runs) / len(runs)
    return Circuits(max(fits), per_length * len(fits), seed, "".join(chars[int(t)] for t in runs[0][1][0, :fits[0]]),
                    heads, first, repeat, lengths=fits, by_length=[r[2][best].induction for r in runs])
