"""The cases ``attnlab verify`` runs: problems chosen for the bugs attention code really has.

Each :class:`Case` is one problem -- sizes, masking, dtype, and how the inputs arrive -- and
:func:`default_cases` is the grid: causal or not; bool, float, broadcast and padding masks, a padding
mask together with ``is_causal``; L != S with both causal alignments; GQA and MQA; head dims 40, 59, 64,
128 and 256; lengths 1 and 97, lengths off the tile sizes kernels use (not multiples of 16, 64 or 128)
with one batch dim, and the longest causal case each dtype affords (:data:`LONGEST`); rows with
every key masked; an explicit ``scale`` (small, large, negative, a 0-d tensor); ``is_causal``
together with a mask; scores in the hundreds (where a softmax without the max subtraction
overflows); inputs that are not contiguous (the ``(B, L, H, E).transpose(1, 2)`` views transformers
passes, expanded keys and values, a sliced last dim) for every mask kind; dropout; score modifiers.

:func:`make_inputs` draws a case's seeded tensors; :func:`views` lays them out as the case says
(from leaves whose gradients the judge reads). :attr:`Case.tags` names what a case exercises, so that
a pattern of failures can be read as a likely cause (:mod:`attnlab.judge.diagnose`).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from attnlab import masks as M
from attnlab.kernels.dtypes import DTYPES as ALL_DTYPES

DTYPES = {name: ALL_DTYPES[name] for name in ("float32", "float64", "bfloat16", "float16")}  # the dtypes verify checks
CPU_DTYPES = ("float32", "float64", "bfloat16")  # what a CPU kernel is checked in unless told otherwise
GPU_DTYPES = ("float16", "bfloat16")  # what a GPU kernel is written for (flash kernels refuse float32 and float64)
LAYOUTS = ("transposed", "expanded", "sliced")  # how non-contiguous inputs arrive (see views)
LARGE = 10.0  # q and k times this: with E = 32 the scaled scores have a spread of about 100
# the long case's length per dtype (left out by quick grids): float64's oracle and PyTorch runs cost the most per
# element, half precision the least, and it is where long sums lose the most
LONGEST = {"float64": 1025, "float32": 2049, "bfloat16": 4097, "float16": 4097}


@dataclass(frozen=True)
class Case:
    """One problem: sizes, masking, dtype, layout. ``mask`` names how the mask is made (see make_inputs)."""

    name: str
    batch: tuple[int, ...] = (2,)
    H: int = 4
    Hkv: int | None = None
    L: int = 64
    S: int | None = None
    E: int = 32
    Ev: int | None = None
    is_causal: bool = False
    mask: str | None = None  # one of MASK_KINDS
    dtype: str = "float32"
    grad_mask: bool = False  # float mask that requires grad (a learnable bias)
    dropout_p: float = 0.0
    mod: str | None = None  # a score modifier family of attnlab.judge.mod_cases (score_mod=)
    scale: float | None = None  # None: 1/sqrt(E)
    scale_tensor: bool = False  # pass the scale as a 0-d tensor, as PyTorch accepts it
    magnitude: float = 1.0  # q and k are multiplied by this (large logits)
    layout: str | None = None  # None (contiguous) or one of LAYOUTS
    api: str | None = None  # how the case is put to an API other than SDPA's (attnlab.judge.apis), in words
    probe: str | None = None  # designed inputs that measure one part of the semantics (attnlab.judge.probes)
    sinks: str | None = None  # attention sinks, how they sit against the scores (attnlab.judge.sink_cases.KINDS)

    def __repr__(self) -> str:
        """The name and the fields that differ from a default case: what a failing test's parameter shows."""
        default = Case(self.name)
        fields = [f"{n}={getattr(self, n)!r}" for n in self.__dataclass_fields__ if n != "name"
                  and getattr(self, n) != getattr(default, n)]
        return f"Case({', '.join([repr(self.name), *fields])})"

    @property
    def work(self) -> int:
        return math.prod(self.batch) * self.H * self.L * (self.S or self.L)

    def seed(self, seed: int) -> int:
        """The seed this case's inputs are drawn from under a run's ``seed``: from the case's name, so that a case
        draws the same numbers whatever else runs with it (``--only`` reruns it as it was) and in every dtype
        (float32 and float64 see the same values; a difference between dtypes is the dtype's)."""
        return seed + zlib.crc32(self.name.encode()) % 1_000_003

    @property
    def label(self) -> str:
        return f"{self.name} [{self.dtype}]"

    @property
    def gqa(self) -> bool:
        return self.Hkv is not None and self.Hkv != self.H

    @property
    def tags(self) -> frozenset[str]:
        """What the case exercises, for reading a pattern of failures (see attnlab.judge.diagnose)."""
        S = self.S or self.L
        t = {self.dtype}
        flags = {
            "scale": self.scale is not None, "scale-tensor": self.scale_tensor,
            "causal": self.is_causal or self.mask in CAUSAL_MASKS,
            "upper-left L!=S": self.is_causal and self.L != S, "lower-right": self.mask in LOWER_RIGHT,
            "gqa": self.gqa, "dropout": self.dropout_p > 0, "large-logits": self.magnitude > 1,
            "causal+mask": self.is_causal and self.mask is not None, "mod": self.mod is not None,
            "noncontig": self.layout is not None,
            "dead-rows": self.mask in ("dead-rows", "float-dead-rows") or (self.mask in LOWER_RIGHT and self.L > S),
            "bool-mask": self.mask in BOOL_MASKS,
            "float-mask": self.mask in ("float", "float-heads", "float-dead-rows"),
            "broadcast-mask": self.mask in ("broadcast", "padding", "float-heads", *CAUSAL_BIAS),  # (L, S) for others
            "mask-fn": self.mask in MASK_FAMILIES, "grad-mask": self.grad_mask, "Ev!=E": (self.Ev or self.E) != self.E,
            "batch-dims": len(self.batch) != 1, "L=1": self.L == 1, "L!=S": self.L != S,
        }
        if self.api:  # an API's case says its mask in the API's own arguments: none of SDPA's mask kinds is passed
            flags = {k: on for k, on in flags.items() if k not in SDPA_MASK_TAGS}
            words = self.api.split()
            flags |= {tag: any(w == arg or w.startswith(arg + "=") for w in words for arg in args)
                      for tag, args in API_ARG_TAGS.items()}
            window = next((w.split("=")[1].split(",") for w in words if w.startswith("window=")), None)
            if window is not None:  # which side the window itself bounds (causal bounds the right one anyway)
                flags["window-left"] = int(window[0]) >= 0
                flags["window-right"] = int(window[1]) >= 0 and "causal" not in words
        return frozenset(t | {name for name, on in flags.items() if on} | ({self.layout} if self.layout else set())
                         | ({"probe"} if self.probe else set()) | ({"sinks"} if self.sinks else set()))

    def shrunk(self, max_work: int) -> Case:
        """The same case at smaller lengths (ratio of L to S kept, L=1 kept), for slow forms."""
        if self.work <= max_work:
            return self
        batch = tuple(1 for _ in self.batch)
        S = self.S or self.L
        f = math.sqrt(max_work / (math.prod(batch) * self.H * self.L * S))
        L2 = 1 if self.L == 1 else max(2, int(self.L * f))
        S2 = max(2, int(S * f)) if self.L != 1 else max(2, int(max_work / (math.prod(batch) * self.H)))
        return replace(self, batch=batch, L=L2, S=S2 if self.S else None, name=f"{self.name} (shrunk: L={L2}, S={S2})")


