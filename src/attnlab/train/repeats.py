"""Repeated random sequences: the data that makes a two-layer model grow heads you can name.

A small character model trained on text alone for a few minutes learns which characters follow
which, and its heads spread their weight in ways no one could name. Mix in rows like

    Kq#7v!zR Kq#7v!zR Kq#7v!zR Kq    (a random segment, repeated to fill the row)

and the only way to predict the second copy is to find where the current character appeared
before and copy the character that came after it. A two-layer model learns that in two steps
(Olsson et al., 2022, "In-context Learning and Induction Heads"):

* a **previous-token head** in layer 0 writes into each position which character came just before;
* an **induction head** in layer 1 matches the current character against that "came before" note
  and attends to the position right after the earlier copy, whose character it then predicts.

:func:`mix` replaces a share of each training batch with such rows; :mod:`attnlab.lesson.circuits`
measures whether the heads grew. Half the segments are drawn from :func:`pool`, the printable ASCII
characters of the vocabulary (no space: a learner can type every one of them), without repeats
inside a segment, so each character of the second copy has exactly one earlier copy; the other half
are what a reader types when the page asks for random letters: lowercase letters drawn with
repeats (:func:`letters`), so a letter of the second copy may have several earlier copies.
"""

from __future__ import annotations

import math
import string

import torch

MIN_SEGMENT = 8  # the shortest repeated segment; the longest is half the row


def pool(chars) -> torch.Tensor:
    """Token ids of the printable, non-space ASCII characters in the vocabulary ``chars`` (id -> character)."""
    wanted = set(string.ascii_letters + string.digits + string.punctuation)
    ids = [i for i, c in enumerate(chars) if c in wanted]
    if len(ids) < MIN_SEGMENT:
        raise ValueError(f"the vocabulary has {len(ids)} printable ASCII characters; repeated sequences need at "
                         f"least {MIN_SEGMENT}")
    return torch.tensor(ids, dtype=torch.int64)


def letters(chars) -> torch.Tensor:
    """Token ids of the lowercase ASCII letters in the vocabulary (the printable pool when it has fewer than
    MIN_SEGMENT of them)."""
    ids = [i for i, c in enumerate(chars) if c in string.ascii_lowercase]
    return torch.tensor(ids, dtype=torch.int64) if len(ids) >= MIN_SEGMENT else pool(chars)


def drawn(ids: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` ids drawn from ``ids`` with repeats allowed: (n,)."""
    return ids[torch.randint(len(ids), (n,), generator=gen)]


def segment(ids: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` distinct ids from ``ids``, in a random order: (n,)."""
    if n > len(ids):
        raise ValueError(f"a segment of {n} distinct characters needs at least {n} of them, the pool has {len(ids)}")
    return ids[torch.randperm(len(ids), generator=gen)[:n]]


def rows(count: int, length: int, ids: torch.Tensor, gen: torch.Generator,
         lower: torch.Tensor | None = None) -> torch.Tensor:
    """``count`` rows of ``length`` ids, each a random segment (MIN_SEGMENT to length // 2 long) repeated: the
    even rows distinct characters of ``ids``, the odd ones letters of ``lower`` drawn with repeats (when given)."""
    longest = max(MIN_SEGMENT, min(length // 2, len(ids)))
    out = []
    for r in range(count):
        n = int(torch.randint(MIN_SEGMENT, longest + 1, (), generator=gen))
        seg = drawn(lower, n, gen) if lower is not None and r % 2 else segment(ids, n, gen)
        out.append(seg.repeat(math.ceil(length / n))[:length])
    return torch.stack(out) if out else torch.empty(0, length, dtype=torch.int64)


def mix(x: torch.Tensor, y: torch.Tensor, share: float, ids: torch.Tensor,
        gen: torch.Generator, lower: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (B, T) with the first ``round(share * B)`` rows replaced by repeated segments
    (:func:`rows`)."""
    n = round(share * x.shape[0])
    if n == 0:
        return x, y
    r = rows(n, x.shape[1] + 1, ids, gen, lower).to(x.device)  # (n, T + 1)
    x, y = x.clone(), y.clone()
    x[:n], y[:n] = r[:, :-1], r[:, 1:]
    return x, y
