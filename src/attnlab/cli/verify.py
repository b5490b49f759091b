"""`attnlab verify`: check forms (or your own function) against the float64 oracle."""

from __future__ import annotations

import sys

from ._args import seconds, seed
from ._folder import json_folder, output_folder, save_json

REPRO_HELP = ("for each cause a failing function gets, write DIR/repro_<cause>.py: the smallest case that still "
              "fails that way (verify shrinks batch, heads, lengths and head dims while it does), as a standalone "
              "script that draws its inputs, calls your function as verify did and prints its error against "
              "PyTorch in float64 beside the limit (exit code 1 while it fails)")


def add_parser(sub):
    from attnlab.judge import APIS
    from attnlab.report.terminal import SHOWS

    p = sub.add_parser("verify", help="check forms of attention against a float64 oracle and PyTorch",
                       description="Check forms, forward and dq/dk/dv, over a grid of cases. A case passes when "
                                   "the form's max error against a float64 oracle is at most 2x PyTorch's own "
                                   "error plus a rounding floor.")
    p.add_argument("--impl", action="append", default=None, metavar="NAME[,NAME...]",
                   help="registered form names, or package.module:function for your own SDPA-style function "
                        "(repeatable; default: every registered form except sdpa)")
    p.add_argument("--api", default="sdpa", choices=APIS,
                   help="the API your function is written to: sdpa (F.scaled_dot_product_attention's), flash-attn "
                        "(flash_attn_func: (B, S, H, D), softmax_scale, causal lower-right, window_size, softcap, "
                        "alibi_slopes, the log-sum-exp), flash-attn-varlen (packed sequences, cu_seqlens), flex "
                        "(flex_attention: score_mod, block_mask, return_lse) or paged-decode "
                        "(flash_attn_with_kvcache over a paged KV cache: block_table, cache_seqlens, k, v appended "
                        "in place); each case is put in the API's own layout and arguments, and the log-sum-exp is "
                        "judged where the API returns one (default: sdpa)")
    p.add_argument("--dtypes", "--dtype", dest="dtype", default=None, metavar="DTYPE[,DTYPE...]",
                   help="dtypes to check, comma-separated, from float32, float64, bfloat16, float16 (default: "
                        "float32,float64,bfloat16 on the CPU; float16,bfloat16 on a GPU, where flash kernels refuse "
                        "float32 and float64: ask for float32 there with --dtypes float16,bfloat16,float32)")
    p.add_argument("--quick", action="store_true", help="skip the long cases (the longest each dtype affords)")
    p.add_argument("--forward-only", action="store_true",
                   help="judge the output alone, for a kernel without a backward (called on inputs that do not "
                        "require grad; said in the summary)")
    _limits(p)
    p.add_argument("--only", metavar="TEXT[,TEXT...]",
                   help="run only the cases whose name contains one of these (case-insensitive), e.g. --only "
                        "causal,GQA to rerun what failed")
    p.add_argument("--show", choices=SHOWS, default="judged",
                   help="which rows to print: judged (default; the skipped cases one row per reason, with a count), "
                        "all (every case, skipped ones too) or failures")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.add_argument("--causes", action="store_true",
                   help="print the table of what the judge and the lab can name (each key, how it is detected, the "
                        "words for a kernel author and for a learner) and exit; with --json, also as JSON")
    p.add_argument("--repro", metavar="DIR", help=REPRO_HELP)
    p.add_argument("--seed", type=seed, default=0, help="random seed, 0 to 2**32 - 1 (default: 0)")
    p.add_argument("--model", metavar="NAME_OR_PATH",
                   help="instead of the grid: run each form inside this Hugging Face causal LM (a hub name or a "
                        "local folder) and compare logits, 16 greedy tokens and gradients with the model's own "
                        "attention in float32; --dtypes, --quick and --show do not apply (needs pip install "
                        "'attnlab[hf]')")
    p.add_argument("--no-dropout", action="store_true",
                   help="skip the dropout cases, for a function without dropout (said in the summary); by default "
                        "a function must honour dropout_p: each weight dropped with probability p, the rest scaled "
                        "by 1/(1-p), the same weights for the same torch.manual_seed")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="any torch device (cpu, cuda, cuda:1, ...): inputs are made there in each case's dtype and "
                        "PyTorch's own F.scaled_dot_product_attention runs there as the 2x baseline; the oracle runs "
                        "on the CPU in float64 (default: cpu)")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="for your own functions: seconds a case may take at the basic case's size (2x4x64x64), "
                        "more in proportion to N*H*L*S; a case past it is a FAIL row and that function's "
                        "remaining cases are skipped (default: 10)")
    p.set_defaults(run=run)



