"""Level 6 of your attention lab: decoding with a KV cache, one token at a time.

A model that writes text makes one token per step. The new token's query attends to every key so
far, its own included; the earlier tokens' keys and values never change, so they are kept -- the
KV cache -- and each step adds one. Two pieces are marked TODO; as it stands it runs, and gives the
wrong answer. After each one, run

    attnlab lab check lab_decode.py

It feeds your function a sequence token by token (the cache you return comes back the next step;
None at the first) and compares what it returns, step by step, with the full causal forward of the
whole sequence, then measures the time and memory of decoding T tokens.
"""

import math

import torch


def decode_step(q, k, v, cache):
    """One decoding step: q, k, v (B, H, 1, d) of the new token; ``cache`` what the step before returned (None at
    first). Returns (out (B, H, 1, d), the cache for the next step)."""
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    # TODO 1 (cache): keep this token's k and v with those of the tokens before it, (B, H, t + 1, d) each
    keys, values = k, v
    # TODO 2 (attend): the new query against every key kept so far (it may see them all), scaled by 1 / sqrt(d)
    out = values[..., -1:, :]
    return out.to(dtype), cache
