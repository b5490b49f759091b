"""Varlen flash attention: unpack the ragged batch into padded (B, max_len) tensors, one batched masked attention, repack."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the padded key/value gather uses the query offsets cu_seqlens_q[b] as the start of sequence b's keys instead of "
        "cu_seqlens_k[b], so keys/values are read from the wrong rows whenever the q and k packings differ",
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    dev = q.device
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    total_k, Hkv, _ = k.shape
    B = cu_seqlens_q.numel() - 1
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    len_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    len_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    Mq = max(int(len_q.max()) if B else 0, 1)
    Mk = max(int(len_k.max()) if B else 0, 1)

    ar_q = torch.arange(Mq, device=dev)
    ar_k = torch.arange(Mk, device=dev)
    q_valid = ar_q[None, :] < len_q[:, None]
    k_valid = ar_k[None, :] < len_k[:, None]
    q_idx = (cu_seqlens_q[:-1].long()[:, None] + ar_q[None, :]).clamp(0, max(total_q - 1, 0))
    k_idx = (cu_seqlens_q[:-1].long()[:, None] + ar_k[None, :]).clamp(0, max(total_k - 1, 0))

    rep = H // Hkv
    qp = q.to(ct)[q_idx].permute(0, 2, 1, 3)
    kp = k.to(ct)[k_idx].permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)
    vp = v.to(ct)[k_idx].permute(0, 2, 1, 3).repeat_interleave(rep, dim=1)

    s = torch.matmul(qp, kp.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = ar_q[None, :, None] + (len_k - len_q)[:, None, None]
    kpos = ar_k[None, None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.reshape(1, H, 1, 1) if sl.dim() == 1 else sl.reshape(B, H, 1, 1)
        s = s - sl * (qpos - kpos).abs().unsqueeze(1).to(ct)
    ok = q_valid[:, :, None] & k_valid[:, None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        ok = ok & (kpos >= qpos - left)
    if right >= 0:
        ok = ok & (kpos <= qpos + right)
    s = s.masked_fill(~ok[:, None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    o = torch.matmul(p, vp).permute(0, 2, 1, 3)

    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=dev)
    lse_out = torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=dev)
    out[q_idx[q_valid]] = o[q_valid]
    lse_out[:, q_idx[q_valid]] = lse.permute(1, 0, 2)[:, q_valid].float()
    out = out.to(q.dtype)
    return (out, lse_out, None) if return_attn_probs else out
