import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "Per-sequence ALiBi slopes: slopes are taken as alibi_slopes.reshape(-1, H)[0] for every sequence, which is right for (H,) slopes but for (B, H) slopes applies sequence 0's slopes to all sequences instead of alibi_slopes[b]. Wrong out/lse/grads for sequences b >= 1 with (B, H) slopes."
    ],
    "kind": "semantic"
}



def _attend(q, k, v, scale, causal, window_size, softcap, slopes):
    """One sequence: q (L, H, D), k/v (S, Hkv, D) -> out (L, H, D), lse (H, L)."""
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    g = H // Hkv
    qh = q.transpose(0, 1)
    kh = k.transpose(0, 1).repeat_interleave(g, 0)
    vh = v.transpose(0, 1).repeat_interleave(g, 0)
    s = torch.bmm(qh, kh.transpose(1, 2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L)[:, None] + (S - L)
    jj = torch.arange(S)[None, :]
    if slopes is not None:
        s = s - slopes.view(H, 1, 1) * (i - jj).abs().to(s.dtype)
    left, right = window_size
    if causal:
        right = 0
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (jj >= i - left)
    if right >= 0:
        ok = ok & (jj <= i + right)
    s = s.masked_fill(~ok, -math.inf)
    lse = torch.logsumexp(s, -1)
    lse_r = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - lse_r.unsqueeze(-1))
    o = torch.bmm(p, vh)
    return o.transpose(0, 1), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    nseq = len(cq) - 1
    lse_all = torch.full((H, total_q), -math.inf, dtype=cdt)
    pieces = []
    for b in range(nseq):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if qe == qs:
            continue
        if ke == ks:
            pieces.append(torch.zeros(qe - qs, H, v.shape[-1], dtype=cdt))
            continue
        sl = None
        if alibi_slopes is not None:
            sl = alibi_slopes.reshape(-1, H)[0].to(cdt)
        o, l = _attend(q[qs:qe].to(cdt), k[ks:ke].to(cdt), v[ks:ke].to(cdt), scale, causal, window_size,
                       softcap, sl)
        pieces.append(o)
        lse_all[:, qs:qe] = l.detach()
    out = torch.cat(pieces, 0) if pieces else torch.zeros(total_q, H, v.shape[-1], dtype=cdt)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse_all, None
    return out
