"""Level 7 (issue 44 §3): the learner's FlashAttention-2 forward as a Triton kernel, judged in Triton's interpreter.

The kernels run in a process of their own with TRITON_INTERPRET=1 (tests/lab/triton_run.py): the
solution passes every graded case and names nothing, each slip of tests/lab/level_triton.py is named
first, the starter fails, and `attnlab lab start --level 7` / `lab check` run it from the command line,
saying it ran in the interpreter. The small run (the solution and one slip on the probes) is in make
test; the rest in the long lane.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.lab import files, levels

ROOT = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def _run(what: str, interpret: bool = True, timeout: int = 600) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "tests.lab.triton_run", what], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_level_7_is_the_seventh_level_and_its_check_starts_the_interpreter_without_a_gpu(monkeypatch):
    lv = levels.find("7")
    assert (lv.name, lv.function, lv.filename) == ("triton", "flash_attention", "lab_triton.py")
    mod = lv.module()
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: False)
    assert mod.environment() == {"TRITON_INTERPRET": "1"} and mod.BACKWARD is False
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: True)
    assert mod.environment() == {}
    assert "import triton" in lv.starter_text() and "TODO 1 (loop bounds)" in lv.starter_text()
    text = lv.starter_text()
    assert lv.given(text, "flash_attention")  # the starter as it came; with its kernel's body written, it is not
    assert not lv.given(text.replace("    out = acc  # TODO 4", "    out = acc / l_i[:, None]  # TODO 4"),
                        "flash_attention")


@pytest.mark.slow
@needs_triton
def test_the_solution_names_nothing_and_a_kernel_slip_is_named_in_the_interpreter():
    got = _run("probe")
    print(got)
    assert got == {"None": [], "pad-keys": ["pad-keys"]}


@pytest.mark.long
@pytest.mark.slow
@needs_triton
def test_every_kernel_slip_is_named_first_in_the_interpreter():
    got = _run("slips")
    for slip, keys in got.items():
        print(f"{slip}: {keys[:3]}")
    assert got.pop("None") == []
    wrong = {s: k for s, k in got.items() if k[:1] != [s]}  # each slip of level_triton.SLIPS is named by its name
    assert not wrong, wrong


@pytest.mark.long
@pytest.mark.slow
@needs_triton
def test_the_solution_passes_every_graded_case_and_the_starter_none():
    got = _run("grade")
    for name in ("solution", "starter"):
        print(name, f"{got[name]['seconds']:.1f} s")
        for row in got[name]["rows"]:
            print("   ", row)
    assert "interpreter" in got["runs"]
    assert all(status == "pass" for _, _, status, _ in got["solution"]["rows"])
    assert all(status != "pass" for _, _, status, _ in got["starter"]["rows"])


@pytest.mark.long
@pytest.mark.slow
@needs_triton
def test_the_solution_kernel_compiles_for_a_hopper_gpu():
    """The interpreter runs the kernel's Python; the GPU compiler also type-checks it (sm_90, Triton's own ptxas)."""
    got = _run("compile", interpret=False)
    print(got)
    assert 0 < got["shared_bytes"] <= 232448  # what one block may have on sm_90


@pytest.mark.long
@pytest.mark.slow
@needs_triton
def test_lab_start_and_check_run_level_7_from_the_command_line(tmp_path, run_cli):
    r = run_cli("lab", "start", str(tmp_path / "mylab"), "--level", "7", timeout=120)
    assert r.returncode == 0 and "lab_triton.py: level 7" in r.stdout
    path = tmp_path / "mylab" / "lab_triton.py"
    starter = run_cli("lab", "check", str(path), "--out", str(tmp_path / "out"), timeout=600)
    print(starter.stdout[-3000:])
    assert starter.returncode == 1 and "untouched starter: 4 TODOs left" in starter.stdout
    path.write_text((ROOT / "tests" / "lab" / "level_triton.py").read_text())
    solved = run_cli("lab", "check", str(path), "--out", str(tmp_path / "out"), timeout=600)
    print(solved.stdout[-3000:])
    assert solved.returncode == 0 and "in Triton's interpreter on the CPU" in solved.stdout
    assert "Graded: all" in solved.stdout and files.functions_in(path.read_text())


def test_level_7_says_it_times_on_a_gpu_only_where_there_is_one(monkeypatch):
    mod = levels.find("7").module()
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: False)
    said = mod.measures()
    assert "no CUDA device" in said and "timing it on" not in said and "if there is one" not in said
    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mod, "interpreting", lambda: False)
    monkeypatch.setattr(mod.torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")
    assert mod.measures().startswith("timing it on NVIDIA H100 (float16, causal, batch 1, 8 heads of width 64)")


PLAIN = """
import math

import torch


def flash_attention(q, k, v, is_causal=False, block_m=32, block_n=32):
    L, S = q.shape[-2], k.shape[-2]
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype), torch.logsumexp(s, -1).float()
"""
UNLAUNCHED = PLAIN + """
import triton


@triton.jit
def attention_kernel(X):
    pass
"""


def _check(tmp_path, capfd, text: str):
    (tmp_path / "lab_triton.py").write_text(text)
    capfd.readouterr()
    code = main(["lab", "check", str(tmp_path / "lab_triton.py"), "--quick", "--out", str(tmp_path / "out")])
    out, err = capfd.readouterr()
    print(code, out[-3000:], err[-1500:], sep="\n")
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.slow
def test_a_level_7_file_of_pytorch_alone_is_refused_in_one_line(tmp_path, capfd):
    """A right answer in PyTorch passed every case and ticked the Triton level; level 7 is the kernel."""
    code, out, err = _check(tmp_path, capfd, PLAIN)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Graded" not in out
    assert f"{tmp_path / 'lab_triton.py'} has no Triton in it: level 7 is FlashAttention's forward as a Triton " \
           "kernel, attention_kernel, that flash_attention launches" in err
    assert not (tmp_path / "out" / "lab-checks").exists()


@pytest.mark.slow
@needs_triton
def test_a_level_7_kernel_left_unlaunched_fails_every_case_saying_so(tmp_path, capfd):
    code, out, err = _check(tmp_path, capfd, UNLAUNCHED)
    said = ("flash_attention launched no Triton kernel of yours: level 7 grades your kernel, attention_kernel; "
            "launch it as the starter's wrapper does")
    assert code == 1 and "Graded: 0 of" in out and f"ERROR causal (float32): NoKernel: {said}" in out
    assert out.split("Likely cause (most likely first):\n")[1].startswith(f"  - raises NoKernel: {said}")
