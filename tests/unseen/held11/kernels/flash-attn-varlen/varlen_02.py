TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['after padding to (B, max_seqlen, ...) the bottom-right diagonal offset is taken from the padded sizes, max_seqlen_k - max_seqlen_q, for every sequence instead of each sequence\'s own S_b - L_b; causal / window / ALiBi positions are shifted for sequences whose S_b - L_b differs from that (causal_L<S_gqa, causal_L>S, empty_seqs_causal, alibiBH_causal, softcap_causal_L<S, causal_window20_5, softcap_alibiH, window16_8_gqa); non-causal cases without window/ALiBi are unaffected'], 'kind': 'semantic'}
import math

import torch


def _pad(x, cu, max_len):
    B = cu.numel() - 1
    out = x.new_zeros((B, max_len) + tuple(x.shape[1:]))
    for b in range(B):
        s, e = int(cu[b]), int(cu[b + 1])
        out[b, :e - s] = x[s:e]
    return out


def _unpad(x, cu):
    B = cu.numel() - 1
    return torch.cat([x[b, :int(cu[b + 1]) - int(cu[b])] for b in range(B)], 0)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    B = cu_seqlens_q.numel() - 1
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    Lm, Sm = int(max_seqlen_q), int(max_seqlen_k)

    qp = _pad(q.to(ct), cu_seqlens_q, Lm).transpose(1, 2)
    kp = _pad(k.to(ct), cu_seqlens_k, Sm).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vp = _pad(v.to(ct), cu_seqlens_k, Sm).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    len_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()

    i = torch.arange(Lm).view(1, Lm, 1) + (Sm - Lm)
    j = torch.arange(Sm).view(1, 1, Sm)
    keep = j < len_k.view(B, 1, 1)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        keep = keep & (j >= i - left)
    if right >= 0:
        keep = keep & (j <= i + right)
    keep = keep.unsqueeze(1)

    s = torch.matmul(qp, kp.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.expand(B, H) if sl.dim() == 1 else sl
        s = s - sl.view(B, H, 1, 1) * (i - j).abs().unsqueeze(1).to(ct)
    s = s.masked_fill(~keep, float('-inf'))
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    o = torch.matmul(e / torch.where(den > 0, den, torch.ones_like(den)), vp)
    lse = (mx + torch.log(den)).squeeze(-1)

    out = _unpad(o.transpose(1, 2), cu_seqlens_q).to(q.dtype)
    lse = _unpad(lse.transpose(1, 2), cu_seqlens_q).transpose(0, 1)
    if return_attn_probs:
        return out, lse, None
    return out
