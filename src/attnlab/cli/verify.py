"""`attnlab verify`: check forms (or your own function) against the float64 oracle."""

from __future__ import annotations

from ._args import seconds, seed
from ._folder import json_folder, save_json


def add_parser(sub):
    p = sub.add_parser("verify", help="check forms of attention against a float64 oracle and PyTorch",
                       description="Check forms, forward and dq/dk/dv, over a grid of cases. A case passes when "
                                   "the form's max error against a float64 oracle is at most 2x PyTorch's own "
                                   "error plus a rounding floor.")
    p.add_argument("--impl", action="append", default=None, metavar="NAME[,NAME...]",
                   help="registered form names, or package.module:function for your own SDPA-style function "
                        "(repeatable; default: every registered form except sdpa)")
    p.add_argument("--dtype", default="float32,float64,bfloat16", help="dtypes to check (comma-separated)")
    p.add_argument("--quick", action="store_true", help="skip the long (L=1025) cases")
    p.add_argument("--show", choices=["all", "failures"], default="all", help="which rows to print")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.add_argument("--seed", type=seed, default=0, help="random seed, 0 to 2**32 - 1 (default: 0)")
    p.add_argument("--model", metavar="NAME_OR_PATH",
                   help="instead of the grid: run each form inside this Hugging Face causal LM (a hub name or a "
                        "local folder) and compare logits, 16 greedy tokens and gradients with the model's own "
                        "attention in float32; --dtype, --quick and --show do not apply (needs pip install "
                        "'attnlab[hf]')")
    p.add_argument("--no-dropout", action="store_true",
                   help="skip the dropout cases, for a function without dropout (said in the summary); by default "
                        "a function must honour dropout_p: each weight dropped with probability p, the rest scaled "
                        "by 1/(1-p), the same weights for the same torch.manual_seed")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="for your own functions: seconds a case may take at the basic case's size (2x4x64x64), "
                        "more in proportion to N*H*L*S; a case past it is a FAIL row and that function's "
                        "remaining cases are skipped (default: 10)")
    p.set_defaults(run=run)



def run(args) -> int:
    from attnlab.lab import verify
    from attnlab.report.terminal import console, progress, verify_summary, verify_table

    specs = _specs(args.impl)
    if args.model:
        return run_model(args, specs)
    targets = _targets(specs)
    dtypes = _dtypes(args.dtype)
    json_folder(args.json)  # before the run, not after it: a folder that cannot be made is known now

    cases = verify.default_cases(dtypes, long=not args.quick)
    with progress(len(cases) * len(targets), "cases") as advance:
        result = verify.verify(targets, cases, seed=args.seed, progress=advance, check_dropout=not args.no_dropout,
                               timeout=args.timeout)
    if args.show == "all" or not result.passed:
        console.print(verify_table(result, args.show))
    console.print(verify_summary(result, list(targets), dropout_skipped=args.no_dropout))
    save_json(result, args.json)
    return 0 if result.passed else 1


def _specs(impl: list[str] | None) -> list[str]:
    """The names given to --impl (repeatable, comma-separated); none: every registered form but sdpa."""
    from attnlab import kernels

    specs = [s.strip() for item in (impl or []) for s in item.split(",") if s.strip()]
    return specs or [n for n in kernels.forms() if n != "sdpa"]


def _targets(specs: list[str]) -> dict:
    """Each --impl spec loaded as (name -> function): a registered form or package.module:function."""
    from attnlab.lab import verify

    from . import UsageError

    targets = {}
    for spec in specs:
        try:
            name, fn = verify.load_function(spec)
        except verify.LoadError as e:
            raise UsageError(str(e)) from None
        targets[name] = fn
    return targets


def _dtypes(text: str) -> list[str]:
    """--dtype as a list of names, each once, or a UsageError naming the choices."""
    from attnlab.lab import verify

    from . import UsageError

    dtypes = list(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))  # each once
    bad = [d for d in dtypes if d not in verify.DTYPES]
    if bad or not dtypes:
        raise UsageError(f"--dtype {text!r}: choose from {', '.join(verify.DTYPES)}")
    return dtypes


def run_model(args, specs: list[str]) -> int:
    """`verify --model`: the three checks of attnlab.lab.hf_check, one table row per form."""
    from attnlab.nn import hf

    from . import UsageError

    try:
        hf.require("transformers")
    except hf.MissingExtra as e:
        raise UsageError(str(e)) from None
    from attnlab.lab import hf_check
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
