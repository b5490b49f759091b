"""benchmarks/pytorch_sdpa_suite.py on a small stand-in for PyTorch's test file: the swap reaches every caller."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = '''
import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention


def test_names_the_argument_cpu():  # attnlab's message; PyTorch words it otherwise
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="must have one dtype"):
        F.scaled_dot_product_attention(q, q.half(), q.half())


def test_imported_name_is_swapped_too_cpu():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="E=8 but key has E=6"):
        scaled_dot_product_attention(q, torch.randn(1, 1, 4, 6), q)


def test_multihead_attention_reaches_it_cpu():
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    out, _ = mha(x, x, x, need_weights=False)
    assert out.shape == (2, 5, 8)


def test_too_large_for_loops_cpu():
    q = torch.randn(1, 2, 200, 8)
    assert F.scaled_dot_product_attention(q, q, q).shape == q.shape
'''


@pytest.mark.slow
@pytest.mark.long  # the benchmark itself, on every form
def test_each_form_runs_the_file_and_differences_from_torch_are_listed(tmp_path):
    path = tmp_path / "test_transformers.py"
    path.write_text(STAND_IN)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pytorch_sdpa_suite.py"), str(path), "--forms",
                        "torch,matrix,loops,sdpa", "-k", "cpu", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    print(r.stdout, r.stderr[-2000:])
    assert r.returncode == 0
    runs = {f["form"]: f for f in json.loads((tmp_path / "pytorch_sdpa_suite.json").read_text())["forms"]}
    assert (runs["torch"]["passed"], runs["torch"]["failed"]) == (2, 2)  # PyTorch's own words differ
    assert (runs["matrix"]["passed"], runs["matrix"]["failed"]) == (4, 0) and runs["matrix"]["differs_from_torch"] == {}
    assert (runs["loops"]["passed"], runs["loops"]["skipped"]) == (3, 1)  # 200 x 200 x 2 pairs: over its budget
    assert "over its 20000" in runs["loops"]["not_passed"]["test_too_large_for_loops_cpu"]
    assert runs["sdpa"]["passed"] == 4  # attnlab's checks, then PyTorch's function: no recursion into the swap
    assert "| passed | failed | skipped" in r.stdout
