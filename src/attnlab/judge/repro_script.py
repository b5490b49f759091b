"""A standalone script for one failing case: the inputs, the call the judge made, the error against float64.

What :mod:`attnlab.judge.repro` shrank is written as a short Python file that needs only torch and the function
itself (imported by the spec ``--impl`` was given). It draws the case's numbers from the same seeded generator,
in the same order, as :func:`attnlab.judge.cases.make_inputs`; lays them out as the case does (transposed,
expanded, sliced views); calls the function with the arguments the judge gave it -- for another API in that API's
own layout and arguments, read off the call the API's adapter makes (:func:`record`): each tensor argument
written as the view of q, k or v it is, or as its values; then reads the output back into (batch, heads, L, Ev)
the way the adapter does. The answer it is held to is PyTorch's float64 ``F.scaled_dot_product_attention`` on the
same inputs with the dense mask the case means (the log-sum-exp written out beside it), or, where PyTorch has no
such call (a score modifier, the function's own dropout), the oracle's float64 answer written into the script.
It prints every quantity's error beside the limit the judge computed for it, checks every input for changes in
place, calls the function again under ``torch.no_grad()`` and ``torch.inference_mode()``, and exits 1 while
something is over.
"""

from __future__ import annotations

import math
import textwrap

import torch

from attnlab.judge import apis, judge
from attnlab.judge.cases import Case, views

MAX_NUMBERS = 200_000  # values written into one script, at most (a case that shrank little may be too big)
WIDTH = 116

# (code, the same in Python): how a tensor argument is laid out from q, k or v in (batch..., heads, L, E)
INPUT_FORMS = (
    ("{t}", lambda t: t),
    ("{t}.reshape(-1, *{t}.shape[-3:])", lambda t: t.reshape(-1, *t.shape[-3:])),
    ("{t}.reshape(-1, *{t}.shape[-3:]).transpose(1, 2).contiguous()",
     lambda t: t.reshape(-1, *t.shape[-3:]).transpose(1, 2).contiguous()),
    ("{t}.reshape(-1, *{t}.shape[-3:]).transpose(1, 2)", lambda t: t.reshape(-1, *t.shape[-3:]).transpose(1, 2)),
    ("{t}.reshape(-1, *{t}.shape[-3:]).transpose(1, 2).contiguous()[0]",
     lambda t: t.reshape(-1, *t.shape[-3:]).transpose(1, 2).contiguous()[0]),
    ("{t}.reshape(-1, *{t}.shape[-3:]).transpose(1, 2)[0]", lambda t: t.reshape(-1, *t.shape[-3:]).transpose(1, 2)[0]),
)
# (code, the same in Python): how an API's output is read back into (batch..., heads, L, Ev), before a reshape
OUTPUT_FORMS = (("{o}", lambda o: o), ("{o}.transpose(1, 2)", lambda o: o.transpose(1, 2)),
                ("{o}.transpose(0, 1)[None]", lambda o: o.transpose(0, 1)[None]))


class NoScript(ValueError):
    """The case cannot be written as a standalone script (the message says why)."""


class _Recorder:
    """A stand-in for the judged function: it keeps the arguments it is called with and answers with an output whose
    values are their own flat indices, so that where each of them lands in the judge's layout can be read."""

    def __init__(self):
        self.args, self.kwargs, self.shape = (), {}, None

    def __call__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) < 3:
            raise NoScript("the call does not pass q, k and v as its first three tensors")
        self.shape = (*tensors[0].shape[:-1], tensors[2].shape[-1])
        return torch.arange(math.prod(self.shape), dtype=torch.float64).reshape(self.shape)


