"""Level 6 of your attention lab: decoding with a KV cache, one token at a time, with rotary positions.

A model that writes text makes one token per step. The new token's query attends to every key so
far, its own included; the earlier tokens' keys and values never change, so they are kept -- the
KV cache -- and each step writes one more. Here the cache is two tensors made once, as long as the
longest sequence, (B, H, T_max, d) each; the token at position pos goes into slot pos, and slots
after it hold nothing yet.

Positions enter as rotations (RoPE, as in Llama): the query and the key of the token at position
pos are turned by rotate(x, pos) before they are used or kept, so that a score depends only on how
far apart two tokens are. A key is rotated once, at its own position, when it enters the cache.

Three pieces are marked TODO; as it stands it runs, and gives the wrong answer. After each one, run

    attnlab lab check lab_decode.py

It feeds your function sequences token by token -- from an empty cache, and from one that already
holds a prompt (written by the check, keys rotated at their positions) -- compares every step with
the full causal forward of the whole sequence, says which step first goes wrong and the likely
cause, then measures the time and memory of decoding T tokens.
"""

TRUTH = {'api': 'level-6', 'level': 6, 'slips': ["the cached keys (already rotated at their own positions when written) are rotated again by the current pos at attend time, so a score depends on the key's absolute position rather than the distance: wrong at every step with pos > 0"], 'kind': 'semantic'}

import math

import torch


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
    dtype = q.dtype
    calc = torch.float64 if dtype == torch.float64 else torch.float32
    q = rotate(q, pos)
    k_cache[:, :, pos:pos + 1] = rotate(k, pos)
    v_cache[:, :, pos:pos + 1] = v
    past_k = rotate(k_cache[:, :, :pos + 1], pos).to(calc)
    past_v = v_cache[:, :, :pos + 1].to(calc)
    s = (q.to(calc) * past_k).sum(-1).unsqueeze(-2) / math.sqrt(d)  # (B, H, 1, pos + 1)
    p = s.softmax(-1)
    return (p @ past_v).to(dtype)