def run(args) -> int:
    from attnlab.report.terminal import (
        console,
        diagnosis_lines,
        oracle_line,
        ratio_lines,
        untested_lines,
        verify_summary,
        verify_table,
    )

    from . import UsageError

    if args.causes:
        return _causes(args.json)
    if args.model is not None:
        if args.api != "sdpa":
            raise UsageError(f"--api {args.api} and --model do not go together: --model runs attnlab's forms inside "
                             "a Hugging Face model, through SDPA's API")
        if not args.model.strip():
            raise UsageError("--model needs a Hugging Face hub name or a local folder, got an empty name")
        return run_model(args, _specs(args.impl))
    device = _device(args.device)
    specs = _specs(args.impl, args.api)
    ours = _registered(specs, device)  # other people's functions are imported only in child processes
    dtypes = _dtypes(args.dtype, device)
    json_folder(args.json)  # before the run, not after it: a folder that cannot be made is known now
    if args.repro is not None:
        output_folder(args.repro, "--repro")

    from attnlab.judge import apis

    cases = apis.cases(args.api, dtypes, long=not args.quick)
    cases = _only(cases, args.only)
    result = _judged(args, specs, ours, cases, device)
    if args.show != "failures" or not result.passed:
        console.print(verify_table(result, args.show))
    for line in diagnosis_lines(result) + ratio_lines(result) + [oracle_line(result) or ""] + untested_lines(result):
        if line:
            console.print(line)
    console.print(verify_summary(result, specs, dropout_skipped=args.no_dropout))
    save_json(result, args.json)
    return 0 if result.passed else 1


def on_stop(args) -> str:
    """What a verify that Ctrl-C stopped kept, and how to go on."""
    kept = f"the --repro scripts written so far are kept in {args.repro}; " if getattr(args, "repro", None) else ""
    return f"{kept}the verdicts are written at the end: run it again"


def _causes(json_path: str | None) -> int:
    """The registry (attnlab.judge.registry) as a table: one row a key."""
    from attnlab.judge import registry
    from attnlab.report.terminal import console

    rows = registry.rows()
    for key, det, author, learner in rows:
        console.print(f"{key}  [{det}]", markup=False)
        if author != "-":
            console.print(f"    author:  {author}", markup=False)
        if learner != "-":
            console.print(f"    learner: {learner}", markup=False)
    console.print(f"{len(rows)} keys", markup=False)
    if json_path:
        import json

        from attnlab.results.files import write_text

        json_folder(json_path)
        write_text(json_path, json.dumps([dict(zip(("key", "detectors", "author", "learner"), r, strict=True))
                                          for r in rows], indent=1))
    return 0


def _limits(p) -> None:
    """--factor and --max-ratio: how far from PyTorch's own error a function may be."""
    p.add_argument("--factor", type=_factor, default=2.0, metavar="X",
                   help="the rule's multiple of PyTorch's own error: max|yours - oracle| <= X * max|PyTorch - oracle| "
                        "+ floor (default 2; a larger X for a kernel that is knowingly less precise, said in the "
                        "summary)")
    p.add_argument("--max-ratio", type=_ratio, default=None, metavar="R",
                   help="fail a case whose error is more than R times PyTorch's own on the same inputs, though the "
                        "rule passes it (each dtype's multiple of PyTorch's error is printed under the table; the "
                        "rule allows up to --factor times it plus a rounding floor, which in bfloat16 can sit near "
                        "7x)")


