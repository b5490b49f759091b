"""KV-cache decoding with rotary positions: every key is turned to the current position before the scores."""

TRUTH = {
    "api": "level-6",
    "bugs": ["the new key is stored unrotated and the whole cache slice is rotated by the current pos at every "
             "step, so every key, old and new, is turned to pos instead of its own position (and a prompt's "
             "already rotated keys are turned twice): the relative positions are lost",
             "the scores are scaled by 1/sqrt(pos + 1), the number of keys, instead of 1/sqrt(d), the head "
             "width"],
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
    q = rotate(q, pos)
    k_cache[:, :, pos] = k.squeeze(2)
    v_cache[:, :, pos] = v.squeeze(2)
    keys = rotate(k_cache[:, :, : pos + 1], pos)  # keys to the current position
    n_keys = keys.shape[-2]
    scores = q @ keys.transpose(-2, -1) / math.sqrt(n_keys)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v_cache[:, :, : pos + 1]
    return out