def record(case: Case, x, api: str, fresh=None):
    """(positional arguments, keywords, output code, the laid-out q, k, v) of the judge's call on ``case``'s inputs
    ``x`` (``fresh``: the case's score modifier, as :class:`attnlab.judge.judge.Expected` holds it): the function is
    not called, a :class:`_Recorder` stands in for it."""
    _, laid = views(case, x.q, x.k, x.v)
    qq, kk, vv = (t.detach() for t in laid)
    rec = _Recorder()
    mod, _ = fresh() if fresh is not None else (None, [])
    if api == "sdpa":
        got = judge.call(rec, qq, kk, vv, x.dense, case, case.dropout_p, mod)
    else:
        got = apis.Adapted(rec, api).call_case(qq, kk, vv, case, case.dropout_p, mod)[0]
    if not isinstance(got, torch.Tensor):
        raise NoScript("the API's call did not read back an output")
    index = got.detach().reshape(-1).long()
    for code, fn in OUTPUT_FORMS:
        o = torch.arange(math.prod(rec.shape)).reshape(rec.shape)
        try:
            if torch.equal(fn(o).reshape(got.shape).reshape(-1), index):
                return rec.args, rec.kwargs, code, (qq, kk, vv)
        except RuntimeError:
            continue
    raise NoScript("the API's output is read back in a layout the script has no code for")


def literal(t: torch.Tensor) -> str:
    """Python code that builds ``t`` (its values, dtype and shape) from numbers written out; bool tensors as rows
    of 0 and 1, a picture of which keys each query sees."""
    t = t.detach().cpu()
    shape = tuple(t.shape)
    if t.dtype == torch.bool:
        rows = t.reshape(-1, shape[-1] if shape else 1).int().tolist() if t.numel() else []
        text = "\n".join("".join(str(b) for b in r) for r in rows)
        return f'bits("""\n{textwrap.indent(text, "    ")}\n""", {shape})'
    if t.is_floating_point():
        digits = 17 if t.dtype == torch.float64 else 9
        values = [_number(format(float(x), f".{digits}g")) for x in t.double().reshape(-1).tolist()]
        dtype = "float64" if t.dtype == torch.float64 else "float32"
        cast = "" if t.dtype in (torch.float64, torch.float32) else f".to(torch.{str(t.dtype)[6:]})"
    else:
        values, dtype, cast = [str(int(x)) for x in t.reshape(-1).tolist()], str(t.dtype)[6:], ""
    body = textwrap.fill(", ".join(values), WIDTH - 4, initial_indent="    ", subsequent_indent="    ")
    return f"torch.tensor([\n{body}\n], dtype=torch.{dtype}).reshape({shape}){cast}"


def _number(text: str) -> str:
    """A float's digits as Python code (infinities and NaN by name)."""
    return {"inf": "math.inf", "-inf": "-math.inf", "nan": "math.nan"}.get(text, text)


def _as(t: torch.Tensor, named) -> str:
    """``t`` as code: a view of one of the ``named`` tensors (the laid-out q, k, v and the mask) it equals (values,
    then strides too), else its values."""
    best = None
    for name, src in named:
        if src is None:
            continue
        for code, fn in INPUT_FORMS:
            try:
                y = fn(src)
            except RuntimeError:
                continue
            if y.shape == t.shape and y.dtype == t.dtype and torch.equal(y, t.detach()):
                if y.stride() == t.stride():
                    return code.format(t=name)
                best = best or code.format(t=name)
    return best or literal(t) + (".to(DEVICE)" if t.device.type != "cpu" else "")


def _value(v, named) -> str:
    """An argument as code (``named``: see :func:`_as`)."""
    from attnlab.judge import oracle

    if isinstance(v, torch.Tensor):
        variant = oracle.causal_variant(v)
        if variant is not None:
            return f"causal_{variant}({int(v.seq_len_q)}, {int(v.seq_len_kv)})"
        if v.dim() == 0:
            return f"torch.tensor({float(v)!r}, dtype=torch.{str(v.dtype)[6:]})"
        return _as(v, named)
    if type(v).__name__ == "BlockMask":  # FlexAttention's: rebuilt from the dense mask it means
        from torch.nn.attention.flex_attention import create_mask

        seen = create_mask(v.mask_mod, *v.shape, device="cpu")
        size = "" if tuple(v.BLOCK_SIZE) == (128, 128) else f", BLOCK_SIZE={tuple(v.BLOCK_SIZE)}"
        return (f"(lambda seen: create_block_mask(lambda b, h, q_idx, kv_idx: seen[b, h, q_idx, kv_idx], *seen.shape, "
                f"device=DEVICE{size}))(\n    {literal(seen)}.to(DEVICE))")
    if callable(v):
        return "score_mod"  # written out before arguments() (modifier_source)
    if isinstance(v, (bool, int, float, str, type(None))) or (
            isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v)):
        return repr(v)
    raise NoScript(f"an argument of type {type(v).__name__} the script cannot write")


