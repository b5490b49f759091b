"""The lab's path seen in Chromium: a learner's checks of each level's solution, kept as `attnlab lab check` keeps
them, and the page ticking each level from those files only -- at 1280x800 and 390x844.

The checks are real (tests/labchecks.py `leveled`: the attention levels graded on a few small cases of the grid,
their memory given; the module, the backward and the decoder graded and measured in this process). The folder is
this test's own; the page is built as `attnlab lesson --quick` builds it, from what is in that folder.
"""

import json
import re
from types import SimpleNamespace

import pytest

import attnlab.report.lesson as lesson_page
from attnlab.lab import levels, store
from attnlab.lesson import collect
from attnlab.report.lesson import levels as levels_page
from tests.labchecks import leveled

from .conftest import BENCH, TIE, TRAIN, tiny_checkpoint


def at(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000000+00:00"


def _items(page) -> list[str]:
    items = page.locator("ol.levels > li.level")
    assert items.count() == len(levels.LEVELS)
    return items.all_inner_texts()


# seven lab checks, then the page in chromium; one level's tick from a check is in make test (test_lesson_lab_browser)
@pytest.mark.long
@pytest.mark.slow
def test_the_path_ticks_each_level_from_the_learners_own_checks(browser, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    for name, data in (("bench", BENCH), ("train", TRAIN), ("tie_kv", TIE)):
        (out / f"{name}.json").write_text(json.dumps(data))
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")
    names = [lv.name for lv in levels.LEVELS]  # loops, matrix, module, flash, backward, decode, triton
    for i, name in enumerate(names):
        store.save(leveled(name, time=at(i)), out)
    store.save(leveled("flash", slip="last-tile-dropped", time=at(9)), out)  # flash's newest check fails
    kept = sorted(p.name for p in (out / store.FOLDER).glob("*.json"))
    assert len(kept) == len(names) + 1 and all(p.startswith(("attention_lab-", "lab_")) for p in kept)

    data = collect(out, quick=True)
    assert len(data.lab) == len(names) + 1  # the page reads the folder's checks, and nothing else
    path = lesson_page.build(data, out / "lesson.html")
    for width, height in ((1280, 800), (390, 844)):
        page = browser.new_context(viewport={"width": width, "height": height}).new_page()
        page.set_default_timeout(5000)
        errors = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        texts = _items(page)
        ticks = [t.strip()[0] for t in texts]
        assert ticks == ["✓", "✓", "✓", "✗", "✓", "✓", "✓"], texts
        for lv, t in zip(levels.LEVELS, texts, strict=True):
            assert f"from {lv.filename}:{lv.function}, checked at" in t, t
        assert "failed" in texts[3] and "drops the last, partial tile" in texts[3]  # the newest flash check's cause
        assert "memory grew as T^2.00" in texts[1] and "the library's" in texts[2]
        head = page.inner_text("p.levels-head")
        # the next step: level 4 is begun and failing, so the learner's own file is to fix, not a new start
        assert "6 of 7 levels done" in head and "fix lab_flash.py:flash_forward and run attnlab lab check " \
            "lab_flash.py again" in head and "lab start" not in head
        assert page.locator("ol.levels figure.level-curve svg polyline").count() >= 6  # the curves are drawn
        _axes_and_numbers(page)
        module = page.inner_text("ol.levels li[data-level=module] figure.level-curve figcaption")
        assert re.search(r"steps 1–\d+; your loss \d\.\d{3} → \d\.\d{3}", module), module
        page.locator("ol.levels li[data-level=backward] details.starter summary").click()
        assert "def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):" in \
            page.inner_text(
            "ol.levels li[data-level=backward] details.starter")
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing runs off the side
        page.locator("#lab-levels").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / f"levels-{width}.png"))
        assert errors == []


def _axes_and_numbers(page) -> None:
    """Each chart has both axes, named, with ticks in the quantity's units; each level's lengths are listed with
    their time, memory and the load they were timed at, or why not; the check's own time is said."""
    matrix = "ol.levels li[data-level=matrix] "
    charts = page.locator(matrix + "svg.chart")
    assert charts.count() == 2  # time and memory against T
    for i, unit in enumerate((r"(µs|ms|s)$", r"(B|KiB|MiB|GiB)$")):
        ticks = charts.nth(i).locator("text.tick").all_text_contents()  # (SVG text has no innerText)
        names = charts.nth(i).locator("text.axis-name").all_text_contents()
        assert {"128", "512", "2048"} <= set(ticks), ticks  # the lengths on the T axis
        assert sum(bool(re.search(r"^[\d.]+ " + unit, t)) for t in ticks) >= 2, ticks  # values on the other
        assert names[0].startswith("T, the sequence length") and ("time" in names[1] or "memory" in names[1])
    rows = page.locator(matrix + "table.level-times tbody tr").all_inner_texts()
    assert [r.split()[0] for r in rows] == ["128", "512", "2048"], rows
    assert all(re.search(r"(ms|s)\s+[\d.]+ (KiB|MiB)\s+1\.5$", r) for r in rows), rows  # time, memory, load
    note = page.inner_text(matrix + "p.level-note")
    assert "Timed on 1 torch thread" in note and "1-minute load average" in note
    assert re.search(r"checked at [\d:]+ UTC \(the check took [\d.]+ (ms|s)\)", page.inner_text(matrix)), \
        page.inner_text(matrix)
    for level, named in (("loops", ("128", "512", "2048")), ("flash", ("512", "1024", "2048", "4096", "8192"))):
        rows = page.locator(f"ol.levels li[data-level={level}] table.level-times tbody tr").all_inner_texts()
        assert [r.split()[0] for r in rows] == list(named), rows  # every length the level names is there


@pytest.mark.slow
def test_a_length_not_timed_says_why_on_the_page(browser, tmp_path):
    """Level 1 timed at 128 and 512, 2048 skipped with its estimate; a check kept without a length says so."""
    from dataclasses import replace

    from attnlab.lab.result import Timing

    out = tmp_path / "out"
    store.save(leveled("loops", time=at(1)), out)
    r = leveled("matrix", time=at(2))
    r.timings = r.timings[:2]  # kept by an attnlab that left T = 2048 out without a word
    store.save(r, out)
    loops = store.history(out)[1]
    skipped = ("estimated 131 s a call (from T = 512, growing like T²), over the 20 s budget; --max-seconds 165 lets "
               "it run")
    loops.timings = [*loops.timings[:2], Timing(2048, skipped=skipped)]
    store.save(replace(loops, time=at(3)), out)
    html = levels_page.path(SimpleNamespace(lab=store.history(out)))
    path = tmp_path / "levels.html"
    path.write_text(f"<!doctype html><meta charset=utf-8><style>{lesson_page._asset('lesson.css')}</style>{html}")
    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    page.goto(path.resolve().as_uri())
    loops_rows = page.locator("li[data-level=loops] table.level-times tbody tr").all_inner_texts()
    matrix_rows = page.locator("li[data-level=matrix] table.level-times tbody tr").all_inner_texts()
    print(loops_rows, matrix_rows)
    assert loops_rows[2].startswith("2048") and "estimated 131 s a call" in loops_rows[2]
    assert matrix_rows[2].startswith("2048") and "did not say why" in matrix_rows[2]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.locator("li[data-level=loops]").screenshot(path=str(tmp_path / "loops-390.png"))
