"""The --model lesson page in Debian's chromium (Playwright, file://): no console errors, no network, and the head
view shows the statistics computed in Python. Screenshots at desktop and phone size go to the test's folder."""

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


@pytest.fixture
def model_page(model_lesson):
    r, out, _ = model_lesson  # the model page the page tests read (tests/conftest.py)
    assert r.returncode == 0, r.stderr
    return out / "lesson-tiny-llama.html", json.loads((out / "lesson-tiny-llama.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("size", [(1280, 800), (390, 844)])
def test_model_page_in_chromium(browser, model_page, size, tmp_path):
    path, data = model_page
    page = browser.new_context(viewport={"width": size[0], "height": size[1]}).new_page()
    page.set_default_timeout(5000)
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(path.resolve().as_uri())
    first = data["texts"][0]
    best = (first["heads"]["best_layer"], first["heads"]["best_head"])
    cards = page.locator(".hv-card")
    assert cards.count() == len(first["stats"]) * len(first["stats"][0])
    for layer in first["stats"]:  # every head's label and numbers, as Python measured them
        for s in layer:
            card = page.locator(f".hv-card[data-layer='{s['layer']}'][data-head='{s['head']}']")
            text = card.inner_text()
            assert s["label"] in text and f"previous {s['previous']:.2f}" in text
            assert f"entropy {s['entropy']:.2f} nats" in text
    found = page.locator(".hv-card.found-head")
    assert found.count() == 1 and found.get_attribute("data-layer") == str(best[0])
    said = f"Layer {best[0]}, head {best[1]} puts {first['heads']['best_weight']:.3f}"
    assert said in page.inner_text("#found-text")
    assert page.locator("#tokstrip .tok").count() == len(first["heads"]["tokens"])
    assert page.locator("#tokstrip .tok.piece").count() >= 1  # "animal" in pieces, drawn as such
    page.screenshot(path=str(tmp_path / f"model-{size[0]}.png"), full_page=True)
    # the second text: its own tokens; no "it -> animal" claimed on it
    page.select_option("#text", "1")
    assert page.locator("#tokstrip .tok").count() == len(data["texts"][1]["heads"]["tokens"])
    assert "nothing is measured here" in page.inner_text("#found-text")
    page.locator(".hv-card[data-layer='1'][data-head='2'] .hv-pick").click()
    assert page.locator("#layer").input_value() == "1" and page.locator("#head").input_value() == "2"
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]  # nothing runs off the side
    print(f"{size}: {len(errors)} console errors, {len(requests) - 1} requests besides the page; screenshots in "
          f"{tmp_path}")
    assert errors == [] and requests == [path.resolve().as_uri()]
