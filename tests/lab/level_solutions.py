"""Each level's solution, and each slip of it a learner makes: ``slip=None`` is the solution, a slip's name its mutant.

The mutants are written the way a learner would slip in that level's own form (loops stay loops, the
tiled forward stays tiled): the levels' tests hold each of the lab's diagnoses to the mutant that must
produce it, and the solutions to passing.
"""

import math

import torch


def _work(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def attention_by_hand(q, k, v, slip=None):
    """Level 1: loops, one query and one key at a time."""
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    q, k, v = (t.reshape(-1, *t.shape[-2:]).to(_work(dtype)) for t in (q, k, v))
    scale = 1 / math.sqrt(S if slip == "scale-length" else E)
    rows = []
    for n in range(q.shape[0]):
        scores = []  # (L, S): the loops' scores, one at a time
        for i in range(L):
            row = []
            for j in range(S):
                s = (q[n, i] * k[n, j]).sum() * scale
                hidden = {"peeks-ahead": j > i + 1, "causal-reversed": j < i}.get(slip, j > i)
                row.append(torch.full_like(s, -math.inf) if hidden else s)
            scores.append(torch.stack(row))
        scores = torch.stack(scores)
        if slip == "softmax-dim":  # each key's column normalised over the queries
            top = scores.max(dim=0, keepdim=True).values
            e = torch.exp(scores - top)
            weights = e / e.sum(dim=0, keepdim=True)
        else:
            outs = []
            for i in range(L):
                e = torch.exp(scores[i] - scores[i].max())
                outs.append(e if slip == "unnormalised" else e / e.sum())
            weights = torch.stack(outs)
        out = []
        for i in range(L):
            acc = torch.zeros(Ev, dtype=q.dtype)
            for j in range(S):
                acc = acc + weights[i, j] * v[n, j]
            out.append(acc)
        rows.append(torch.stack(out))
    return torch.stack(rows).reshape(*lead, L, Ev).to(dtype)


def attention_matrix(q, k, v, slip=None):
    """Level 2: four tensor lines."""
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    q, k, v = q.to(_work(dtype)), k.to(_work(dtype)), v.to(_work(dtype))
    scale = 1 / math.sqrt(S if slip == "scale-length" else E)
    scale = 1.0 if slip in ("unscaled", "unscaled+causal-ignored") else scale
    scores = q @ k.transpose(-2, -1) * scale
    shift = {"peeks-ahead": 2, "causal-reversed": None, "diagonal": 0}.get(slip, 1)
    future = (torch.ones(L, S, dtype=torch.bool).tril(-1) if shift is None
              else torch.ones(L, S, dtype=torch.bool).triu(shift))
    if slip not in ("causal-ignored", "unscaled+causal-ignored"):
        scores = scores.masked_fill(future, 0.0 if slip == "mask-zero" else -math.inf)
    if slip == "unnormalised":
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    elif slip == "max-subtraction":  # exp of the raw scores
        e = torch.exp(scores)
        weights = e / e.sum(dim=-1, keepdim=True)
    else:
        weights = torch.softmax(scores, dim=-2 if slip == "softmax-dim" else -1)
    return (weights @ v).to(dtype)


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64, slip=None):
    """Level 4: tiles of queries against tiles of keys with a running max and sum; (out, lse)."""
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    q, k, v = q.to(_work(dtype)), k.to(_work(dtype)), v.to(_work(dtype))
    out = torch.zeros(*lead, L, Ev, dtype=q.dtype)
    lse = torch.zeros(*lead, L, dtype=q.dtype)
    for i0 in range(0, L, block_q):
        qb = q[..., i0:i0 + block_q, :]
        Bq = qb.shape[-2]
        rows = torch.arange(i0, i0 + Bq).unsqueeze(-1)
        m = torch.full((*lead, Bq, 1), -math.inf, dtype=q.dtype)
        total = torch.zeros(*lead, Bq, 1, dtype=q.dtype)
        acc = torch.zeros(*lead, Bq, Ev, dtype=q.dtype)
        stop = S - S % block_k if slip == "last-tile-dropped" else S
        for j0 in range(0, stop, block_k):
            if is_causal and (j0 >= i0 if slip == "diagonal-skipped" else j0 > i0 + Bq - 1):
                continue
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
            s = (qb @ kb.transpose(-2, -1)) / math.sqrt(E)
            if is_causal:
                cols = torch.arange(kb.shape[-2]) + (0 if slip == "tile-mask" else j0)
                s = s.masked_fill(cols > rows - (i0 if slip == "tile-mask" else 0), -math.inf)
            top = s.amax(dim=-1, keepdim=True)
            new = top if slip == "max-not-carried" else torch.maximum(m, top)
            safe = torch.where(torch.isinf(new), 0.0, new)
            alpha = torch.ones_like(m) if slip == "max-not-carried" else torch.exp(m - safe)
            p = torch.exp(s - {"stale-max": torch.where(torch.isinf(m), 0.0, m),  # the old max, guarded by 0
                               "stale-max-guarded": torch.where(m == -math.inf, new, m)}.get(slip, safe))
            total = (total if slip == "sum-not-rescaled" else total * alpha) + p.sum(dim=-1, keepdim=True)
            acc = (acc if slip == "acc-not-rescaled" else acc * alpha) + p @ vb
            m = new
        out[..., i0:i0 + Bq, :] = acc if slip == "not-divided" else acc / total
        lse[..., i0:i0 + Bq] = (torch.log(total) if slip == "lse-no-max" else m + torch.log(total))[..., 0]
    return out.to(dtype), lse


