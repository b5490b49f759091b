"""Machine facts: one module, and results keep importing them as before."""

import os

from attnlab import results
from attnlab.measure import memory
from attnlab.results import host as machine


def test_results_carry_the_same_functions():
    assert results.machine is machine.machine and results.versions is machine.versions
    info = machine.machine()
    assert info["cpu_count"] == os.cpu_count() and info["torch_threads"] >= 1
    assert {"attnlab", "python", "torch", "numpy"} <= set(machine.versions())


def test_load_average_is_the_one_minute_load():
    load = machine.load_average()
    assert load is None if not hasattr(os, "getloadavg") else load >= 0.0


def test_glibc_is_loaded_once_and_the_memory_method_says_whether_it_trims():
    lib = machine.glibc()
    assert machine.glibc() is lib  # cached
    how = memory.method("cpu")
    if how is not None:
        assert ("after malloc_trim" in how) == (lib is not None)


def test_cpu_features_read_the_flags_and_what_torch_detects(tmp_path, monkeypatch):
    import builtins

    import torch

    feats = machine.cpu_features()
    assert feats["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert feats["torch_avx512_bf16"] == torch.cpu._is_avx512_bf16_supported()
    assert feats["torch_amx_tile"] == torch.cpu._is_amx_tile_supported()
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma amx_tile amx_bf16\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(fake if p == "/proc/cpuinfo" else p, *a, **k))
    feats = machine.cpu_features()
    assert feats["avx2"] and feats["amx_bf16"] and feats["amx_tile"] and not feats["avx512_bf16"]
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    assert machine.cpu_features()["avx2"] is None  # unknown, not False
