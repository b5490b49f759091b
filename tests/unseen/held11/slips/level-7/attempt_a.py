"""Level 7 of your attention lab: FlashAttention-2's forward as a Triton kernel.

Level 4 walked the tiles in a Python loop, one tile of queries after another. A GPU runs thousands
of them at once: here each tile of queries is one *program* of a Triton kernel, and all of them
run side by side. The program keeps its queries' running max m_i, running sum l_i and accumulator
acc in registers, walks the tiles of keys in a loop, and writes its rows of the output and of the
log-sum-exp. The loop is level 4's inner loop, in Triton's words:

    tl.load(pointers, mask=..., other=0.0)    read a tile; the mask keeps reads inside the tensor
    _dot(a, b)                                a @ b (float32 products, given below)
    tl.max(x, 1), tl.sum(x, 1), tl.exp(x)     per row, per element
    tl.where(cond, a, b), tl.maximum(a, b)    elementwise choice
    tl.store(pointers, values, mask=...)      write a tile; the mask keeps writes inside

A tile's shape is fixed when the kernel is compiled (BLOCK_M queries, BLOCK_N keys, BLOCK_E
features, powers of two), so the last tiles reach past the ends of the tensors: every load and
store is masked there, and a key past S must get no weight. The wrapper at the bottom is given: it
lays the tensors out, launches one program per (tile of queries, batch x head) and returns (out,
lse). Four pieces of the kernel are marked TODO; as it stands it runs, and gives the wrong answer.
After each one, run

    attnlab lab check lab_triton.py

On a machine with an NVIDIA GPU the kernel runs compiled there; without one, in Triton's
interpreter on the CPU (the check sets TRITON_INTERPRET=1 for you), which runs the same kernel,
slowly. It grades out and lse against the float64 oracle on small cases (causal and not, L != S,
lengths and head widths off the tile sizes, float32, float16 and bfloat16) and says the likely
cause of what fails; on a GPU it also times your kernel.
"""

TRUTH = {'api': 'level-7', 'level': 7, 'slips': ["under IS_CAUSAL the key loop stops at the tile's FIRST query (hi = pid_m * BLOCK_M) instead of after its last one: the diagonal key tile is never visited (the first query tile sees no key at all -> 0/0 NaN); every causal case fails, non-causal passes"], 'kind': 'semantic'}

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
    """One tile of BLOCK_M queries of one (batch x head) n: its rows of O (N, L, EV) and LSE (N, L, float32)."""
    pid_m = tl.program_id(0)  # which tile of queries
    n = tl.program_id(1)  # which (batch x head)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,): this program's queries
    offs_e = tl.arange(0, BLOCK_E)  # (BLOCK_E,): the features of q and k
    offs_ev = tl.arange(0, BLOCK_EV)  # (BLOCK_EV,): the features of v and out
    q = tl.load(Q + n * sq_n + offs_m[:, None] * sq_l + offs_e[None, :] * sq_e,
                mask=(offs_m[:, None] < L) & (offs_e[None, :] < E), other=0.0)  # (BLOCK_M, BLOCK_E)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # each query's running max
    l_i = tl.zeros([BLOCK_M], tl.float32)  # each query's running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)  # each query's running sum of exp(score - m_i) * v
    hi = S  # TODO 1 (loop bounds): under IS_CAUSAL, stop after the last key this tile's last query sees
    if IS_CAUSAL:
        hi = tl.minimum(pid_m * BLOCK_M, S)
    for start_n in range(0, hi, BLOCK_N):  # one tile of keys at a time
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,): the tile's keys
        k = tl.load(K + n * sk_n + offs_n[:, None] * sk_s + offs_e[None, :] * sk_e,
                    mask=(offs_n[:, None] < S) & (offs_e[None, :] < E), other=0.0)  # (BLOCK_N, BLOCK_E)
        v = tl.load(V + n * sv_n + offs_n[:, None] * sv_s + offs_ev[None, :] * sv_e,
                    mask=(offs_n[:, None] < S) & (offs_ev[None, :] < EV), other=0.0)  # (BLOCK_N, BLOCK_EV)
        s = _dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N): the tile's scores
        # TODO 2 (edges, mask)
        valid = offs_n[None, :] < S
        if IS_CAUSAL:
            valid = valid & (offs_m[:, None] >= offs_n[None, :])
        s = tl.where(valid, s, -float("inf"))
        # TODO 3 (online softmax)
        row_max = tl.max(s, axis=1)
        new_m = tl.maximum(m_i, row_max)
        corr = tl.exp(m_i - new_m)
        p = tl.exp(s - new_m[:, None])
        l_i = corr * l_i + tl.sum(p, axis=1)
        acc = corr[:, None] * acc + _dot(p, v)
        m_i = new_m
    out = acc / l_i[:, None]  # TODO 4 (finish)
    lse = m_i + tl.log(l_i)
    tl.store(O + n * so_n + offs_m[:, None] * so_l + offs_ev[None, :] * so_e, out.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < L) & (offs_ev[None, :] < EV))
    tl.store(LSE + n * L + offs_m, lse, mask=offs_m < L)


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
