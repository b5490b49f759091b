"""Compile the triton form's kernels for a Hopper GPU (sm_90) on a machine without one.

The interpreter runs the kernels' Python; it does not type-check them as the GPU compiler does.
This compiles each kernel, every mask path switched on at once (and the forward's sinks), with the ptxas that
ships in the Triton wheel, and prints the shared memory each needs (a Hopper block may have 227 KiB).

    python tests/kernels/triton_compile_check.py [DTYPE] [HEAD_DIM]     (run by test_triton.py)
"""

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)  # compiled kernels, not interpreted ones

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from attnlab.kernels import flash_triton, triton_kernels  # noqa: E402

HOPPER_SHARED = 232448  # bytes of shared memory one block may use on sm_90
POINTERS = {"M": "*fp32", "IL": "*fp32", "D": "*fp32", "SINK": "*fp32", "MT": "*i64", "PACK": "*u8"}


def signature(fn, dtype, consts):
    out = {}
    for name in fn.arg_names:
        if name in consts:
            out[name] = "constexpr"
        elif name in POINTERS:
            out[name] = POINTERS[name]
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV", "MASK"):  # MASK: a float mask
            out[name] = f"*{dtype}"
        else:
            out[name] = "fp32" if name in ("qk_scale", "scale") else "i32"
    return out


def main(dtype="bf16", head_dim=128) -> int:
    fwd, dkdv, dq = flash_triton._blocks(head_dim, None, None, interp=False, wide=dtype == "fp32")
    from attnlab.kernels.triton_masks import BITS

    flags = dict(MASKS=sum(BITS.values()) - BITS["DENSE_BOOL"])  # every path at once (the float mask tensor)
    prec = "ieee" if dtype == "fp32" else "tf32"
    bad = 0
    for name, (bm, bn) in (("_fwd", fwd), ("_bwd_dkdv", dkdv), ("_bwd_dq", dq)):
        fn = getattr(triton_kernels, name)
        fn = getattr(fn, "fn", fn)  # under the autotuner
        pow2 = max(16, 1 << (head_dim - 1).bit_length())
        consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_E=pow2, BLOCK_EV=pow2, DOT_PREC=prec, **flags,
                      **({"HAS_SINK": True} if "HAS_SINK" in fn.arg_names else {}))
        src = ASTSource(fn=fn, signature=signature(fn, dtype, consts), constexprs=consts)
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2})
        shared = k.metadata.shared
        ok = shared <= HOPPER_SHARED
        bad += not ok
        print(f"{name} {dtype} d={head_dim} tiles {bm}x{bn}: compiled for sm_90, shared memory {shared} bytes"
              + ("" if ok else f" > {HOPPER_SHARED}"), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(*(sys.argv[1:2] or ["bf16"]), *(int(a) for a in sys.argv[2:3])))
