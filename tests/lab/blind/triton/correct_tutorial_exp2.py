"""Level 7: my FlashAttention-2 forward in Triton."""

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _dot(a, b):
    """a @ b with float32 products and sums (no TF32 on a GPU: the check holds you to float32's rounding)."""
    return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")


@triton.jit
def attention_kernel(Q, K, V, O, LSE, sq_n, sq_l, sq_e, sk_n, sk_s, sk_e, sv_n, sv_s, sv_e, so_n, so_l, so_e,
                     L, S, E, EV, scale,
                     IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr):
    """Like Triton's fused-attention tutorial: exp2 with log2(e) folded into the scale, pointers advanced per tile."""
    start_m = tl.program_id(0)
    off_n = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_E)
    offs_dv = tl.arange(0, BLOCK_EV)
    offs_k = tl.arange(0, BLOCK_N)
    q = tl.load(Q + off_n * sq_n + offs_m[:, None] * sq_l + offs_d[None, :] * sq_e,
                mask=(offs_m[:, None] < L) & (offs_d[None, :] < E), other=0.0)
    qk_scale = scale * 1.44269504  # 1 / ln(2)
    k_ptrs = K + off_n * sk_n + offs_k[:, None] * sk_s + offs_d[None, :] * sk_e
    v_ptrs = V + off_n * sv_n + offs_k[:, None] * sv_s + offs_dv[None, :] * sv_e
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], dtype=tl.float32)
    hi = S
    if IS_CAUSAL:
        hi = tl.minimum(S, (start_m + 1) * BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_k
        k = tl.load(k_ptrs, mask=(cols[:, None] < S) & (offs_d[None, :] < E), other=0.0)
        v = tl.load(v_ptrs, mask=(cols[:, None] < S) & (offs_dv[None, :] < EV), other=0.0)
        qk = _dot(q, tl.trans(k)) * qk_scale
        ok = cols[None, :] < S
        if IS_CAUSAL:
            ok = ok & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(ok, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p, v)
        m_i = m_ij
        k_ptrs += BLOCK_N * sk_s
        v_ptrs += BLOCK_N * sv_s
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back from log2 units to natural log
    tl.store(O + off_n * so_n + offs_m[:, None] * so_l + offs_dv[None, :] * so_e, acc.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_dv[None, :] < EV))
    tl.store(LSE + off_n * L + offs_m, lse, mask=offs_m < L)


def flash_attention(q, k, v, is_causal=False, block_m=32, block_n=32):
    """Attention by the kernel above: q (..., L, E), k (..., S, E), v (..., S, Ev) on one device ->
    (out (..., L, Ev) in q's dtype, lse (..., L) in float32). is_causal: query i sees keys 0 .. i (top-left, as
    PyTorch's). Given: the kernel is yours to write, this is not."""
    *lead, L, E = q.shape
    S, EV = k.shape[-2], v.shape[-1]
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], t.shape[-1]) for t in (q, k, v))  # (N, rows, features)
    N = q3.shape[0]
    out = torch.empty(N, L, EV, dtype=q.dtype, device=q.device)
    lse = torch.empty(N, L, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(L, block_m), N)  # one program per (tile of queries, batch x head)
    attention_kernel[grid](q3, k3, v3, out, lse, *q3.stride(), *k3.stride(), *v3.stride(), *out.stride(),
                           L, S, E, EV, 1.0 / math.sqrt(E), IS_CAUSAL=bool(is_causal), BLOCK_M=block_m,
                           BLOCK_N=block_n, BLOCK_E=max(16, triton.next_power_of_2(E)),
                           BLOCK_EV=max(16, triton.next_power_of_2(EV)))
    return out.reshape(*lead, L, EV), lse.reshape(*lead, L)
