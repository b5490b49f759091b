"""Decode step: rotate, write the cache slot, attend over the cached keys."""

TRUTH = {
    "api": "level-6",
    "bugs": [
        "the new query attends to slots 0 .. pos - 1 only (k_cache[:, :, :pos]), leaving out its own key; it "
        "should attend to slots 0 .. pos",
    ],
    "kind": "semantic",
}

import math  # noqa: E402

import torch  # noqa: E402


def rotate(x, pos):
    """RoPE: x (..., n, d) turned to position pos (an int: every row there). Pair feature i with feature i + d/2 and
    turn the pair by the angle pos * 10000^(-2i/d). Given: use it, don't change it."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)  # (d/2,)
    cos, sin = torch.cos(pos * theta).to(x.dtype), torch.sin(pos * theta).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def decode_step(q, k, v, cache, pos):
    """One decoding step: q, k, v (B, H, 1, d) of the new token, not yet rotated; ``cache`` = (k_cache, v_cache),
    (B, H, T_max, d) each, holding the rotated keys and the values of positions 0 .. pos - 1; ``pos`` the new token's
    position. Writes the new token into slot pos of both and returns its output, (B, H, 1, d)."""
    k_cache, v_cache = cache
    d = q.shape[-1]
    q, k = rotate(q, pos), rotate(k, pos)
    k_cache[:, :, pos:pos + 1] = k
    v_cache[:, :, pos:pos + 1] = v
    keys, values = k_cache[:, :, :pos], v_cache[:, :, :pos]  # (B, H, pos + 1, d)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    scores = (q.to(work) @ keys.to(work).transpose(-2, -1)) / math.sqrt(d)  # (B, H, 1, pos + 1)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ values.to(work)
    return out.to(q.dtype)
