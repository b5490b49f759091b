"""The triton form: its kernels under Triton's CPU interpreter, and how it behaves where it cannot run.

The kernel checks live in triton_interpreter_cases.py and run in a process of their own with
TRITON_INTERPRET=1 (Triton reads it when a kernel is defined); this process never sets it.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab import kernels
from attnlab.measure import bench

ROOT = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def env(interpret: bool) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        e["TRITON_INTERPRET"] = "1"
    return e


@pytest.mark.long
@pytest.mark.slow
@needs_triton
def test_kernels_under_the_interpreter():
    """Forward and gradients against the float64 oracle: every mask kind, GQA, L != S, odd sizes, dead rows."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                        str(ROOT / "tests/kernels/triton_interpreter_cases.py")],
                       capture_output=True, text=True, timeout=600, env=env(True), cwd=ROOT)
    print(r.stdout[-6000:], r.stderr[-2000:])
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout


@pytest.mark.slow
def test_import_attnlab_does_not_import_triton():
    code = "import sys, attnlab; attnlab.forms(); attnlab.kernels.get('triton'); print('triton' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env(True))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_on_a_cpu_without_the_interpreter_it_says_so(no_interpreter):
    form = kernels.get("triton")
    assert "triton" not in attnlab.forms() and "triton" in attnlab.forms(device=None)
    why = form.why_not("cpu")
    assert why is not None and ("TRITON_INTERPRET=1" in why or "not installed" in why)
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(RuntimeError, match="triton form cannot run on cpu"):
        attnlab.attention(q, q, q, impl="triton")


@pytest.mark.slow
@needs_triton
def test_bench_reports_it_unavailable_on_a_cpu(no_interpreter):
    cfg = bench.BenchConfig(seq=(16,), impls=("triton", "matrix"), heads=1, head_dim=8, repeats=1, matmul_n=32)
    rows = {r.impl: r for r in bench.sweep(cfg).results}
    assert rows["triton"].skipped.startswith("unavailable: it runs on CUDA")
    assert rows["matrix"].skipped is None and rows["matrix"].time_s > 0


@pytest.mark.slow
@needs_triton
@pytest.mark.parametrize("argv", [["verify", "--impl", "triton"], ["train", "--impl", "triton", "--steps", "1"]])
def test_cli_one_line_and_exit_2_without_the_interpreter(run_cli, argv):
    r = run_cli(*argv, env={"TRITON_INTERPRET": "0"}, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "TRITON_INTERPRET=1" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.long
@needs_triton
@pytest.mark.slow
def test_verify_quick_passes_under_the_interpreter(run_cli, tmp_path):
    # float32 only: under the interpreter every dtype of the quick grid takes minutes on two cores; the half
    # dtypes are verify's rows on a GPU (benchmarks/gpu.py), and the dry run below takes three half cases here
    r = run_cli("verify", "--impl", "triton", "--quick", "--dtype", "float32", "--show", "failures",
                "--json", tmp_path / "v.json", env={"TRITON_INTERPRET": "1"}, timeout=900)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "ALL PASS" in r.stdout and (tmp_path / "v.json").is_file()


@pytest.mark.long
@needs_triton
@pytest.mark.slow
def test_gpu_benchmark_dry_run(tmp_path):
    """benchmarks/gpu.py --dry-run: the GPU script's whole code path on the CPU, tiny sizes."""
    import json

    r = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu.py"), "--dry-run", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=900, env=env(False), cwd=tmp_path)
    print(r.stdout[-4000:], r.stderr[-2000:])
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "gpu.json").read_text())
    assert out["dry_run"] and out["correctness"] and all(c["passed"] for c in out["correctness"])
    assert [v["impl"] for v in out["verify"]] == ["triton", "sdpa"]
    # the cases its three names pick (GQA 6/2 causal also with dropout and a score_mod, which triton skips), not
    # the whole grid
    assert all(v["exit_code"] == 0 and v["counts"]["pass"] >= 3 and v["counts"]["fail"] + v["counts"]["error"] == 0
               and sum(v["counts"].values()) == 5 for v in out["verify"]), out["verify"]
    measured = {r["impl"] for r in out["speed"] if "tflops" in r}
    assert {"triton", "sdpa-flash", "flash (PyTorch)", "matrix"} <= measured
    assert any(r["impl"] == "triton" and "seconds" in r for r in out["window"])
    assert (tmp_path / "gpu.png").stat().st_size > 10_000


def test_docs_show_the_source_as_it_is():
    """docs/triton.md copies three loop bodies; each must still be a run of lines of the file it names."""
    import re

    text = (ROOT / "docs/triton.md").read_text()
    blocks = re.findall(r"<!-- source: (\S+) -->\n```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for path, block in blocks:
        src = [line.strip() for line in (ROOT / path).read_text().splitlines()]
        want = [line.strip() for line in block.strip("\n").splitlines()]
        assert any(src[i:i + len(want)] == want for i in range(len(src))), (
            f"docs/triton.md: the block from {path} no longer matches it; copy it again")


@pytest.mark.long
@needs_triton
@pytest.mark.slow
def test_kernels_compile_for_hopper_without_a_gpu():
    """The GPU compiler type-checks what the interpreter only runs: every mask path, for sm_90."""
    r = subprocess.run([sys.executable, str(ROOT / "tests/kernels/triton_compile_check.py"), "bf16", "128"],
                       capture_output=True, text=True, timeout=600, env=env(False), cwd=ROOT)
    print(r.stdout, r.stderr[-3000:])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("compiled for sm_90") == 3
