"""Whole `attnlab lab check` runs of every level's solution and of its slips, alone, beside busy processes, or several
at once: the verdict and the named cause each gives, its wall time and the load (issue 54).

``python -m tests.lab.stress [--busy N] [--at-once N] [--levels 1,2] [--slips K] [--repeat R]`` prints one row a
check and a JSON line per check; the long lane's stress test (tests/lab/test_stress.py) holds every row to the same
verdict and cause as the check alone.

The files are the level solutions of tests/lab/level_solutions.py (level 7: the Triton kernel of
tests/lab/level_triton.py, a real kernel), each a learner's file that imports them with ``slip`` set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# three slips a level: each named by the level (tests/lab/test_levels.py holds them to it)
SLIPS = {
    "loops": ("scale-length", "softmax-dim", "peeks-ahead"),
    "matrix": ("unscaled", "causal-ignored", "mask-zero"),
    "module": ("heads-split", "no-proj", "scale-C"),
    "flash": ("acc-not-rescaled", "tile-mask", "lse-no-max"),
    "backward": ("d-wrong", "scale-missing", "dv-not-transposed"),
    "decode": ("before-write", "no-rope", "unscaled"),
    "triton": ("pad-keys", "stale-max", "not-divided"),
}

HEAD = (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tests.lab import level_solutions as _S\n"
        "SLIP = {slip!r}\n\n")
BODIES = {
    "loops": "def attention_by_hand(q, k, v):\n    return _S.attention_by_hand(q, k, v, slip=SLIP)\n",
    "matrix": "def attention_matrix(q, k, v):\n    return _S.attention_matrix(q, k, v, slip=SLIP)\n",
    "module": "class CausalSelfAttention(_S.causal_self_attention(SLIP)):\n    pass\n",
    "flash": "def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):\n"
             "    return _S.flash_forward(q, k, v, is_causal, block_q, block_k, slip=SLIP)\n",
    "backward": "def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):\n"
                "    return _S.flash_backward(q, k, v, out, lse, dout, is_causal, block_q, block_k, slip=SLIP)\n",
    "decode": "def decode_step(q, k, v, cache, pos):\n    return _S.decode_step(q, k, v, cache, pos, slip=SLIP)\n",
    "triton": "from tests.lab import level_triton as _T\n"
              "from tests.lab.level_triton import attention_kernel  # noqa\n\n\n"
              "def flash_attention(q, k, v, is_causal=False, block_m=32, block_n=32):\n"
              "    return _T.flash_attention(q, k, v, is_causal, block_m, block_n, slip=SLIP)\n",
}


def source(level: str, slip: str | None = None) -> str:
    return HEAD.format(slip=slip) + BODIES[level]


def write(folder: Path, level: str, slip: str | None = None) -> Path:
    from attnlab.lab import levels

    lv = levels.find(level)
    where = Path(folder) / f"{lv.name}-{slip or 'right'}"
    where.mkdir(parents=True, exist_ok=True)
    path = where / lv.filename
    path.write_text(source(lv.name, slip))
    return path


def check(path: Path, args=(), timeout: float = 1800) -> dict:
    """``attnlab lab check path`` in a child: exit code, whether it passed, the causes named (keys, first first), the
    wall time, the check's own seconds, the load before and after, the last lines it printed."""
    out = path.parent / "out"
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-m", "attnlab", "lab", "check", str(path), "--out", str(out), *args],
                       capture_output=True, text=True, timeout=timeout, cwd=path.parent, env=env)
    wall = time.perf_counter() - t0
    saved = sorted((out / "lab-checks").glob("*.json")) if (out / "lab-checks").is_dir() else []
    got = json.loads(saved[-1].read_text()) if saved else {}
    for f in saved:  # each check's own folder stays empty for the next run of the same file
        f.unlink()
        f.with_suffix(".png").unlink(missing_ok=True)
    causes = [d["key"] for d in got.get("diagnoses", [])]
    return {"file": str(path.parent.name), "code": r.returncode, "passed": r.returncode == 0, "causes": causes,
            "wall_s": round(wall, 1), "seconds": got.get("seconds"), "load": [round(load0, 1),
                                                                              round(os.getloadavg()[0], 1)],
            "busy_line": "the machine is busy" in r.stdout + r.stderr, "tail": (r.stdout + r.stderr)[-1500:]}


@contextlib.contextmanager
def busy(n: int):
    """``n`` processes that keep a core busy each, ended after the block."""
    ps = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield ps
    finally:
        for p in ps:
            p.kill()
        for p in ps:
            p.wait()


def files(folder: Path, chosen, slips: int = 3) -> list[Path]:
    from attnlab.lab import levels

    out = []
    for name in chosen:
        lv = levels.find(name)
        for slip in (None, *SLIPS[lv.name][:slips]):
            out.append(write(folder, lv.name, slip))
    return out


def run(paths: list[Path], busy_n: int = 0, at_once: int = 1, args=(), say=None) -> list[dict]:
    """Check every file of ``paths`` (``at_once`` at a time), beside ``busy_n`` busy processes; the rows in order."""
    with busy(busy_n):
        if busy_n:
            time.sleep(5)  # the load average follows the busy processes
        with ThreadPoolExecutor(max(1, at_once)) as pool:
            rows = []
            for r in pool.map(lambda p: check(p, args), paths):
                rows.append(r)
                if say is not None:
                    say(r)
            return rows


def row(r: dict) -> str:
    """One check as a line of the table."""
    return (f"{r['file']:28s} exit {r['code']}  {','.join(r['causes'][:2]) or '-':40s} wall {r['wall_s']:7.1f} s  "
            f"kept {r['seconds'] or 0:7.1f} s  load {r['load']}" + ("  [busy line]" if r["busy_line"] else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--busy", type=int, default=0)
    p.add_argument("--at-once", type=int, default=1)
    p.add_argument("--levels", default="1,2,3,4,5,6,7")
    p.add_argument("--slips", type=int, default=3)
    p.add_argument("--folder", default="/tmp/attnlab-stress")
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="pass --quick to every check")
    a = p.parse_args(argv)
    paths = files(Path(a.folder), a.levels.split(","), a.slips)
    rows = run(paths, a.busy, a.at_once, ("--quick",) if a.quick else (), say=lambda r: print(row(r), flush=True))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
