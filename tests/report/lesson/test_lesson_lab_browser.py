"""The lab as a learner does it, seen in Chromium: a wrong function, fixed, a second function that fails, the
starter checked again -- the page rebuilt and read after each check, its checklist right at every step.

The folder is this test's own (bench, train, tie-kv and a checkpoint, made up and small), and what is in it is
asserted before each build. The checks are graded for real with verify's rule on a few small cases of the lab's
grid (tests/labchecks.py) and kept as `attnlab lab check` keeps them (the store); only their time and memory
measurements, which a full check takes minutes over, are given. The page is built as `attnlab lesson --quick`
builds it; after the first build only the checklist's input changes, so the figures drawn for it are reused.
"""

import json
import math
import time
from dataclasses import replace

import pytest
import torch

import attnlab.report.lesson as lesson_page
from attnlab.lab import starter, store
from attnlab.lesson import collect, sources
from tests.labchecks import graded

from .conftest import BENCH, TIE, TRAIN, tiny_checkpoint
from .test_lesson_checklist import OF_1


def _matrix(q, k, v, scale, future):  # the learner's matrix version, with the scale and the mask they chose
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale  # (..., L, S)
    L, S = scores.shape[-2:]
    scores = scores.masked_fill(future(torch.ones(L, S, dtype=torch.bool)), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.to(work)).to(q.dtype)


def unscaled(q, k, v):  # attention_lab.py:my_attention, the first try: the scale forgotten
    return _matrix(q, k, v, 1.0, lambda m: m.triu(1))


def fixed(q, k, v):  # attention_lab.py:my_attention, fixed
    return _matrix(q, k, v, 1 / math.sqrt(q.shape[-1]), lambda m: m.triu(1))


def flipped(q, k, v):  # my_second.py:attention_by_hand: query i sees keys i .. S-1, the future
    return _matrix(q, k, v, 1 / math.sqrt(q.shape[-1]), lambda m: m.tril(-1))


def _folder(tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    for name, data in (("bench", BENCH), ("train", TRAIN), ("tie_kv", TIE)):
        (out / f"{name}.json").write_text(json.dumps(data))
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")
    return out


def _contents(out) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "lesson.html")


def _items(page) -> list[str]:
    items = page.locator("ul.checklist li")
    assert items.count() == 4
    return items.all_inner_texts()


@pytest.mark.slow
def test_the_learners_checks_tick_the_page_from_their_newest_results(browser, tmp_path, monkeypatch):
    t0 = time.perf_counter()
    out = _folder(tmp_path)
    given = ["bench.json", "checkpoints/scale-sqrt.pt", "tie_kv.json", "train.json"]
    assert _contents(out) == given and store.history(out) == []  # nothing of the learner's, nothing from elsewhere
    data = collect(out, quick=True)
    assert data.lab == []
    drawn, real_images = {}, lesson_page.images

    def images(d):  # the figures do not depend on the learner's checks: drawn once, for the first build
        if not drawn:
            drawn.update(real_images(d))
        return drawn

    monkeypatch.setattr(lesson_page, "images", images)
    path = lesson_page.build(data, out / "lesson.html")
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(5000)
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(path.resolve().as_uri())
    texts = _items(page)
    assert [t[0] for t in texts] == ["✗"] * 4 and "nothing of yours checked yet" in page.inner_text("#results")

    kept = []

    def check(fn, file, function, passed, is_given=False):
        """The learner checks ``file:function``; the folder then holds every check so far; the page is rebuilt."""
        r = graded(fn, file, function)
        assert (store.passed(r), r.given) == (passed, is_given), (file, function, r.verify.counts())
        store.save(r, out)
        kept.insert(0, (file, function, passed))
        assert [(c.file, c.function, store.passed(c)) for c in store.history(out)] == kept  # newest first, none lost
        assert len(_contents(out)) == len(given) + len(kept)
        lesson_page.build(replace(data, lab=sources.lab(out)), path)
        page.reload()
        return r, _items(page), page.inner_text("#results")

    # 1. the first try forgets the scale: it fails, and its measurements tick nothing
    wrong, texts, results = check(unscaled, "attention_lab.py", "my_attention", passed=False)
    assert [t[0] for t in texts] == ["✗", "✗", "✗", "✗"] and "0 of 4 done" in results
    assert "attention_lab.py:my_attention, checked at" in texts[0] and "graded cases failed" in texts[0]
    assert "likely cause: the output is attention without the scale" in texts[0]
    assert all("only a passing function's measurements count" in t and "T^" not in t for t in texts[1:3])
    assert not any("Your newest check" in t for t in texts)  # every item is from the newest check itself

    # 2. fixed: the same file and function, now passing; the failing check is kept, and set aside
    right, texts, results = check(fixed, "attention_lab.py", "my_attention", passed=True)
    assert [t[0] for t in texts] == ["✓", "✓", "✓", "✗"] and "3 of 4 done" in results
    source = "from attention_lab.py:my_attention, checked at"
    assert all(source in t for t in texts[:3]) and f"every one of its {len(right.verify.rows)} graded cases" in texts[0]
    assert "T^2.00" in texts[2] and "the machine's run" in texts[3]

    # 3. a second function, in another file, fails: the passing one still counts, and the newest says it failed
    _, texts, results = check(flipped, "my_second.py", "attention_by_hand", passed=False)
    assert [t[0] for t in texts] == ["✓", "✓", "✓", "✗"] and "3 of 4 done" in results
    assert all(source in t for t in texts[:3])
    assert all(f"{OF_1}my_second.py:attention_by_hand at" in t and t.endswith(", failed.")
               for t in texts[:3])

    # 4. the starter's attention_by_hand checked again as it came: the same function name replaces nothing
    _, texts, results = check(starter.attention_by_hand, "attention_lab.py", "attention_by_hand", passed=False,
                              is_given=True)
    assert [t[0] for t in texts] == ["✓", "✓", "✓", "✗"] and "(4 checks kept in lab-checks/)" in results
    assert all(source in t for t in texts[:3])
    assert all(f"{OF_1}attention_lab.py:attention_by_hand at" in t and "(the starter's code as it "
               "came), failed." in t for t in texts[:3])
    assert "my_second" not in " ".join(texts)  # an older failing check is neither the source nor the newest

    assert errors == []
    assert set(u for u in requests if not u.startswith("data:")) == {path.resolve().as_uri()}  # nothing fetched
    print(f"the replay took {time.perf_counter() - t0:.1f} s")
