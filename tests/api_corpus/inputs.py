"""Inputs of the kind each API is used with, and one call that runs a kernel or the reference on them.

A case is a name and a function of a seed that draws float64 inputs (tensors, lengths, tables, block masks). run()
puts them in a dtype, calls a kernel in the API's way and returns what the API gives back, in float64: the output,
the log-sum-exp where the API has one, and the gradients where it has a backward (flash-attn, varlen, sdpa).
reference() answers the same from tests/api_corpus/reference.py on the same rounded inputs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tests.api_corpus import reference as R


@dataclass(frozen=True)
class Case:
    name: str
    draw: Callable  # seed -> dict of inputs


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _flash(L, S, H=4, Hkv=2, D=24, B=2, mult=1.0, alibi=0, **kw):
    def draw(seed):
        g = _g(seed)
        t = {"q": torch.randn(B, L, H, D, generator=g, dtype=torch.float64) * mult,
             "k": torch.randn(B, S, Hkv, D, generator=g, dtype=torch.float64) * mult,
             "v": torch.randn(B, S, Hkv, D, generator=g, dtype=torch.float64)}
        if alibi:
            t["alibi_slopes"] = torch.rand(*((H,) if alibi == 1 else (B, H)), generator=g).float()
        return {"tensors": t, "kw": kw}
    return draw


FLASH = [
    Case("basic", _flash(70, 70)), Case("MHA causal", _flash(70, 70, Hkv=4, causal=True)),
    Case("causal L>S, dead rows", _flash(40, 25, causal=True)), Case("causal L<S", _flash(20, 77, causal=True)),
    Case("window (10, 3)", _flash(70, 70, window_size=(10, 3))),
    Case("window (-1, 5) L<S", _flash(33, 90, window_size=(-1, 5))),
    Case("window (4, -1) L>S", _flash(90, 33, window_size=(4, -1))),
    Case("softcap 5 causal", _flash(50, 64, mult=2.0, softcap=5.0, causal=True)),
    Case("alibi (H,) causal", _flash(50, 64, alibi=1, causal=True)),
    Case("alibi (B, H)", _flash(50, 45, alibi=2)), Case("scale 0.3", _flash(65, 65, softmax_scale=0.3)),
    Case("decode L=1", _flash(1, 100, causal=True)),
    Case("causal window (10, 0) L>S", _flash(100, 75, causal=True, window_size=(10, 0))),
    Case("large logits causal", _flash(70, 70, mult=10.0, causal=True)),
    Case("large logits", _flash(100, 137, D=40, mult=6.0)),
]


def _cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _varlen(lq, lk, H=4, Hkv=2, D=24, mult=1.0, alibi=0, **kw):
    def draw(seed):
        g = _g(seed)
        t = {"q": torch.randn(sum(lq), H, D, generator=g, dtype=torch.float64) * mult,
             "k": torch.randn(sum(lk), Hkv, D, generator=g, dtype=torch.float64) * mult,
             "v": torch.randn(sum(lk), Hkv, D, generator=g, dtype=torch.float64)}
        if alibi:
            kw2 = {**kw, "alibi_slopes": torch.rand(*((H,) if alibi == 1 else (len(lq), H)), generator=g).float()}
        else:
            kw2 = kw
        return {"tensors": t, "cu": (_cu(lq), _cu(lk), max(lq), max(lk)), "kw": kw2}
    return draw


VARLEN = [
    Case("4 sequences", _varlen([5, 40, 0, 17], [5, 40, 0, 17])),
    Case("4 sequences causal", _varlen([5, 40, 0, 17], [5, 40, 0, 17], causal=True)),
    Case("L_b != S_b causal, an empty key set", _varlen([3, 40, 7, 1], [9, 33, 0, 50], causal=True)),
    Case("window (5, 2)", _varlen([30, 70], [60, 20], window_size=(5, 2))),
    Case("softcap causal", _varlen([30, 70], [60, 20], mult=2.0, softcap=3.0, causal=True)),
    Case("alibi (nseq, H) causal", _varlen([30, 70], [60, 20], alibi=2, causal=True)),
    Case("decode rows, alibi (H,)", _varlen([1, 1, 1], [64, 1, 37], alibi=1)),
    Case("large logits causal", _varlen([37, 64, 20], [37, 64, 20], D=40, mult=10.0, causal=True)),
]


def _paged(lens, bs, H=4, Hkv=2, D=24, Lq=1, Lnew=0, mult=1.0, **kw):
    def draw(seed):
        g = _g(seed)
        B = len(lens)
        per_seq = -(-(max(lens) + Lnew) // bs) + 1
        n_blocks = B * per_seq + 3
        table = torch.randperm(n_blocks, generator=g)[:B * per_seq].view(B, per_seq).to(torch.int32)
        t = {"q": torch.randn(B, Lq, H, D, generator=g, dtype=torch.float64) * mult,
             "k_cache": torch.randn(n_blocks, bs, Hkv, D, generator=g, dtype=torch.float64) * mult,
             "v_cache": torch.randn(n_blocks, bs, Hkv, D, generator=g, dtype=torch.float64)}
        if Lnew:
            t["k"] = torch.randn(B, Lnew, Hkv, D, generator=g, dtype=torch.float64) * mult
            t["v"] = torch.randn(B, Lnew, Hkv, D, generator=g, dtype=torch.float64)
        return {"tensors": t, "kw": {"cache_seqlens": torch.tensor(lens, dtype=torch.int32), "block_table": table,
                                     **kw}}
    return draw


PAGED = [
    Case("3 sequences, pages of 16", _paged([1, 37, 64], 16)), Case("empty caches", _paged([0, 5, 16], 16)),
    Case("GQA 8/2, pages of 1", _paged([10, 30], 1, H=8)), Case("softcap", _paged([20, 37, 64], 16, softcap=2.0)),
    Case("one new token", _paged([3, 37, 64], 16, Lnew=1)),
    Case("4 new tokens, 4 queries, causal", _paged([3, 37, 64], 16, Lq=4, Lnew=4, causal=True)),
    Case("MQA, 5 queries, 2 new, causal, pages of 8", _paged([3, 37, 64], 8, Hkv=1, Lq=5, Lnew=2, causal=True)),
    Case("window (6, 0), 3 new", _paged([20, 37, 64], 16, Lq=3, Lnew=3, window_size=(6, 0))),
    Case("large logits", _paged([40, 90, 128], 16, D=40, mult=6.0)),
]


def _rel_bias(slopes):
    def rel(score, b, h, q_idx, kv_idx):
        return score + 0.1 * (q_idx - kv_idx) - slopes[h] * (q_idx - kv_idx).abs()
    return rel


def _softcap(score, b, h, q_idx, kv_idx):
    return 2.0 * torch.tanh(score / 2.0)


def _mask_mods():
    doc = torch.tensor([0] * 50 + [1] * 60 + [2] * 27)
    return {"causal": lambda b, h, q, kv: q >= kv, "window 20": lambda b, h, q, kv: (q >= kv) & (q - kv <= 20),
            "documents": lambda b, h, q, kv: doc[q] == doc[kv],
            "rows 3 mod 7 hidden": lambda b, h, q, kv: (q % 7 != 3) & (kv <= q)}


def _flex(L, S, mask=None, block=128, mod=None, H=4, Hkv=2, E=24, Ev=8, mult=1.0):
    def draw(seed):
        from torch.nn.attention.flex_attention import create_block_mask
        g = _g(seed)
        t = {"query": torch.randn(2, H, L, E, generator=g, dtype=torch.float64) * mult,
             "key": torch.randn(2, Hkv, S, E, generator=g, dtype=torch.float64) * mult,
             "value": torch.randn(2, Hkv, S, Ev, generator=g, dtype=torch.float64)}
        kw = {"enable_gqa": Hkv != H}
        if mask is not None:
            kw["block_mask"] = create_block_mask(_mask_mods()[mask], None, None, L, S, device="cpu",
                                                 BLOCK_SIZE=block)
        if mod == "softcap":
            kw["score_mod"] = _softcap
        elif mod == "relative":
            kw["score_mod"] = _rel_bias(torch.rand(H, generator=g) * 0.1)
        return {"tensors": t, "kw": kw}
    return draw


FLEX = [
    Case("no mask L=100 S=75", _flex(100, 75)), Case("no mask L=S=137", _flex(137, 137, H=4, Hkv=4)),
    Case("causal, blocks of 128", _flex(137, 137, "causal")),
    Case("causal, blocks of 64, softcap", _flex(137, 137, "causal", 64, "softcap")),
    Case("window 20, blocks of 32, relative bias", _flex(137, 137, "window 20", 32, "relative")),
    Case("documents, blocks of 128, softcap", _flex(137, 137, "documents", 128, "softcap")),
    Case("hidden rows, blocks of 16", _flex(137, 137, "rows 3 mod 7 hidden", 16)),
    Case("relative bias, GQA 4/2, no mask", _flex(64, 80, None, 128, "relative")),
    Case("large logits causal", _flex(137, 137, "causal", 64, None, E=40, mult=6.0)),
]


def _sdpa(L, S, H=4, Hkv=4, E=24, batch=(2,), mult=1.0, mask=None, **kw):
    def draw(seed):
        g = _g(seed)
        t = {"q": torch.randn(*batch, H, L, E, generator=g, dtype=torch.float64) * mult,
             "k": torch.randn(*batch, Hkv, S, E, generator=g, dtype=torch.float64) * mult,
             "v": torch.randn(*batch, Hkv, S, E, generator=g, dtype=torch.float64)}
        if mask == "bool":
            m = torch.rand(L, S, generator=g) > 0.3
            m[3] = False  # a row that sees no key
            kw["attn_mask"] = m
        elif mask == "float":
            t["attn_mask"] = torch.randn(L, S, generator=g, dtype=torch.float64)
        return {"tensors": t, "kw": kw}
    return draw


SDPA = [
    Case("basic", _sdpa(64, 64)), Case("causal", _sdpa(64, 64, is_causal=True)),
    Case("causal L<S, top-left", _sdpa(20, 77, is_causal=True)),
    Case("bool mask, a dead row", _sdpa(40, 50, mask="bool")),
    Case("float mask", _sdpa(40, 50, mask="float")), Case("GQA 6/2", _sdpa(33, 33, H=6, Hkv=2, enable_gqa=True)),
    Case("no batch dim, scale 0.3", _sdpa(30, 45, batch=(), scale=0.3)),
    Case("large logits", _sdpa(100, 137, E=40, mult=6.0)),
    Case("large logits causal", _sdpa(137, 137, E=40, mult=6.0, is_causal=True)),
]

CASES = {"flash-attn": FLASH, "flash-attn-varlen": VARLEN, "paged-decode": PAGED, "flex": FLEX, "sdpa": SDPA}
GRADS = {"flash-attn", "flash-attn-varlen", "sdpa"}


def _call(api, fn, t, drawn, want_lse):
    kw = drawn["kw"]
    if api == "flash-attn":
        return fn(t["q"], t["k"], t["v"], return_attn_probs=want_lse, **kw)
    if api == "flash-attn-varlen":
        return fn(t["q"], t["k"], t["v"], *drawn["cu"], return_attn_probs=want_lse, **kw)
    if api == "paged-decode":
        new = {n: t[n] for n in ("k", "v") if n in t}
        return fn(t["q"], t["k_cache"], t["v_cache"], return_softmax_lse=want_lse, **new, **kw)
    if api == "flex":
        return fn(t["query"], t["key"], t["value"], return_lse=want_lse, **kw)
    return fn(t["q"], t["k"], t["v"], **({"attn_mask": t["attn_mask"]} if "attn_mask" in t else {}), **kw)


def _grads(api, out, t, seed):
    if api not in GRADS:
        return {}
    leaves = {n: x for n, x in t.items() if x.requires_grad}
    do = torch.randn(out.shape, generator=_g(seed + 1), dtype=torch.float64).to(out.dtype)
    gs = torch.autograd.grad(out, list(leaves.values()), do, allow_unused=True)
    return {"d" + n: (torch.zeros_like(leaves[n]) if g is None else g).double()
            for n, g in zip(leaves, gs, strict=True)}


def _inputs(api, drawn, dtype):
    t = {n: x.to(dtype) if x.is_floating_point() and n != "alibi_slopes" else x
         for n, x in drawn["tensors"].items()}
    if api in GRADS:
        for n in ("q", "k", "v", "attn_mask"):
            if n in t:
                t[n] = t[n].detach().requires_grad_()
    return t


@functools.cache
def _drawn(case: Case, seed: int) -> dict:
    """A case's float64 inputs, drawn once (block masks take a while to build); callers copy before changing."""
    return case.draw(seed)


