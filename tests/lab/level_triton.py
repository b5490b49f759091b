"""Level 7's solution, and each slip of it a learner makes, as one Triton kernel: ``SLIP`` (a constexpr) picks one.

The kernel is the starter's with its TODOs done; each slip is a branch the compiler keeps or drops,
written the way a learner slips in a kernel: the scores past the last key left unmasked, a causal
loop bound a tile short or counted in BLOCK_N, no mask inside the diagonal tile, the rescale left
out or taken after the max moves, the running max used before it is updated, the finish. Imports
Triton: load it in a process where TRITON_INTERPRET is set as the run needs (the tests start one).
"""

import math

import torch
import triton
import triton.language as tl

SLIPS = ("pad-keys", "bound-short", "bound-block-n", "diagonal-unmasked", "acc-not-rescaled", "sum-not-rescaled",
         "rescale-after-update", "stale-max", "not-divided", "lse-no-max", "lse-no-sum", "causal-reversed",
         "unscaled")


@triton.jit
def _dot(a, b):
    return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")


@triton.jit
def attention_kernel(Q, K, V, O, LSE, sq_n, sq_l, sq_e, sk_n, sk_s, sk_e, sv_n, sv_s, sv_e, so_n, so_l, so_e,
                     L, S, E, EV, scale,
                     IS_CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr, SLIP: tl.constexpr):
    pid_m = tl.program_id(0)
    n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_e = tl.arange(0, BLOCK_E)
    offs_ev = tl.arange(0, BLOCK_EV)
    q = tl.load(Q + n * sq_n + offs_m[:, None] * sq_l + offs_e[None, :] * sq_e,
                mask=(offs_m[:, None] < L) & (offs_e[None, :] < E), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)
    hi = S
    if IS_CAUSAL:
        if SLIP == 2:  # bound-short: the tile's own diagonal left out
            hi = tl.minimum(S, pid_m * BLOCK_M)
        elif SLIP == 3:  # bound-block-n
            hi = tl.minimum(S, (pid_m + 1) * BLOCK_N)
        else:
            hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    qk_scale = 1.0 if SLIP == 13 else scale
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + n * sk_n + offs_n[:, None] * sk_s + offs_e[None, :] * sk_e,
                    mask=(offs_n[:, None] < S) & (offs_e[None, :] < E), other=0.0)
        v = tl.load(V + n * sv_n + offs_n[:, None] * sv_s + offs_ev[None, :] * sv_e,
                    mask=(offs_n[:, None] < S) & (offs_ev[None, :] < EV), other=0.0)
        s = _dot(q, tl.trans(k)) * qk_scale
        if SLIP != 1:  # pad-keys: the zeros past S keep their score 0
            s = tl.where(offs_n[None, :] < S, s, float("-inf"))
        if IS_CAUSAL:
            if SLIP == 12:  # causal-reversed
                s = tl.where(offs_n[None, :] < offs_m[:, None], float("-inf"), s)
            elif SLIP != 4:  # diagonal-unmasked
                s = tl.where(offs_n[None, :] > offs_m[:, None], float("-inf"), s)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        if SLIP == 8:  # stale-max: exp against the max from before this tile
            p = tl.exp(s - tl.where(m_i == float("-inf"), 0.0, m_i)[:, None])
        else:
            p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m_i - shift)
        if SLIP == 7:  # rescale-after-update
            alpha = tl.exp(m_new - m_new)
        if SLIP == 6:
            l_i = l_i + tl.sum(p, 1)
        else:
            l_i = l_i * alpha + tl.sum(p, 1)
        if SLIP == 5:
            acc = acc + _dot(p, v)
        else:
            acc = acc * alpha[:, None] + _dot(p, v)
        m_i = m_new
    if SLIP == 9:
        out = acc
    else:
        out = acc / l_i[:, None]
    if SLIP == 10:
        lse = tl.log(l_i)
    elif SLIP == 11:
        lse = m_i
    else:
        lse = m_i + tl.log(l_i)
    tl.store(O + n * so_n + offs_m[:, None] * so_l + offs_ev[None, :] * so_e, out.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))
    tl.store(LSE + n * L + offs_m, lse, mask=offs_m < L)


def flash_attention(q, k, v, is_causal=False, block_m=32, block_n=32, slip=None):
    """The starter's wrapper, with ``slip`` (one of SLIPS, or None for the solution) passed to the kernel."""
    *lead, L, E = q.shape
    S, EV = k.shape[-2], v.shape[-1]
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], t.shape[-1]) for t in (q, k, v))
    N = q3.shape[0]
    out = torch.empty(N, L, EV, dtype=q.dtype, device=q.device)
    lse = torch.empty(N, L, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(L, block_m), N)
    attention_kernel[grid](q3, k3, v3, out, lse, *q3.stride(), *k3.stride(), *v3.stride(), *out.stride(),
                           L, S, E, EV, 1.0 / math.sqrt(E), IS_CAUSAL=bool(is_causal), BLOCK_M=block_m,
                           BLOCK_N=block_n, BLOCK_E=max(16, triton.next_power_of_2(E)),
                           BLOCK_EV=max(16, triton.next_power_of_2(EV)),
                           SLIP=0 if slip is None else SLIPS.index(slip) + 1)
    return out.reshape(*lead, L, EV), lse.reshape(*lead, L)