SLIPS = {
    "loops": ("scale-length", "softmax-dim", "unnormalised", "peeks-ahead", "causal-reversed"),
    "matrix": ("scale-length", "softmax-dim", "unnormalised", "peeks-ahead", "causal-reversed", "unscaled",
               "causal-ignored", "unscaled+causal-ignored", "mask-zero", "diagonal", "max-subtraction"),
    "flash": ("acc-not-rescaled", "sum-not-rescaled", "max-not-carried", "last-tile-dropped", "tile-mask",
              "diagonal-skipped", "stale-max", "not-divided", "lse-no-max"),
}


def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64, slip=None):
    """Level 5: dq, dk, dv from the saved log-sum-exp, tile by tile, no autograd."""
    dtype = q.dtype
    q, k, v, out, lse, dout = (t.to(_work(dtype)) for t in (q, k, v, out, lse, dout))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(E)
    f = 1.0 if slip == "scale-missing" else scale
    D = ((dout * v) if slip == "d-wrong" else (dout * out)).sum(-1, keepdim=True)  # (..., L, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, S, block_k):
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
        cols = torch.arange(kb.shape[-2]) + j0
        dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
        for i0 in range(0, L, block_q):
            qb, dob = q[..., i0:i0 + block_q, :], dout[..., i0:i0 + block_q, :]
            rows = torch.arange(i0, i0 + qb.shape[-2]).unsqueeze(-1)
            s = qb @ kb.transpose(-2, -1) * scale
            if is_causal and slip != "mask-missing":
                s = s.masked_fill(cols > rows, -math.inf)
            if slip == "second-softmax":
                P = torch.softmax(s, dim=-1).nan_to_num(0.0)
            elif slip == "second-softmax@nan":  # a row the tile masks whole left NaN, as torch.softmax gives it
                P = torch.softmax(s, dim=-1)
            else:
                at = lse[..., j0:j0 + block_k].unsqueeze(-2) if slip == "lse-other-row" else \
                    lse[..., i0:i0 + block_q].unsqueeze(-1)
                P = torch.exp(s) / torch.exp(at) if slip == "exp-ratio" else torch.exp(s - at)
            dvb += (P @ dob) if slip == "dv-not-transposed" else P.transpose(-2, -1) @ dob
            dP = dob @ vb.transpose(-2, -1)
            Dq = (P * dP).sum(-1, keepdim=True) if slip == "d-wrong@tile" else \
                D[..., j0:j0 + block_k, :] if slip == "d-key-tile" else D[..., i0:i0 + block_q, :]
            dS = P * (dP - Dq)  # ("d-wrong@tile": rowsum(P dP) over this tile's keys alone)
            dq[..., i0:i0 + block_q, :] = (0 if slip == "dq-overwritten" else dq[..., i0:i0 + block_q, :]) + \
                dS @ kb * f
            dkb += dS.transpose(-2, -1) @ qb * f
        dk[..., j0:j0 + block_k, :], dv[..., j0:j0 + block_k, :] = dkb, dvb
    back = torch.float64 if slip == "dtype" else dtype
    return dq.to(back), dk.to(back), dv.to(back)


