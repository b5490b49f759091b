"""The lesson page in a real browser: Debian's chromium, driven by Playwright, opened from file://.

Never a downloaded browser: the session's ``browser`` (tests/conftest.py) is /usr/bin/chromium. Without it the test
is skipped with a message -- unless the environment variable CI is set, where a missing chromium is a failure
(`make test` installs it).
"""

import os
from pathlib import Path

import pytest

RIGHT = [1, 2, 0, 3, 0, 1, 2]  # the test's right answers, as in attnlab.report.lesson.sections.QUIZ


def test_the_answers_here_match_the_page():
    from attnlab.report.lesson.sections import QUIZ

    assert [right for _, _, right, _ in QUIZ] == RIGHT


TEXTS = ["the animal did not cross the street because it was tired", "it was tired.", "a cat, a rat", "t"]


def _max_diff(a, b) -> float:
    if isinstance(a, list):
        assert len(a) == len(b)
        return max((_max_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return abs(a - b)


def _open(browser, lesson, **context):
    r, out = lesson
    assert r.returncode == 0, r.stderr
    url = (out / "lesson.html").resolve().as_uri()
    page = browser.new_context(**context).new_page()
    page.set_default_timeout(5000)
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(url)
    return page, url, errors, requests


@pytest.mark.slow
def test_the_page_runs_the_same_model_as_python(browser, lesson):
    """window.attnlab.forward and the head statistics, computed by the page's script, against PyTorch."""
    from attnlab.lesson import heads, model

    page, _, errors, _ = _open(browser, lesson, viewport={"width": 1280, "height": 800})
    m = model.trained(lesson[1] / "checkpoints" / "scale-sqrt.pt")
    worst_w = worst_p = worst_s = 0.0
    for text in TEXTS:
        js = page.evaluate("(t) => window.attnlab.forward(t)", text)
        py = model.reference(m, text)
        assert js["tokens"] == py["tokens"] == list(text)
        worst_w = max(worst_w, _max_diff(js["weights"], py["weights"]))
        worst_p = max(worst_p, _max_diff(js["probs"], py["probs"]))
        stats = page.evaluate("(t) => window.attnlab.stats(t)", text)
        for layer_js, layer_w in zip(stats, py["weights"], strict=True):
            for s_js, w in zip(layer_js, layer_w, strict=True):
                s_py = heads.head_stats(list(text), w, layer=s_js["layer"], head=s_js["head"])
                assert (s_js["pattern"], s_js["word"]) == (s_py.pattern, s_py.word), (text, s_js, s_py)
                for key in ("previous", "same", "first", "boundary", "entropy", "word_share"):
                    a, b = s_js[key], getattr(s_py, key)
                    assert (a is None) == (b is None)
                    worst_s = max(worst_s, abs(a - b) if a is not None else 0.0)
    print(f"page JS against PyTorch on {len(TEXTS)} texts: max |weights| diff {worst_w:.2e}, "
          f"max |probs| diff {worst_p:.2e}, max head-statistic diff {worst_s:.2e}")
    assert worst_w <= 1e-4 and worst_p <= 1e-4 and worst_s <= 1e-4
    # the other scales: the same weights, another multiplier
    for scale in ("none", "inv"):
        js = page.evaluate("([t, s]) => window.attnlab.run(t, {scale: s}).layers.map((L) => L.weights.map("
                           "(M) => M.map((r) => Array.from(r))))", [TEXTS[0], scale])
        assert _max_diff(js, model.reference(m, TEXTS[0], scale=scale)["weights"]) <= 1e-4
    assert errors == []


@pytest.mark.slow
def test_lesson_page_in_chromium(browser, lesson, tmp_path):
    page, url, errors, requests = _open(browser, lesson, viewport={"width": 1280, "height": 900})
    ind, title, explain = page.locator("#stage-ind"), page.locator("#stage-title"), page.locator("#explain")

    # every stage with the buttons, each filling the explanation and quoting its line of code
    assert ind.inner_text() == "1/6" and "Token vectors X" in explain.inner_text()
    titles = [title.inner_text()]
    for n in range(2, 7):
        page.click("#next")
        assert ind.inner_text() == f"{n}/6"
        titles.append(title.inner_text())
        assert "nn/causal.py:" in page.locator("#stage-code").inner_text()
    assert len(set(titles)) == 6 and "Softmax" in titles[4] and "Weighted sum" in explain.inner_text()
    assert "more (their weights add up to" in page.locator(".calc").inner_text()  # the rest of the sum, counted
    assert page.get_attribute("#next", "aria-disabled") == "true"  # the last stage: Next is off
    page.locator("body").focus()
    page.keyboard.press("ArrowRight")  # past the end: stays
    assert ind.inner_text() == "6/6"
    for n in range(5, 0, -1):
        page.keyboard.press("ArrowLeft")
        assert ind.inner_text() == f"{n}/6"
    assert "nn/causal.py:" in page.locator("#stage-code").inner_text()  # the projections' lines
    assert "attention_lab.py:" in page.locator("#stage-code").inner_text()  # and the starter's
    page.keyboard.press("ArrowRight")
    assert ind.inner_text() == "2/6"
    page.focus("#next")  # keyboard only: Enter presses a focused control
    page.keyboard.press("Enter")
    assert ind.inner_text() == "3/6"

    # a box goes to its step and explains it
    page.click("[data-box=softmax]")
    assert ind.inner_text() == "5/6" and "Softmax" in explain.inner_text()
    page.click("[data-box=k]")
    assert ind.inner_text() == "1/6" and "Key K" in explain.inner_text()
    page.focus("[data-box=mask]")
    page.keyboard.press("Enter")
    assert ind.inner_text() == "4/6" and "−∞" in explain.inner_text()

    # steps 2-4 share one colour scale: the same range on the colour bar
    bars = []
    for box in ("scores", "scale", "mask"):
        page.click(f"[data-box={box}]")
        bars.append(page.locator("#stage-figs .cbar").first.inner_text())
    assert bars[0] == bars[1] == bars[2] and "one colour scale" in bars[0]

    # a heatmap: the value under the pointer, keyboard reading, masked cells said to be masked
    canvas = page.locator("#stage-figs canvas").first
    box = canvas.bounding_box()
    canvas.hover(position={"x": box["width"] - 3, "y": box["height"] - 3})  # the bottom-right cell
    assert page.locator("#tip").is_visible() and ":" in page.locator("#tip").inner_text()
    canvas.focus()
    readout = page.locator("#stage-figs .readout").first
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")
    for _ in range(60):
        page.keyboard.press("ArrowRight")
    assert "masked" in readout.inner_text()
    assert ind.inner_text() == "4/6"  # arrows on a heatmap move its cursor, not the stage

    # the learner's own sentence: every step, the head view and the prediction follow
    before = page.locator("#stage-text").inner_text()
    page.fill("#text", "it was tired.")
    cur = page.evaluate("window.attnlab.current()")
    assert cur["tokens"] == list("it was tired.") and cur["query"] == 1  # the "t" of "it"
    assert page.locator("#stage-text").inner_text() != before
    assert "After “it was tired.”" in page.locator("#predict-after").inner_text()
    assert page.locator("#predict-list .bar").count() == 8
    top1 = float(page.locator("#predict-list .bar .v").first.inner_text())
    page.fill("#temp", "0.2")
    page.dispatch_event("#temp", "input")
    assert float(page.locator("#predict-list .bar .v").first.inner_text()) > top1  # colder: sharper
    page.fill("#text", "it was tired é")  # a character the model has no token for: refused, not crashed on
    assert "Not in the model's vocabulary" in page.locator("#text-status").inner_text()
    assert "é" in page.locator("#text-status").inner_text()
    assert page.evaluate("window.attnlab.current()")["tokens"] == list("it was tired.")
    page.fill("#text", "it was tired.")

    # the scale and the mask, recomputed live
    peak = "window.attnlab.current().weights[0][0].slice(1).reduce((a, r) => a + Math.max(...r), 0)"
    sharp = page.evaluate(peak)
    page.select_option("#scale", "none")
    assert page.evaluate(peak) > sharp  # no 1/sqrt(d): the softmax saturates
    page.select_option("#scale", "sqrt")
    assert page.evaluate(peak) == pytest.approx(sharp)
    page.uncheck("#causal")
    w = page.evaluate("window.attnlab.current().weights[0][0]")
    assert w[0][-1] > 0 and "mask is off" in page.locator("#stage-text").inner_text()  # the upper triangle fills in
    page.check("#causal")
    assert page.evaluate("window.attnlab.current().weights[0][0][0].slice(1).every((x) => x === 0)")

    # layer and head: the selectors and the head view's buttons
    page.select_option("#head", "1")
    assert "head 1" in title.inner_text()
    page.locator(".hv-card[data-layer='1'][data-head='0'] .hv-pick").click()
    assert "layer 1, head 0" in title.inner_text() and page.input_value("#layer") == "1"
    assert page.locator("#headview canvas").count() == 4
    labels = page.locator(".hv-label").all_inner_texts()
    assert len(labels) == 4 and all("head" in t for t in labels)
    assert all("entropy" in t and "previous" in t for t in page.locator(".hv-stats").all_inner_texts())

    # worked example, code listings, checklist, figures
    assert "1/√4 = 0.5" in page.locator("#byhand").inner_text()
    assert page.locator("details.listing").count() == 2
    assert "you are done when" in page.locator("#results").inner_text()
    assert page.locator("td.skipped").first.is_visible()  # an empty bench cell says why
    assert "loops at T = 128: estimated 97.5 s a call" in page.locator("ol.reasons").inner_text()
    fig = page.locator("figure.zoom").first
    fig.locator("img").click()
    assert "big" in fig.get_attribute("class")
    fig.locator("img").click()
    assert "big" not in fig.get_attribute("class")

    # a hard question's reveal
    hard = page.locator("#hard-1")
    assert hard.get_attribute("open") is None
    page.click("#hard-1 summary")
    assert hard.get_attribute("open") is not None and "nats" in hard.inner_text()

    # the test, failing path: everything wrong, and each answer explained
    def answer(choices):
        page.click("#quiz-reset")
        for qi, oi in enumerate(choices):
            if oi is not None:
                page.check(f"#quiz-q{qi} input[value='{oi}']")
        page.click("#quiz-submit")
        return page.locator("#quiz-result").inner_text()

    res = answer([(a + 1) % 4 for a in RIGHT])
    assert "0/7" in res and "not passed" in res
    assert page.locator(".quiz-q.wrong").count() == 7 and page.locator(".quiz-q label.answer").count() == 7
    feedback = page.locator("#quiz-q0 .quiz-feedback").inner_text()
    assert "the answer is" in feedback and "variance" in feedback  # the answer and why
    # passing path, right at the pass mark: 5 of 7, one wrong and one left unanswered
    res = answer(RIGHT[:5] + [(RIGHT[5] + 1) % 4, None])
    assert "5/7" in res and "passed" in res and "not passed" not in res
    assert page.locator(".quiz-q.right").count() == 5
    assert "Not answered" in page.locator("#quiz-q6 .quiz-feedback").inner_text()
    res = answer(RIGHT[:4] + [None, None, None])  # 4 of 7 is below the mark
    assert "4/7" in res and "not passed" in res
    page.click("#quiz-reset")  # choosing an answer with the keyboard alone
    page.focus("#quiz-q2 input[value='0']")
    page.keyboard.press("Space")
    assert page.is_checked("#quiz-q2 input[value='0']")

    assert errors == []
    assert [u for u in requests if not u.startswith("data:")] == [url]  # the page itself, nothing else


@pytest.mark.slow
def test_lesson_page_on_a_phone(browser, lesson, tmp_path):
    page, url, errors, requests = _open(browser, lesson, viewport={"width": 390, "height": 844}, is_mobile=True,
                                        has_touch=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the screen
    assert not page.locator(".hint").is_visible()  # no keyboard on a touch screen
    page.evaluate("document.getElementById('walk').scrollIntoView()")
    page.click("#next")
    top = page.evaluate("document.getElementById('stage').getBoundingClientRect().top")
    assert 0 <= top < 844  # the stage that changed is on screen
    assert page.locator(".controls").bounding_box()["y"] >= 0  # the step buttons stay at hand (sticky)
    cards = [page.locator(".hv-card").nth(i).bounding_box() for i in range(3)]
    assert cards[0]["y"] == cards[1]["y"] and cards[2]["y"] > cards[0]["y"]  # two heads a row
    assert cards[0]["x"] + cards[0]["width"] <= cards[1]["x"]
    shots = Path(os.environ.get("ATTNLAB_SCREENSHOTS", tmp_path))
    page.screenshot(path=str(shots / "lesson-phone.png"))
    assert errors == []
    assert [u for u in requests if not u.startswith("data:")] == [url]
