import math

import torch

TRUTH = {"api": "flash-attn-varlen", "bugs": ["When the packed keys are scattered into a padded (B, max_seqlen_k) batch, the key-padding mask keeps slots j <= seqlen_k_b instead of j < seqlen_k_b, so one zero padding key (score 0, value 0) takes part in every sequence shorter than max_seqlen_k, diluting its softmax (output and lse wrong)."], "kind": "semantic"}


def _pad(x, cu, max_len):
    n = cu.numel() - 1
    out = x.new_zeros((n, max_len) + tuple(x.shape[1:]))
    lens = (cu[1:] - cu[:-1]).long()
    idx = torch.arange(max_len, device=x.device)
    for b in range(n):
        out[b, :lens[b]] = x[cu[b]:cu[b + 1]]
    return out, lens, idx


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    nb = cu_seqlens_q.numel() - 1
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    max_q = int((cu_q[1:] - cu_q[:-1]).max()) if nb else 0
    max_k = max(int(max_seqlen_k), int((cu_k[1:] - cu_k[:-1]).max()) if nb else 0)
    qp, len_q, iq = _pad(q.to(acc_t), cu_q, max_q)          # (B, Mq, H, D)
    kp, len_k, ik = _pad(k.to(acc_t), cu_k, max_k)          # (B, Mk, Hkv, D)
    vp, _, _ = _pad(v.to(acc_t), cu_k, max_k)
    group = H // Hkv
    qh = qp.permute(0, 2, 1, 3)                              # (B, H, Mq, D)
    kh = kp.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    vh = vp.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale       # (B, H, Mq, Mk)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    pos = iq[None, :, None] + (len_k - len_q)[:, None, None]  # (B, Mq, 1) position of each query
    rel = pos - ik[None, None, :]                             # (B, Mq, Mk)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(acc_t).reshape(-1, H).expand(nb, H)
        s = s - sl[:, :, None, None] * rel.abs()[:, None].to(acc_t)
    ok = (ik[None, None, :] <= len_k[:, None, None]) & (iq[None, :, None] < len_q[:, None, None])
    if left >= 0:
        ok &= rel <= left
    if right >= 0:
        ok &= rel >= -right
    s = s.masked_fill(~ok[:, None], -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = torch.matmul(p, vh) / torch.where(l > 0, l, torch.ones_like(l))
    lse_p = torch.where(l > 0, m + torch.log(torch.where(l > 0, l, torch.ones_like(l))),
                        torch.full_like(l, -math.inf))[..., 0]   # (B, H, Mq)
    out = torch.empty(total_q, H, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(H, total_q, dtype=torch.float32, device=q.device)
    for b in range(nb):
        n = int(len_q[b])
        out[cu_q[b]:cu_q[b + 1]] = o[b, :, :n].transpose(0, 1).to(q.dtype)
        lse[:, cu_q[b]:cu_q[b + 1]] = lse_p[b, :, :n].float()
    if return_attn_probs:
        return out, lse, None
    return out
