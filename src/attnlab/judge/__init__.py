"""The judge: anyone's attention held to a float64 oracle, forward and backward, and told what is wrong.

What ``attnlab verify`` and :mod:`attnlab.testing` sit on: the oracle (:mod:`.oracle`, its own short float64
reference that shares nothing with the forms), the grid of cases (:mod:`.cases`), the one tolerance rule
(:mod:`.rule`), the judge of one case (:mod:`.judge`), the wrong semantics a failure is held against and the causes
they name (:mod:`.hypotheses`, :mod:`.diagnose`), the APIs other than SDPA's (:mod:`.apis`), other people's code in
a process of its own (:mod:`.apart`: loading it, the wire, the worker, the watchdog, serving), and checks inside
real models (:mod:`.hf_check`).

The front door -- what the CLI, the lab and :mod:`attnlab.testing` take from the judge::

    from attnlab.judge import Case, VerifyResult, default_cases, verify

    result = verify({"mine": my_attention}, default_cases(["float32"], long=False))

:func:`verify` (the grid run against the oracle: a :class:`VerifyResult` of :class:`Row` s and
:class:`Diagnosis` lines), the grid (:class:`Case`, :func:`default_cases`, :func:`default_dtypes`, :data:`DTYPES`),
the APIs a function may be written to (:data:`APIS`), and the errors a caller catches (:class:`NoDevice`,
:class:`LoadError`). Each name is imported when first asked for, so importing one part of the judge (the judged
process's worker, say) does not import the rest. The judge's own modules import each other directly.

``verify`` is also the module :mod:`attnlab.judge.verify` (a package's attribute holds one object, and the import
system sets a submodule's): the module is callable, as its function ``verify.verify``, so
``from attnlab.judge import verify`` gives the function's behaviour and the module's names alike.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnlab.judge.apart.loader import LoadError
    from attnlab.judge.apis import NAMES as APIS
    from attnlab.judge.arguments import NoDevice
    from attnlab.judge.cases import DTYPES, Case, default_cases, default_dtypes
    from attnlab.judge.diagnose import Diagnosis
    from attnlab.judge.judge import Row
    from attnlab.judge.verify import VerifyResult, verify

__all__ = ["APIS", "DTYPES", "Case", "Diagnosis", "LoadError", "NoDevice", "Row", "VerifyResult", "default_cases",
           "default_dtypes", "verify"]

_WHERE = {  # a front-door name -> (the module that holds it, its name there; None: the module itself)
    "APIS": ("apis", "NAMES"),
    "DTYPES": ("cases", "DTYPES"),
    "Case": ("cases", "Case"),
    "Diagnosis": ("diagnose", "Diagnosis"),
    "LoadError": ("apart.loader", "LoadError"),
    "NoDevice": ("arguments", "NoDevice"),
    "Row": ("judge", "Row"),
    "VerifyResult": ("verify", "VerifyResult"),
    "default_cases": ("cases", "default_cases"),
    "default_dtypes": ("cases", "default_dtypes"),
    "verify": ("verify", None),  # the module, callable as its verify()
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _WHERE[name]
    found = importlib.import_module(f"{__name__}.{module}")
    value = found if attr is None else getattr(found, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
