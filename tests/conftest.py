import os
from pathlib import Path

import pytest
import torch

from tests.costs import pytest_addoption, pytest_configure  # noqa: F401 -- each test's CPU time against its mark
from tests.helpers import cli

# Tests check numbers, not speed: one thread avoids thread hand-off costs on the many tiny tensors here.
torch.set_num_threads(1)
# The flash form's tile sizes are the defaults here, whatever `attnlab tune` cached on this machine (the child
# processes the CLI tests start inherit it).
os.environ["ATTNLAB_TILES"] = "off"


@pytest.fixture
def tiles_cache(tmp_path, monkeypatch):
    """A tile-size cache of this test's own (ATTNLAB_TILES), read afresh: where `attnlab tune` writes and the flash
    form reads."""
    from attnlab.kernels import tuned

    path = tmp_path / "tiles.json"
    monkeypatch.setenv("ATTNLAB_TILES", str(path))
    tuned._LOADED.clear()
    yield path
    tuned._LOADED.clear()


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m attnlab ARGS` in a subprocess; returns CompletedProcess (text)."""

    def run(*args, timeout=300, env=None):
        return cli(*args, cwd=tmp_path, env=env, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def data():
    """The training corpus the train tests share: Python's standard library, its first 200,000 characters."""
    from attnlab.train import corpus

    return corpus.stdlib(max_chars=200_000)


@pytest.fixture
def small_bands(monkeypatch):
    """Bands of 4 query rows and batches of a few hundred scores, so that small problems use the band path."""
    from attnlab.kernels import flash_band

    monkeypatch.setattr(flash_band, "BAND_BLOCK_Q", 4)
    monkeypatch.setattr(flash_band, "BATCH_SCORES", 150)  # per head: a few tiles per batch


@pytest.fixture
def round_trip():
    """Check that a result survives JSON through its class: ``round_trip(result)`` or ``round_trip(data, cls)``.

    A result: ``from_dict`` of its JSON equals it, and writes the same JSON back. JSON a command wrote:
    read through ``cls``, it writes the same JSON back (NaN was written as null and reads back as NaN).
    Returns the result read back.
    """
    import json

    def check(result, cls=None):
        if cls is not None:
            back = cls.from_dict(result)
            assert back.to_dict() == result
            return back
        data = json.loads(json.dumps(result.to_dict()))
        back = type(result).from_dict(data)
        assert back == result and back.to_dict() == data
        return back

    return check


@pytest.fixture(scope="session")
def model_lesson(tmp_path_factory):
    """(completed process, out folder, model folder) of `attnlab lesson --model DIR --text tiny.TEXT` on a tiny
    random Llama with a tokenizer trained here: the one build of the model page, for its page and browser tests."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.hf import tiny

    root = tmp_path_factory.mktemp("lesson-model")
    model = tiny.with_tokenizer(root / "tiny-llama")
    out = root / "out"
    return cli("lesson", "--model", model, "--text", tiny.TEXT, "--out", out), out, model


# The browser tests drive Debian's chromium, never a browser Playwright downloads.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _need_browser():
    """Skip without chromium or playwright, with a message -- unless CI is set, where that is a failure (`make test`
    installs chromium)."""
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


@pytest.fixture(scope="session")
def _chromium():
    """One headless chromium for the whole session (started by the first browser test)."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def browser(_chromium):
    """The session's chromium; every context a test opens in it (``browser.new_context(...)``) is closed after it."""
    yield _chromium
    for context in list(_chromium.contexts):
        context.close()


# `make test` runs the suite on two workers (pytest-xdist, --dist loadgroup). The tests that share the session's
# built pages and its one chromium go to one worker, so each is built, and chromium started, once.
PAGE_FIXTURES = {"browser", "lesson", "model_lesson"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The page's tests in one xdist group: one build of each page, one chromium. The cases of a parametrised test
    that a module lists in ``SLOW_CASES`` (by name, ``"test_x[id]"``: those measured over 0.3 s of CPU
    where the test's other cases take hundredths) slow-marked, as ``pytest.param(..., marks=...)`` would where one
    parameter alone does not decide the cost. And, before -m deselects any, the counts the README states
    (tests/test_readme.py), where the whole suite was collected."""
    seen: set[tuple[str, str]] = set()
    for item in items:
        if PAGE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("page"))
        listed = getattr(getattr(item, "module", None), "SLOW_CASES", ())
        if item.name in listed:
            item.add_marker(pytest.mark.slow)
            seen.add((item.module.__name__, item.name))
    tests = Path(__file__).resolve().parent
    if [Path(a).resolve() for a in config.args] in ([tests], [tests.parent]) and not config.getoption("keyword"):
        modules = {item.module for item in items if getattr(item, "module", None) is not None}
        stale = sorted(f"{m.__name__}: {n}" for m in modules for n in getattr(m, "SLOW_CASES", ())
                       if (m.__name__, n) not in seen)
        if stale:  # a renamed test or parameter would leave its case fast-marked, and the list a claim of nothing
            raise pytest.UsageError(f"SLOW_CASES names tests that were not collected: {'; '.join(stale)}")
        marks = [{m.name for m in item.iter_markers()} for item in items]
        config.stash[SUITE] = {"test": sum("long" not in m for m in marks), "long": sum("long" in m for m in marks),
                               "fast": sum("slow" not in m for m in marks)}


SUITE = pytest.StashKey[dict]()  # the suite's counts: make test's, make test-long's and make test-fast's tests


# Each test starts with this process's torch as the suite set it: one thread, float32, gradients on. A test that
# runs code which sets the thread count for its own work (training's estimate, a benchmark) leaves it so for every
# test after it in that worker, where two threads per worker on two cores spin against each other: a test's CPU time
# grew up to 4 times by which tests ran before it. Put back after each, and said where ATTNLAB_TEST_STATE names a file.
def _state() -> tuple:
    return torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()


_START = _state()


@pytest.fixture(autouse=True)
def _torch_state(request):
    yield
    now = _state()
    if now != _START:
        torch.set_num_threads(_START[0])
        torch.set_default_dtype(_START[1])
        torch.set_grad_enabled(_START[2])
        if os.environ.get("ATTNLAB_TEST_STATE"):
            with open(os.environ["ATTNLAB_TEST_STATE"], "a") as f:
                f.write(f"{request.node.nodeid}\t{now}\n")
