"""The judge with attention sinks: the oracle's sinks against attnlab's matrix form in float64 (forward, log-sum-exp,
every gradient and d sinks), verify's sink cases given only to functions that take sinks, right sink kernels passed
in every API that carries them, and the sink probe's reading of each row's sink weight (on q = 0 a row's visible
weights sum to 1 - w_sink). Each sink cause named first on a wrong kernel is held by tests/judge/test_cause_table.py
(its fixtures: tests/sink_kernels.py); the blind corpus by tests/judge/test_sink_corpus.py."""

import math

import pytest
import torch

import attnlab
from attnlab.judge import apis, oracle, sink_cases, verify
from attnlab.judge.probes import sinks as sink_probe
from tests import sink_kernels

N, H, HKV, L, S, E = 2, 4, 2, 6, 9, 8


def _inputs(seed=0, gqa=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, H, L, E, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(N, HKV if gqa else H, S, E, generator=g, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    sinks = (2 * torch.randn(H, generator=g, dtype=torch.float64)).requires_grad_()
    return q, k, v, sinks


def _eager(q, k, v, sinks, mask=None, is_causal=False):
    """gpt-oss's eager formula written out: scores and the sink concatenated, softmax, the sink's column dropped."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    row = torch.cat([s, sinks.view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    return torch.softmax(row, dim=-1)[..., :-1] @ v, torch.logsumexp(row, dim=-1)


@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("is_causal", [False, True])
def test_the_oracle_with_sinks_is_the_matrix_form_in_float64_forward_lse_and_every_gradient(gqa, is_causal):
    q, k, v, sinks = _inputs(1, gqa)
    grad = torch.randn(N, H, L, E, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ref, f = oracle.answer(q, k, v, is_causal=is_causal, enable_gqa=gqa, grad_out=grad, sinks=sinks)
    mine = attnlab.attention(q, k, v, is_causal=is_causal, enable_gqa=gqa, impl="matrix", sinks=sinks)
    got = (mine, *torch.autograd.grad(mine, (q, k, v, sinks), grad))
    assert len(ref) == 5  # out, dq, dk, dv, d sinks (last)
    for name, a, b in zip(("out", "dq", "dk", "dv", "dsinks"), got, ref, strict=True):
        assert a.shape == b.shape, name
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (name, float((a - b).abs().max()))
    eager_out, eager_lse = _eager(q, k, v, sinks, is_causal=is_causal)
    assert torch.allclose(f.lse, eager_lse.detach(), rtol=1e-12, atol=1e-12)
    assert torch.allclose(f.sink_P, torch.exp(sinks.detach().view(1, H, 1) - f.lse), rtol=1e-12)
    assert torch.allclose(f.P.sum(-1) + f.sink_P, torch.ones(N, H, L, dtype=torch.float64))
    # d sink_h = -sum over the head's rows of P_sink (dO . O)
    dsink = -(f.sink_P * (grad * f.out).sum(-1)).sum((0, 2))
    assert torch.allclose(ref[-1], dsink, rtol=1e-10, atol=1e-12)


def test_a_row_that_sees_no_key_gives_the_sink_all_its_weight():
    q, k, v, sinks = _inputs(3)
    mask = torch.ones(L, S, dtype=torch.bool)
    mask[2] = False  # row 2 sees no key
    grad = torch.ones(N, H, L, E, dtype=torch.float64)
    ref, f = oracle.answer(q, k, v, attn_mask=mask, grad_out=grad, sinks=sinks)
    assert torch.equal(ref[0][:, :, 2], torch.zeros(N, H, E, dtype=torch.float64))
    assert torch.allclose(f.lse[:, :, 2], sinks.detach().view(1, H).expand(N, H))
    assert torch.all(f.sink_P[:, :, 2] == 1)
    eager_out, eager_lse = _eager(q, k, v, sinks, mask=mask)
    assert torch.allclose(ref[0], eager_out.detach(), atol=1e-12)
    assert torch.allclose(f.lse, eager_lse.detach(), atol=1e-12)


def test_pytorchs_answer_with_sinks_is_the_oracles_in_float64():
    q, k, v, sinks = _inputs(4, gqa=True)
    ours = oracle.reference(q, k, v, is_causal=True, enable_gqa=True, sinks=sinks)
    theirs = sink_cases.pytorch(q, k, v, is_causal=True, enable_gqa=True, sinks=sinks)
    assert torch.allclose(ours, theirs, atol=1e-12)


def _cases(api, dtypes=("float32",)):
    return [c for c in apis.cases(api, dtypes, long=False) if c.sinks and not (c.api and apis.skip_reason(c))]


def test_sink_cases_go_only_to_functions_that_take_sinks():
    def plain(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                                scale=scale, enable_gqa=enable_gqa)

    cases = _cases("sdpa")[:3]
    assert not sink_cases.takes_sinks(plain) and sink_cases.takes_sinks(sink_kernels.sdpa_right)
    alone = verify.verify({"plain": plain}, cases, timeout=None)  # sink cases alone: skipped, and why
    assert {r.status for r in alone.rows} == {"skipped"}
    assert all("sinks=" in r.detail for r in alone.rows)
    basic = [c for c in verify.default_cases(["float32"], long=False) if c.name == "basic"]
    mixed = verify.verify({"plain": plain}, basic + cases, timeout=None)  # beside others: no rows for them
    assert [r.case for r in mixed.rows] == ["basic"] and mixed.passed


@pytest.mark.parametrize("api, fn", [("sdpa", sink_kernels.sdpa_right), ("flash-attn", sink_kernels.flash_kernel()),
                                     ("flash-attn-varlen", sink_kernels.varlen_kernel()),
                                     ("paged-decode", sink_kernels.paged_kernel())])
def test_a_right_sink_kernel_passes_its_apis_sink_cases(api, fn):
    target = fn if api == "sdpa" else apis.Adapted(fn, api)
    cases = _cases(api)
    assert cases
    r = verify.verify({f"right {api}": target}, cases, timeout=None, backward=api in ("sdpa", "flash-attn"))
    assert r.passed, [(x.case, x.detail) for x in r.rows if x.status != "pass"]
    assert {x.status for x in r.rows} == {"pass"}


def _probe_reading(fn, name):
    case = next(c for c in _cases("sdpa") if c.probe and name in c.name)
    r = verify.verify({"k": fn}, [case], timeout=None)
    assert not r.passed
    return [m for row in r.rows for m in row.measured if m["kind"] == "sinks"]


@pytest.mark.parametrize("bug, probe, said", [("head0", "L=S=37", "head 0's for every head"),
                                              ("query", "L=S=37", "by the query's position"),
                                              ("per-tile", "L=S=150", "once per key tile"),
                                              ("ignored", "L=S=37", "the sink takes no weight")])
def test_the_sink_probe_reads_each_rows_sink_weight(bug, probe, said):
    found = _probe_reading(sink_kernels.sdpa_kernel(bug), probe)
    assert found and "gives the sink the weight" in found[0]["text"], found
    assert said in found[0]["text"], found[0]["text"]


def test_the_sink_weight_read_is_one_minus_the_visible_weights():
    """On a weights probe (q = 0, v one-hot per key) a row's output is its weights; what they leave of 1 is the
    sink's, which the reading gives back as the spec's where the kernel is right."""
    case = next(c for c in _cases("sdpa") if c.probe and "causal, L=S=37" in c.name)
    x = verify.inputs(case, case.seed(0))
    assert float(x.q.abs().max()) == 0.0
    out = sink_kernels.sdpa_right(x.q, x.k, x.v, is_causal=case.is_causal, sinks=x.sinks).double()
    _, f = oracle.answer(x.q.double(), x.k.double(), x.v.double(), is_causal=case.is_causal, sinks=x.sinks)
    w_sink = 1 - out[..., :case.L].sum(-1)
    assert torch.allclose(w_sink, f.sink_P.reshape(w_sink.shape), atol=1e-5)
    assert sink_probe.read(case, out, oracle.unflatten(f.out, f).double(), f, 1e-6) == []


def _one(cases):
    c = cases[0]
    return getattr(c, "values", (c,))[0]


@pytest.mark.slow  # judged in a process of its own, as attnlab.testing judges
def test_attnlab_testing_takes_sink_kernels_in_the_sdpa_face_and_flash_attn():
    import attnlab.testing as testing

    case = _one(testing.cases(["float32"], only="sinks: random"))
    testing.assert_case(sink_kernels.sdpa_right, case)
    with pytest.raises(AssertionError, match="one head's sink is used for every head"):
        testing.assert_case(sink_kernels.sdpa_kernel("head0"), case)
    flash = _one(testing.cases(["float32"], only="flash sinks: GQA", api="flash-attn"))
    testing.assert_case(sink_kernels.flash_kernel(), flash)
    with pytest.raises(AssertionError, match="the sink is read by the kv head"):
        testing.assert_case(sink_kernels.flash_kernel("kv-head"), flash)
