"""Machine facts: one module, and results keep importing them as before."""

import os

from attnlab.lab import machine, results
from attnlab.lab.measure import memory


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
