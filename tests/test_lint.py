"""The linter sees every file of the project.

ruff skips folders with some names by default (``dist``, ``build``, ``venv`` and others), and a package
folder named that way is then never linted, without a word. This test asks ruff which files it would
check and holds that list to the ``.py`` files on disk under src/, tests/ and benchmarks/.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "benchmarks")


def _ruff() -> str:
    """ruff from the interpreter's own environment (next to sys.executable), else the one on PATH."""
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (it comes with the dev extras)")
    return found


def _on_disk() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
            if "__pycache__" not in p.parts}


def _linted() -> set[str]:
    out = subprocess.run([_ruff(), "check", "--show-files", *FOLDERS], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {Path(line).resolve().relative_to(ROOT).as_posix() for line in out.stdout.splitlines()
            if line.strip().endswith(".py")}


def test_ruff_checks_every_python_file():
    on_disk, linted = _on_disk(), _linted()
    assert len(on_disk) > 100, f"too few files found on disk under {FOLDERS}: {len(on_disk)}"
    skipped, extra = sorted(on_disk - linted), sorted(linted - on_disk)
    assert not skipped and not extra, f"ruff skips {skipped}; ruff lists files not on disk: {extra}"


def test_make_lint_names_every_folder():
    makefile = (ROOT / "Makefile").read_text()
    line = next(line for line in makefile.splitlines() if "ruff check" in line)
    assert line.split("ruff check", 1)[1].split() == list(FOLDERS), line
