"""The judged side's answers: a case run on the real function, and the values sent back.

:func:`answer` turns one request of the judge (:class:`attnlab.judge.apart.remote.Remote`) into a reply
of plain values and tensors. ``run`` is the judge's own :func:`attnlab.judge.judge.run` -- lay the
inputs out as the case says, call, check the contract, take the gradients -- done where the function
lives; ``call`` is a forward without gradients (dropout's probe, the lab's match). What the function
raises is sent as its type, message and line, never as the exception object.
"""

from __future__ import annotations

import torch

from attnlab.judge.apart import wire
from attnlab.judge.cases import DTYPES, Case


def case_of(d: dict) -> Case:
    return Case(**{**d, "batch": tuple(d["batch"])})


def _mask(word, dense):
    if isinstance(word, dict) and "causal_bias" in word:
        from torch.nn.attention import bias

        make = bias.causal_lower_right if word["causal_bias"] else bias.causal_upper_left
        return make(word["L"], word["S"])
    return dense


def _fresh(case: Case, seed: int, ts: list):
    """The case's score modifier, built on the judge's tensors (see judge._modifier)."""
    from attnlab.judge import mod_cases

    if case.mod not in mod_cases.MOD_FAMILIES:  # none, or an API's own arguments (flash-attn's softcap, ALiBi)
        return None

    _, build = mod_cases.make(case.mod, case.H, seed, DTYPES[case.dtype])

    def fresh(dtype=None, device=None):
        leaves = [t.detach().clone().requires_grad_(True) for t in ts]
        return build(leaves), leaves

    return fresh


def answer(fn, header: dict, tensors: list, roots: tuple[str, ...] = (), extra=None) -> tuple[dict, list]:
    """The reply to one request (``extra``: more operations by name, ``op(fn, header) -> dict``)."""
    from attnlab.judge import judge
    from attnlab.judge.apart import remote

    op = header.get("op")
    try:
        if op == "run":
            case = case_of(header["case"])
            q, k, v, dense, grad_out, *ts = tensors
            sinks = ts.pop() if header.get("sinks") else None  # a sink case's sinks travel last
            mine, problems = judge.run(fn, case, header["seed"], q, k, v, _mask(header["mask"], dense), grad_out,
                                       header["p"], _fresh(case, header["seed"], ts), header["layout"],
                                       header.get("backward", True), header.get("inference", False), sinks)
            return {"mine": mine is not None, "problems": problems}, list(mine or [])
        if op == "call":
            case = case_of(header["case"])
            q, k, v, dense = tensors
            torch.manual_seed(header["seed"])
            with torch.no_grad():
                out = judge.call(fn, q, k, v, _mask(header["mask"], dense), case, header["p"])
            if not isinstance(out, torch.Tensor):
                return {"tensor": False, "returned": type(out).__name__}, []
            return {"tensor": True}, [out]
        if extra and op in extra:
            return extra[op](fn, header), []
        return {"raised": {"type": "ValueError", "message": f"no such request {op!r}"}}, []
    except BaseException as e:  # whatever the function does is the judge's to read, as values
        return {"raised": remote.raised(e, roots)}, []


def baseline() -> dict:
    """torch's global state as it is now (taken in the judged process before the judged code is loaded)."""
    return {"dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(), "threads": torch.get_num_threads(),
            "deterministic": torch.are_deterministic_algorithms_enabled(), "device": torch.get_default_device()}


def restore(state: dict) -> None:
    """Put torch's global state back as :func:`baseline` took it: what the judged file set at import (a default
    dtype of float64, grad mode off, a thread count, deterministic algorithms, a default device) or in an earlier
    call never reaches the inputs the level builds or the calls it makes."""
    torch.set_default_dtype(state["dtype"])
    torch.set_grad_enabled(state["grad"])
    if torch.get_num_threads() != state["threads"]:
        torch.set_num_threads(state["threads"])
    if torch.are_deterministic_algorithms_enabled() != state["deterministic"]:  # setting it costs 2-3 s the 1st time
        torch.use_deterministic_algorithms(state["deterministic"])
    if torch.get_default_device() != state["device"]:
        torch.set_default_device(state["device"])


def serve(fn, rfd: int, wfd: int, watch: float | None = None, roots: tuple[str, ...] = (), extra=None,
          state: dict | None = None) -> dict:
    """Answer the judge's requests with ``fn`` until it closes (returns {}) or sends what is not a request
    (returned, e.g. the judge's result). ``watch``: seconds a request may take here before the judge is told it
    hung (an in-process watchdog; a judged process of its own is killed by the judge instead). ``state``: torch's
    global state to restore before each request (:func:`baseline`)."""
    while True:
        try:
            header, tensors = wire.receive(rfd)
        except wire.Closed:
            return {}
        op = header.get("op")
        if op is None:
            return header
        if op == "close":
            return {}
        if state is not None:
            restore(state)
        if watch is None:
            reply = answer(fn, header, tensors, roots, extra)
        else:
            from attnlab.judge.apart.watchdog import case_limit, watched

            case = header.get("case")
            limit = case_limit(case_of(case), watch) if case else watch
            reply = watched(lambda h=header, t=tensors: answer(fn, h, t, roots, extra), limit) or (
                {"hung": limit}, [])
        wire.send(wfd, *reply)
