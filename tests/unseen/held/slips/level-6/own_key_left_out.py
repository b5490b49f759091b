"""Decode step with a KV cache: rotate, store the new token at slot pos, attend the cached keys."""

TRUTH = {
    "api": "level-6",
    "bugs": ["the new query attends slots 0 .. pos - 1 (k_cache[:, :, :pos]) and leaves out its own key and "
             "value in slot pos: every step is wrong, and the first step (pos = 0) has no key at all"],
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
    q, k = rotate(q, pos), rotate(k, pos)  # both turned to the new token's position
    k_cache[:, :, pos] = k[:, :, 0]
    v_cache[:, :, pos] = v[:, :, 0]
    keys = k_cache[:, :, :pos]  # the keys so far
    vals = v_cache[:, :, :pos]
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, pos)
    out = torch.softmax(scores, dim=-1) @ vals
    return out
