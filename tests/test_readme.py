"""Every Python snippet in the README and in docs/ runs exactly as written: each as a script of its own (its own
file, globals and folder), one after another in one fresh interpreter (tests/snippet_batch.py) -- what one snippet
leaves in the interpreter (an imported module, torch's global state) the next one meets.

A snippet that starts a torch.distributed process group (or says to run it under torchrun) is run
that way, under torchrun (two processes). A block the page marks ``<!-- not run: REASON -->`` (a
signature, a download) or ``<!-- source: PATH -->`` (a copy of source lines, checked against the file
by tests/kernels/test_triton.py) is not run. Printed output is shown with -s.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:^<!-- (not run|source): ?(.*?) -->\n)?^```python\n(.*?)^```", flags=re.S | re.M)


def _blocks():
    """(page, marker, reason, code) for every Python block of every page."""
    return [(page, m[1], m[2], m[3]) for page in PAGES for m in BLOCK.finditer(page.read_text())]


SNIPPETS = [(page, code) for page, marker, _, code in _blocks() if marker is None]


def _id(snippet) -> str:
    page, code = snippet
    first = code.strip().splitlines()[0]
    return page.stem + ":" + re.sub(r"\W+", "_", first)[:40]


def test_the_readme_and_the_docs_have_python_snippets():
    pages = {page.name for page, _ in SNIPPETS}
    assert len(SNIPPETS) >= 7 and "README.md" in pages
    assert {"api.md", "flash.md", "train.md", "ring.md", "models.md"} <= pages, pages


def test_a_block_that_is_not_run_says_why():
    skipped = [(page.name, reason) for page, marker, reason, _ in _blocks() if marker == "not run"]
    assert skipped and all(reason.strip() for _, reason in skipped), skipped


def _under_torchrun(code: str) -> bool:
    return "init_process_group" in code or "torchrun" in code.splitlines()[0]


# the blocks run under torchrun (two ranks: 10-16 s apiece) are in make test-long; the same launches stay in make test
# through tests/cli/test_train_parallel_cli.py and tests/cli/test_ring_cli.py
TORCHRUN = [pytest.param(s, id=_id(s)) for s in SNIPPETS if _under_torchrun(s[1])]
PLAIN = [s for s in SNIPPETS if not _under_torchrun(s[1])]


@pytest.mark.slow
def test_every_plain_snippet_runs_as_written(tmp_path):
    """The snippets that need no torchrun, each run as a script (``__name__ == "__main__"``, in a folder of its own)
    by one fresh interpreter, one after another (tests/snippet_batch.py): an interpreter and torch's import once, not
    once a snippet."""
    from tests import snippet_batch

    got = snippet_batch.run_all([code for _, code in PLAIN], tmp_path)
    failed = [f"{page.name}: {r['error']}" for (page, _), r in zip(PLAIN, got, strict=True) if r["error"]]
    for (page, code), r in zip(PLAIN, got, strict=True):
        print(f"--- {_id((page, code))}\n{r['output'][-1500:]}")
    assert len(got) == len(PLAIN) and not failed, failed


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.parametrize("snippet", TORCHRUN)
def test_snippet_runs_under_torchrun(snippet, tmp_path):
    page, code = snippet
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node=2", str(script)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, f"{page.name}: " + r.stderr[-3000:]


def test_the_readme_names_every_command_with_flags_that_exist():
    """The command table: one row per command of the CLI, and every flag it shows is one that command takes."""
    from attnlab.cli import COMMANDS, build_parser

    rows = re.findall(r"^\| `attnlab (\w+)([^`]*)`", README.read_text(), flags=re.M)
    assert {name for name, _ in rows} == set(COMMANDS)
    subparsers = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name, usage in rows:
        known = {s for action in subparsers[name]._actions for s in action.option_strings}
        shown = set(re.findall(r"--[a-z][a-z-]*", usage))
        assert shown <= known, f"attnlab {name}: the README shows {sorted(shown - known)}"


def test_the_readme_says_how_many_tests_each_target_runs_and_how_long_they_took(request):
    """The counts of tests the README gives for make test, make test-long and make test-fast are the suite's own,
    counted at collection (tests/conftest.py), and the times it gives are the ones benchmarks/suite_times.py measured
    (benchmarks/results/suite-*.json, the processor's file the README names)."""
    import json

    from tests.conftest import SUITE

    counts = request.config.stash.get(SUITE, None)
    if counts is None:
        pytest.skip("only a part of the suite was collected (a path or -k was given): its counts are not the suite's")
    text = README.read_text()
    said = {target: int(n.replace(",", "")) for target, n in
            re.findall(r"`make (test|test-long|test-fast)` runs ([\d,]+) tests", text)}
    assert said == {"test": counts["test"], "test-long": counts["long"], "test-fast": counts["fast"]}, (said, counts)
    result = re.search(r"measured by `benchmarks/suite_times.py` \((benchmarks/results/suite-[\w-]+\.json)\)", text)
    assert result, "the README names the file the suite's times come from"
    times = json.loads((ROOT / result[1]).read_text())
    for target in ("test", "test-long", "test-fast"):
        m = re.search(rf"`make {target}` runs [\d,]+ tests in (\d+) min (\d+) s", text)
        assert m, target
        assert int(m[1]) * 60 + int(m[2]) == round(times["runs"][target]["seconds"]), (target, times["runs"][target])
