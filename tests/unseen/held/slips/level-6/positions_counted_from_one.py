"""Decode step with RoPE: the token at position pos is the (pos + 1)-th token, rotated by its number."""

TRUTH = {
    "api": "level-6",
    "bugs": ["q and k are rotated by pos + 1 instead of pos (positions counted from 1): with a prompt cached "
             "at the right positions every score against a prompt key sees a distance one too large (from an "
             "empty cache the shift cancels)"],
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
    n = pos + 1  # the new token is token number pos + 1
    q, k = rotate(q, n), rotate(k, n)
    k_cache[:, :, pos:pos + 1] = k
    v_cache[:, :, pos:pos + 1] = v
    K, V = k_cache[:, :, :n], v_cache[:, :, :n]  # the n tokens so far
    scores = (q @ K.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    out = torch.softmax(scores, dim=-1) @ V
    return out
