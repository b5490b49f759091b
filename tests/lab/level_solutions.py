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
    scale = 1 / math.sqrt(S if slip == "scale-sqrt-S" else E)
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
    scale = 1 / math.sqrt(S if slip == "scale-sqrt-S" else E)
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


def flash_forward(q, k, v, block=64, slip=None):
    """Level 4: key blocks with a running max and sum."""
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    q, k, v = q.to(_work(dtype)), k.to(_work(dtype)), v.to(_work(dtype))
    m = torch.full((*lead, L, 1), -math.inf, dtype=q.dtype)
    total = torch.zeros(*lead, L, 1, dtype=q.dtype)
    acc = torch.zeros(*lead, L, Ev, dtype=q.dtype)
    rows = torch.arange(L).unsqueeze(-1)
    stop = S - S % block if slip == "last-block-dropped" else S
    for j0 in range(0, stop, block):
        kb, vb = k[..., j0:j0 + block, :], v[..., j0:j0 + block, :]
        s = (q @ kb.transpose(-2, -1)) / math.sqrt(E)
        cols = torch.arange(kb.shape[-2]) + (0 if slip == "block-mask" else j0)
        s = s.masked_fill(cols > rows, -math.inf)
        top = s.amax(dim=-1, keepdim=True)
        new = top if slip == "max-not-carried" else torch.maximum(m, top)
        safe = torch.where(torch.isinf(new), 0.0, new)
        alpha = torch.ones_like(m) if slip == "max-not-carried" else torch.exp(m - safe)
        p = torch.exp(s - safe)
        total = (total if slip == "sum-not-rescaled" else total * alpha) + p.sum(dim=-1, keepdim=True)
        acc = (acc if slip == "acc-not-rescaled" else acc * alpha) + p @ vb
        m = new
    return torch.where(total > 0, acc / total.clamp_min(1e-30), 0.0).to(dtype)


SLIPS = {
    "loops": ("scale-sqrt-S", "softmax-dim", "unnormalised", "peeks-ahead", "causal-reversed"),
    "matrix": ("scale-sqrt-S", "softmax-dim", "unnormalised", "peeks-ahead", "causal-reversed", "unscaled",
               "causal-ignored", "unscaled+causal-ignored", "mask-zero", "diagonal", "max-subtraction"),
    "flash": ("acc-not-rescaled", "sum-not-rescaled", "max-not-carried", "last-block-dropped", "block-mask"),
}


def flash_backward(q, k, v, out, lse, dout, block=64, slip=None):
    """Level 5: dq, dk, dv from the saved log-sum-exp, one key block at a time, no autograd."""
    dtype = q.dtype
    q, k, v, out, lse, dout = (t.to(_work(dtype)) for t in (q, k, v, out, lse, dout))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(E)
    f = 1.0 if slip == "scale-missing" else scale
    D = ((dout * v) if slip == "d-wrong" else (dout * out)).sum(-1, keepdim=True)  # (..., L, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = torch.arange(L).unsqueeze(-1)
    for j0 in range(0, S, block):
        kb, vb = k[..., j0:j0 + block, :], v[..., j0:j0 + block, :]
        cols = torch.arange(kb.shape[-2]) + j0
        s = (q @ kb.transpose(-2, -1) * scale).masked_fill(cols > rows, -math.inf)
        at = lse[..., j0:j0 + block].unsqueeze(-2) if slip == "lse-other-row" else lse.unsqueeze(-1)
        P = torch.exp(s - at)
        dv[..., j0:j0 + block, :] = P.transpose(-2, -1) @ dout
        dS = P * (dout @ vb.transpose(-2, -1) - D)
        dq += dS @ kb * f
        dk[..., j0:j0 + block, :] = dS.transpose(-2, -1) @ q * f
    back = torch.float64 if slip == "dtype" else dtype
    return dq.to(back), dk.to(back), dv.to(back)


def autograd_backward(q, k, v, out, lse, dout, block=64):
    """A backward that asks autograd: the check must refuse it."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.autograd.grad(o, (q, k, v), dout)


SLIPS["backward"] = ("d-wrong", "scale-missing", "lse-other-row", "dtype")


def decode_step(q, k, v, cache, slip=None):
    """Level 6: one token at a time, the keys and values kept."""
    dtype = q.dtype
    q, k, v = q.to(_work(dtype)), k.to(_work(dtype)), v.to(_work(dtype))
    old_k, old_v = cache if cache is not None else (k[..., :0, :], v[..., :0, :])
    keys, values = torch.cat([old_k, k], dim=-2), torch.cat([old_v, v], dim=-2)
    seen_k, seen_v = {"cache-before-append": (old_k, old_v), "cache-dropped": (k, v),
                      # the first step uses the new token (nothing is cached yet), the later ones the cache alone
                      "cache-before-append-first": (old_k, old_v) if cache is not None else (k, v),
                      }.get(slip, (keys, values))
    if seen_k.shape[-2] == 0:
        out = torch.zeros_like(q)
    else:
        w = torch.softmax(q @ seen_k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        out = w @ seen_v
    return out.to(dtype), (keys, values)


SLIPS["decode"] = ("cache-before-append", "cache-before-append-first", "cache-dropped")


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
            if slip == "heads-split":
                q, k, v = (t.reshape(B, self.n_head, T, self.head_dim) for t in (q, k, v))
            else:
                q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
            s = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            future = torch.ones(T, T, dtype=torch.bool).triu(1)
            if slip == "mask-after-softmax":
                w = torch.softmax(s, dim=-1).masked_fill(future, 0.0)
            else:
                w = torch.softmax(s.masked_fill(future, -math.inf), dim=-1)
            y = (w @ v).transpose(1, 2).reshape(B, T, C)
            return y if slip == "no-proj" else self.proj(y)

    return CausalSelfAttention


SLIPS["module"] = ("heads-split", "no-proj", "mask-after-softmax")
