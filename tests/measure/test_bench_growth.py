"""Growth exponents read where growth dominates, and a matmul peak that says what it measures and stays short."""

import os
import subprocess
import sys
import time

import pytest
import torch

from attnlab.cli import main
from attnlab.measure import bench, growth, memory


def test_the_fit_keeps_the_longer_half_of_the_lengths():
    T = [128, 512, 2048]
    offset = 9 * 2**20  # a fixed part, as the heap or a call's own overhead adds
    cost = [offset + 3 * 8 * t * t * 4 for t in T]  # + three (H=8, T, T) float32 matrices
    everything = growth.exponent(T, cost)
    kept = growth.dominant(list(zip(T, cost, strict=True)))
    longer = growth.exponent(*zip(*kept, strict=True))
    print(f"fit over {T}: T^{everything:.2f}; over {[x for x, _ in kept]}: T^{longer:.2f}")
    assert [x for x, _ in kept] == [512, 2048] and everything < 1.65 < 1.75 < longer < 2.0  # nearer the truth
    assert [x for x, _ in growth.dominant([(t, 1.0) for t in (16, 32, 64, 128, 256)])] == [64, 128, 256]
    assert growth.dominant([(16, 1.0), (32, None), (64, 0.0)]) == [(16, 1.0)]  # what cannot be fitted is left out


def test_a_fit_of_repeats_gives_the_range_every_choice_of_them_allows():
    import itertools

    samples = {32: [0.1], 128: [1.0, 1.3], 512: [10.0, 16.0, 12.0], 2048: [200.0, 150.0, 260.0], 8192: [3000.0, 2000.0]}
    f = growth.fit(samples)
    assert f.lengths == (512, 2048, 8192) and f.repeats == 2  # the longer half; the fewest repeats there
    slopes = [growth.exponent(f.lengths, ys) for ys in itertools.product(*(samples[x] for x in f.lengths))]
    assert f.low == pytest.approx(min(slopes)) and f.high == pytest.approx(max(slopes))  # the extremes, exactly
    assert f.low < f.exponent < f.high
    assert f.exponent == pytest.approx(growth.exponent(f.lengths, [12.0, 200.0, 2500.0]))  # through the medians
    assert f.within(2.0, 0.25) is None and f.within(2.0, 1.5) is True and f.within(4.0, 0.1) is False
    assert growth.fit({128: [1.0, 2.0], 512: [None, 0.0]}) is None  # one length measured: no slope
    once = growth.fit({128: [1.0], 512: [16.0]})  # measured once: no spread to see, and it says so
    assert once.repeats == 1 and once.low == once.high == pytest.approx(2.0)


@pytest.mark.slow
@pytest.mark.skipif(memory.method("cpu") is None, reason="no way to reset the peak here (not Linux)")
def test_the_matrix_forms_memory_reads_quadratic():
    if os.environ.get("ATTNLAB_FRESH_PROCESS") != "1":
        # peaks are read from this process's memory: measure in a fresh interpreter, where no earlier
        # test's heap or left-behind threads (verify's watchdog) can move them
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            f"{__file__}::test_the_matrix_forms_memory_reads_quadratic"],
                           env={**os.environ, "ATTNLAB_FRESH_PROCESS": "1"}, capture_output=True, text=True,
                           timeout=300)
        print(r.stdout[-2000:])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        return
    cfg = bench.BenchConfig(seq=(128, 256, 512, 1024), impls=("matrix",), heads=4, head_dim=16, repeats=1,
                            matmul_n=128)
    r = bench.sweep(cfg)
    peaks = {x.seq: x.peak_bytes for x in r.results}
    e = r.exponents["matrix"]["memory"]
    print({t: f"{p / 2**20:.2f} MiB" for t, p in peaks.items()}, f"T^{e:.2f} over {r.fit_lengths['matrix']}")
    assert r.fit_lengths["matrix"] == {"time": [512, 1024], "memory": [512, 1024]}
    assert 1.9 <= e <= 2.1
    assert "every block of 64 KiB or more its own mapping" in r.machine["memory_method"]


def test_half_precision_peak_uses_a_size_that_takes_a_second_or_two():
    t0 = time.perf_counter()
    sizes = bench.peak_sizes(bench.BenchConfig(dtype="float16"))
    n = sizes["float16"]
    a = torch.ones(n, n, dtype=torch.float16)
    t1 = time.perf_counter()
    a @ a
    one = time.perf_counter() - t1
    print(f"{sizes}: chosen in {t1 - t0:.2f} s, one float16 product {one:.3f} s")
    assert list(sizes) == ["float16", "float32"] and sizes["float32"] == 2048  # float32 is never shrunk
    assert 256 <= n <= 2048 and n % 64 == 0
    assert one < 4 * bench.PEAK_PRODUCT_S  # about PEAK_PRODUCT_S; a busy machine gets some slack
    assert bench.peak_sizes(bench.BenchConfig(matmul_n=300)) == {"float32": 300}  # a size given is a size kept
    assert bench.peak_sizes(bench.BenchConfig()) == {"float32": 2048}


@pytest.mark.slow
def test_bench_says_when_it_measures_the_peak(tmp_path, capsys):
    assert main(["bench", "--seq", "16", "32", "--impl", "matrix", "--heads", "1", "--head-dim", "8", "--repeats",
                 "1", "--matmul-size", "64", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "measuring this machine's matmul peak (float32 64 x 64 products)" in out
    assert "measuring the matmul peak again" in out and "(float32, 64 x 64," in out
    assert "over the longer half of the lengths" in out and "(T = 16, 32)" in out
