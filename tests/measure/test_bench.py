"""The benchmark's parts: the growth fit, the FLOP formula, the memory method, the guards, the files.

Timings are never asserted: on a shared machine they are noise. Memory is, within the noise floor.
"""

import csv
import json
import math
import time

import pytest
import torch

from attnlab import kernels
from attnlab.kernels import sdpa
from attnlab.measure import bench, flex, growth, memory, timing
from attnlab.measure.flops import attention_flops, matmul_flops
from attnlab.report import bench as report
from attnlab.results import to_dict

TINY = dict(seq=(16, 32), batch=1, heads=1, head_dim=8, repeats=1, matmul_n=128)


def test_growth_exponent_recovers_the_slope_of_synthetic_data():
    T = [128, 256, 512, 1024, 2048]
    assert growth.exponent(T, [3e-9 * t**2 for t in T]) == pytest.approx(2.0)
    assert growth.exponent(T, [5e3 * t for t in T]) == pytest.approx(1.0)
    noisy = [7.0 * t**1.5 * f for t, f in zip(T, [1.05, 0.97, 1.02, 0.99, 1.01], strict=True)]
    assert growth.exponent(T, noisy) == pytest.approx(1.5, abs=0.03)
    # skipped or unmeasurable points are left out; one length is not a slope
    assert growth.exponent([128, 256, 512], [None, 4.0, 16.0]) == pytest.approx(2.0)
    assert growth.exponent([128, 256], [1.0, 0]) is None
    assert growth.exponent([128, 128], [1.0, 2.0]) is None


def test_extrapolate_clips_the_slope():
    assert growth.extrapolate([], 10) is None
    assert growth.extrapolate([(100, 1.0)], 200) == pytest.approx(4.0)  # one point: assume T^2
    pts = [(100, 1.0), (200, 1.5)]  # slope < 1: clipped to 1
    assert growth.extrapolate(pts, 400) == pytest.approx(3.0)
    assert growth.extrapolate([(100, 1.0), (200, 16.0)], 400, lo=2.0) == pytest.approx(16.0 * 4)


