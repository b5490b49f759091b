TRUTH = {'api': 'flash-attn-varlen', 'bugs': [], 'kind': 'correct'}
import math
import torch


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    tq, H, D = q.shape
    tk, Hkv = k.shape[0], k.shape[1]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    B = cu_q.numel() - 1
    lq = cu_q[1:] - cu_q[:-1]
    lk = cu_k[1:] - cu_k[:-1]
    seq_q = torch.repeat_interleave(torch.arange(B), lq)
    seq_k = torch.repeat_interleave(torch.arange(B), lk)
    pos_q = torch.arange(tq) - cu_q[seq_q]
    pos_k = torch.arange(tk) - cu_k[seq_k]
    qpos = pos_q + (lk - lq)[seq_q]
    head_map = torch.arange(H) // (H // Hkv)
    kx = k.to(cdt).index_select(1, head_map)
    vx = v.to(cdt).index_select(1, head_map)
    s = torch.einsum('qhd,khd->hqk', q.to(cdt), kx) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt)
        sl = sl[None, :].expand(B, H) if sl.dim() == 1 else sl
        row_slope = sl[seq_q].transpose(0, 1)
        s = s - row_slope[:, :, None] * (qpos[:, None] - pos_k[None, :]).abs().to(cdt)
    keep = seq_q[:, None] == seq_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        keep = keep & (pos_k[None, :] >= qpos[:, None] - left)
    if right >= 0:
        keep = keep & (pos_k[None, :] <= qpos[:, None] + right)
    s = s.masked_fill(~keep, -math.inf)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    den_safe = torch.where(den > 0, den, torch.ones_like(den))
    p = e / den_safe
    out = torch.einsum('hqk,khd->qhd', p, vx).to(q.dtype)
    lse = torch.where(den > 0, m + torch.log(den_safe), torch.full_like(den, -math.inf)).squeeze(-1).detach()
    if return_attn_probs:
        return out, lse, None
    return out
