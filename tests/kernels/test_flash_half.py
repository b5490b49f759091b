"""The flash form in half precision, FlashAttention's recipe (flash.py [P11]): which hardware takes it, that it
really rounds P and dS to the input dtype, that verify's half-precision rows pass with it, and float16's traps.

On a CPU without AMX / AVX512-BF16 the form stays in float32 by default; ``half_matmuls=True`` forces the
recipe, so that it is checked here on any machine (slowly per FLOP, as torch emulates the half matmuls).
"""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab import masks
from attnlab.judge import oracle, rule, verify
from attnlab.judge.cases import BANDS
from attnlab.kernels import dtypes, flash, online
from tests.helpers import qkv

HALF_FLASH = functools.partial(flash.attention, half_matmuls=True)
FAST_CASES = ("GQA 6/2 causal", "large logits, causal, L=97", "dropout 0.2")  # the running max, the keep-mask


@pytest.fixture
def plain_cpu(monkeypatch):
    """A CPU with neither AMX nor AVX512-BF16 (this machine or not)."""
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_amx_fp16_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda: False)


def test_matmul_dtype_is_float32_for_half_inputs_on_a_cpu_without_the_hardware(plain_cpu, monkeypatch):
    for dt in dtypes.HALF:
        assert dtypes.matmul_dtype(dt, "cpu") == torch.float32
        assert dtypes.matmul_dtype(dt, "cpu", half_matmuls=True) == dt  # forced
        assert dtypes.matmul_dtype(dt, "cuda") == dt  # a GPU multiplies half precision fast
        assert dtypes.matmul_dtype(dt, torch.device("cuda", 0), half_matmuls=False) == torch.float32
    for dt in (torch.float32, torch.float64):  # nothing changes for them, forced or not
        assert dtypes.matmul_dtype(dt, "cpu", half_matmuls=True) == dtypes.matmul_dtype(dt, "cuda") == dt
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert dtypes.matmul_dtype(torch.bfloat16, "cpu") == torch.bfloat16
    assert dtypes.matmul_dtype(torch.float16, "cpu") == torch.float32  # float16 needs AMX-FP16
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: True)
    assert dtypes.matmul_dtype(torch.float16, "cpu") == torch.float16


def test_default_on_a_plain_cpu_computes_exactly_as_float32(plain_cpu):
    q, k, v = (t.to(torch.bfloat16) for t in qkv(1, 2, 2, 40, 40, 16))
    assert torch.equal(flash.attention(q, k, v, is_causal=True), flash.attention(q, k, v, is_causal=True,
                                                                                 half_matmuls=False))


def _run(q, k, v, go, **kw):
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash.attention(*ins, **kw)
    out.backward(go)
    return [out.detach(), *(t.grad for t in ins)]


def _emulated(q, k, v, go):
    """FlashAttention's roundings written out in float32 for one tile on the bounded path (shift 0): P rounded
    before P V and P^T dO, dS before dS K and dS^T Q, each product rounded as a half matmul returns it."""
    dt = q.dtype

    def r(x):
        return x.to(dt).float()

    qf, kf, vf, gf = (t.float() for t in (q, k, v, go))
    scale = 1 / math.sqrt(q.shape[-1])
    s = torch.baddbmm(torch.empty(1), qf[0], kf[0].transpose(-1, -2), beta=0, alpha=scale * online.LOG2E)
    P = s.exp2()
    l = P.sum(-1, keepdim=True)
    out = r(r(P) @ vf[0]) / l
    P = P / l
    D = (gf[0].double() * out.double()).sum(-1, keepdim=True).float()
    dS = (gf[0] @ vf[0].transpose(-1, -2) - D) * P
    grads = [r(r(dS) @ kf[0]) * scale, r(r(dS).transpose(-1, -2) @ qf[0]) * scale, r(r(P).transpose(-1, -2) @ gf[0])]
    return [t[None].to(dt) for t in (out, *grads)]


@pytest.mark.parametrize("seed", [0, 1])
def test_forced_half_matmuls_round_p_and_ds_as_flashattention_does(seed):
    """A form that silently stayed in float32 fails this: it differs from the emulation in about half the entries."""
    q, k, v, go = (t.to(torch.bfloat16) for t in qkv(1, 2, 2, 24, 24, 16, grad_out=True, seed=seed))
    half, f32 = _run(q, k, v, go, half_matmuls=True), _run(q, k, v, go, half_matmuls=False)
    for name, h, f, e in zip(("out", "dq", "dk", "dv"), half, f32, _emulated(q, k, v, go), strict=True):
        same_h, same_f = float((h == e).float().mean()), float((f == e).float().mean())
        ulp = torch.finfo(torch.bfloat16).eps * float(e.float().abs().max())
        print(f"{name}: equal to the emulation {same_h:.3f} (float32 path {same_f:.3f}); "
              f"largest difference {float((h.float() - e.float()).abs().max()):.1e}, one ulp {ulp:.1e}")
        assert same_h >= 0.99 and float((h.float() - e.float()).abs().max()) <= ulp  # summation order may flip a few
        assert same_f < 0.9 and not torch.equal(h, f)


