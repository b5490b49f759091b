"""A decoder with every step switchable: what a level 6 ``decode_step`` with one slip returns over a sequence.

:func:`decode64` runs the step the way the check runs the learner's -- a cache of T + spare slots,
the prompt's keys (turned to their positions) and values already in it, then one token a step from
position P -- with a :class:`Slip` switching one step to what a learner gets wrong: the rotation,
the slot written, the slots read, the mask PyTorch adds with ``is_causal=True``, the scale. Float64;
a step that reads no key at all gives zeros, as ``softmax`` of nothing times nothing does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.nn import rope


@dataclass(frozen=True)
class Slip:
    write: int | None = 0  # the slot written is pos + write (None: never written)
    read: str = "upto"  # "upto": slots 0 .. pos; "before": 0 .. pos - 1 read before the write; "short": 0 .. pos - 1
    # after it; "ahead": 0 .. pos + 1; "all": every slot; "self": the new token alone; "concat": slots 0 .. pos - 1
    # and the new token. (Slots 0 .. pos read before the write are the slot-ahead slip's keys: the same scores.)
    sdpa_causal: bool = False  # F.sdpa(..., is_causal=True) over what is read: the query sees the first key alone
    q_at: int | None = 0  # q turned to pos + q_at (None: not turned -- the same as turned to 0, or every key turned
    k_at: int | None = 0  # to the new token's position when read: q·k does not change)
    scale: str = "right"  # "none", "1/d", "length": 1/sqrt(the keys read)
    again: bool = False  # the keys read turned to pos again (they were turned when kept)
    v_at: int | None = None  # v turned to pos + v_at as well (None: v kept as it is, right)
    softmax: int = -1  # the dim the weights are normalised over


SLIPS = (  # (key, the slip's switches), in the order they are tried
    ("sdpa-causal", {"sdpa_causal": True}), ("before-write", {"read": "before"}),
    ("slot-ahead", {"write": 1}),
    ("slot-ahead", {"write": 1, "read": "ahead"}),
    ("slot-behind", {"write": -1}), ("slot-behind", {"write": -1, "read": "short"}), ("whole-buffer", {"read": "all"}),
    ("cache-not-written", {"write": None, "read": "concat"}),
    ("cache-dropped", {"read": "self"}), ("no-rope", {"q_at": None, "k_at": None}), ("rope-q-only", {"k_at": None}),
    ("rope-k-only", {"q_at": None}), ("rope-offset", {"q_at": 1, "k_at": 1}),
    ("rope-offset", {"q_at": -1, "k_at": -1}), ("rope-offset", {"q_at": 1}), ("rope-offset", {"k_at": 1}),
    ("rope-k-only", {"again": True}), ("rope-v", {"v_at": 0}), ("softmax-dim", {"softmax": -2}),
    ("unscaled", {"scale": "none"}),
    ("scale-1/d", {"scale": "1/d"}), ("scale-length", {"scale": "length"}),
)


def _turn(x, pos: int, at: int | None):
    if at is None:
        return x
    return rope.apply(x, torch.full((x.shape[-2],), pos + at))


def decode64(q, k, v, prompt: int, spare: int, slip: Slip = Slip()) -> torch.Tensor:
    """The outputs of positions prompt .. T - 1, (B, H, T - prompt, d), of a decoder with ``slip``."""
    B, H, T, d = q.shape
    kc, vc = q.new_zeros(B, H, T + spare, d), q.new_zeros(B, H, T + spare, d)
    kc[..., :prompt, :] = rope.apply(k[..., :prompt, :], torch.arange(prompt))
    vc[..., :prompt, :] = v[..., :prompt, :]
    outs = []
    for pos in range(prompt, T):
        one = slice(pos, pos + 1)
        qt = _turn(q[..., one, :], pos, slip.q_at)
        kt = _turn(k[..., one, :], pos, slip.k_at)
        vt = _turn(v[..., one, :], pos, slip.v_at)
        before = (kc[..., :pos, :].clone(), vc[..., :pos, :].clone())
        if slip.write is not None:
            kc[..., pos + slip.write, :], vc[..., pos + slip.write, :] = kt[..., 0, :], vt[..., 0, :]
        keys, values = _read(kc, vc, before, kt, vt, pos, slip)
        if slip.again:
            keys = rope.apply(keys, torch.full((keys.shape[-2],), pos))
        outs.append(_attend(qt, keys, values, slip))
    return torch.cat(outs, dim=-2)


def _read(kc, vc, before, kt, vt, pos: int, slip: Slip):
    if slip.read == "before":
        return before
    if slip.read == "short":
        return kc[..., :pos, :], vc[..., :pos, :]
    if slip.read == "ahead":
        return kc[..., :pos + 2, :], vc[..., :pos + 2, :]
    if slip.read == "all":
        return kc, vc
    if slip.read == "self":
        return kt, vt
    if slip.read == "concat":
        return torch.cat([before[0], kt], dim=-2), torch.cat([before[1], vt], dim=-2)
    return kc[..., :pos + 1, :], vc[..., :pos + 1, :]


def _attend(q, keys, values, slip: Slip):
    n, d = keys.shape[-2], q.shape[-1]
    if n == 0:
        return torch.zeros_like(q)
    sc = {"right": 1 / math.sqrt(d), "none": 1.0, "1/d": 1 / d, "length": 1 / math.sqrt(n)}[slip.scale]
    s = q @ keys.transpose(-2, -1) * sc  # (B, H, 1, n)
    if slip.sdpa_causal:
        s = s.masked_fill(torch.arange(n) > 0, -math.inf)  # top-left: query 0 sees key 0
    return torch.softmax(s, dim=slip.softmax) @ values
