import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "The log2(e) constant of the exp2-domain softmax is a float32 tensor (torch.tensor(1.4426950408889634, dtype=torch.float32)); multiplied into float64 scores it rounds log2(e) to float32 while lse is converted back with the exact ln 2, so for float64 inputs the softmax temperature and lse are off by ~1e-8 relative. Float32 and bfloat16 are unaffected."
    ],
    "kind": "precision"
}


LOG2E = torch.tensor(1.4426950408889634, dtype=torch.float32)
LN2 = 0.6931471805599453
BLOCK_M = 48


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32

    # grouped layout: (B, Hkv, G, L, D) queries against (B, Hkv, 1, S, D) keys
    qg = q.to(acc_t).view(B, L, Hkv, G, D).permute(0, 2, 3, 1, 4)
    kg = k.to(acc_t).permute(0, 2, 1, 3).unsqueeze(2)
    vg = v.to(acc_t).permute(0, 2, 1, 3).unsqueeze(2)

    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc_t).reshape(-1, Hkv, G, 1, 1)

    left, right = window_size
    if causal:
        right = 0
    offset = S - L
    j = torch.arange(S)

    outs, lses = [], []
    for i0 in range(0, L, BLOCK_M):
        i1 = min(i0 + BLOCK_M, L)
        qi = (torch.arange(i0, i1) + offset).view(-1, 1)
        s = torch.matmul(qg[:, :, :, i0:i1], kg.transpose(-1, -2)) * sm_scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (qi - j).abs().to(acc_t)
        vis = torch.ones(i1 - i0, S, dtype=torch.bool)
        if left >= 0:
            vis &= j >= qi - left
        if right >= 0:
            vis &= j <= qi + right
        z = (s * LOG2E).masked_fill(~vis, float('-inf'))      # log2 domain
        mx = z.detach().amax(-1, keepdim=True)
        mx = torch.where(mx == float('-inf'), torch.zeros_like(mx), mx)
        p = torch.exp2(z - mx)
        den = p.sum(-1, keepdim=True)
        nz = den > 0
        den1 = torch.where(nz, den, torch.ones_like(den))
        outs.append(torch.matmul(p / den1, vg))
        lses.append(torch.where(nz, (mx + torch.log2(den1)) * LN2, torch.full_like(den, float('-inf'))))
    o = torch.cat(outs, 3)                                    # B Hkv G L D
    out = o.permute(0, 3, 1, 2, 4).reshape(B, L, H, D).to(q.dtype)
    if return_attn_probs:
        lse = torch.cat(lses, 3).reshape(B, H, L).detach()
        return out, lse, None
    return out
