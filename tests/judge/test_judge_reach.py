"""The judged code cannot reach the judge.

Each plant is a module that, when imported, patches what a judge in its process would read -- PyTorch's
SDPA (so that PyTorch's answer agrees with the wrong function), torch.allclose and torch.testing,
attnlab's own rule and verify, sys.modules -- and defines a wrong function (out x 1.05 but in float64).
Judged in the plant's own process, the first plants do make it pass (that is the reach); verify --impl,
lab check and attnlab.testing fail it every time, the judge never sharing a process with it."""

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from attnlab.cli import main
from attnlab.lab import grade, judged

pytestmark = pytest.mark.slow  # judged processes, and a fresh interpreter per plant for attnlab.testing

WRONG = """
import sys

import torch
import torch.nn.functional as F

_sdpa = F.scaled_dot_product_attention


def wrong(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    # 5 % too large, except in float64 (where a judge checks PyTorch against its oracle)
    out = _sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa)
    return out if query.dtype == torch.float64 else 1.05 * out


def wrong_lab(q, k, v):
    return 1.05 * _sdpa(q, k, v, is_causal=True)
"""
PLANTS = {  # name -> (what the module does when imported, does it fool a judge in its own process)
    "F.scaled_dot_product_attention": ("F.scaled_dot_product_attention = wrong\n"
                                       "torch.nn.functional.scaled_dot_product_attention = wrong\n", True),
    "torch.allclose, torch.testing": ("torch.allclose = lambda *a, **k: True\n"
                                      "torch.testing.assert_close = lambda *a, **k: None\n", False),
    "attnlab's rule": ("import dataclasses\nimport attnlab.judge.rule as _rule\n_compare = _rule.compare\n"
                       "_rule.compare = lambda *a, **k: dataclasses.replace(_compare(*a, **k), passed=True)\n", True),
    "attnlab's verify": ("import attnlab.judge.judge as _J\nimport attnlab.judge.verify as _V\n"
                         "_V.verify = lambda targets, cases, **k: _V.VerifyResult.of(\n"
                         "    [_J.row(n, c, 'pass') for n in targets for c in cases])\n", True),
    "sys.modules": ("import types\nimport attnlab.testing\n_fake = types.ModuleType('attnlab.judge.rule')\n"
                    "_fake.__getattr__ = lambda name: (lambda *a, **k: True)\n"
                    "sys.modules['attnlab.judge.rule'] = _fake\n", False),
}
ONLY = "basic,causal"

SCRIPT = """
import json, sys
import plant
from attnlab.judge import verify
import attnlab.testing
cases = [c for c in verify.default_cases(["float32"], long=False) if c.name in {names}]
here = verify.verify({{"wrong": plant.wrong}}, cases).passed
apart = []
for case in cases:
    try:
        attnlab.testing.assert_case(plant.wrong, case)
    except AssertionError as e:
        apart.append(str(e))
print(json.dumps({{"in_its_own_process": here, "testing": apart}}))
"""


@pytest.fixture(params=list(PLANTS))
def plant(request, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body, reaches = PLANTS[request.param]
    (tmp_path / "plant.py").write_text(textwrap.dedent(WRONG) + body)
    return SimpleNamespace(name=request.param, reaches=reaches, folder=tmp_path)


def test_verify_impl_fails_the_planted_wrong_function(plant, capfd):
    code = main(["verify", "--impl", "plant:wrong", "--quick", "--dtype", "float32", "--only", ONLY])
    out = capfd.readouterr().out
    print(plant.name, out[-1200:])
    assert code == 1 and "FAILURES" in out and " 0 passed" in out


@pytest.mark.long  # the lab's judged process against every plant; verify --impl's against every plant is in make test
def test_lab_check_fails_the_planted_wrong_function(plant):
    with judged.open_learner("plant.py:wrong_lab") as learner:
        result, _, _ = grade.grade(learner.fn, "wrong_lab", learner.form, None, quick=True)
        err = grade.match(learner.fn)
    print(plant.name, result.counts(), f"match {err:.3g}")
    assert not result.passed and result.counts()["pass"] == 0 and err > 1e-2


@pytest.mark.long  # two fresh interpreters a plant; verify --impl holds every plant in make test
def test_attnlab_testing_fails_the_planted_wrong_function_that_fools_a_judge_beside_it(plant):
    names = {"basic", "causal"}
    script = SCRIPT.format(names=sorted(names))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=plant.folder)
    print(plant.name, r.stdout[-2000:], r.stderr[-2000:])
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["in_its_own_process"] is plant.reaches  # the plant is real: a judge in its process is fooled
    assert len(got["testing"]) == len(names) and all("FAIL" in text for text in got["testing"])
