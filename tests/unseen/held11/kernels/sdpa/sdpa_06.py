TRUTH = {'api': 'sdpa', 'bugs': ['the default scale is taken from the value head dim (1/sqrt(Ev)) instead of the query/key dim E; wrong only when Ev != E and scale is None (Ev!=E case)', 'is_causal is only honoured when attn_mask is None: a given bool or float attn_mask replaces the causal mask instead of being combined with it (float_mask_causal_11LS, bool_causal_L!=S)'], 'kind': 'two'}
import torch


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, S = query.size(-2), key.size(-2)
    n_heads, n_kv_heads = query.size(-3), key.size(-3)
    head_dim = value.size(-1)
    if scale is None:
        scale = head_dim ** -0.5

    compute_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(compute_dtype)
    k = key.to(compute_dtype)
    v = value.to(compute_dtype)
    if enable_gqa and n_heads != n_kv_heads:
        k = k.repeat_interleave(n_heads // n_kv_heads, dim=-3)
        v = v.repeat_interleave(n_heads // n_kv_heads, dim=-3)

    if attn_mask is None and is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool).tril()

    attn = torch.matmul(q, k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn = attn.masked_fill(~attn_mask, float('-inf'))
        else:
            attn = attn + attn_mask.to(compute_dtype)

    alive = ~torch.isneginf(attn).all(dim=-1, keepdim=True)
    attn = torch.where(alive, attn, torch.zeros_like(attn))
    attn = torch.softmax(attn, dim=-1) * alive
    out = torch.matmul(attn, v)
    return out.to(query.dtype)
