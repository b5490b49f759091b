"""The lesson page's figures and tables fit its column in Chromium at both sizes the guide names (1280x800 and
390x844): every figure is drawn whole, no wider than its box, with nothing to scroll sideways (on a phone they were
kept at 80 % of their natural width and scrolled in boxes of 354 px, so a wide figure was never seen whole); a
table fits by wrapping its cells, and one that cannot scrolls with a line above it that says so."""

import pytest

from .test_lesson_layout_browser import SIZES, _page

# Each figure's picture (an image, a chart, a canvas): its width, its box's (the figure's content, or the column's),
# and the first box above it that scrolls sideways because of it (null: none).
FIGURES = """() => {
  const scroller = (e) => { for (let a = e.parentElement; a; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if ((o === 'auto' || o === 'scroll') && a.scrollWidth > a.clientWidth + 1)
        return a.tagName.toLowerCase() + '.' + a.className + ` (${a.scrollWidth} px in ${a.clientWidth} px)`; }
    return null; };
  const out = [];
  for (const e of document.querySelectorAll('figure img, figure svg, figure canvas')) {
    const r = e.getBoundingClientRect();
    if (r.width === 0) continue;
    const fig = e.closest('figure'), cs = getComputedStyle(fig);
    const inner = fig.getBoundingClientRect().width - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const column = document.querySelector('main').clientWidth;
    out.push({what: (e.getAttribute('alt') || e.tagName).slice(0, 50), width: r.width, box: Math.min(inner, column),
              natural: Number(e.getAttribute('width')) || r.width, scrolls: scroller(e)});
  }
  return out;
}"""
# Each table that needs more room than it has, and whether the line that says so is above it.
TABLES = """() => Array.from(document.querySelectorAll('table, .matwrap')).filter(
    (e) => !(e.tagName === 'TABLE' && e.parentElement.classList.contains('matwrap'))
      && e.getBoundingClientRect().width > 0 && e.scrollWidth > e.clientWidth + 1).map((e) => ({
    what: e.textContent.trim().slice(0, 50), width: e.scrollWidth, box: e.clientWidth,
    hinted: !!(e.previousElementSibling && e.previousElementSibling.classList.contains('scroll-hint')
               && e.previousElementSibling.getBoundingClientRect().height > 0)}))"""


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES)
def test_every_figure_is_seen_whole_and_every_table_fits_or_says_it_scrolls(browser, lesson, size):
    w, h = size
    page, url, errors, requests = _page(browser, lesson, size)
    figures = page.evaluate(FIGURES)
    page.screenshot(path=f"/tmp/attnlab-lesson-{w}x{h}.png", full_page=True)
    print(f"{w}x{h}: {len(figures)} figures, " + ", ".join(f"{f['width']:.0f}/{f['box']:.0f}" for f in figures))
    assert len(figures) >= 8  # the bench's, the training's, the sinks' figures and the walk's canvases
    for f in figures:
        assert f["width"] <= f["box"] + 0.5 and f["scrolls"] is None, f
    if w < 600:  # the wide ones scaled down to the column, not cut by it
        assert any(f["natural"] > f["box"] + 100 and f["width"] >= f["box"] - 40 for f in figures)
    wide = page.evaluate(TABLES)
    print(f"{w}x{h}: tables wider than their box: {wide}")
    assert wide == []  # this page's tables all fit, by wrapping their cells
    assert page.evaluate("document.documentElement.scrollWidth") <= w
    assert page.locator(".scroll-hint").count() == 0
    # a table of too many columns to be read narrow scrolls, and a line above it says so
    page.evaluate("""() => { const t = document.createElement('table'); t.id = 'many';
        t.innerHTML = '<tr>' + Array.from({length: 40}, (_, i) => `<td>column&nbsp;${i}</td>`).join('') + '</tr>';
        document.querySelector('#results').append(t); window.dispatchEvent(new Event('resize')); }""")
    wide = page.evaluate(TABLES)
    assert [t["hinted"] for t in wide] == [True], wide
    assert page.evaluate("document.documentElement.scrollWidth") <= w  # it scrolls inside itself, not the page
    assert errors == [] and [u for u in requests if not u.startswith("data:")] == [url]


@pytest.mark.slow
def test_on_a_phone_a_tap_enlarges_a_figure_to_its_natural_width_at_least(browser, lesson):
    page, _, errors, _ = _page(browser, lesson, (390, 844))
    img = page.locator("figure.zoom img").last
    natural = float(img.get_attribute("width"))
    before = img.bounding_box()["width"]
    assert before < natural  # drawn whole in the column, its text small ...
    img.click()
    assert img.bounding_box()["width"] >= natural - 0.5  # ... and readable enlarged, scrolled in its own view
    page.screenshot(path="/tmp/attnlab-lesson-390x844-enlarged.png")
    img.click()
    assert img.bounding_box()["width"] == pytest.approx(before, abs=1)
    assert errors == []
