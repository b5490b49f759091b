"""`pip install attnlab` without the 'lab' extra: torch alone runs the kernels and `attnlab verify`;
what needs matplotlib, rich or numpy says which extra to install.

Each test runs a fresh interpreter in which those three cannot be imported: a sitecustomize makes the
path finder find nothing by their names, exactly as if they were not installed.
"""

import json
import subprocess
import sys

import pytest

BLOCKED = ("numpy", "matplotlib", "rich")
INSTALL = "pip install 'attnlab[lab]'"

SHIM = """from importlib.machinery import PathFinder

_find_spec = PathFinder.find_spec


def find_spec(cls, name, path=None, target=None):  # as if the module were not installed: no finder finds it
    if name.split(".")[0] in {blocked!r}:
        return None
    return _find_spec(name, path, target)


PathFinder.find_spec = classmethod(find_spec)
"""

pytestmark = pytest.mark.slow  # each test starts an interpreter and imports torch


@pytest.fixture
def core(tmp_path):
    """Run python (``-c CODE`` or ``-m attnlab ...``) with the lab extra's modules blocked."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM.format(blocked=BLOCKED))

    def run(*args, timeout=300):
        import os

        env = {**os.environ, "PYTHONPATH": str(shim), "OMP_NUM_THREADS": "1"}
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path, env=env)

    return run


def test_attention_and_its_forms_need_only_torch(core):
    code = """
import sys
import torch
import attnlab
q, k, v = (torch.randn(1, 4, 9, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
for impl in ("matrix", "flash", "loops"):
    out = attnlab.attention(q, k, v, is_causal=True, impl=impl)
    out.sum().backward()
    print(impl, float((out - ref).abs().max()))
from attnlab.nn import GPT, GPTConfig
gpt = GPT(GPTConfig(vocab_size=11, n_layer=1, n_head=2, d_model=16))
print("gpt", tuple(gpt(torch.zeros(1, 5, dtype=torch.long))[0].shape))
print("loaded", sorted(n for n in ("numpy", "matplotlib", "rich") if sys.modules.get(n) is not None))
"""
    r = core("-c", code)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    assert all(float(lines[impl]) < 1e-12 for impl in ("matrix", "flash", "loops")), r.stdout
    assert lines["gpt"] == "(1, 5, 11)" and lines["loaded"] == "[]"


def test_verify_runs_and_prints_its_table_without_rich(core, tmp_path):
    r = core("-m", "attnlab", "verify", "--impl", "matrix", "--dtype", "float32", "--quick", "--json", "v.json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ALL PASS" in r.stdout and "[green]" not in r.stdout
    assert "form" in r.stdout and "PASS" in r.stdout.splitlines()[3]  # title, header, rule, then rows
    result = json.loads((tmp_path / "v.json").read_text())
    assert result["versions"]["numpy"] is None and result["rows"]


@pytest.mark.parametrize("argv, needs", [(["bench", "--seq", "16"], "rich"), (["demo"], "matplotlib"),
                                         (["explore", "trust"], "numpy")])
def test_a_command_that_needs_the_lab_extra_says_so_in_one_line(core, argv, needs):
    r = core("-m", "attnlab", *argv)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"attnlab {argv[0]}: error: needs ") and INSTALL in lines[0], lines[0]


MODULES = {"attnlab.report.bench": "rich", "attnlab.train.corpus": "numpy", "attnlab.report.explore": "numpy"}


def test_the_shim_blocks_the_extras_and_a_module_that_needs_one_raises_importerror_with_the_pip_command(core):
    """One interpreter: the extras cannot be imported, and each module that needs one says which, and how."""
    code = f"""
import importlib
for name in {BLOCKED!r}:
    try:
        importlib.import_module(name)
    except ImportError:
        print(name, "| blocked")
for module in {list(MODULES)!r}:
    try:
        importlib.import_module(module)
    except ImportError as e:
        print(module, "|", type(e).__name__, "|", e)
"""
    r = core("-c", code)
    assert r.returncode == 0, r.stderr[-3000:]
    said = dict(line.split(" | ", 1) for line in r.stdout.strip().splitlines())
    assert all(said[name] == "blocked" for name in BLOCKED), r.stdout
    for module, needs in MODULES.items():
        kind, message = said[module].split(" | ")
        assert kind == "MissingExtra" and f"needs {needs}" in message and INSTALL in message, r.stdout
