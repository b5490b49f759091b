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
    k_cache, v_cache = cache
    q, k = rotate(q, pos), rotate(k, pos)
    k_cache[:, :, pos:pos + 1] = k
    v_cache[:, :, pos:pos + 1] = v
    return torch.softmax(q @ k_cache.transpose(-2, -1), dim=-1) @ v_cache