def numbers(args, kwargs, named, case: Case, x, exp) -> int:
    """How many values the script would write out: the mask, the arguments that are not views of q, k, v or the
    mask, and the oracle's answer where it is written in."""
    def written(t) -> bool:
        return not any(src is not None and src.shape == t.shape and torch.equal(src, t.detach()) for _, src in named)

    n = x.dense.numel() if isinstance(x.dense, torch.Tensor) else 0
    if any(callable(a) and not isinstance(a, torch.Tensor) and type(a).__name__ != "BlockMask"
           for a in (*args, *kwargs.values())):  # a score_mod's bias, tabulated (modifier_source)
        n += math.prod(case.batch) * case.H * case.L * (case.S or case.L)
    n += sum(a.numel() for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and written(a))
    if case.mod or case.dropout_p > 0:
        n += sum(t.numel() for t in exp.ref if isinstance(t, torch.Tensor))
    return n


HELPERS = '''
def bits(text, shape):
    """A bool tensor from rows of 0 and 1 (a row a query, a column a key: 1 = seen)."""
    rows = [[c == "1" for c in line.strip()] for line in text.strip().splitlines()]
    return torch.tensor(rows, dtype=torch.bool).reshape(shape)


def check(name, mine, ref):
    """Print ``name``'s error against the float64 answer beside its limit; True when it is over (or not there)."""
    if name not in LIMITS:
        return False
    if not isinstance(mine, torch.Tensor):
        print(f"{name:>22}: {type(mine).__name__}, not a tensor                      FAILS")
        return True
    if mine.shape != ref.shape:
        print(f"{name:>22}: shape {tuple(mine.shape)}, not {tuple(ref.shape)}                 FAILS")
        return True
    got = mine.detach().double().cpu()
    inf = torch.isinf(ref)  # a row that sees no key: its log-sum-exp is an infinity (either sign passes)
    err = float((got - ref)[~inf].abs().max()) if bool((~inf).any()) else 0.0
    over = not err <= LIMITS[name] or not bool(torch.isinf(got[inf]).all())
    print(f"{name:>22}: max|yours - PyTorch(float64)| = {err:.3e}   limit {LIMITS[name]:.3e}   "
          f"{'OVER' if over else 'ok'}")
    return over


def snapshot(args, kwargs):
    return [(str(i), a.detach().clone()) for i, a in list(enumerate(args)) + list(kwargs.items())
            if isinstance(a, torch.Tensor)]


def unchanged(where, before, args, kwargs):
    """Print the arguments the call changed in place; True when it changed one."""
    now = dict((str(i), a) for i, a in list(enumerate(args)) + list(kwargs.items()))
    bad = [name for name, was in before if not torch.equal(now[name].detach(), was)]
    for name in bad:
        which = f"argument {int(name) + 1}" if name.isdigit() else name
        print(f"{where}: changed its input {which} in place                          FAILS")
    return bool(bad)
'''

LAYOUT_CODE = {  # how the case lays q, k, v out (attnlab.judge.cases.views), as the script's lines
    None: ["leaves = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]", "q_, k_, v_ = leaves"],
    "transposed": ["# stored (batch, L, heads, E), seen (batch, heads, L, E), as transformers passes them",
                   "leaves = [t.detach().transpose(-3, -2).contiguous().requires_grad_(grad) for t in (q, k, v)]",
                   "q_, k_, v_ = (t.transpose(-3, -2) for t in leaves)"],
    "expanded": ["# k and v are one batch element's, expanded over the batch (stride 0)",
                 "leaves = [q.detach().clone().requires_grad_(grad)] + [t.detach()[:1].clone().requires_grad_(grad)"
                 " for t in (k, v)]",
                 "q_, k_, v_ = leaves[0], leaves[1].expand(k.shape), leaves[2].expand(v.shape)"],
    "sliced": ["# the last dim is the first E columns of a wider tensor",
               "leaves = [torch.cat([t.detach(), t.detach()[..., :7]], dim=-1).requires_grad_(grad)",
               "          for t in (q, k, v)]",
               "q_, k_, v_ = (w[..., :t.shape[-1]] for w, t in zip(leaves, (q, k, v)))"],
}


