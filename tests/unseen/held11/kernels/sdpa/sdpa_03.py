TRUTH = {'api': 'sdpa', 'bugs': ['boolean masks (and the causal mask) are turned into an additive bias of finfo.min instead of -inf; a query row whose keys are all masked then gets equal finite scores and returns the mean of its masked value rows (plus nonzero grads) instead of zeros; shows on fully-masked rows of bool masks (bool_mask_B1LS_emptyrows, twobatch_boolLS_scale, bool_causal_L!=S)'], 'kind': 'semantic'}
import math

import torch

BLOCK_N = 32


def _mask_bias(attn_mask, is_causal, L, S, dtype):
    neg = torch.finfo(dtype).min
    bias = None
    if is_causal:
        tri = torch.ones(L, S, dtype=torch.bool).tril()
        bias = torch.zeros(L, S, dtype=dtype).masked_fill(~tri, neg)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            extra = torch.zeros(attn_mask.shape, dtype=dtype).masked_fill(~attn_mask, neg)
        else:
            extra = attn_mask.to(dtype)
        bias = extra if bias is None else bias + extra
    return bias


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32

    q = query.to(acc_t)
    k = key.to(acc_t)
    v = value.to(acc_t)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=-3)
        v = v.repeat_interleave(H // Hkv, dim=-3)

    bias = _mask_bias(attn_mask, is_causal, L, S, acc_t)

    m_i = torch.full(q.shape[:-1] + (1,), float('-inf'), dtype=acc_t)
    l_i = torch.zeros_like(m_i)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=acc_t)
    for start in range(0, S, BLOCK_N):
        end = min(start + BLOCK_N, S)
        s = torch.matmul(q, k[..., start:end, :].transpose(-1, -2)) * sm_scale
        if bias is not None:
            s = s + bias[..., start:end]
        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
        m_ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_i - m_ref)
        p = torch.exp(s - m_ref)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + torch.matmul(p, v[..., start:end, :])
        m_i = m_new
    out = acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i))
    return out.to(query.dtype)
