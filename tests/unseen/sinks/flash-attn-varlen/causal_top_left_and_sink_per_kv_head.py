"""flash_attn_varlen_func with a learnable sink, one dense problem per packed sequence, GQA handled by grouping the
query heads of each kv head (no K/V repeat).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "causal masking inside a sequence uses the top-left diagonal (key j visible iff j <= i) instead of the "
        "bottom-right one (j <= i + S_b - L_b), so causal sequences with L_b != S_b see the wrong keys",
        "the sink is taken per kv head (learnable_sink[kv_head], broadcast over its group) instead of per query "
        "head, so with GQA query head h uses sink[h // G]",
    ],
    "kind": "two",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    out = torch.zeros(total_q, H, v.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=cdt, device=q.device)
    for b in range(cu_seqlens_q.numel() - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = q1 - q0, k1 - k0
        if L == 0:
            continue
        qg = q[q0:q1].to(cdt).view(L, Hkv, G, D)
        kb = k[k0:k1].to(cdt)
        vb = v[k0:k1].to(cdt)
        s = torch.einsum("lkgd,skd->kgls", qg, kb) * scale  # Hkv G L S
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(L, device=q.device).view(L, 1)
        j = torch.arange(S, device=q.device).view(1, S)
        diag = i + S - L
        if alibi_slopes is not None:
            sl = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(cdt).view(Hkv, G, 1, 1)
            s = s - sl * (diag - j).abs()
        hidden = torch.zeros(L, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            hidden |= j < diag - left
        if right >= 0:
            hidden |= j > diag + right
        if causal:
            hidden |= j > i
        s = s.masked_fill(hidden, float("-inf"))
        if learnable_sink is not None:
            sk = learnable_sink.to(cdt)[:Hkv].view(Hkv, 1, 1, 1).expand(Hkv, G, L, 1)
        else:
            sk = s.new_full((Hkv, G, L, 1), float("-inf"))
        full = torch.cat([s, sk], dim=-1)
        mx = full.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(full - mx)
        z = e.sum(-1, keepdim=True)
        p = e[..., :S] / torch.where(z == 0, torch.ones_like(z), z)
        out[q0:q1] = torch.einsum("kgls,skd->lkgd", p, vb).reshape(L, H, -1)
        lse[:, q0:q1] = (mx + torch.log(z)).reshape(H, L)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
