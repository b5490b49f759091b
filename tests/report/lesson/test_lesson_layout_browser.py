"""The lesson page's layout in Chromium at both sizes the guide names (1280x800 and 390x844): nothing makes the page
scroll sideways, no caption or card text runs out of its box into a neighbour, and at every step of the walk the
sticky Back/Next bar sits above the step's text, never over it. The checker is shown failing a page with a caption
that spills, so a pass means something."""

import pytest

from .test_lesson_browser import _open

# Every box whose text must stay inside it: figure captions, the head cards and their lines, the live boxes, the
# checklist and the quiz. An element inside something that scrolls on its own (overflow-x auto or scroll: code
# listings, wide tables, enlarged figures) is left out: its overflow is the scroller's, and the page stays put.
SPILLS = """(selector) => {
  const scrolls = (e) => { for (let a = e.parentElement; a; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
  const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const out = [];
  let checked = 0;
  for (const e of document.querySelectorAll(selector)) {
    if (!shown(e) || scrolls(e)) continue;
    checked += 1;
    const box = e.closest('.hv-card, figure, .live, .key-fact, details, section, main') || document.body;
    const r = e.getBoundingClientRect(), b = (box === e ? e.parentElement : box).getBoundingClientRect();
    const label = e.tagName.toLowerCase() + '.' + e.className + ': ' + e.textContent.trim().slice(0, 60);
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')
      out.push(label + ` (text ${e.scrollWidth} px in a box of ${e.clientWidth} px)`);
    else if (r.right > b.right + 1 || r.left < b.left - 1)
      out.push(label + ` (${Math.round(r.left)}-${Math.round(r.right)} px outside ` +
               `${Math.round(b.left)}-${Math.round(b.right)})`);
  }
  return {checked, out};
}"""
TEXT = "figcaption, .hv-card p, .hv-card button, .live p, .live label, .checklist li, .quiz-q label, .cbar"
BAR_OVER_TEXT = """() => {
  const bar = document.querySelector('.controls').getBoundingClientRect();
  const title = document.getElementById('stage-title').getBoundingClientRect();
  return [bar.bottom, title.top, window.innerHeight];
}"""
SIZES = [pytest.param((1280, 800), id="desktop-1280x800"), pytest.param((390, 844), id="phone-390x844")]


def _page(browser, lesson, size):
    w, h = size
    phone = w < 600
    return _open(browser, lesson, viewport={"width": w, "height": h}, is_mobile=phone, has_touch=phone)


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_nothing_spills_and_the_sticky_bar_never_covers_a_steps_text(browser, lesson, size):
    w, h = size
    page, url, errors, requests = _page(browser, lesson, size)
    assert page.evaluate("document.documentElement.scrollWidth") <= w  # no sideways scroll
    assert page.locator(".hv-card").count() >= 2 and page.locator("figcaption").count() >= 2  # there is text to check
    found = page.evaluate(SPILLS, TEXT)
    print(f"{w}x{h}: {found['checked']} boxes checked, {len(found['out'])} spill")
    assert found["checked"] >= 30 and found["out"] == []
    page.evaluate("document.getElementById('walk').scrollIntoView()")
    bar, top, height = page.evaluate(BAR_OVER_TEXT)  # step 1, the walk's start in view: the bar above its title
    assert bar <= top + 0.5, ("step 1", bar, top, height)  # (which may be further down, after the walk's intro)
    steps, seen = 0, {page.inner_text("#stage-title")}
    while page.get_attribute("#next", "aria-disabled") != "true" and steps < 40:
        page.locator("#next").click()
        steps += 1
        title = page.inner_text("#stage-title")
        seen.add(title)
        bar, top, height = page.evaluate(BAR_OVER_TEXT)
        assert bar <= top + 0.5 and top < height, (title, bar, top, height)  # the bar above the step, in sight
        assert page.evaluate("document.documentElement.scrollWidth") <= w, title
        assert page.evaluate(SPILLS, "#stage figcaption, #stage p, #stage li, #stage .cbar")["out"] == [], title
    print(f"{w}x{h}: {steps + 1} steps seen, each with its title below the bar")
    assert steps >= 5 and len(seen) == steps + 1  # each Next showed a step of its own, up to the last
    assert errors == [] and [u for u in requests if not u.startswith("data:")] == [url]


# text a learner types without a space, in the test model's letters: 40 of them, and one 200-letter word (longer than
# the model's context, so the page also quotes the part it reads)
UNBROKEN = {"40 letters": ("thestreetbecauseitwastired" * 2)[:40], "a 200-letter word": ("crossthestreet" * 15)[:200]}


@pytest.mark.slow
def test_long_unbroken_text_wraps_at_390_px(browser, lesson):
    """The head cards' captions quote the word the query reads ("n → “thestreet…”"): a long word broke out of
    the cards and made the phone's page scroll sideways (scrollWidth 521 at 390 px)."""
    page, _, errors, _ = _page(browser, lesson, (390, 844))
    for name, text in UNBROKEN.items():
        assert " " not in text
        page.fill("#text", text)
        page.wait_for_function("(t) => { const read = window.attnlab.current().tokens.join(''); "
                               "return read.length >= 40 && t.endsWith(read); }", arg=text)  # the page has read it
        assert "→" in page.inner_text("#headview"), name  # the caption that quotes the word is shown
        width = page.evaluate("document.documentElement.scrollWidth")
        found = page.evaluate(SPILLS, TEXT + ", .live .text-status, #headview figcaption")
        print(f"390x844, {name}: scrollWidth {width}, {found['checked']} boxes checked, spilled: {found['out']}")
        assert width <= 390 and found["out"] == [], name
    assert errors == []


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_the_model_pages_head_cards_keep_their_text(browser, model_lesson, size):
    """The --model page: a card per head of a real (tiny) Llama, each with its label and statistics."""
    pytest.importorskip("transformers")
    r, out, _ = model_lesson
    w, h = size
    assert r.returncode == 0, r.stderr
    page = browser.new_context(viewport={"width": w, "height": h}, is_mobile=w < 600).new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((out / "lesson-tiny-llama.html").resolve().as_uri())
    cards = page.locator(".hv-card").count()
    found = page.evaluate(SPILLS, TEXT)
    print(f"model page {w}x{h}: {cards} head cards, {found['checked']} boxes checked, {len(found['out'])} spill")
    assert cards >= 4 and found["checked"] >= 2 * cards and found["out"] == []
    assert page.evaluate("document.documentElement.scrollWidth") <= w and errors == []


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_the_layout_checker_finds_a_caption_that_spills(browser, lesson, size):
    """The same checker on the same page with one caption made unbreakable and long: it must report that caption."""
    page, _, _, _ = _page(browser, lesson, size)
    page.evaluate("""() => { const c = document.querySelector('.hv-card p');
        c.style.whiteSpace = 'nowrap'; c.textContent = 'induction head: ' + 'x'.repeat(300); }""")
    spilled = page.evaluate(SPILLS, TEXT)["out"]
    assert len(spilled) == 1 and spilled[0].startswith("p.hv-label: induction head: xxx"), spilled
    # a bar that covers the step's title: the title scrolled to 100 px from the top, under a fixed bar 400 px tall
    page.evaluate("""() => { const b = document.querySelector('.controls');
        b.style.position = 'fixed'; b.style.top = '0'; b.style.height = '400px';
        const t = document.getElementById('stage-title');
        window.scrollTo(0, t.getBoundingClientRect().top + window.scrollY - 100); }""")
    bar, top, _ = page.evaluate(BAR_OVER_TEXT)
    assert bar > top + 0.5, (bar, top)  # the walk's assertion would fail on it
