"""Every lab level ends in a verdict (issue 46): one table of bad files, run over every level through the command
line -- a function that loops, sleeps, raises, exits, returns the wrong shape, the wrong dtype or no tensor, and a
right one that sets torch's global state, starts a thread or starts a process at import. Each check ends within its
--max-seconds budget and a margin, in a verdict (never a traceback), with nothing left running; a new level gets
the table for free (the levels are read from attnlab.lab.levels)."""

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from attnlab.lab import levels
from tests.processes import marked_env, of_run, wait_until_gone

SLOW = pytest.mark.slow  # a whole `attnlab lab check` (or start) in a child process

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 3  # --max-seconds for a bad function
HANG_BUDGET = 1  # ... and for one that never answers (HANGS): what it is told is "ran out of time" at any budget, and
# a waiting function is waited for 1.5 times its budget, twice (its retry), so a smaller one is seconds of idle less
RIGHT_BUDGET = 60  # ... and for a right one whose file does something else: the module's 20 training steps take
# seconds under load, and a right function must pass
WITHIN = 75  # seconds a check of a bad file may take at that budget: the rate, the first case, the start-ups

# behaviour -> (what the function does with the right answer's thunk, what the file does at import, exit code,
# what the verdict says)
BEHAVIOURS = {
    "loops": ("while True:\n        pass", "", 1, ("ran out of time", "timed out")),
    "sleeps": ("time.sleep(600)", "", 1, ("ran out of time", "timed out")),
    "raises": ('raise ValueError("my own bug")', "", 1, ("my own bug",)),
    "exits": ("os._exit(3)", "", 1, ("exit code 3",)),
    "wrong shape": ("return _first(thunk(), lambda t: t[..., :-1])", "", 1, ("shape",)),
    "wrong dtype": ("return _first(thunk(), lambda t: t.half())", "", 1, ("float16", "dtype")),
    "no tensor": ('return _first(thunk(), lambda t: "a string")', "", 1, ("str", "not a tensor", "not the three")),
    "global state": ("return thunk()", "torch.set_default_dtype(torch.float64)\ntorch.set_grad_enabled(False)\n"
                     "torch.set_num_threads(1)\ntorch.use_deterministic_algorithms(True)", 0, ("",)),
    "a thread": ("return thunk()", "threading.Thread(target=time.sleep, args=(600,)).start()", 0, ("",)),
    "a process": ("return thunk()", 'CHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])',
                  0, ("left processes of its own running",)),
}
HANGS = ("loops", "sleeps")  # the behaviours that never answer (HANG_BUDGET)

TEMPLATE = '''import functools
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, {root!r})
import torch

from tests.lab import level_solutions as _S
{kernel}
{prelude}


def _first(out, f):
    return (f(out[0]), *out[1:]) if isinstance(out, (tuple, list)) else f(out)


def _bad(thunk):
    {body}


{definition}
'''

FUNCTION = '''@functools.wraps({source}.{name})
def {name}(*args, **kwargs):
    return _bad(lambda: {source}.{right}(*args, **kwargs))
'''
# the answer a bad function spoils: level 1's loops take seconds a case in Python, so there the matrix form answers
# (the same causal (q, k, v) -> out), and what is judged is the bad behaviour, not the loops' speed
RIGHT = {"attention_by_hand": "attention_matrix"}
# level 7 answers with a Triton kernel (its check refuses an answer no kernel of the learner's own launched): the
# solution's, imported in the judged process, where the check has set TRITON_INTERPRET before any kernel is defined
KERNEL = {"triton": "from tests.lab import level_triton as _T\n"}

MODULE = '''class CausalSelfAttention(_S.causal_self_attention()):
    def forward(self, x):
        return _bad(lambda: super(CausalSelfAttention, self).forward(x))
'''


def bad_file(folder: Path, level, behaviour: str) -> Path:
    body, prelude, _, _ = BEHAVIOURS[behaviour]
    right = RIGHT.get(level.function, level.function)
    source = "_T" if level.name in KERNEL else "_S"
    definition = MODULE if level.name == "module" else FUNCTION.format(name=level.function, right=right, source=source)
    path = folder / level.filename
    path.write_text(TEMPLATE.format(root=str(ROOT), prelude=prelude, body=body, definition=definition,
                                    kernel=KERNEL.get(level.name, "")))
    return path


def _check(tmp_path, level, behaviour):
    path = bad_file(tmp_path, level, behaviour)
    tag = uuid.uuid4().hex
    budget = (HANG_BUDGET if behaviour in HANGS else BUDGET) if BEHAVIOURS[behaviour][2] else RIGHT_BUDGET
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "attnlab", "lab", "check", str(path), "--level", level.name,
                        "--max-seconds", str(budget), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       cwd=tmp_path, env=marked_env(tag), timeout=300)
    took = time.perf_counter() - t0
    print(f"level {level.name}, {behaviour}: exit {r.returncode} in {took:.1f} s\n", r.stdout[-4000:], r.stderr[-2000:])
    wait_until_gone(of_run(tag), guard_s=30)
    assert of_run(tag) == [], "something the check or the file started is still running"
    return r, took


