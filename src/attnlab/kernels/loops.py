"""Attention written with explicit Python loops: the lab's "write it with loops" form.

One query at a time, one key at a time, exactly as the formula reads: for query i, score every
key j as a dot product, turn the scores into weights with a softmax (subtracting the largest
score first so ``exp`` cannot overflow), then add up the values weighted by those weights.

It is slow by design -- millions of tiny Python operations where the matrix form does one
matrix multiply -- so use it on small sizes only (a few thousand query-key pairs). It exists so
you can read the arithmetic line by line and check it against the faster forms.

A score modifier (``score_mod=``, see :mod:`attnlab.mods`) changes the scaled scores of a row
before the mask. Attention sinks (``sinks=``, gpt-oss) add one term per row to the softmax's sum --
its head's sink logit, a score with no value -- and the max is taken with it.
"""

from __future__ import annotations

import math

import torch

from . import dropout
from ._check import check, check_score_mod, empty_output


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, score_mod=None, sinks=None):
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, sinks=sinks)
    mod = check_score_mod(score_mod)
    if a.trivial:  # an empty dim: nothing to attend to
        return a.unflatten(empty_output(a))
    idx = [torch.tensor(x).view(1, 1, 1, 1) for x in range(max(a.N, a.H, a.L))] if mod is not None else []
    keys = torch.arange(a.S).view(1, 1, 1, a.S)
    work = a.work  # half precision is computed in float32
    q, k, v = a.q.to(work), a.k.to(work), a.v.to(work)
    mask = a.dense_mask()
    if mask is not None:
        mask = mask.expand(a.N, a.H, a.L, a.S)
    seed = dropout.draw_seed() if a.dropout_p > 0 else 0

    rows = []
    for n in range(a.N):
        heads = []
        for h in range(a.H):
            hk = h // a.groups  # the key/value head this query head reads (GQA)
            sink = [] if a.sinks is None else [a.sinks[h].to(work)]  # one more score of every row, with no value
            keep = None
            if a.dropout_p > 0:
                keep = dropout.keep_mask(seed, a.dropout_p, a.N, a.H, torch.arange(a.L), torch.arange(a.S))[n, h]
            outs = []
            for i in range(a.L):
                # 1. one score per key: the dot product of query i with key j, scaled
                modded = None
                if mod is not None:  # a score modifier sees row i's scaled scores, with their indices
                    raw = torch.stack([(q[n, h, i] * k[n, hk, j]).sum() * a.scale for j in range(a.S)])
                    modded = mod.apply(raw.view(1, 1, 1, a.S), idx[n], idx[h], idx[i], keys).view(a.S)
                scores = []
                for j in range(a.S):
                    s = (q[n, h, i] * k[n, hk, j]).sum() * a.scale if modded is None else modded[j]
                    if mask is not None:
                        if mask.dtype == torch.bool:
                            if not mask[n, h, i, j]:
                                s = torch.full_like(s, -math.inf)  # key j is masked out: its weight will be 0
                        else:
                            s = s + mask[n, h, i, j].to(work)
                    scores.append(s)
                # 2. softmax, subtracting the max first so exp cannot overflow (the sink counts: it is a score)
                if all(float(s.detach()) == -math.inf for s in scores):  # every key masked: zeros, as PyTorch
                    outs.append(_no_key(v[n, hk], q[n, h, i], k[n, hk], sink))
                    continue
                m = torch.stack(scores + sink).detach().amax()  # a NaN score stays NaN, as in PyTorch
                exps = [torch.exp(s - m) for s in scores]
                total = sum(exps) + sum(torch.exp(s - m) for s in sink)  # the sink's weight: in the sum only
                # 3. the weighted sum of values
                o = torch.zeros(a.Ev, dtype=work)
                for j, e in enumerate(exps):  # a masked key adds 0 * v[j]: a NaN there stays NaN, as in PyTorch
                    w = e / total
                    if keep is not None:
                        w = w * keep[i, j] * dropout.factor(a.dropout_p)
                    o = o + w * v[n, hk, j]
                outs.append(o)
            heads.append(torch.stack(outs))  # (L, Ev)
        rows.append(torch.stack(heads))  # (H, L, Ev)
    out = torch.stack(rows)  # (N, H, L, Ev)
    return a.unflatten(out.to(a.q.dtype))


def _no_key(v, q, k, sink: list) -> torch.Tensor:
    """The output of a row that sees no key, zeros (with a sink too: all the row's weight is the sink's, which has no
    value). 0 * v: a NaN in v still shows, as in PyTorch; empty sums tie q, k and the sink in, with zero gradients."""
    return 0.0 * v.sum(dim=0) + q[:0].sum() + k[:, :0].sum() + sum(s[None][:0].sum() for s in sink)