def _at_least_1(text: str, why: str) -> float:
    """A number of at least 1 from the command line, or an argparse error that says ``why``."""
    import argparse
    import math

    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number >= 1 ({why})")
    return x


def _ratio(text: str) -> float:
    """--max-ratio as a number of at least 1."""
    return _at_least_1(text, "PyTorch's own error is 1x")


def _factor(text: str) -> float:
    """--factor as a number of at least 1 (the rule never asks less of a kernel than PyTorch's own error)."""
    return _at_least_1(text, "default 2")


def _only(cases: list, text: str | None) -> list:
    """The cases ``--only`` picks (all without it); none picked is a UsageError naming a few case names."""
    from . import UsageError

    if text is None:
        return cases
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    picked = [c for c in cases if any(w in c.name.lower() for w in words)]
    if not picked:
        names = ", ".join(list(dict.fromkeys(c.name for c in cases if not c.probe))[:6])
        raise UsageError(f"--only {text!r} matches no case; case names read like: {names}, ...")
    return picked


def _specs(impl: list[str] | None, api: str = "sdpa") -> list[str]:
    """The names given to --impl (repeatable, comma-separated), each once; none: every registered form but sdpa.
    Under another ``api`` than sdpa only your own functions (the registered forms take SDPA's)."""
    from attnlab import kernels

    from . import UsageError
    from ._args import function_spec

    names = [s.strip() for item in (impl or []) for s in item.split(",")]
    if "" in names:  # an empty name must not quietly mean "every form"
        given = " ".join(f"--impl {item!r}" for item in impl)
        raise UsageError(f"{given}: an empty form name; give one or more of {', '.join(kernels.forms())} or "
                         "package.module:function, or leave --impl out to check every form")
    specs = [function_spec(s) if ":" in s else s for s in names]  # a misspelt one is said now, not by a child
    if api != "sdpa":
        forms = [s for s in specs if ":" not in s]
        if forms or not specs:
            said = f"--impl {', '.join(forms)}: " if forms else ""
            raise UsageError(f"{said}--api {api} judges your own function, given as package.module:function; "
                             "attnlab's registered forms take SDPA's API (--api sdpa)")
    return list(dict.fromkeys(specs)) or [n for n in kernels.forms() if n != "sdpa"]


def _device(text: str) -> str:
    """--device as a torch device that is here and computes, or a UsageError in one line -- before anything runs
    (the judge's rule, :func:`attnlab.judge.arguments.device`, as attnlab.testing applies it)."""
    from attnlab.judge import arguments

    from . import UsageError

    try:
        return arguments.device(text, "--device")
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from None


def _registered(specs: list[str], device: str) -> dict:
    """The registered forms among --impl, loaded (name -> function); a bad name is a UsageError."""
    from attnlab.judge import LoadError

    from . import UsageError
    from ._args import load_function

    targets = {}
    for spec in specs:
        if ":" in spec:
            continue
        try:
            name, fn = load_function(spec, device)
        except LoadError as e:
            raise UsageError(str(e)) from None
        targets[name] = fn
    return targets


def _judged(args, specs: list[str], ours: dict, cases: list, device: str):
    """verify's result for every function of --impl (attnlab's forms here, the others each in a process of its own),
    with each failing function's causes shrunk to their smallest cases (and with --repro their scripts written)."""
    from attnlab.judge import VerifyResult, repro, verify
    from attnlab.report.terminal import progress

    kw = {"seed": args.seed, "check_dropout": not args.no_dropout, "timeout": args.timeout, "device": device,
          "backward": not args.forward_only, "factor": args.factor, "max_ratio": args.max_ratio}
    rows: dict[str, list] = {}
    repros: dict[str, list] = {}
    shrink = _shrinker(args, cases, kw, len(specs) > 1, repros)
    with progress(len(cases) * len(specs), "cases") as advance:
        if ours:
            done = verify(ours, cases, progress=advance, **kw)
            rows.update({name: [r for r in done.rows if r.form == name] for name in ours})
            for name, fn in ours.items():
                shrink(fn, name, done)
        for spec in specs:
            if spec not in ours:
                rows[spec] = _elsewhere(spec, cases, advance, {**kw, "api": args.api}, shrink)
    result = VerifyResult.of([r for spec in specs for r in rows[spec]], device, args.factor, not args.forward_only)
    return repro.Reproduced.of_result(result, {spec: repros[spec] for spec in specs if repros.get(spec)})