def _layout(case: Case):
    """The layout views() gives the case (an expanded layout needs a batch dim to expand over)."""
    return None if case.layout == "expanded" and not case.batch else case.layout


def _importing(spec: str) -> list[str]:
    """The lines that import the judged function by the spec --impl was given (a registered form's name, or
    package.module:function)."""
    if ":" not in spec:
        return ["from attnlab import kernels  # one of attnlab's own forms", "",
                f"judged = kernels.get({spec!r}).fn  # attnlab verify --impl {spec}"]
    module, _, attr = spec.partition(":")
    if "." not in attr:
        return [f"from {module} import {attr} as judged  # attnlab verify --impl {spec}"]
    return [f"import {module}", "", f"judged = {module}.{attr}  # attnlab verify --impl {spec}"]


def _inputs(case: Case, seed: int, x) -> list[str]:
    """The lines that draw the case's numbers as make_inputs draws them, and its mask."""
    Hkv, S, Ev = case.Hkv or case.H, case.S or case.L, case.Ev or case.E
    mag = f" * {case.magnitude!r}" if case.magnitude != 1 else ""
    b = "".join(f"{n}, " for n in case.batch)
    lines = ["g = torch.Generator().manual_seed(SEED)  # the numbers attnlab verify drew for this case, in its order",
             f"q = torch.randn({b}{case.H}, {case.L}, {case.E}, generator=g){mag}  # (batch..., heads, L, E)",
             f"k = torch.randn({b}{Hkv}, {S}, {case.E}, generator=g){mag}",
             f"v = torch.randn({b}{Hkv}, {S}, {Ev}, generator=g)",
             f"grad_out = torch.randn({b}{case.H}, {case.L}, {Ev}, generator=g)"]
    if case.layout == "expanded" and case.batch:
        lines.append("k, v = (t[:1].expand(t.shape).clone() for t in (k, v))  # one batch element's, seen by all")
    lines.append("q, k, v, grad_out = (t.to(DEVICE, DTYPE) for t in (q, k, v, grad_out))")
    if x.dense is not None:
        lines.append(f"mask = {literal(x.dense)}.to(DEVICE)")
    return lines


def modifier_source(fn, case: Case) -> list[str]:
    """The score modifier the call passes, as code a script can hold: its bias tabulated over (b, h, q_idx, kv_idx)
    where it adds one (ALiBi, a relative bias, a hidden row's -inf), and a soft-cap around it where it caps
    (``CAP * tanh((score + bias) / CAP)``); NoScript for a modifier that is neither."""
    N, H, L, S = math.prod(case.batch), case.H, case.L, case.S or case.L
    grids = [torch.arange(n).view(*(n if d == a else 1 for d in range(4))) for a, n in enumerate((N, H, L, S))]
    try:
        with torch.no_grad():
            at0 = fn(torch.zeros(N, H, L, S, dtype=torch.float64), *grids).double()
            at1 = fn(torch.full((N, H, L, S), 0.75, dtype=torch.float64), *grids).double()
    except Exception as e:  # noqa: BLE001 -- a modifier written for one index at a time, or any other failure
        raise NoScript(f"the call passes a score_mod that could not be tabulated ({type(e).__name__}: {e})") from None
    at0, at1 = at0.expand(N, H, L, S), at1.expand(N, H, L, S)
    live = torch.isfinite(at0)
    if torch.allclose((at1 - at0)[live], torch.full_like(at0[live], 0.75), atol=1e-12) and \
            torch.equal(torch.isfinite(at1), live):
        return ["# The score_mod the call passed: the bias it adds, tabulated over (b, h, q_idx, kv_idx)",
                f"BIAS = {literal(at0)}", "", "", "def score_mod(score, b, h, q_idx, kv_idx):",
                "    return score + BIAS[b, h, q_idx, kv_idx].to(score.dtype)", ""]
    from attnlab.judge.mod_cases import CAP

    bias = CAP * torch.atanh((at0 / CAP).clamp(-1 + 1e-15, 1 - 1e-15))
    if torch.allclose(CAP * torch.tanh((0.75 + bias) / CAP), at1, atol=1e-9):
        return [f"# The score_mod the call passed: a soft-cap of {CAP} around the bias it adds, tabulated over (b, h, "
                "q_idx, kv_idx)", f"CAP = {CAP!r}", f"BIAS = {literal(bias)}", "", "",
                "def score_mod(score, b, h, q_idx, kv_idx):",
                "    return CAP * torch.tanh((score + BIAS[b, h, q_idx, kv_idx].to(score.dtype)) / CAP)", ""]
    raise NoScript("the call passes a score_mod that is neither a bias nor a soft-capped bias: the script has no code "
                   "for it")


