TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['token-to-sequence ids are built by setting flags at cu_seqlens[1:-1] and taking a cumsum; an empty sequence puts a duplicate offset in cu_seqlens and the flag assignment (not accumulation) counts it once, so every token after an empty sequence gets a sequence id that is one too small and attends to the wrong sequence with wrong positions; shows only when some sequence has 0 queries or 0 keys in the middle of the batch (empty_seqs, empty_seqs_causal)'], 'kind': 'semantic'}
import math

import torch


def _segment_ids(cu_seqlens, total):
    flags = torch.zeros(total, dtype=torch.long)
    bounds = cu_seqlens[1:-1].long()
    bounds = bounds[bounds < total]
    flags[bounds] = 1
    return torch.cumsum(flags, 0)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0

    seq_q = _segment_ids(cu_seqlens_q, total_q)
    seq_k = _segment_ids(cu_seqlens_k, total_k)
    len_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    len_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    # key-space position of each query / key inside its own sequence
    qpos = torch.arange(total_q) - cu_seqlens_q.long()[seq_q] + (len_k - len_q)[seq_q]
    kpos = torch.arange(total_k) - cu_seqlens_k.long()[seq_k]

    qpos_, kpos_ = qpos.view(-1, 1), kpos.view(1, -1)
    allowed = seq_q.view(-1, 1) == seq_k.view(1, -1)
    if left >= 0:
        allowed &= kpos_ >= qpos_ - left
    if right >= 0:
        allowed &= kpos_ <= qpos_ + right

    qh = q.to(ct).transpose(0, 1)
    kh = k.to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    vh = v.to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        per_row = sl.view(H, 1).expand(H, total_q) if sl.dim() == 1 else sl[seq_q].transpose(0, 1)
        s = s - per_row.unsqueeze(-1) * (qpos_ - kpos_).abs().to(ct)
    s = s.masked_fill(~allowed, float('-inf'))

    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - mx)
    z = e.sum(-1, keepdim=True)
    out = torch.matmul(e / torch.where(z > 0, z, torch.ones_like(z)), vh).transpose(0, 1).to(q.dtype)
    lse = (mx + torch.log(z)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
