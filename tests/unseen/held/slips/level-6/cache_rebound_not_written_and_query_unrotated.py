"""Decoding step: append the new key and value to the cache, then attend."""

TRUTH = {
    "api": "level-6",
    "bugs": ["the new key and value are appended with torch.cat into new local tensors instead of written into "
             "slot pos of the caller's k_cache and v_cache, so the cache never keeps them: from the next step "
             "on the earlier generated tokens are missing (their slots stay empty)",
             "the query is never rotated (only the key is), so the scores carry each key's absolute position "
             "instead of the distance between the two tokens"],
    "kind": "two",
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
    k = rotate(k, pos)
    k_cache = torch.cat([k_cache[:, :, :pos], k], dim=2)  # slots 0 .. pos
    v_cache = torch.cat([v_cache[:, :, :pos], v], dim=2)
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, pos + 1)
    out = torch.softmax(scores, dim=-1) @ v_cache
    return out
