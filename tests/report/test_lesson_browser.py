"""The lesson page in a real browser: Debian's chromium, driven by Playwright, opened from file://.

Never a downloaded browser: Playwright is pointed at /usr/bin/chromium. Without it the test is skipped
with a message -- unless the environment variable CI is set, where a missing chromium is a failure
(`make test` installs it).
"""

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
RIGHT = [1, 2, 0, 3, 0]  # the test's right answers, as in attnlab.report.lesson.sections.QUIZ


def _need_browser():
    missing = None
    if not CHROMIUM.exists():
        missing = f"no {CHROMIUM}: install Debian's chromium (apt-get install chromium) to run the browser test"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "the playwright Python package is not installed (pip install -e '.[dev]')"
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI is set and {missing}")
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def browser():
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def test_the_answers_here_match_the_page():
    from attnlab.report.lesson.sections import QUIZ

    assert [right for _, _, right, _ in QUIZ] == RIGHT


def test_lesson_page_in_chromium(browser, lesson, tmp_path):
    r, out = lesson
    assert r.returncode == 0, r.stderr
    url = (out / "lesson.html").resolve().as_uri()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(5000)
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(url)
    ind = page.locator("#stage-ind")
    title = page.locator("#stage-title")

    # every stage with the buttons, then back with the arrow keys
    assert ind.inner_text() == "1/6"
    titles = [title.inner_text()]
    for n in range(2, 7):
        page.click("#next")
        assert ind.inner_text() == f"{n}/6"
        titles.append(title.inner_text())
    assert len(set(titles)) == 6 and "Softmax" in titles[4]
    assert page.get_attribute("#next", "aria-disabled") == "true"  # the last stage: Next is off
    page.locator("body").focus()
    page.keyboard.press("ArrowRight")  # past the end: stays
    assert ind.inner_text() == "6/6"
    for n in range(5, 0, -1):
        page.keyboard.press("ArrowLeft")
        assert ind.inner_text() == f"{n}/6"
    page.keyboard.press("ArrowRight")
    assert ind.inner_text() == "2/6"

    # keyboard only: Tab to a control, Enter presses it
    page.focus("#next")
    page.keyboard.press("Enter")
    assert ind.inner_text() == "3/6"

    # a box and its explanation
    page.click("[data-box=k]")
    assert "Key K" in page.locator("#explain").inner_text()
    page.focus("[data-box=mask]")
    page.keyboard.press("Enter")
    assert "−∞" in page.locator("#explain").inner_text()

    # a heatmap shows the value under the pointer, and reads out cells from the keyboard
    canvas = page.locator("#stage-figs canvas").first
    box = canvas.bounding_box()
    canvas.hover(position={"x": box["width"] - 3, "y": box["height"] - 3})  # the bottom-right cell
    assert page.locator("#tip").is_visible() and ":" in page.locator("#tip").inner_text()
    canvas.focus()
    before = page.locator("#stage-figs .readout").first.inner_text()
    page.keyboard.press("ArrowUp")
    assert page.locator("#stage-figs .readout").first.inner_text() != before
    assert ind.inner_text() == "3/6"  # arrows on a heatmap move its cursor, not the stage
    page.uncheck("#hl-it")
    page.check("#hl-it")

    # the head view: every head of every layer
    assert page.locator("#headview canvas").count() == 4

    # a hard question's reveal
    hard = page.locator("#hard-1")
    assert hard.get_attribute("open") is None
    page.click("#hard-1 summary")
    assert hard.get_attribute("open") is not None and "nats" in hard.inner_text()

    # the test, failing path: everything wrong
    def answer(choices):
        page.click("#quiz-reset")
        for qi, oi in enumerate(choices):
            if oi is not None:
                page.check(f"#quiz-q{qi} input[value='{oi}']")
        page.click("#quiz-submit")
        return page.locator("#quiz-result").inner_text()

    res = answer([(a + 1) % 4 for a in RIGHT])
    assert "0/5" in res and "not passed" in res
    assert page.locator(".quiz-q.wrong").count() == 5 and page.locator(".quiz-q label.answer").count() == 5
    assert "the answer is" in page.locator("#quiz-q0 .quiz-feedback").inner_text()
    # passing path, right at the pass mark: 3 of 5, one left unanswered
    res = answer(RIGHT[:3] + [(RIGHT[3] + 1) % 4, None])
    assert "3/5" in res and "passed" in res and "not passed" not in res
    assert page.locator(".quiz-q.right").count() == 3
    assert "Not answered" in page.locator("#quiz-q4 .quiz-feedback").inner_text()
    # 2 of 5 is below the mark
    res = answer(RIGHT[:2] + [None, None, None])
    assert "2/5" in res and "not passed" in res
    # choosing an answer with the keyboard alone
    page.click("#quiz-reset")
    page.focus("#quiz-q2 input[value='0']")
    page.keyboard.press("Space")
    assert page.is_checked("#quiz-q2 input[value='0']")

    # readable at phone width: nothing wider than the screen
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(300)  # the page redraws its heatmaps after a resize
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shots = Path(os.environ.get("ATTNLAB_SCREENSHOTS", tmp_path))
    page.evaluate("document.getElementById('walk').scrollIntoView()")
    page.screenshot(path=str(shots / "lesson-phone.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.wait_for_timeout(300)
    page.evaluate("document.getElementById('walk').scrollIntoView()")
    page.screenshot(path=str(shots / "lesson-desktop.png"))

    assert errors == []
    assert [u for u in requests if not u.startswith("data:")] == [url]  # the page itself, nothing else
