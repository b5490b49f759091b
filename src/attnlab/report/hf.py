"""The table of `attnlab verify --model`: one row per form, the three checks on a real model."""

from __future__ import annotations

from attnlab._extras import require

from .fmt import fmt_err

escape, Table = require("rich.markup").escape, require("rich.table").Table


def model_table(result) -> Table:
    """Per form: logits error / PyTorch's / limit, whether generation matched, gradient error / limit, verdict."""
    t = Table(title=f"attnlab verify --model {escape(result.model)} ({result.model_type}): each form against "
                    f"transformers' '{result.reference}', max error against the float64 model "
                    f"(limit = 2 x {result.reference}'s + floor)")
    for col in ("form", "transformers name", "logits error", f"{result.reference}'s error", "limit",
                f"{result.new_tokens} greedy tokens", "grad error", f"{result.reference}'s error ", "limit ",
                "time", "result"):
        t.add_column(col, justify="left" if col in ("form", "transformers name", "result") else "right")
    for r in result.rows:
        style = {"pass": "green", "fail": "red", "error": "red"}[r.status]
        verdict = f"[{style}]{r.status.upper()}[/]" + (f" {escape(r.detail)}" if r.detail else "")
        if r.logits is None:
            t.add_row(r.form, r.impl, "-", "-", "-", "-", "-", "-", "-", f"{r.seconds:.1f} s", verdict)
            continue
        gen = "identical" if r.generation_match else f"[red]differ from token {r.first_difference}[/]"
        logits = [fmt_err(r.logits.err), fmt_err(r.logits.torch_err), fmt_err(r.logits.allowed)]
        grads = [fmt_err(r.grads.err), fmt_err(r.grads.torch_err), fmt_err(r.grads.allowed)]
        t.add_row(r.form, r.impl, *logits, gen, *grads, f"{r.seconds:.1f} s", verdict)
    return t


def model_summary(result, model: str) -> str:
    """The verdict under the table: how many forms pass on the model."""
    c = sum(r.status == "pass" for r in result.rows)
    verdict = "[green]ALL PASS[/]" if result.passed else "[red]FAILURES[/]"
    return f"{verdict}: {c} of {len(result.rows)} form(s) pass on {model}"
