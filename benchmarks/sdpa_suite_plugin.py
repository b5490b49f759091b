"""The pytest plugin behind benchmarks/pytorch_sdpa_suite.py: F.scaled_dot_product_attention becomes an attnlab form.

Loaded with ``-p sdpa_suite_plugin`` (benchmarks/ on PYTHONPATH). Environment:

* ``ATTNLAB_SUITE_FORM`` -- the form (``torch`` leaves PyTorch's own function in place: the baseline);
* ``ATTNLAB_SUITE_REPORT`` -- a JSON-lines file: one line per test with its outcome and first line of failure;
* ``ATTNLAB_SUITE_MAX_WORK`` -- the largest N*H*L*S given to a slow form; larger calls skip the test.

The function is replaced before the test file is imported, so ``from torch.nn.functional import
scaled_dot_product_attention`` binds the form too, and so does every caller inside torch.nn
(``nn.MultiheadAttention``'s slow path). An input the form does not take (``attnlab.Unsupported``)
or one too large for it skips the test with the reason, rather than failing it.
"""

from __future__ import annotations

import json
import math
import os
import threading

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.kernels import Unsupported

_ORIGINAL = F.scaled_dot_product_attention


def _work(q, k) -> int:
    """N*H*L*S of a call: every query row (batch dims, heads, positions) against every key."""
    return math.prod(q.shape[:-1]) * k.shape[-2]


def _wrap(form: str, max_work: int | None):
    fn = attnlab.kernels.get(form).fn
    inside = threading.local()  # the sdpa form calls F.scaled_dot_product_attention itself: PyTorch's, then

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                     enable_gqa=False):
        if getattr(inside, "depth", 0):
            return _ORIGINAL(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        if max_work is not None and isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) \
                and query.dim() >= 2 and key.dim() >= 2 and _work(query, key) > max_work:
            pytest.skip(f"{form}: a call of {_work(query, key)} query-key pairs is over its {max_work}")
        inside.depth = 1
        try:
            return fn(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        except Unsupported as e:
            pytest.skip(f"{form}: {e}")
        finally:
            inside.depth = 0

    return scaled_dot_product_attention


def pytest_configure(config):
    form = os.environ.get("ATTNLAB_SUITE_FORM", "torch")
    if form != "torch":
        limit = os.environ.get("ATTNLAB_SUITE_MAX_WORK")
        F.scaled_dot_product_attention = _wrap(form, int(limit) if limit else None)
        torch.nn.functional.scaled_dot_product_attention = F.scaled_dot_product_attention
    config._attnlab_report = os.environ.get("ATTNLAB_SUITE_REPORT")


def _first_line(report) -> str:
    if report.passed:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:300]
    crash = getattr(report.longrepr, "reprcrash", None)
    return (crash.message if crash is not None else str(report.longrepr)).strip().splitlines()[0][:300]


def pytest_runtest_logreport(report):
    path = os.environ.get("ATTNLAB_SUITE_REPORT")
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    if report.when == "teardown" and report.outcome == "passed":
        return
    outcome = "error" if report.when != "call" and report.failed else report.outcome
    with open(path, "a") as f:
        f.write(json.dumps({"test": report.nodeid.split("::", 1)[-1], "outcome": outcome,
                            "message": _first_line(report)}) + "\n")