# What ends a bad function is the lab's, not the level's: the judged process, its budget and its verdict are one
# machine for every level (attnlab.lab.judged, attnlab.lab.check); a level adds what it calls (a function, its
# gradients, decode steps, a module's training, a Triton kernel). So the table is a cover, not the whole cross
# product: level i takes the behaviours 3i, 3i + 1, 3i + 2 (round the list), so every level meets three of them
# -- a bad answer, a hang or a crash, and a right one with a side effect among them -- and every behaviour two or
# three levels, one of them a function's and one the module's or steps'; a new level gets its three rows for free.
# Four rows run in make test (a hang, a wrong shape, global state, a process left running; the grid's level, the
# gradients', the module's, the kernel's); the rest in make test-long.
NAMES = list(BEHAVIOURS)
COVER = [(lv, NAMES[(3 * i + j) % len(NAMES)]) for i, lv in enumerate(levels.LEVELS) for j in range(3)]
QUICK = {("loops", "sleeps"), ("backward", "wrong shape"), ("decode", "global state"), ("triton", "a process")}
TABLE = [pytest.param(lv.name, b, id=f"{lv.name}: {b}", marks=() if (lv.name, b) in QUICK else (pytest.mark.long,))
         for lv, b in COVER]


def test_the_cover_meets_every_level_and_every_behaviour():
    assert {lv.name for lv, _ in COVER} == {lv.name for lv in levels.LEVELS}
    assert {b for _, b in COVER} == set(BEHAVIOURS)
    assert QUICK.issubset({(lv.name, b) for lv, b in COVER})
    assert set(HANGS) <= set(BEHAVIOURS) and all(BEHAVIOURS[b][2] for b in HANGS)  # (a renamed one: stale here)
    for lv in levels.LEVELS:  # each level: a function that fails, and one that must pass with a side effect
        mine = [b for v, b in COVER if v is lv]
        assert any(BEHAVIOURS[b][2] for b in mine), lv.name


@SLOW
@pytest.mark.parametrize("level_name, behaviour", TABLE)
def test_every_bad_file_ends_in_a_verdict_within_its_budget(tmp_path, level_name, behaviour):
    level = levels.find(level_name)
    _, _, code, says = BEHAVIOURS[behaviour]
    r, took = _check(tmp_path, level, behaviour)
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    assert r.returncode == code, out[-3000:]
    assert any(s in out for s in says), says
    if code:
        assert took < WITHIN, f"{took:.0f} s, past {WITHIN} s"
    import json  # the check kept says how long the learner waited: the whole command, not a part of it (issue 54)

    kept = json.loads(next((tmp_path / "out" / "lab-checks").glob("*.json")).read_text())
    assert 0.8 * took <= kept["seconds"] <= took, (kept["seconds"], took)


@SLOW
def test_a_results_folder_that_is_a_file_is_one_line_after_the_verdict(tmp_path):
    level = levels.find("matrix")
    path = bad_file(tmp_path, level, "raises")
    out = tmp_path / "out"
    out.mkdir()
    (out / "lab-checks").write_text("")
    r = subprocess.run([sys.executable, "-m", "attnlab", "lab", "check", str(path), "--max-seconds", "2",
                        "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    print(r.returncode, r.stdout[-1500:], r.stderr)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert r.stderr.strip() == ("attnlab lab: error: the check's result was not kept: cannot write "
                                f"{out / 'lab-checks'}: it is a file, not the folder the checks are kept in")
    assert "my own bug" in r.stdout  # the verdict was printed before the line


@pytest.mark.parametrize("make, says", [(lambda p: p.write_text(""), "it is a file, not the folder"),
                                        (lambda p: p.symlink_to(p.parent / "nowhere"), "a symbolic link to nothing")],
                         ids=["file", "dangling link"])
def test_store_refuses_a_results_folder_that_is_not_one(tmp_path, make, says):
    from attnlab.lab import store
    from attnlab.results.files import CannotWrite

    make(tmp_path / "lab-checks")
    result = type("R", (), {"time": "", "file": "lab_matrix.py", "function": "attention_matrix"})()
    with pytest.raises(CannotWrite) as e:
        store.save(result, tmp_path)
    print(e.value)
    assert says in e.value.reason and e.value.path == tmp_path / "lab-checks"
    assert (tmp_path / "lab-checks").is_symlink() or (tmp_path / "lab-checks").read_text() == ""  # left as it was


@SLOW
def test_lab_start_over_a_folder_named_like_the_level_s_file_says_so(tmp_path):
    (tmp_path / "lab_flash.py").mkdir()
    r = subprocess.run([sys.executable, "-m", "attnlab", "lab", "start", "--level", "flash", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    print(r.returncode, r.stdout, r.stderr)
    assert r.returncode == 2 and "lab_flash.py is a folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "already there" not in r.stdout