def autograd_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    """A backward that asks autograd: the check must refuse it."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    return torch.autograd.grad(o, (q, k, v), dout)


SLIPS["backward"] = ("d-wrong", "scale-missing", "lse-other-row", "dtype", "dv-not-transposed", "second-softmax",
                     "mask-missing", "dq-overwritten", "d-wrong@tile", "second-softmax@nan",
                     "d-key-tile")  # (key@how: another way to the same slip, named by its key)


def rotate(x, pos):
    """The level 6 starter's RoPE, as given."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(pos * theta).to(x.dtype), torch.sin(pos * theta).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def decode_step(q, k, v, cache, pos, slip=None):
    """Level 6: one token at a time into a preallocated cache, rotated to its position."""
    import torch.nn.functional as F

    k_cache, v_cache = cache
    if slip != "no-rope":
        q = rotate(q, pos + (1 if slip == "rope-offset" else 0))
        k = k if slip == "rope-q-only" else rotate(k, pos + (1 if slip == "rope-offset" else 0))
    slot = pos + 1 if slip == "slot-ahead" else pos
    if slip == "before-write":
        keys, values = k_cache[..., :pos, :].clone(), v_cache[..., :pos, :].clone()
    k_cache[..., slot, :], v_cache[..., slot, :] = k[..., 0, :], v[..., 0, :]
    if slip != "before-write":
        end = k_cache.shape[-2] if slip == "whole-buffer" else pos + 1
        keys, values = k_cache[..., :end, :], v_cache[..., :end, :]
    if slip == "cache-dropped":
        keys, values = k, v
    if slip == "sdpa-causal":
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True)
    if keys.shape[-2] == 0:
        return torch.zeros_like(q)
    scale = 1.0 if slip == "unscaled" else 1 / math.sqrt(q.shape[-1])
    return torch.softmax(q @ keys.transpose(-2, -1) * scale, dim=-1) @ values


SLIPS["decode"] = ("sdpa-causal", "before-write", "slot-ahead", "whole-buffer", "cache-dropped", "no-rope",
                   "rope-q-only", "rope-offset", "unscaled")


def causal_self_attention(slip=None):
    """Level 3: the lesson's module written out, as a class; ``slip``: one of its mutants."""
    from torch import nn

    class CausalSelfAttention(nn.Module):
        def __init__(self, d_model, n_head):
            super().__init__()
            self.n_head, self.head_dim = n_head, d_model // n_head
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=-1)
            if slip == "qkv-order":
                k, v = v, k
            if slip == "scores-transposed":
                q, k = k, q
            if slip == "heads-split":
                q, k, v = (t.reshape(B, self.n_head, T, self.head_dim) for t in (q, k, v))
            else:
                q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
            s = q @ k.transpose(-2, -1) / math.sqrt(C if slip == "scale-C" else self.head_dim)
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            if slip == "mask-after-softmax":
                w = torch.softmax(s, dim=-1).masked_fill(future, 0.0)
            elif slip == "causal-ignored":
                w = torch.softmax(s, dim=-1)
            elif slip == "softmax-float32":  # the mixed-precision habit: the weights in float32 whatever x's dtype
                w = torch.softmax(s.masked_fill(future, -math.inf).float(), dim=-1).type_as(s)
            elif slip == "peeks-ahead+view":  # key i + 1 seen, and the merge a .view of a transposed tensor
                w = torch.softmax(s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(2), -math.inf), dim=-1)
                return self.proj((w @ v).transpose(1, 2).view(B, T, C))
            else:
                w = torch.softmax(s.masked_fill(future, -math.inf), dim=-1)
            y = (w @ v).view(B, T, C) if slip == "merge-view" else (w @ v).transpose(1, 2).reshape(B, T, C)
            return y if slip == "no-proj" else self.proj(y)

    return CausalSelfAttention


SLIPS["module"] = ("heads-split", "no-proj", "mask-after-softmax", "qkv-order", "scores-transposed", "scale-C",
                   "causal-ignored", "merge-view")


def flash_attention(q, k, v, is_causal=False, block_m=32, block_n=32):
    """Level 7's function with level 4's tiles in PyTorch, not a Triton kernel (tests/lab/level_triton.py is the
    kernel; level 7's check refuses an answer no kernel of the learner's own launched)."""
    return flash_forward(q, k, v, is_causal, block_m, block_n)