def _rows(cases, seeds):
    rows = [row for c in cases for seed in seeds for row in verify.check_forms({"flash half": HALF_FLASH}, c, seed)]
    worst = max(r.worst.err / r.worst.allowed for r in rows if r.worst is not None and r.worst.allowed > 0)
    print(f"{len(rows)} rows, worst err / allowed {worst:.3f}")
    bad = [(r.case, r.dtype, r.status, r.worst, r.detail) for r in rows if r.status != "pass"]
    assert not bad, bad[:5]
    return rows


def test_verify_half_rows_pass_with_half_matmuls_forced():
    cases = [c for c in verify.default_cases(["bfloat16", "float16"], long=False) if c.name in FAST_CASES]
    assert len(cases) == 2 * len(FAST_CASES)
    _rows(cases, [0])


@pytest.mark.slow
def test_every_quick_half_case_passes_with_half_matmuls_forced():  # about 40 s here: the half matmuls are emulated
    rows = _rows(verify.default_cases(["bfloat16", "float16"], long=False), [0])
    assert any(r.case == f"mask fn: {BANDS}" for r in rows)  # the band path


def test_the_band_path_rounds_its_weights_too(monkeypatch):
    from attnlab.kernels import flash_band

    seen = []
    band_forward = flash_band.forward
    monkeypatch.setattr(flash_band, "forward", lambda *a: seen.append(a[5]) or band_forward(*a))  # a[5]: half
    q, k, v = (t.to(torch.bfloat16) for t in qkv(1, 2, 2, 512, 512, 16))
    window = masks.sliding_window(24)
    plans = [flash.plan(q, k, v, attn_mask=window, half_matmuls=h) for h in (True, False)]
    assert [(p.path, p.half) for p in plans] == [("bands", torch.bfloat16), ("bands", None)], [str(p) for p in plans]
    assert "weights   multiplied in bfloat16" in str(plans[0]) and "multiplied in float32" in str(plans[1])
    half = flash.attention(q, k, v, attn_mask=window, half_matmuls=True)
    f32 = flash.attention(q, k, v, attn_mask=window, half_matmuls=False)
    ref = oracle.reference(q, k, v, attn_mask=window)
    c = rule.compare("out", half, F.scaled_dot_product_attention(q, k, v, attn_mask=window.dense(1, 2, 512, 512)),
                     ref, torch.bfloat16, rule.rounding_floor(q, k, v, attn_mask=window, dtype=torch.bfloat16)["out"])
    print(seen, c)
    assert seen == [torch.bfloat16, None] and c.passed and not torch.equal(half, f32)


def test_float16_weights_never_take_the_bounded_path():
    """q, k x 1.6: the bound |q| |k| scale (about 31) allows shift 0, where P = exp(s) passes float16's 65504."""
    q, k, v, go = qkv(1, 2, 2, 256, 256, 64, grad_out=True, seed=0)
    q, k = q * 1.6, k * 1.6
    bound = float(q.norm(dim=-1).max() * k.norm(dim=-1).max()) / 8
    assert bound <= online.SAFE_LOGIT and float((q @ k.transpose(-1, -2)).max()) / 8 > math.log(65504)
    h = [t.to(torch.float16) for t in (q, k, v, go)]
    got = _run(*h, half_matmuls=True)
    ref = oracle.reference(*h[:3], grad_out=h[3])
    floors = rule.rounding_floor(*h[:3], grad_out=h[3], dtype=torch.float16)
    ins = [t.clone().requires_grad_() for t in h[:3]]
    out = F.scaled_dot_product_attention(*ins)
    out.backward(h[3])
    theirs = [out, *(t.grad for t in ins)]
    for name, mine, other, r in zip(("out", "dq", "dk", "dv"), got, theirs, ref, strict=True):
        c = rule.compare(name, mine, other, r, torch.float16, floors[name])
        print(f"bound {bound:.1f}", c)
        assert bool(torch.isfinite(mine).all()) and c.passed


def test_float16_products_that_could_overflow_are_computed_in_float32():
    q, k, v = (t.to(torch.float16) for t in qkv(1, 2, 2, 64, 300, 16))
    v = v * 1000  # |P V| over a key tile can reach 256 * 4000 > 65504
    out = flash.attention(q, k, v, half_matmuls=True)
    assert torch.equal(out, flash.attention(q, k, v, half_matmuls=False))


def test_half_matmuls_takes_only_a_bool_or_none():
    q = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="half_matmuls must be True, False or None, got 'yes'"):
        flash.attention(q, q, q, half_matmuls="yes")
