"""flash_attn_func as a dense-forward autograd.Function with an explicit FlashAttention-2 backward (softcap/ALiBi/windows)."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "with softcap > 0 the backward forgets the chain-rule factor of the tanh cap: dS should be multiplied by "
        "(1 - tanh(s / softcap)^2) before forming dq and dk; forward output and lse are right, gradients are not",
    ],
    "kind": "semantic",
}


def _layout(x, rep, ct):
    x = x.to(ct).transpose(1, 2)
    return x.repeat_interleave(rep, dim=1) if rep > 1 else x


def _score_matrix(qh, kh, B, H, L, S, scale, causal, window, softcap, slopes):
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    qpos = torch.arange(L, device=qh.device)[:, None] + S - L
    kpos = torch.arange(S, device=qh.device)[None, :]
    if slopes is not None:
        sl = slopes.to(s.dtype).reshape(-1, H, 1, 1)
        s = s - sl * (qpos - kpos).abs().to(s.dtype)
    lo, hi = window
    if causal:
        hi = 0
    keep = torch.ones(L, S, dtype=torch.bool, device=qh.device)
    if lo >= 0:
        keep &= kpos >= qpos - lo
    if hi >= 0:
        keep &= kpos <= qpos + hi
    return s.masked_fill(~keep, float("-inf"))


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, softcap, slopes):
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        ct = torch.float64 if q.dtype == torch.float64 else torch.float32
        rep = H // Hkv
        qh, kh, vh = _layout(q, 1, ct), _layout(k, rep, ct), _layout(v, rep, ct)
        s = _score_matrix(qh, kh, B, H, L, S, scale, causal, window, softcap, slopes)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
        o = torch.matmul(p, vh)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (scale, causal, window, softcap, slopes)
        lse32 = lse.float()
        ctx.mark_non_differentiable(lse32)
        return o.transpose(1, 2).to(q.dtype), lse32

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, o, lse = ctx.saved_tensors
        scale, causal, window, softcap, slopes = ctx.args
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        rep = H // Hkv
        ct = o.dtype
        qh, kh, vh = _layout(q, 1, ct), _layout(k, rep, ct), _layout(v, rep, ct)
        do = d_out.to(ct).transpose(1, 2)
        s = _score_matrix(qh, kh, B, H, L, S, scale, causal, window, softcap, slopes)
        p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
        dv = p.transpose(-1, -2) @ do
        dp = do @ vh.transpose(-1, -2)
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        dq = (ds @ kh) * scale
        dk = (ds.transpose(-1, -2) @ qh) * scale
        dk = dk.reshape(B, Hkv, rep, S, D).sum(2)
        dv = dv.reshape(B, Hkv, rep, S, dv.size(-1)).sum(2)
        return (dq.transpose(1, 2).to(q.dtype), dk.transpose(1, 2).to(k.dtype), dv.transpose(1, 2).to(v.dtype),
                None, None, None, None, None)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.size(-1))
    out, lse = _Attention.apply(q, k, v, scale, bool(causal), tuple(window_size), float(softcap), alibi_slopes)
    return (out, lse, None) if return_attn_probs else out
