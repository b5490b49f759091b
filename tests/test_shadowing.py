"""The tests are one package, ``tests``: no folder or helper of theirs can stand in for an installed package.

Before, pytest put ``tests/`` itself on ``sys.path`` and ``tests/kernels`` was importable as ``kernels``, the name
of Hugging Face's kernel hub package, which transformers imports: every test that loaded a model failed with
"cannot import name 'CUDAProperties' from 'kernels' (tests/kernels/__init__.py)". Now pytest puts the repository's
root there, and the tests' own modules are ``tests.kernels``, ``tests.helpers`` and so on.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _own_names() -> list[str]:
    """Every top-level name the tests' folders and modules would take if tests/ were on sys.path."""
    names = {p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in TESTS.glob("*.py") if p.stem not in ("__init__", "conftest")}
    return sorted(names)


def test_tests_folder_is_not_on_the_import_path():
    assert str(TESTS) not in [str(Path(p).resolve()) for p in sys.path if p], sys.path


@pytest.mark.parametrize("name", _own_names())
def test_no_test_module_is_importable_by_its_bare_name(name):
    spec = importlib.util.find_spec(name)
    where = spec.origin if spec is not None else None
    print(f"{name}: {where}")
    assert where is None or not Path(where).resolve().is_relative_to(TESTS), (
        f"import {name} would load the tests' own {where}, shadowing any installed package of that name")


def test_transformers_kernel_hub_integration_imports_under_pytest():
    """What failed: transformers' hub-kernels integration imports the installed ``kernels`` package."""
    pytest.importorskip("transformers")
    from transformers.integrations import hub_kernels  # noqa: F401

    kernels = sys.modules.get("kernels")
    where = getattr(kernels, "__file__", None)
    print(f"kernels: {where}")
    assert where is None or not Path(where).resolve().is_relative_to(TESTS), where