def _shrinker(args, cases, kw: dict, several: bool, repros: dict):
    """``shrink(fn, name, result)``: each cause of ``name``'s failures in verify's ``result`` shrunk to its smallest
    case, with --repro its script written (attnlab.judge.repro), kept in ``repros`` by name."""
    from attnlab import kernels
    from attnlab.judge import repro

    def shrink(fn, name: str, result) -> None:
        if not result.diagnoses.get(name):
            return
        form = kernels.forms(device=None).get(name)
        ours = form is not None and form.fn is fn
        how = repro.Judging(kw["seed"], kw["device"], kw["timeout"], kw["backward"], kw["factor"], ours,
                            ours and form.shared_dropout)
        repros[name] = repro.reproduce(fn, name, result, cases, how, spec=name, api=args.api, folder=args.repro,
                                       several=several)

    return shrink


def _elsewhere(spec: str, cases, advance, kw, shrink=None) -> list:
    """The rows of your function ``package.module:function``, run in a child process (attnlab.judge.apart.isolate);
    ``shrink(fn, spec, result)`` is given the function before its process ends."""
    from attnlab.judge.apart import isolate

    from . import UsageError

    try:
        rows = isolate.verify_elsewhere(spec, cases, progress=advance,
                                        note=lambda line: print(f"attnlab verify: note: {line}", file=sys.stderr),
                                        after=None if shrink is None else lambda fn, r: shrink(fn, spec, r), **kw)
    except isolate.LoadFailed as e:
        raise UsageError(str(e)) from None
    return rows


def _dtypes(text: str | None, device: str = "cpu") -> list[str]:
    """--dtypes as a list of names, each once, or a UsageError naming the choices; not given: the device's
    (:func:`attnlab.judge.cases.default_dtypes`)."""
    from attnlab.judge import DTYPES, default_dtypes

    from . import UsageError

    if text is None:
        return list(default_dtypes(device))
    dtypes = list(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))  # each once
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise UsageError(f"--dtypes {text!r}: choose from {', '.join(DTYPES)}")
    return dtypes


def run_model(args, specs: list[str]) -> int:
    """`verify --model`: the three checks of attnlab.judge.hf_check, one table row per form."""
    from attnlab.nn import hf

    from . import UsageError

    try:
        hf.require("transformers")
    except hf.MissingExtra as e:
        raise UsageError(str(e)) from None
    from attnlab.judge import hf_check
    from attnlab.report.hf import model_summary, model_table
    from attnlab.report.terminal import console, progress

    known = hf.names().values()
    bad = [s for s in specs if s not in known]
    if bad:
        raise UsageError(f"--impl {', '.join(bad)}: --model runs registered single-process forms other than sdpa "
                         f"({', '.join(known)})")
    json_folder(args.json)
    console.print(f"attnlab verify --model {args.model}: {', '.join(specs)} (logits, {hf_check.NEW_TOKENS} greedy "
                  f"tokens, gradients)")
    try:
        with progress(len(specs), "forms") as advance:
            result = hf_check.check_model(args.model, specs, seed=args.seed, progress=advance)
    except (OSError, ValueError) as e:  # no such model, or not a causal LM transformers can load
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"cannot load a causal LM from {args.model!r}: {first}") from None
    console.print(model_table(result))
    console.print(model_summary(result, args.model))
    save_json(result, args.json)
    return 0 if result.passed else 1
