"""Level 7 run where Triton can run it: ``python -m tests.lab.triton_run WHAT`` prints a JSON answer.

Triton reads TRITON_INTERPRET when a kernel is defined, so the kernels of tests/lab/level_triton.py
are judged in a process of their own, started by the tests with the variable set (or on a GPU without
it). WHAT is ``probe`` (the solution and a slip named, on the level's probes: the small run
`make test` keeps), ``slips`` (every slip of level_triton.SLIPS and the solution: what is named first),
``grade`` (the solution and the starter on the level's graded cases and lse cases, as lab check grades
them), or ``compile`` (where there is no GPU: the solution kernel compiled for a Hopper GPU by the
compiler in the wheel, as tests/kernels/triton_compile_check.py does for the triton form).
"""

import functools
import json
import sys
import time


def _named(slip):
    from attnlab.lab import levels
    from attnlab.lab.check import level_diagnoses
    from attnlab.lab.levels import slips
    from attnlab.lab.levels import triton as level
    from tests.lab import level_triton as LT

    fn = functools.partial(LT.flash_attention, slip=slip)
    got = slips.answers(functools.partial(level.probe_call, fn), level.PROBES, 0)
    return [d.key for d in level_diagnoses(got, levels.find("triton"), 0, [])]


def probe() -> dict:
    return {str(s): _named(s) for s in (None, "pad-keys")}


def all_slips() -> dict:
    from tests.lab import level_triton as LT

    return {str(s): _named(s) for s in (None, *LT.SLIPS)}


def grade() -> dict:
    import tempfile
    from pathlib import Path

    from attnlab.judge import verify as V
    from attnlab.judge.apart import loader
    from attnlab.lab import files, levels
    from attnlab.lab.levels import triton as level
    from tests.lab import level_triton as LT

    out = {"runs": level.runs()}
    with tempfile.TemporaryDirectory() as d:
        starter = loader.load_file(Path(files.start(d, levels.find("triton")).path), "flash_attention",
                                   module_name="attnlab_test_triton_starter")
        for name, fn in (("solution", LT.flash_attention), ("starter", starter)):
            t0 = time.perf_counter()
            r = V.verify({name: level.sdpa(fn)}, level.cases(), timeout=None, backward=False)
            rows, _, _ = level.extra_rows(functools.partial(level.run, fn), name, 0)
            out[name] = {"rows": [(x.case, x.dtype, x.status, [f"{c.err:.1e}/{c.allowed:.1e}" for c in x.comparisons])
                                  for x in r.rows + rows], "seconds": time.perf_counter() - t0}
    return out


def compile_for_hopper() -> dict:
    """The solution kernel compiled for sm_90 (no GPU needed): its shared memory, or the compiler's error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tests.lab import level_triton as LT

    kernel = LT.attention_kernel
    consts = {"IS_CAUSAL": True, "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_E": 64, "BLOCK_EV": 64, "SLIP": 0}
    pointers = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "LSE": "*fp32"}
    sig = {n: "constexpr" if n in consts else pointers.get(n, "fp32" if n == "scale" else "i32")
           for n in kernel.arg_names}
    compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32))
    return {"shared_bytes": compiled.metadata.shared}


if __name__ == "__main__":
    what = sys.argv[1]
    print(json.dumps({"probe": probe, "slips": all_slips, "grade": grade, "compile": compile_for_hopper}[what]()))
