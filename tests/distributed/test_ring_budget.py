"""The row-sliced float64 oracle against the full one, and ring's estimate of memory and time before a launch."""

import dataclasses

import pytest
import torch

from attnlab.distributed import budget as ring_budget
from attnlab.distributed.ring import RingConfig
from attnlab.judge import oracle, oracle_rows, rule
from attnlab.measure import memory
from tests.helpers import qkv


@pytest.mark.parametrize("seed", range(12))
def test_slices_of_rows_give_the_full_oracles_numbers(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))  # noqa: E731
    Hkv = r(1, 3)
    N, H, L, S, E, Ev = r(1, 2), Hkv * r(1, 3), r(1, 40), r(1, 40), r(1, 9), r(1, 9)
    causal, scale = bool(r(0, 1)), [None, 0.3, 2.0][r(0, 2)]
    q, k, v, go = qkv(N, H, Hkv, L, S, E, Ev, dtype=torch.float32, grad_out=True, generator=g)
    kw = dict(is_causal=causal, scale=scale, enable_gqa=Hkv != H)
    want = oracle.reference(q, k, v, grad_out=go, **kw)
    seen = []
    got = oracle_rows.reference(q, k, v, grad_out=go, slice_bytes=r(1, 3) * N * H * S * 8, **kw,
                                progress=lambda done, total: seen.append((done, total)))
    errs = [rule.max_err(a, b) for a, b in zip(got, want, strict=True)]
    print(f"N={N} H={H}/{Hkv} L={L} S={S} E={E} Ev={Ev} causal={causal} scale={scale}: out, dq, dk, dv {errs}")
    assert max(errs) < 1e-12
    assert rule.max_err(oracle_rows.reference(q, k, v, **kw), want[0]) < 1e-12
    assert seen[-1] == (L, L) and len(seen) > 1 or L <= 3


@pytest.mark.slow
def test_slices_of_rows_need_linear_memory():
    T, d = 2048, 16
    q, k, v, go = (torch.randn(1, 1, T, d) for _ in range(4))
    def sliced_call():
        return oracle_rows.reference(q, k, v, grad_out=go, is_causal=True, slice_bytes=256 * 2**10)

    sliced_call()  # the first call loads code paths: that is not the call's memory
    memory.exact_heap("cpu")  # peaks that follow the live tensors, whatever this process allocated before
    try:  # the least of three: a high-water mark can only hold more than the call's own pages, never less
        sliced = min(memory.measure_peak(sliced_call) for _ in range(3))
        full = memory.measure_peak(lambda: oracle.reference(q, k, v, grad_out=go, is_causal=True))
    finally:
        memory.exact_heap("cpu", exact=False)
    matrix = T * T * 8
    print(f"peak at T={T}: sliced {sliced / 2**20:.1f} MiB, full oracle {full / 2**20:.1f} MiB, one T x T float64 "
          f"matrix {matrix / 2**20:.0f} MiB")
    assert sliced < matrix / 4 and 2 * matrix < full


def test_bad_arguments_name_themselves():
    q = torch.randn(1, 4, 8, 8)
    with pytest.raises(ValueError, match="key has 3 heads but query has 4"):
        oracle_rows.reference(q, torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8), enable_gqa=True)
    with pytest.raises(ValueError, match=r"query must be a 4-D .* got \(4, 8, 8\)"):
        oracle_rows.reference(q[0], q, q)
    with pytest.raises(ValueError, match="slice_bytes must be a positive integer, got 0"):
        oracle_rows.reference(q, q, q, slice_bytes=0)


RATES = dict(rate=2e10, rate64=1e10)  # FLOP/s, given: the estimate is then a pure function of the sizes


def test_estimate_grows_linearly_in_memory_and_quadratically_in_time():
    cfg = RingConfig(world=4, seq=16384, causal=True, backward=True, layout="zigzag")
    small, big = (ring_budget.estimate(dataclasses.replace(cfg, seq=T), **RATES) for T in (16384, 65536))
    print(small.describe(), big.describe(), sep="\n")
    over = ring_budget.PROCESS_BYTES
    assert 3.5 < (big.rank_bytes - over) / (small.rank_bytes - over) <= 4.0  # O(T), 4 x the length
    assert 15 < big.total_s / small.total_s < 17  # O(T^2)
    assert ring_budget.refusal(cfg, small, available=24 * 2**30) is None  # docs/ring.md's large run fits 24 GB


def test_what_does_not_fit_is_refused_with_the_estimate_and_the_limit():
    huge = RingConfig(world=4, seq=10**9)
    why = ring_budget.refusal(huge, ring_budget.estimate(huge, **RATES), available=24 * 2**30)
    print(why)
    assert "T=1000000000 on 4 ranks needs about" in why and "TiB" in why
    assert "more than the limit of 19.2 GiB (80% of the 24 GiB free now)" in why
    slow = RingConfig(world=4, seq=262144, causal=True, backward=True)
    why = ring_budget.refusal(slow, ring_budget.estimate(slow, **RATES), available=2**50)
    print(why)
    assert "would take" in why and " h " in why and "a launch is stopped after 10 min (--time-limit)" in why