def test_one_flop_formula():
    f = attention_flops(2, 3, 5, 7, 11)
    assert f == 4 * 2 * 3 * 5 * 7 * 11
    assert attention_flops(2, 3, 5, 7, 11, causal=True) == f / 2
    assert attention_flops(2, 3, 5, 7, 11, mode="backward") == 2.5 * f
    assert attention_flops(2, 3, 5, 7, 11, causal=True, mode="forward+backward") == 3.5 * f / 2
    assert matmul_flops(4, 5, 6) == 240
    for bad in (dict(batch=0), dict(head_dim=1.5), dict(L=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            attention_flops(**{"batch": 1, "heads": 1, "L": 1, "S": 1, "head_dim": 1, **bad})
    with pytest.raises(ValueError, match="mode"):
        attention_flops(1, 1, 1, 1, 1, mode="both")


needs_peak = pytest.mark.skipif(memory.method("cpu") is None, reason="no way to reset the peak here (not Linux)")


@pytest.mark.slow
@needs_peak
def test_memory_method_finds_a_known_allocation_within_the_noise_floor():
    floor = memory.noise_floor("cpu")
    assert memory.MIN_FLOOR <= floor < 4 * 2**20
    for mib in (8, 48):
        n = mib * 2**20

        def alloc(n=n):
            return torch.ones(n // 4)

        alloc()
        got = memory.measure_peak(alloc)
        print(f"{mib} MiB: measured {got} bytes, floor {floor}")
        assert abs(got - n) <= floor
    assert memory.measure_peak(lambda: None) < floor
    # what was allocated before the call is the baseline, not part of the call's peak
    held = torch.ones(16 * 2**20 // 4)
    held + 0  # first call: loads code (that would count), as the benchmark's warm-up does
    assert memory.measure_peak(lambda: held + 0) == pytest.approx(held.numel() * 4, abs=floor)


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_garbage_the_calls_leave_in_cycles_is_still_collected_with_the_older_objects_set_aside():
    """The lab's measurement collects before each peak with what was alive before it set aside (gc.freeze): the
    cycles made inside are freed as before, and on leaving nothing stays frozen."""
    import gc
    import weakref

    class Node:
        pass

    before = gc.get_freeze_count()
    with memory.older_objects_set_aside():
        assert gc.get_freeze_count() > before  # what was alive is set aside: a collection no longer walks it
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, as a call's graph leaves one
        gone = weakref.ref(a)
        del a, b
        gc.collect()  # what measure_peak does before each peak
        assert gone() is None
    assert gc.get_freeze_count() == 0


def test_mask_names_and_config_errors():
    assert bench.make_mask(None, 8) is None
    assert bench.make_mask("sliding_window:4", 8).name == "sliding_window(4)"
    assert bench.make_mask("document:2", 8).name == "document"
    for spec in ("sliding_window", "sliding_window:0", "nonsense", "causal:3"):
        with pytest.raises(ValueError, match="unknown mask"):
            bench.make_mask(spec, 8)
    for bad, msg in [(dict(seq=()), "seq"), (dict(seq=(0, 16)), "seq"), (dict(heads=0), "heads"),
                     (dict(dtype="int8"), "dtype"), (dict(causal=True, mask="causal"), "either"),
                     (dict(impls=("fast",)), "unknown impl 'fast'"), (dict(budget_s=0), "budget"),
                     (dict(device="tpu"), "device"), (dict(device="cpu:x"), "device"), (dict(threads=True), "threads")]:
        with pytest.raises(ValueError, match=msg):
            bench.BenchConfig(**bad)


@pytest.mark.slow
def test_every_registered_form_is_benchmarked(monkeypatch):
    monkeypatch.setitem(kernels._REGISTRY, "toy", kernels.Form("toy", sdpa.attention, "a registered twin"))
    assert "toy" in bench.known_impls() and "flex" in bench.known_impls()
    r = bench.sweep(bench.BenchConfig(impls=("toy",), **TINY))
    assert [(x.impl, x.seq, x.skipped) for x in r.results] == [("toy", 16, None), ("toy", 32, None)]


@pytest.mark.slow
def test_sweep_result_json_schema_and_csv(tmp_path, round_trip):
    seen = []
    r = bench.sweep(bench.BenchConfig(impls=("matrix", "sdpa"), mask="causal", **TINY), progress=seen.append)
    assert seen == ["matrix T=16", "sdpa T=16", "matrix T=32", "sdpa T=32"]
    j = json.loads(json.dumps(to_dict(r)))
    assert set(j) == {"machine", "versions", "config", "matmul_gflops", "results", "exponents", "fit_lengths"}
    assert j["matmul_gflops"] > 0 and "torch" in j["versions"] and "memory_noise_floor_bytes" in j["machine"]
    assert j["config"]["seq"] == [16, 32] and j["config"]["mask"] == "causal" and "1/2" in j["config"]["flops"]
    assert [(x["impl"], x["seq"]) for x in j["results"]] == [("matrix", 16), ("matrix", 32), ("sdpa", 16),
                                                             ("sdpa", 32)]
    for x in j["results"]:
        assert set(x) == set(report.COLUMNS) and x["skipped"] is None
        assert x["time_min_s"] <= x["time_s"] <= x["time_max_s"]
        flops = attention_flops(1, 1, x["seq"], x["seq"], 8, causal=True)
        assert x["gflops"] == pytest.approx(flops / x["time_s"] / 1e9)
    assert set(j["exponents"]) == {"matrix", "sdpa"} and set(j["exponents"]["matrix"]) == {"time", "memory"}
    assert isinstance(j["exponents"]["matrix"]["time"], float)
    rows = list(csv.DictReader(report.write_csv(r, tmp_path / "b.csv").read_text().splitlines()))
    assert len(rows) == 4 and list(rows[0]) == report.COLUMNS and rows[0]["skipped"] == ""
    assert float(rows[0]["time_s"]) == pytest.approx(j["results"][0]["time_s"])
    assert report.figure(r, tmp_path / "b.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    round_trip(r)


@pytest.mark.slow
def test_guards_skip_with_a_reason_instead_of_running():
    r = bench.sweep(bench.BenchConfig(impls=("matrix", "loops"), memory_limit_bytes=1024, **TINY))
    assert all(x.skipped and x.skipped.startswith("estimated") and "--max-memory" in x.skipped for x in r.results)
    assert {x.status for x in r.results} == {"skipped"}  # a fact of the row, not read back from its reason
    assert r.exponents["matrix"] == {"time": None, "memory": None}
    assert "[ ] quadratic memory growth measured" in report.checklist_line(r)
    # the loops form is timed on a tiny problem first; a budget it cannot fit skips it
    r = bench.sweep(bench.BenchConfig(impls=("loops",), budget_s=1e-4, **TINY))
    assert all("budget" in x.skipped for x in r.results)


@pytest.mark.slow
def test_memory_estimate_from_shorter_lengths_skips_longer_ones():
    sizes = {**TINY, "seq": (64, 4096), "heads": 4, "head_dim": 16}
    # at 4096 one score matrix alone is 256 MiB: far over the limit, and known from the 64 measured
    cfg = bench.BenchConfig(impls=("matrix",), memory_limit_bytes=64 * 2**20, budget_s=86400.0, **sizes)
    r = bench.sweep(cfg)
    assert r.results[0].skipped is None and r.results[0].peak_bytes > 0
    assert r.results[1].skipped.startswith("estimated") and "--max-memory" in r.results[1].skipped


@pytest.mark.slow
def test_failing_form_and_ctrl_c_keep_what_was_measured(monkeypatch):
    def breaks_at_32(q, k, v, *args, **kw):
        if q.shape[-2] >= 32:
            raise ValueError("too long for me")
        return sdpa.attention(q, k, v, *args, **kw)

    def interrupted_at_32(q, k, v, *args, **kw):  # as torch.compile does: Ctrl-C wrapped in its own error
        if q.shape[-2] >= 32:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as e:
                raise RuntimeError("compilation failed") from e
        return sdpa.attention(q, k, v, *args, **kw)

    monkeypatch.setitem(kernels._REGISTRY, "brittle", kernels.Form("brittle", breaks_at_32, ""))
    monkeypatch.setitem(kernels._REGISTRY, "ctrlc", kernels.Form("ctrlc", interrupted_at_32, ""))
    r = bench.sweep(bench.BenchConfig(impls=("brittle",), **{**TINY, "seq": (16, 32, 64)}))
    assert [x.skipped for x in r.results] == [None, "failed: ValueError: too long for me",
                                              "not tried: failed at T=32"]
    assert [x.status for x in r.results] == ["measured", "failed", "failed"]
    assert report.skip_lines(r) == ["failed brittle T=32: failed: ValueError: too long for me",
                                    "failed brittle T=64: not tried: failed at T=32"]
    r = bench.sweep(bench.BenchConfig(impls=("ctrlc", "matrix"), **{**TINY, "seq": (16, 32, 64)}))
    assert r.interrupted
    done = [(x.impl, x.seq) for x in r.results if x.skipped is None]
    assert done == [("ctrlc", 16), ("matrix", 16)]
    assert all(x.skipped == "interrupted" and x.status == "interrupted" for x in r.results if x.seq > 16)


def test_flex_wrapper_refuses_what_flex_cannot_do():
    assert flex.unavailable() is None or isinstance(flex.unavailable(), str)
    if flex.unavailable():
        pytest.skip(flex.unavailable())
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(ValueError, match="dropout"):
        flex.attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="mask function"):
        flex.attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="4-d"):
        flex.attention(q[0], q[0], q[0])


def test_timing_counts_repeats_not_warmup_and_matmul_peak_is_a_rate():
    calls = []
    times = timing.time_calls(lambda: calls.append(1), warmup=2, repeats=3, before=lambda: calls.append(0))
    assert len(times) == 3 and all(t >= 0 for t in times) and calls == [0, 1] * 5
    with pytest.raises(ValueError, match="repeats"):
        timing.time_calls(lambda: None, 1, 0)
    # a budget stops the timed calls early, but never before min_repeats of them
    assert len(timing.time_calls(lambda: time.sleep(0.01), 0, 50, budget_s=0.05, min_repeats=3)) in range(3, 6)
    assert len(timing.time_calls(lambda: time.sleep(0.01), 0, 10, budget_s=1e-6, min_repeats=2)) == 2
    g = timing.matmul_peak(torch.float32, "cpu", n=128, repeats=2)
    assert g > 0 and math.isfinite(g)


def test_the_slow_forms_seconds_are_decided_as_the_sweep_decides(monkeypatch):
    """`lesson --build` estimated the bench at 34 s where its loops form was skipped (6.6 s a call x 5 calls over
    the 30 s budget) and it took 7 s: the loops part is the sweep's own decision, made ahead from the same probe."""
    monkeypatch.setattr(bench, "_probe", lambda cfg, form: 0.01)  # a call at T = PROBE: 0.01 s; as T^2 from there
    cfg = bench.BenchConfig(impls=("loops", "matrix"), seq=(16, 32), warmup=1, repeats=5, budget_s=0.2)
    # T = 16: 5 calls fit (1 warm-up, 3 timed, 1 for memory: 0.05 s), 5 timed; T = 32: 0.04 s a call, 0.2 s fits
    assert bench.slow_forms_seconds(cfg) == pytest.approx(7 * 0.01 + 7 * 0.04, abs=1e-3)
    # a budget of 0.1 s: T = 32's five calls (0.2 s) do not fit, and it is skipped, as the sweep skips it
    assert bench.slow_forms_seconds(bench.BenchConfig(**{**cfg.__dict__, "budget_s": 0.1})) == pytest.approx(
        7 * 0.01, abs=1e-3)
    # a budget under the first length's calls: the form is skipped whole (the sweep says "estimated ... > budget")
    assert bench.slow_forms_seconds(bench.BenchConfig(**{**cfg.__dict__, "budget_s": 0.04})) < 1e-3
    assert bench.slow_forms_seconds(bench.BenchConfig(impls=("matrix", "sdpa"))) == 0.0  # no slow form: none
    # no form named: every form, as the sweep runs them (the loops form among them), each length once
    every = bench.BenchConfig(**{**cfg.__dict__, "impls": None, "seq": (16, 16)})
    assert bench.slow_forms_seconds(every) == pytest.approx(7 * 0.01, abs=1e-3)