def _arguments(case: Case, args, kwargs, named, api: str) -> list[str]:
    learn = case.grad_mask and api == "sdpa"
    mods = [a for a in (*args, *kwargs.values()) if callable(a) and not isinstance(a, torch.Tensor)
            and type(a).__name__ != "BlockMask"]
    prelude = modifier_source(mods[0], case) + [""] if mods else []
    lines = [*prelude, "def arguments(grad):",
             '    """Fresh q, k, v laid out as the case lays them out, the tensors the gradients are taken for,',
             '    and the arguments of the call attnlab verify made."""',
             *("    " + line for line in LAYOUT_CODE[_layout(case)])]
    if any(n == "m" and t is not None for n, t in named):
        lines.append(f"    m = mask.detach().clone().requires_grad_(grad and {learn})")
    lines.append("    wrt = [q_, k_, v_]" + (" + [m]" if learn else ""))
    lines.append("    args = [")
    lines += [textwrap.indent(_value(a, named), " " * 8) + "," for a in args]
    lines.append("    ]")
    lines.append("    kwargs = {}")
    for key, value in kwargs.items():
        lines.append(f"    kwargs[{key!r}] = " + textwrap.indent(_value(value, named), "    ").lstrip())
    return lines + ["    return wrt, args, kwargs"]


def _call(case: Case, api: str, out_code: str, shape) -> list[str]:
    lines = ["def call(args, kwargs):", '    """The output as attnlab verify reads it (batch..., heads, L, Ev), and '
             'the log-sum-exp where one comes back."""']
    if case.dropout_p > 0:
        lines.append("    torch.manual_seed(SEED)  # the function's dropout follows torch's seed, as under verify")
    lines.append("    res = judged(*args, **kwargs)")
    if api == "sdpa":
        return lines + ["    return res, None"]
    N, H, L = math.prod(shape[:-3]), shape[-3], shape[-2]
    return lines + [
        "    out, lse = (res[0], res[1] if len(res) > 1 else None) if isinstance(res, (tuple, list)) else (res, None)",
        "    if isinstance(out, torch.Tensor) and out.numel() == " + str(math.prod(shape)) + ":",
        f"        out = {out_code.format(o='out')}.reshape{tuple(shape)}  # in the API's layout: read back",
        f"    if isinstance(lse, torch.Tensor) and lse.numel() == {N * H * L}:",
        f"        lse = lse.reshape({N}, {H}, {L})",
        "    return out, lse"]


