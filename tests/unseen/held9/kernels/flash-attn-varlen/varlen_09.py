TRUTH = {'api': 'flash-attn-varlen',
 'bugs': ['packed row -> sequence lookup uses searchsorted(cu[1:], idx, right=False), so the first row of each '
          'sequence is assigned to the previous sequence (wrong ids/positions at every boundary); wrong in every '
          'multi-sequence case',
          "the left window test is strict (j > i' - left), dropping the leftmost key of each window; wrong "
          'whenever window_size[0] >= 0 (window16_8_gqa, causal_window20_5)'],
 'kind': 'two'}

import math
import torch


def _positions(cu, total):
    idx = torch.arange(total)
    seq = torch.searchsorted(cu[1:].long(), idx)
    pos = idx - cu.long()[seq]
    return seq, pos


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    lens_q = cu_q[1:] - cu_q[:-1]
    lens_k = cu_k[1:] - cu_k[:-1]
    qseq, qpos = _positions(cu_q, total_q)
    kseq, kpos = _positions(cu_k, total_k)
    qdiag = (qpos + lens_k[qseq] - lens_q[qseq]).view(-1, 1)
    kp = kpos.view(1, -1)
    ok = qseq.view(-1, 1) == kseq.view(1, -1)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        ok = ok & (kp > qdiag - left)
    if right >= 0:
        ok = ok & (kp <= qdiag + right)
    qg = q.to(cd).permute(1, 0, 2).reshape(Hkv, g, total_q, D)
    kg = k.to(cd).permute(1, 0, 2).unsqueeze(1)
    vg = v.to(cd).permute(1, 0, 2).unsqueeze(1)
    s = torch.matmul(qg, kg.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cd)
        per_row = sl.view(1, H).expand(qseq.numel(), H) if sl.dim() == 1 else sl[qseq]
        per_row = per_row.t().reshape(Hkv, g, total_q, 1)
        s = s - per_row * (qdiag - kp).abs().to(cd)
    s = s.masked_fill(~ok, -math.inf)
    seen = ok.any(dim=1)
    s = torch.where(seen.view(-1, 1), s, torch.zeros_like(s))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)) * seen.view(-1, 1)
    out = torch.matmul(p, vg).reshape(H, total_q, -1).permute(1, 0, 2).to(dt)
    if return_attn_probs:
        lse = torch.where(seen, lse, torch.full_like(lse, -math.inf)).reshape(H, total_q)
        return out, lse.detach(), None
    return out
