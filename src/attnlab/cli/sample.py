"""`attnlab sample`: continue a prompt with a trained checkpoint, through the KV cache."""

from __future__ import annotations

import math
import sys

from ._args import positive, seed, single_process_form


def add_parser(sub):
    p = sub.add_parser("sample", help="generate text from a checkpoint written by `attnlab train`",
                       description="Continue a prompt one character at a time: the prompt fills the KV cache "
                                   "once, then every new character is a single query against it.")
    p.add_argument("--ckpt", required=True, help="checkpoint, e.g. attnlab-out/checkpoints/scale-sqrt.pt")
    p.add_argument("--prompt", default="def ", help="text to continue (default: 'def ')")
    p.add_argument("--tokens", type=positive, default=200,
                   help="characters to generate, at most 1,000,000 (default: 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default: 0.8)")
    p.add_argument("--top-k", type=positive, default=None, help="sample only from the k likeliest characters")
    p.add_argument("--seed", type=seed, default=0, help="random seed (default: 0)")
    p.add_argument("--impl", default=None, help="form of attention to decode with (default: the one trained with)")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.train import sample

    from . import UsageError

    if not args.ckpt.strip():  # Path("") is the current folder
        raise UsageError("--ckpt needs a checkpoint file, such as attnlab-out/checkpoints/scale-sqrt.pt; got an "
                         "empty name")
    if not 0 < args.temperature < math.inf:
        raise UsageError(f"--temperature must be a finite number > 0, got {args.temperature}")
    if not args.tokens <= sample.MAX_TOKENS:  # before the checkpoint is read: known from the flag alone
        raise UsageError(f"--tokens {args.tokens}: at most {sample.MAX_TOKENS:,} characters in one run; run again "
                         "with another --seed for more text")
    if args.impl is not None:
        single_process_form(args.impl, "sampling", "cpu")  # the model is read onto the CPU

    shown = []

    def show(text: str) -> None:  # each character as it comes: Ctrl-C keeps what was written
        if not shown:  # the prompt with the first character: a checkpoint or prompt that fails writes nothing
            shown.append(sys.stdout.write(args.prompt))
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        r = sample.sample(args.ckpt, args.prompt, args.tokens, args.temperature, args.top_k, args.seed, args.impl,
                          on_text=show)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        if shown:
            show("\n")
        raise
    show("\n")
    rate = r.tokens / r.seconds if r.seconds > 0 else float("inf")
    print(f"[{r.tokens} characters from {r.variant} at step {r.step} in {r.seconds:.2f} s, {rate:,.0f} characters/s, "
          f"through the KV cache]", file=sys.stderr)
    return 0