def _reference(case: Case, api: str, x, exp, backward: bool) -> list[str]:
    """The lines that compute what the function is held to: PyTorch's float64 answer on the same numbers with the
    dense mask the case means (and the log-sum-exp written out), or the oracle's answer written in."""
    names = judge.quantities(case)
    if case.mod or case.dropout_p > 0:
        why = "a score modifier, which F.scaled_dot_product_attention does not take" if case.mod else \
            "the function's own dropout (the weights it dropped were read from it)"
        lines = [f"# The answer: attnlab's float64 oracle on these numbers (the case has {why}), written in",
                 "REF = {}"]
        for name, t in zip(names, exp.ref, strict=False):
            if t is not None and (name in ("out", "dq", "dk", "dv", "dmask", "lse")):
                lines.append(f"REF[{name!r}] = {literal(t)}")
        return lines
    learn = case.grad_mask and api == "sdpa"
    lines = ["# The answer: PyTorch's F.scaled_dot_product_attention in float64 on the same numbers",
             "q64, k64, v64 = (t.detach().double().cpu().requires_grad_(True) for t in (q, k, v))"]
    if x.dense is not None:
        lines.append("mask64 = mask.detach().cpu()" + (".double()" if x.dense.is_floating_point() else "")
                     + (".requires_grad_(True)" if learn else ""))
    kw = ["attn_mask=mask64" if x.dense is not None else "attn_mask=None"]
    kw += ["is_causal=True"] if case.is_causal and api == "sdpa" else []
    kw += [f"scale={float(case.scale)!r}"] if case.scale is not None else []
    kw += ["enable_gqa=True"] if case.gqa else []
    lines += [f"out64 = F.scaled_dot_product_attention(q64, k64, v64, {', '.join(kw)})",
              'REF = {"out": out64.detach()}']
    if backward and "dq" in names:
        lines += ["grads64 = torch.autograd.grad(out64, [q64, k64, v64" + (", mask64" if learn else "")
                  + "], grad_out.detach().double().cpu())",
                  'REF.update(zip(("dq", "dk", "dv", "dmask"), grads64))']
    if "lse" in names:
        scale = case.scale if case.scale is not None else 1 / math.sqrt(case.E)
        masked = ("" if x.dense is None else ".masked_fill(~mask64, -math.inf)" if x.dense.dtype == torch.bool
                  else " + mask64")
        lines += ["# the log-sum-exp of each row's scaled, masked scores (-inf for a row that sees no key)",
                  f"s64 = q64 @ k64.repeat_interleave(q64.shape[-3] // k64.shape[-3], dim=-3).transpose(-2, -1) * "
                  f"{scale!r}",
                  f'REF["lse"] = torch.logsumexp(s64{masked}, dim=-1).detach()']
    return lines


RUN = '''

def attempt(where, work):
    """(True, ``work()``), or where it raises (False, None), the exception printed as verify says it."""
    try:
        return True, work()
    except Exception as e:  # noqa: BLE001 -- what your function raises is what the case reproduces
        message = str(e).splitlines()[0][:160] if str(e) else "(no message)"
        print(f"{where}: raises {type(e).__name__}: {message}                 FAILS")
        return False, None


def gradients(out, wrt):
    """The gradients of out (against grad_out) for wrt; where torch.autograd.grad is refused (reentrant activation
    checkpointing takes only .backward()), as verify does: a fresh call, and the .grad that .backward() leaves."""
    try:
        return torch.autograd.grad(out, wrt, grad_out.to(out.dtype), allow_unused=True)
    except RuntimeError as first:
        wrt, args, kwargs = arguments(grad=True)
        for t in wrt:
            if not t.is_leaf:
                t.retain_grad()
        out, _ = call(args, kwargs)
        try:
            out.backward(grad_out.to(out.dtype))
        except RuntimeError:
            raise first from None
        return [t.grad for t in wrt]


wrt, args, kwargs = arguments(grad=GRAD)
before = snapshot(args, kwargs)
ran, got = attempt("called with gradients" if GRAD else "called", lambda: call(args, kwargs))
failed = not ran
if ran:
    out, lse = got
    if isinstance(out, torch.Tensor) and out.dtype != DTYPE:
        print(f"                   out: dtype {out.dtype}, not the inputs' {DTYPE}                 FAILS")
        failed = True
    failed |= check("out", out, REF["out"])
    failed |= check("lse", lse, REF.get("lse"))
failed |= unchanged("with gradients" if GRAD else "called", before, args, kwargs)
if ran:
    if "dq" in LIMITS and isinstance(out, torch.Tensor) and out.requires_grad:
        ran, grads = attempt("its backward", lambda: gradients(out, wrt))
        failed |= not ran
        for name, g in zip(("dq", "dk", "dv", "dmask"), grads or ()):
            failed |= check(name, g, REF[name])
    elif "dq" in LIMITS:
        print("no gradient flows back to q, k or v: the output does not require grad                FAILS")
        failed = True
for mode, context in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
    if f"out ({mode})" in LIMITS:
        wrt, args, kwargs = arguments(grad=False)
        before = snapshot(args, kwargs)
        with context():
            ran, got = attempt(f"under torch.{mode}()", lambda: call(args, kwargs))
            failed |= unchanged(f"under torch.{mode}()", before, args, kwargs) or not ran
        if ran:
            failed |= check(f"out ({mode})", got[0], REF["out"])
print("FAILS: over a limit, an exception, or an input changed" if failed else
      "passes: every quantity within its limit")
sys.exit(1 if failed else 0)
'''