API_ARG_TAGS = {"window": ("window",), "causal": ("causal",), "softcap": ("softcap",),
                "alibi": ("alibi", "alibi-batch"),
                "append": ("new",)}  # an API case's tag -> the words of its API arguments that give it
SDPA_MASK_TAGS = {"upper-left L!=S", "lower-right", "causal+mask", "bool-mask", "float-mask", "broadcast-mask",
                  "mask-fn", "grad-mask"}

def _documents_by_row(S: int):
    def fn(b, h, i, j, L, S_):
        n = 2 + b % 2  # documents in batch row b, of equal length
        return (i * n) // S_ == (j * n) // S_

    return M.Mask(fn, "documents per batch row")


def _documents_by_head(S: int):
    def fn(b, h, i, j, L, S_):
        n = 2 + h % 3  # documents in head h, of equal length
        return (i * n) // S_ == (j * n) // S_

    return M.Mask(fn, "documents per head")


MASK_FAMILIES = {  # name -> (S -> mask): every mask function of attnlab.masks, sized for a case
    "causal": lambda S: M.from_spec("causal"),
    "causal_lower_right": lambda S: M.from_spec("causal_lower_right"),
    "sliding_window": lambda S: M.from_spec(f"sliding_window:{max(1, S // 5)}"),
    "prefix_lm": lambda S: M.from_spec(f"prefix_lm:{S // 4}"),
    "document & causal": lambda S: M.from_spec(f"document:{min(4, S)}", S) & M.from_spec("causal"),
    "sliding_window | prefix_lm": lambda S: M.from_spec("sliding_window:4") | M.from_spec("prefix_lm:3"),
    # a window narrow enough that the flash form runs it as key bands (attnlab.kernels.flash_band)
    "causal_lower_right & sliding_window": lambda S: M.causal_lower_right() & M.sliding_window(max(1, S // 12)),
    # documents that differ from one batch row to the next (2 of them in even rows, 3 in odd): a kernel that reads
    # one row's mask for every row shows it
    "documents per batch row & causal": lambda S: _documents_by_row(S) & M.from_spec("causal"),
    # ... and from one head to the next (2, 3 or 4 of them): a kernel that reads a kv head's mask, or one head's for
    # every head, shows it
    "documents per head & causal": lambda S: _documents_by_head(S) & M.from_spec("causal"),
}
BANDS = "causal_lower_right & sliding_window"  # at L=128, S=217 the flash form runs it as key bands
CAUSAL_BIAS = ("causal-bias upper-left", "causal-bias lower-right")  # torch.nn.attention.bias.CausalBias
MASK_KINDS = ("bool", "float", "float-heads", "broadcast", "padding", "dead-rows", "float-dead-rows", "lower-right",
              *CAUSAL_BIAS,
              *MASK_FAMILIES)
# masks that other people's functions receive as bool tensors (mask functions too)
BOOL_MASKS = {"bool", "dead-rows", "broadcast", "padding", "lower-right", *CAUSAL_BIAS, *MASK_FAMILIES}
CAUSAL_MASKS = {"lower-right", *CAUSAL_BIAS, *MASK_FAMILIES} - {"sliding_window | prefix_lm"}
LOWER_RIGHT = {"lower-right", "causal-bias lower-right", "causal_lower_right", "causal_lower_right & sliding_window"}


def default_dtypes(device="cpu") -> tuple[str, ...]:
    """The dtypes a function is judged in on ``device`` unless asked for others: on the CPU float32, float64 and
    bfloat16; on any other device (a GPU) float16 and bfloat16, the dtypes its kernels are written for -- float32
    or float64 there only where asked (``--dtypes``, ``dtypes=``)."""
    return CPU_DTYPES if torch.device(device).type == "cpu" else GPU_DTYPES


def default_cases(dtypes: Iterable[str] = CPU_DTYPES, long: bool = True) -> list[Case]:
    """The verification grid: every case in every dtype."""
    cases = [replace(c, dtype=dt) for dt in dtypes for c in _base() + _noncontiguous()]
    if long:  # the longest case each dtype affords, after that dtype's other cases
        for dt in dtypes:
            n = LONGEST[dt]
            at = max(i for i, c in enumerate(cases) if c.dtype == dt) + 1
            cases.insert(at, Case(f"L={n} causal", batch=(1,), H=2 if n <= 1025 else 1, L=n, E=64, is_causal=True,
                                  dtype=dt))
    if "float64" in dtypes:  # learnable ALiBi slopes and an unlisted bias: float64 only (mod_cases.FLOAT64_ONLY)
        cases.append(Case("score_mod alibi slopes, learnable, padding", mask="padding", mod="alibi slopes",
                          dtype="float64"))
        cases.append(Case("score_mod reads a learnable bias it does not list, causal", is_causal=True,
                          mod="unlisted bias", dtype="float64"))
    return cases


def _base() -> list[Case]:
    """The grid's cases in one dtype: shapes, masks, alignments, scales, large logits, dropout, score_mods."""
    base = [
        Case("basic"),
        Case("causal", is_causal=True),
        Case("no batch dims", batch=(), H=2, L=17, E=16),
        Case("two batch dims", batch=(2, 3), H=2, L=9, E=8),
        Case("head dim 40, L=97", batch=(1,), H=2, L=97, E=40, is_causal=True),
        Case("head dim 59, Ev=24", batch=(1,), H=2, L=33, S=47, E=59, Ev=24),
        *[Case(f"head dim {E}, causal", batch=(1,), H=2, L=48, E=E, is_causal=True) for E in (64, 128, 256)],
        Case("off the tiles: L=100, S=75", batch=(1,), H=2, L=100, S=75),  # L, S mod 16 != 0
        Case("off the tiles: L=S=137, padding mask", batch=(1,), H=2, L=137, mask="padding"),
        Case("L=1", batch=(2,), H=2, L=1, S=65, E=32),
        Case("L<S causal upper-left", batch=(1,), H=2, L=33, S=97, E=32, is_causal=True),
        Case("L>S causal upper-left", batch=(1,), H=2, L=97, S=33, E=32, is_causal=True),
        Case("L<S causal lower-right", batch=(1,), H=2, L=33, S=97, E=32, mask="lower-right"),
        Case("L>S lower-right, dead rows", batch=(1,), H=2, L=97, S=33, E=32, mask="lower-right"),
        Case("L=1 decode lower-right", batch=(2,), H=2, L=1, S=65, E=32, mask="lower-right"),
        Case("bool mask", mask="bool"),
        Case("float mask", mask="float"),
        Case("broadcast mask (L, S)", mask="broadcast"),
        Case("padding mask (N,1,1,S)", mask="padding"),
        Case("is_causal with a padding mask (N,1,1,S)", is_causal=True, mask="padding"),
        Case("fully masked rows", mask="dead-rows"),
        Case("float mask with -inf, fully masked rows", mask="float-dead-rows"),
        Case("CausalBias upper-left, L>S", batch=(1,), H=2, L=47, S=33, mask="causal-bias upper-left"),
        Case("CausalBias lower-right, L<S", batch=(1,), H=2, L=33, S=47, mask="causal-bias lower-right"),
        Case("GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True),
        Case("MQA 4/1 bool mask", batch=(1,), H=4, Hkv=1, L=40, E=32, mask="bool"),
    ]
    base += [Case(f"mask fn: {name}", batch=(2,), H=2, L=61, E=32, mask=name) if name != BANDS else
             Case(f"mask fn: {name}", batch=(2,), H=4, L=128, S=217, mask=name) for name in MASK_FAMILIES]
    base += [
        Case("float mask, learnable bias", mask="float", grad_mask=True),
        Case("float bias (H,1,S), learnable", mask="float-heads", grad_mask=True),
        Case("scale=0.05", scale=0.05),
        Case("scale=3, causal", is_causal=True, scale=3.0),
        Case("scale=-0.7", batch=(1,), H=2, L=33, S=47, scale=-0.7),
        Case("scale=0.3 as a 0-d tensor, GQA 4/2", batch=(1,), H=4, Hkv=2, L=40, scale=0.3, scale_tensor=True),
        Case("is_causal with a bool mask", is_causal=True, mask="bool"),
        Case("is_causal with a float mask, L<S", batch=(1,), H=2, L=33, S=47, is_causal=True, mask="float"),
        Case("large logits", magnitude=LARGE),
        Case("large logits, causal, L=97", batch=(1,), H=2, L=97, is_causal=True, magnitude=LARGE),
        Case("dropout 0.2", dropout_p=0.2),
        Case("dropout 0.5, GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True, dropout_p=0.5),
        Case("score_mod softcap(2), causal", is_causal=True, mod="softcap"),
        Case("score_mod alibi, GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True, mod="alibi"),
        Case("score_mod relative_bias, learnable, L<S", batch=(1,), H=2, L=33, S=97, mod="relative_bias"),
        Case("score_mod alibi then softcap, sliding window", batch=(2,), H=2, L=61, mask="sliding_window",
             mod="alibi then softcap"),
        Case("score_mod hides whole rows", mod="hide rows"),
    ]
    return base


def _noncontiguous() -> list[Case]:
    """Transposed views for no mask, causal and every mask kind; expanded k/v and a sliced last dim on a few."""
    out = [Case("transposed (B, L, H, E) views", layout="transposed"),
           Case("transposed views, causal", is_causal=True, layout="transposed")]
    for kind in MASK_KINDS:
        S = 217 if kind == BANDS else (47 if kind in ("lower-right", *CAUSAL_BIAS) else None)
        L = 128 if S == 217 else (33 if S == 47 else 40)
        out.append(Case(f"transposed views, mask {kind}", batch=(2,), H=2, L=L, S=S, mask=kind, layout="transposed"))
    out += [Case("expanded k, v (stride 0 over the batch)", layout="expanded"),
            Case("expanded k, v, causal GQA 4/2", batch=(2,), H=4, Hkv=2, L=40, is_causal=True, layout="expanded"),
            Case("expanded k, v, bool mask", mask="bool", layout="expanded"),
            Case("sliced last dim", layout="sliced"),
            Case("sliced last dim, causal, L<S", batch=(1,), H=2, L=33, S=47, is_causal=True, layout="sliced"),
            Case("sliced last dim, float mask", mask="float", layout="sliced")]
    return out


def make_inputs(case: Case, seed: int, device="cpu"):
    """Seeded inputs for a case, on ``device``: q, k, v, the mask argument for attnlab forms, its dense twin
    (for PyTorch and functions that take only tensors), grad_out. Drawn on the CPU, so every device sees
    the same numbers."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[case.dtype]
    Hkv, S, Ev = case.Hkv or case.H, case.S or case.L, case.Ev or case.E
    q = torch.randn(*case.batch, case.H, case.L, case.E, generator=g) * case.magnitude
    k = torch.randn(*case.batch, Hkv, S, case.E, generator=g) * case.magnitude
    v = torch.randn(*case.batch, Hkv, S, Ev, generator=g)
    grad_out = torch.randn(*case.batch, case.H, case.L, Ev, generator=g)
    if case.layout == "expanded" and case.batch:  # one batch element's keys and values, seen by all
        k, v = (t[:1].expand(t.shape).clone() for t in (k, v))
    mask = _mask(case, g)
    if case.mask in CAUSAL_BIAS:  # PyTorch's CausalBias, and the bool mask it stands for (for other functions)
        dense = torch.ones(case.L, S, dtype=torch.bool).tril(S - case.L if "lower" in case.mask else 0)
    elif isinstance(mask, M.Mask):
        dense = _dense_twin(case.mask, case.batch, case.H, case.L, S).clone()
    else:
        dense = mask
    q, k, v, grad_out = (t.to(device=device, dtype=dt) for t in (q, k, v, grad_out))
    if case.mask in CAUSAL_BIAS:
        dense = dense.to(device)
    elif isinstance(mask, torch.Tensor):
        mask = mask.detach().to(device, dt if mask.is_floating_point() else torch.bool).requires_grad_(case.grad_mask)
        dense = mask
    elif dense is not None:
        dense = dense.to(device)
    return q, k, v, mask, dense, grad_out


@functools.lru_cache(maxsize=32)
def _dense_twin(name: str, batch: tuple[int, ...], H: int, L: int, S: int) -> torch.Tensor:
    """A mask function's bool tensor (*batch, H, L, S) (``name``: "lower-right" or a mask family) for the functions
    that take tensors, read the way FlexAttention's ``create_mask`` reads it -- ``torch.vmap`` over the key index,
    then the query's, the head's, the batch's -- not the oracle's way (one vmap over every index at once), and
    without importing FlexAttention (seconds); once per shape, for every dtype."""
    mask = M.causal_lower_right() if name == "lower-right" else MASK_FAMILIES[name](S)

    def fn(b, h, i, j):
        return mask(b, h, i, j, L, S)

    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        fn = torch.vmap(fn, in_dims=dims)
    d = fn(torch.arange(math.prod(batch)), torch.arange(H), torch.arange(L), torch.arange(S))
    return d.reshape(*batch, H, L, S) if batch else d[0]


def _mask(case: Case, g: torch.Generator):
    """The case's mask: a tensor drawn from ``g``, an attnlab mask function, or None."""
    S = case.S or case.L
    shape = (*case.batch, case.H, case.L, S)
    if case.mask == "bool":
        mask = torch.rand(shape, generator=g) > 0.3
        mask[..., 0] = True  # keep every row alive: dead rows are their own case
    elif case.mask == "float":
        mask = torch.randn(shape, generator=g)
    elif case.mask == "float-heads":
        mask = torch.randn(case.H, 1, S, generator=g)
    elif case.mask == "broadcast":
        mask = torch.rand(case.L, S, generator=g) > 0.5
        mask[:, -1] = True
    elif case.mask == "padding":
        lengths = torch.randint(1, S + 1, (math.prod(case.batch),), generator=g)
        mask = (torch.arange(S)[None] < lengths[:, None]).view(*case.batch, 1, 1, S)
    elif case.mask == "dead-rows":
        mask = torch.rand(shape, generator=g) > 0.3
        mask[..., ::5, :] = False  # every fifth query sees no key at all
    elif case.mask == "float-dead-rows":  # an additive mask: -inf hides a key, as a bool mask's False does
        mask = torch.randn(shape, generator=g).masked_fill(torch.rand(shape, generator=g) < 0.3, -math.inf)
        mask[..., ::5, :] = -math.inf  # every fifth query sees no key at all
    elif case.mask == "lower-right":
        mask = M.causal_lower_right()
    elif case.mask in CAUSAL_BIAS:
        from torch.nn.attention import bias  # imported only here: it costs seconds

        mask = (bias.causal_lower_right if "lower" in case.mask else bias.causal_upper_left)(case.L, S)
    elif case.mask is not None:
        mask = MASK_FAMILIES[case.mask](S)
    else:
        mask = None
    return mask


def views(case: Case, q, k, v):
    """(leaves, inputs): fresh leaves that require grad, and q, k, v laid out from them as the case says.

    transposed: stored (..., L, H, E) and seen (..., H, L, E), as transformers passes them;
    expanded: k and v are one batch element's, expanded (stride 0) over the batch;
    sliced: the last dim is the first E columns of a wider tensor.
    """
    if case.layout == "transposed" and q.dim() >= 3:
        leaves = [t.detach().transpose(-3, -2).contiguous().requires_grad_(True) for t in (q, k, v)]
        return leaves, [t.transpose(-3, -2) for t in leaves]
    if case.layout == "expanded" and case.batch:
        lq = q.detach().clone().requires_grad_(True)
        lk, lv = (t.detach()[:1].clone().requires_grad_(True) for t in (k, v))
        return [lq, lk, lv], [lq, lk.expand(k.shape), lv.expand(v.shape)]
    if case.layout == "sliced":
        leaves = [torch.cat([t.detach(), t.detach()[..., :7]], dim=-1).requires_grad_(True) for t in (q, k, v)]
        return leaves, [w[..., :t.shape[-1]] for w, t in zip(leaves, (q, k, v), strict=True)]
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    return leaves, leaves


def random_cases(n: int, seed: int, dtypes=("float32", "float64"), max_len: int = 24, max_dim: int = 40,
                 max_batch: int = 3) -> list[Case]:
    """``n`` seeded random cases: 0-2 batch dims, GQA/MQA, L != S, E != Ev, odd sizes, every mask kind,
    causal, a learnable bias, any scale (negative too), dropout, any layout, in the given dtypes."""
    g = torch.Generator().manual_seed(seed)

    def pick(seq):
        return seq[int(torch.randint(len(seq), (), generator=g))]

    def num(lo, hi):
        return int(torch.randint(lo, hi + 1, (), generator=g))

    out = []
    for i in range(n):
        Hkv = num(1, 3)
        H = Hkv * pick((1, 1, 2, 3))
        L, S = num(1, max_len), pick((None, num(1, max_len)))
        mask = pick((None, None, *MASK_KINDS))
        causal = mask is None and num(0, 2) == 0
        S = None if mask == "document & causal" else S  # document ids index queries and keys alike
        scale = pick((None, None, None, round(float(torch.randn((), generator=g)), 3)))
        out.append(Case(f"random #{i}", batch=tuple(num(1, max_batch) for _ in range(num(0, 2))), H=H,
                        Hkv=Hkv if Hkv != H else None, L=L, S=S, E=num(1, max_dim), Ev=pick((None, num(1, max_dim))),
                        is_causal=causal, mask=mask, dtype=pick(dtypes),
                        grad_mask=mask in ("float", "float-heads") and num(0, 1) == 1,
                        dropout_p=pick((0.0,) * 7 + (0.3,)), scale=scale,
                        layout=pick((None,) * 5 + LAYOUTS)))
    return out
