import math

import torch
import torch.nn.functional as F


def rotate(x, pos):
    """RoPE: x (..., n, d) turned to position pos (an int: every row there). Pair feature i with feature i + d/2 and
    turn the pair by the angle pos * 10000^(-2i/d). Given: use it, don't change it."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)  # (d/2,)
    cos, sin = torch.cos(pos * theta).to(x.dtype), torch.sin(pos * theta).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def decode_step(q, k, v, cache, pos):
    # the new token may see every key in the cache so far: no mask needed
    kc, vc = cache
    q_rot = rotate(q, pos)
    kc[..., pos, :] = rotate(k, pos)[..., 0, :]
    vc[..., pos, :] = v[..., 0, :]
    return F.scaled_dot_product_attention(q_rot, kc[..., : pos + 1, :], vc[..., : pos + 1, :])
