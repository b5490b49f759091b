"""Level 4, the online softmax: ``flash_forward(q, k, v, block)``, one block of keys at a time.

Each query row keeps a running max ``m``, a running sum ``l`` of exp(score − m) and an accumulator of
exp(score − m)·v; a new block raises the max, rescales both by exp(m_old − m_new) and adds its own.
Nothing of size (L, S) is ever held, so the extra memory grows like T, not T².

Graded on verify's grid as a (q, k, v) function with the block size varied by the case
(:func:`block_for`: about a third of the keys, so the last block is partial), its slips named from
its outputs on probes with several block sizes: the accumulator or the sum not rescaled, the max not
carried from block to block, the last partial block dropped, the causal mask's boundary taken within
the block. Measured at T = 512 … 8192 with block 64: the memory's growth exponent must be at most 1.2.
"""

from __future__ import annotations

import math

import torch

from . import slips

SEQS = (512, 1024, 2048, 4096, 8192)
BLOCK = 64  # the block size when it is measured
LINEAR = 1.2  # the most the memory's growth exponent may be


def block_for(S: int) -> int:
    """The block size a graded case of S keys runs with: S // 3 + 1 (three blocks, the last one partial)."""
    return S // 3 + 1


def wrap(fn):
    """The learner's function as the grid calls it: (q, k, v), with the block size the keys' count gives."""
    def graded(q, k, v):
        return fn(q, k, v, block_for(k.shape[-2]))
    graded.__name__ = getattr(fn, "__name__", "flash_forward")
    return graded


def measure_call(fn):
    def measured(q, k, v):
        return fn(q, k, v, BLOCK)
    return measured


def tiled(q, k, v, block: int, rescale_acc=True, rescale_sum=True, carry_max=True, last=True, local_mask=False):
    """Float64 tiled causal attention with each step of the online softmax switchable: the slips' answers."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    rows = torch.arange(L).unsqueeze(-1)  # (L, 1)
    stop = S if last else S - S % block
    for j0 in range(0, stop, block):
        kb, vb = k[..., j0:j0 + block, :], v[..., j0:j0 + block, :]
        cols = torch.arange(kb.shape[-2]) + (0 if local_mask else j0)
        s = (q @ kb.transpose(-2, -1) / math.sqrt(E)).masked_fill(cols > rows, -math.inf)  # (..., L, block)
        top = s.amax(dim=-1, keepdim=True)
        new = torch.maximum(m, top) if carry_max else top
        new_safe = torch.where(torch.isinf(new), 0.0, new)
        alpha = torch.exp(m - new_safe) if carry_max else torch.ones_like(m)
        p = torch.exp(s - new_safe)
        total = (total * alpha if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
        acc = (acc * alpha if rescale_acc else acc) + p @ vb
        m = new
    return torch.where(total > 0, acc / total.clamp_min(1e-300), 0.0)


def slip_list():
    """The level's own slips first (they are what a tiled form gets wrong), then attention's."""
    def at(**kw):
        return lambda q, k, v: tiled(q, k, v, block_for(k.shape[-2]), **kw)
    return [("acc-not-rescaled", at(rescale_acc=False)), ("sum-not-rescaled", at(rescale_sum=False)),
            ("max-not-carried", at(carry_max=False)), ("last-block-dropped", at(last=False)),
            ("block-mask", at(local_mask=True))] + slips.common()


TEXT = {
    "acc-not-rescaled": "your accumulator is not rescaled when the running max grows: multiply it by exp(m_old − "
                        "m_new) before adding the new block's exp(s − m_new)·v",
    "sum-not-rescaled": "your running sum is not rescaled when the running max grows: multiply it by exp(m_old − "
                        "m_new) before adding the new block's exp(s − m_new)",
    "max-not-carried": "your max is not carried from block to block: each block's exps are taken against that "
                       "block's own max and added as they are; keep m = max(m, the block's max) and rescale",
    "last-block-dropped": "your loop over key blocks drops the last, partial block (when S is not a multiple of "
                          "block): range(0, S, block) visits it, and k[..., j0:j0 + block] is shorter there",
    "block-mask": "your causal mask compares the query with the key's place inside its block, not in the sequence: "
                  "key j0 + c comes after query i when j0 + c > i",
    **slips.TEXT,
}


def measured_ok(result) -> tuple[bool, str]:
    p = result.exponents.get("memory")
    if p is None:
        return False, "its memory was not measured at two lengths or more"
    return p <= LINEAR, f"memory grew as T^{p:.2f} (the level asks for at most T^{LINEAR})"
