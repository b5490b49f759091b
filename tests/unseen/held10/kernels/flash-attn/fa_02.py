TRUTH = {'api': 'flash-attn', 'bugs': ['The ALiBi bias uses the signed distance (i + S - L - j) instead of its absolute value, so keys right of the query get a bonus; shows on non-causal ALiBi cases.'], 'kind': 'semantic'}
import math
import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    g = H // Hkv
    qh = q.to(cdt).permute(0, 2, 1, 3)
    kh = k.to(cdt).permute(0, 2, 1, 3).repeat_interleave(g, 1)
    vh = v.to(cdt).permute(0, 2, 1, 3).repeat_interleave(g, 1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(L)[:, None] + (S - L)
    kpos = torch.arange(S)[None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cdt)
        if sl.dim() == 1:
            sl = sl[None, :].expand(B, H)
        s = s - sl[:, :, None, None] * (qpos - kpos).to(cdt)
    left, right = window_size
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    s = s.masked_fill(~keep, -math.inf)
    mx = s.detach().amax(-1, keepdim=True)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    lse = (mx + torch.log(den.detach())).squeeze(-1)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, vh).permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, lse.detach(), None
    return out
