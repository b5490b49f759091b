"""One step of decoding with rotary positions and a KV cache.
"""

TRUTH = {
    "api": "level-6",
    "bugs": [
        "The query and key are rotated to pos + 1 instead of pos: from an empty cache the shift cancels, but "
        "after a prompt cached at its true positions every score against the prompt is off by one position.",
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
    q = rotate(q, pos + 1)  # the token is the (pos + 1)-th
    k = rotate(k, pos + 1)
    k_cache[:, :, pos:pos + 1] = k  # slot pos
    v_cache[:, :, pos:pos + 1] = v
    keys, values = k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1]  # slots 0 .. pos, its own included
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, pos + 1)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ values  # (B, H, 1, d)
    return out
