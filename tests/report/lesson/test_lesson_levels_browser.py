"""The lab's path seen in Chromium: a learner's checks of each level's solution, kept as `attnlab lab check` keeps
them, and the page ticking each level from those files only -- at 1280x800 and 390x844.

The checks are real (tests/labchecks.py `leveled`: the attention levels graded on a few small cases of the grid,
their memory given; the module, the backward and the decoder graded and measured in this process). The folder is
this test's own; the page is built as `attnlab lesson --quick` builds it, from what is in that folder.
"""

import json
import re

import pytest

import attnlab.report.lesson as lesson_page
from attnlab.lab import levels, store
from attnlab.lesson import collect
from tests.labchecks import leveled

from .conftest import BENCH, TIE, TRAIN, tiny_checkpoint


def at(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000000+00:00"


def _items(page) -> list[str]:
    items = page.locator("ol.levels > li.level")
    assert items.count() == 6
    return items.all_inner_texts()


@pytest.mark.slow
def test_the_path_ticks_each_level_from_the_learners_own_checks(browser, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    for name, data in (("bench", BENCH), ("train", TRAIN), ("tie_kv", TIE)):
        (out / f"{name}.json").write_text(json.dumps(data))
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")
    names = [lv.name for lv in levels.LEVELS]  # loops, matrix, module, flash, backward, decode
    for i, name in enumerate(names):
        store.save(leveled(name, time=at(i)), out)
    store.save(leveled("flash", slip="last-block-dropped", time=at(9)), out)  # flash's newest check fails
    kept = sorted(p.name for p in (out / store.FOLDER).glob("*.json"))
    assert len(kept) == 7 and all(p.startswith(("attention_lab-", "lab_")) for p in kept)

    data = collect(out, quick=True)
    assert len(data.lab) == 7  # the page reads the folder's checks, and nothing else
    path = lesson_page.build(data, out / "lesson.html")
    for width, height in ((1280, 800), (390, 844)):
        page = browser.new_context(viewport={"width": width, "height": height}).new_page()
        page.set_default_timeout(5000)
        errors = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        texts = _items(page)
        ticks = [t.strip()[0] for t in texts]
        assert ticks == ["✓", "✓", "✓", "✗", "✓", "✓"], texts
        for lv, t in zip(levels.LEVELS, texts, strict=True):
            assert f"from {lv.filename}:{lv.function}, checked at" in t, t
        assert "failed" in texts[3] and "drops the last, partial block" in texts[3]  # the newest flash check's cause
        assert "memory grew as T^2.00" in texts[1] and "the library's" in texts[2]
        head = page.inner_text("p.levels-head")
        # the next step: level 4 is begun and failing, so the learner's own file is to fix, not a new start
        assert "5 of 6 levels done" in head and "fix lab_flash.py:flash_forward and run attnlab lab check " \
            "lab_flash.py again" in head and "lab start" not in head
        assert page.locator("ol.levels figure.level-curve svg polyline").count() >= 6  # the curves are drawn
        # each curve says the numbers it is drawn through (a sparkline has no axes): the lengths and the memory
        matrix = page.inner_text("ol.levels li[data-level=matrix] figure.level-curve figcaption")
        assert re.search(r"T = 128, 512, 2048; yours [\d.]+ (KiB|MiB) → [\d.]+ (KiB|MiB) → [\d.]+ (KiB|MiB)", matrix), \
            matrix
        module = page.inner_text("ol.levels li[data-level=module] figure.level-curve figcaption")
        assert re.search(r"steps 1–\d+; your loss \d\.\d{3} → \d\.\d{3}", module), module
        page.locator("ol.levels li[data-level=backward] details.starter summary").click()
        assert "def flash_backward(q, k, v, out, lse, dout, block=64):" in page.inner_text(
            "ol.levels li[data-level=backward] details.starter")
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing runs off the side
        page.locator("#lab-levels").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / f"levels-{width}.png"))
        assert errors == []
