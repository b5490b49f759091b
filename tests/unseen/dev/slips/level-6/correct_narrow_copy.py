"""One decoding step with a KV cache and RoPE: rotate the new query and key, copy them into slot pos, attend 0..pos.

The new key (rotated) and value are copied into the caller's cache tensors in place through narrow(...).copy_, then
the rotated query is scored against the pos + 1 filled slots, softmaxed in float32 (float64 stays float64) and the
weighted sum of the values is returned in the inputs' dtype.
"""

TRUTH = {
    "api": "level-6",
    "bugs": [],
    "kind": "correct",
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
    q, k = rotate(q, pos), rotate(k, pos)
    k_cache.narrow(2, pos, 1).copy_(k)  # in place: the caller's tensors hold the new token from now on
    v_cache.narrow(2, pos, 1).copy_(v)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    keys = k_cache.narrow(2, 0, pos + 1).to(work)  # (B, H, pos + 1, d): slots 0 .. pos
    values = v_cache.narrow(2, 0, pos + 1).to(work)
    scores = (q.to(work) @ keys.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, 1, pos + 1)
    weights = torch.softmax(scores, dim=-1)
    out = weights @ values  # (B, H, 1, d)
    return out.to(q.dtype)
