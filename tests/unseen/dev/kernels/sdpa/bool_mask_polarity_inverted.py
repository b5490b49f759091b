"""SDPA reference port (einsum form); boolean masks follow the padding-mask convention."""


import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a boolean attn_mask is read with the opposite polarity: True entries are masked out and False entries "
        "take part, whereas in SDPA True means the key takes part"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise NotImplementedError("no dropout")
    odt = query.dtype
    cdt = torch.float64 if odt == torch.float64 else torch.float32
    q, k, v = (t.to(cdt) for t in (query, key, value))
    E = q.shape[-1]
    sm_scale = scale if scale is not None else E ** -0.5
    if enable_gqa:
        n_rep = q.shape[-3] // k.shape[-3]
        k = torch.repeat_interleave(k, n_rep, dim=-3)
        v = torch.repeat_interleave(v, n_rep, dim=-3)
    logits = torch.einsum("...le,...se->...ls", q, k) * sm_scale
    L, S = logits.shape[-2], logits.shape[-1]
    neg = torch.tensor(float("-inf"), dtype=cdt, device=q.device)
    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1)
        logits = torch.where(causal, neg, logits)
    if attn_mask is not None:
        # padding mask convention: True marks a position to ignore
        is_bool = attn_mask.dtype == torch.bool
        logits = torch.where(attn_mask, neg, logits) if is_bool else logits + attn_mask.to(cdt)
    mx = logits.amax(-1, keepdim=True).detach()
    mx = torch.nan_to_num(mx, neginf=0.0)
    w = torch.exp(logits - mx)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.einsum("...ls,...sd->...ld", w, v).to(odt)
