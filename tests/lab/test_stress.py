"""The lab's verdicts do not depend on the load (issue 54): the same files checked alone, beside 8 busy processes and
4 at a time give the same verdict and the same named cause every time -- a right file passes, a slip fails and is
named -- and each check keeps, as the time it took, the wall time its command took.

The whole table (every level's right file and three of its slips) is ``python -m tests.lab.stress`` (minutes an
hour); this test, in ``make test-long``, runs the part of it that fits about four minutes of wall on two cores:
a right file whose verdict rests on a measurement a busy machine used to move (level 2's memory growth: a right file
read T^1.74 once) and a slip of a level with cases of its own, each within its budget (level 5), with --quick; four
at once is each of them twice. Beside 8 busy processes a check takes about five times as long as alone on two idle
cores (ten times where others' work is there too), so this is what fits.
"""

from __future__ import annotations

import pytest

from tests.lab import stress

FILES = [("matrix", None), ("backward", "d-wrong")]
BUSY = 8  # busy processes beside the checks
AT_ONCE = 4  # checks at a time


def _verdict(r: dict) -> tuple:
    return r["passed"], r["causes"][:1]


def _said(r: dict) -> str:
    """The check's verdict lines (its level line, its grading and its growth), for a failing assertion to show."""
    said = ("Level", "Graded", "  growth", "  T =")
    return "\n".join(line for line in r["tail"].splitlines() if line.startswith(said))


@pytest.mark.long
@pytest.mark.slow
def test_the_same_files_give_the_same_verdicts_alone_busy_and_together(tmp_path):
    paths = [stress.write(tmp_path, level, slip) for level, slip in FILES]
    say = lambda r: print(stress.row(r), flush=True)  # noqa: E731
    alone = stress.run(paths, args=("--quick",), say=say)
    busy = stress.run(paths, busy_n=BUSY, args=("--quick",), say=say)
    twice = [stress.write(tmp_path / "again", level, slip) for level, slip in FILES]
    both = stress.run(paths + twice, at_once=AT_ONCE, args=("--quick",), say=say)
    together = both[:len(paths)]
    assert [_verdict(r) for r in both[len(paths):]] == [_verdict(r) for r in together]
    table = "\n".join(f"{what:9s} {stress.row(r)}" for what, rows in (("alone", alone), ("busy", busy),
                                                                      ("together", together)) for r in rows)
    print(table)
    for (level, slip), a, b, c in zip(FILES, alone, busy, together, strict=True):
        assert a["passed"] == (slip is None), (level, slip, _said(a))
        if slip is not None:
            assert a["causes"][:1] == [slip], (level, slip, a["causes"], a["tail"])  # the slip, named first
        assert _verdict(b) == _verdict(a), (level, slip, "beside busy processes", b["tail"])
        assert _verdict(c) == _verdict(a), (level, slip, "four at a time", c["tail"])
        for r in (a, b, c):
            assert "endless loop" not in r["tail"] and not r["busy_line"], r["tail"]
            assert 0.8 * r["wall_s"] <= r["seconds"] <= r["wall_s"] + 0.1, (r["seconds"], r["wall_s"])