def write(path, *, spec: str, api: str, cause: str, text: str, case: Case, seed: int, device: str, row, x, exp,
          grid: str, smallest: str, backward: bool = True, limits: dict | None = None) -> str:
    """Write the script for ``case`` (its ``row`` judged; ``x``, ``exp``: its inputs and what it is held to) to
    ``path``; returns the path. ``limits``: each quantity's limit (the row's, where None). :class:`NoScript` when
    it cannot be written."""
    from attnlab.results.files import write_text

    args, kwargs, out_code, (qq, kk, vv) = record(case, x, api, exp.fresh)
    named = [("q_", qq), ("k_", kk), ("v_", vv), ("m", x.dense if isinstance(x.dense, torch.Tensor) else None)]
    n = numbers(args, kwargs, named, case, x, exp)
    if n > MAX_NUMBERS:
        raise NoScript(f"its mask and arguments hold {n:,} numbers, too many to write out")
    if limits is None:
        limits = {c.quantity: c.allowed for c in row.comparisons if math.isfinite(c.allowed)}
    blocks = any(type(a).__name__ == "BlockMask" for a in (*args, *kwargs.values()))
    dtype = str(x.q.dtype)[6:]
    head = _docstring(path, spec, api, cause, text, case, dtype, grid, smallest)
    head += ["import math", "import os", "import sys", "", "import torch", "import torch.nn.functional as F"]
    head += ["from torch.nn.attention.flex_attention import create_block_mask"] if blocks else []
    head += ["", "sys.path.insert(0, os.getcwd())  # your module, as verify imported it", "", *_importing(spec), ""]
    head += [f"SEED = {seed}", f"DEVICE = {device!r}", f"DTYPE = torch.{dtype}",
             f"GRAD = {backward!r}  # the first call's inputs require grad", "LIMITS = {",
             *(f"    {k!r}: {v!r}," for k, v in limits.items()), "}", HELPERS, ""]
    body = [*_inputs(case, seed, x), "", "", *_arguments(case, args, kwargs, named, api), "", "",
            *_call(case, api, out_code, tuple(exp.ref[0].shape)), "", "", *_reference(case, api, x, exp, backward)]
    write_text(path, "\n".join(head + body) + "\n" + RUN)
    return str(path)


def _docstring(path, spec: str, api: str, cause: str, text: str, case: Case, dtype: str, grid: str,
               smallest: str) -> list[str]:
    """The script's docstring: the cause's line, the case, how to run it and what it prints."""
    from pathlib import Path

    said = f"the grid's {case.name!r} [{dtype}] at {smallest} (the grid's: {grid})"
    how = ("It prints each quantity's error against PyTorch in float64 beside the limit attnlab's rule set for it on "
           f"this case (2 x PyTorch's own error in {dtype} on the same inputs + a rounding floor), checks that no "
           "input changes in place, with gradients and under torch.no_grad() and torch.inference_mode(), and exits 1 "
           "while something is over.")
    quotes = '"' * 3
    return [f"{quotes}Reproduces what attnlab verify found in {spec}" + (f" (the {api} API)" if api != "sdpa" else "")
            + f": {cause}", "", *("    " + w for w in textwrap.wrap(text.replace(quotes, "'" * 3), WIDTH - 4)), "",
            *textwrap.wrap(f"The smallest case found that still fails that way: {said}. Run it from the folder you "
                           "ran attnlab verify in:", WIDTH), "", f"    python {Path(path).name}", "",
            *textwrap.wrap(how, WIDTH), quotes, ""]