def run(api, fn, case: Case, dtype, seed=0, drawn=None):
    """fn's answer on case's inputs in dtype: {'out', 'lse'?, 'dq', 'dk', 'dv', ...} in float64."""
    drawn = dict(_drawn(case, seed) if drawn is None else drawn)
    t = _inputs(api, drawn, dtype)
    if "alibi_slopes" in t:
        drawn["kw"] = {**drawn["kw"], "alibi_slopes": t.pop("alibi_slopes")}
    res = _call(api, fn, t, drawn, api != "sdpa")
    out, lse = (res, None) if api == "sdpa" else res[:2]
    found = {"out": out.detach().double(), **_grads(api, out, t, seed)}
    if lse is not None:
        found["lse"] = lse.detach().double()
    return found


def _ref_fn(api):
    def flash(q, k, v, return_attn_probs=False, **kw):
        return R.flash_ref(q, k, v, **kw)

    def varlen(q, k, v, cq, ck, mq, mk, return_attn_probs=False, **kw):
        return R.varlen_ref(q, k, v, cq, ck, **kw)

    def paged(q, k_cache, v_cache, return_softmax_lse=False, **kw):
        return R.paged_ref(q, k_cache, v_cache, **kw)

    def flex(query, key, value, return_lse=False, **kw):
        return R.flex_ref(query, key, value, **kw)

    def sdpa(q, k, v, **kw):
        return F.scaled_dot_product_attention(q, k, v, **kw)

    return {"flash-attn": flash, "flash-attn-varlen": varlen, "paged-decode": paged, "flex": flex, "sdpa": sdpa}[api]


@functools.cache
def reference(api, case: Case, dtype, seed=0):
    """The reference's answer on the inputs run() gives a kernel in dtype, computed in float64 (once per case)."""
    drawn = dict(_drawn(case, seed))
    drawn["tensors"] = {n: x.to(dtype).double() if x.is_floating_point() and n != "alibi_slopes" else x
                        for n, x in drawn["tensors"].items()}
    return run(api, _ref_fn(api), case, torch.float64, seed, drawn)


def difference(a: dict, b: dict) -> float:
    """The largest |a - b| over the quantities both have; infinities must match, a shape mismatch or NaN is inf."""
    worst = 0.0
    for key in a.keys() & b.keys():
        x, y = a[key], b[key]
        if x.shape != y.shape:
            return math.inf
        both_inf = torch.isinf(x) & torch.isinf(y) & ((x > 0) == (y > 0))
        dead_lse = torch.isinf(x) & torch.isinf(y) if key == "lse" else both_inf  # +inf or -inf for a dead row
        d = torch.where(dead_lse | both_inf, 0.0, (x - y).abs())
        worst = max(worst, math.inf if d.isnan().any() else float(d.max()) if d.numel() else 0.0)
    return worst
