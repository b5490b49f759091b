TRUTH = {'api': 'flash-attn', 'bugs': ["A split's partial output divides by its raw denominator, so a split in which a row sees no key gives NaN that the merge (0 * NaN) propagates; shows on causal and windowed cases."], 'kind': 'semantic'}
import math
import torch

NUM_SPLITS = 4


def _split_forward(qh, kc, vc, j0, sc, causal, left, right, softcap, slopes, L, S):
    s = torch.matmul(qh, kc.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    n = kc.shape[2]
    qpos = torch.arange(L)[:, None] + (S - L)
    kpos = torch.arange(j0, j0 + n)[None, :]
    if slopes is not None:
        s = s - slopes[:, :, None, None] * (qpos - kpos).abs().to(s.dtype)
    if causal:
        right = 0
    keep = torch.ones(L, n, dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    s = s.masked_fill(~keep, -math.inf)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    den_safe = torch.where(den > 0, den, torch.ones_like(den))
    o = torch.matmul(e, vc) / den
    lse = torch.where(den > 0, m + torch.log(den_safe), torch.full_like(den, -math.inf))
    return o, lse


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    g = H // Hkv
    qh = q.to(cdt).transpose(1, 2)
    kh = k.to(cdt).transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.to(cdt).transpose(1, 2).repeat_interleave(g, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt)
        slopes = slopes.view(1, H).expand(B, H) if slopes.dim() == 1 else slopes
    left, right = window_size
    chunk = (S + NUM_SPLITS - 1) // NUM_SPLITS
    outs, lses = [], []
    for sidx in range(NUM_SPLITS):
        j0 = sidx * chunk
        j1 = min(j0 + chunk, S)
        if j0 >= j1:
            continue
        o, l = _split_forward(qh, kh[:, :, j0:j1], vh[:, :, j0:j1], j0, sc, causal, left, right, softcap, slopes,
                              L, S)
        outs.append(o)
        lses.append(l)
    O = torch.stack(outs, 0)
    LSE = torch.stack(lses, 0)
    mx = LSE.detach().amax(0)
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    w = torch.exp(LSE - mx)
    wsum = w.sum(0)
    wsum_safe = torch.where(wsum > 0, wsum, torch.ones_like(wsum))
    out = (w * O).sum(0) / wsum_safe
    lse = torch.where(wsum > 0, mx + torch.log(wsum_safe), torch.full_like(wsum, -math.inf)).squeeze(-1)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse.detach(), None
    return out
