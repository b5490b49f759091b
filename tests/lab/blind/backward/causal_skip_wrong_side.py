import math

import torch


def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    # FlashAttention-2 order: outer loop over key tiles, inner over query tiles
    in_dtype = q.dtype
    acc_t = torch.float64 if in_dtype == torch.float64 else torch.float32
    Q, K, V, O, LSE, dO = (x.to(acc_t) for x in (q, k, v, out, lse, dout))
    n_q, n_k, hd = Q.shape[-2], K.shape[-2], Q.shape[-1]
    sm = hd**-0.5
    dQ = torch.zeros_like(Q)
    dK = torch.zeros_like(K)
    dV = torch.zeros_like(V)
    delta = torch.sum(dO * O, dim=-1, keepdim=True)  # rowsum(dO * O)
    for ks in range(0, n_k, block_k):
        ke = min(ks + block_k, n_k)
        Kt, Vt = K[..., ks:ke, :], V[..., ks:ke, :]
        dK_t = torch.zeros_like(Kt)
        dV_t = torch.zeros_like(Vt)
        for qs in range(0, n_q, block_q):
            qe = min(qs + block_q, n_q)
            if is_causal and qs >= ke:
                break  # past the diagonal: the rest is masked
            Qt, dOt = Q[..., qs:qe, :], dO[..., qs:qe, :]
            logits = Qt @ Kt.mT * sm
            if is_causal:
                qi = torch.arange(qs, qe, device=Q.device)[:, None]
                kj = torch.arange(ks, ke, device=Q.device)[None, :]
                logits = logits.masked_fill(kj > qi, float("-inf"))
            probs = torch.exp(logits - LSE[..., qs:qe, None])
            dV_t += probs.mT @ dOt
            dprobs = dOt @ Vt.mT
            dlogits = probs * (dprobs - delta[..., qs:qe, :])
            dQ[..., qs:qe, :] += sm * (dlogits @ Kt)
            dK_t += sm * (dlogits.mT @ Qt)
        dK[..., ks:ke, :] = dK_t
        dV[..., ks:ke, :] = dV_t
    return dQ.to(in_dtype), dK.to(in_dtype), dV.to(in_dtype)
