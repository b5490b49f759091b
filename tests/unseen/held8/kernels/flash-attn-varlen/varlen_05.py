TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "rows that see no key get lse = logsumexp of zeros = log(total_k) instead of -inf (output is right); lse-only, in empty-key sequences and causal L > S rows"
    ],
    "kind": "semantic"
}

import math
import torch


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    nseq = cu_q.numel() - 1
    len_q = cu_q[1:] - cu_q[:-1]
    len_k = cu_k[1:] - cu_k[:-1]
    seg_q = torch.repeat_interleave(torch.arange(nseq), len_q)
    seg_k = torch.repeat_interleave(torch.arange(nseq), len_k)
    pos_q = torch.arange(total_q) - cu_q[seg_q]
    pos_k = torch.arange(total_k) - cu_k[seg_k]
    qpos = pos_q + (len_k - len_q)[seg_q]
    same = seg_q[:, None] == seg_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    rel = qpos[:, None] - pos_k[None, :]
    ok = same
    if left >= 0:
        ok = ok & (rel <= left)
    if right >= 0:
        ok = ok & (rel >= -right)
    qh = q.to(cdt).transpose(0, 1)
    kh = k.to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    vh = v.to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt)
        if sl.dim() == 1:
            sl_q = sl[:, None].expand(H, total_q)
        else:
            sl_q = sl[seg_q].t()
        s = s - sl_q[:, :, None] * rel.abs().to(cdt)[None]
    s = s.masked_fill(~ok, float('-inf'))
    has = ok.any(-1)
    lse = torch.logsumexp(torch.where(has[:, None], s, torch.zeros_like(s)), dim=-1)
    p = torch.exp(s - torch.where(has, lse, torch.zeros_like(lse))[..., None])
    out = torch.matmul(p, vh).transpose(0, 1).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
