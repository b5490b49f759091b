"""Check attnlab's forms inside a real causal language model: logits, generation, gradients.

For a Hugging Face causal LM (a hub name or a local folder) and each form, registered with
transformers by :mod:`attnlab.nn.hf`, three checks on a seeded, left-padded batch of token ids:

1. **logits** -- the model run with the form against the same model run with transformers' own
   attention (``sdpa``, or ``eager`` for models that soft-cap their scores, which sdpa refuses),
   under the tolerance rule of :mod:`attnlab.judge.oracle`: the oracle is the model in float64, each
   sequence alone and unpadded (so no padded row can put a NaN in it), and the form may be at most
   2x as far from it as the model's own implementation is, plus a rounding floor. Only the real
   (unpadded) positions count: what a model writes at a padding position is not defined;
2. **generation** -- 16 greedy tokens through the KV cache, compared token for token with the
   model's own implementation;
3. **gradients** -- one backward pass of the next-token loss; every parameter's gradient, under
   the same rule against the float64 model.

**The rounding floor carried through the model.** The attention rule's floor
(:func:`attnlab.judge.rule.rounding_floor`) bounds one attention call's rounding in the model's dtype; the
logits and the gradients are many layers further on. So the floor is measured on the model itself: the float64
model is run again with every element of every attention layer's output (and, in the backward, of dq, dk and dv)
moved by its own float32 rounding bound (``rounding_floor(..., elementwise=True)``), up or down at random -- the
probabilistic model of rounding that the rule's ``u sqrt(n)`` stands on -- and the floor of the logits (of the
gradients) is how far that run moves them from the float64 model's. It is computed once per model and check
(:attr:`ModelCheck.floors`). Like the rule's floor it bounds rounding rather than guessing it: on the suite's tiny
models it is 6e-7 to 8e-7 (2e-6 for soft-capped Gemma 2) on logits and gradients whose float32 error is about
1e-7, and a form with its scale off by 0.1 % is more than ten times over the limit.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.judge import oracle, rule
from attnlab.kernels import mods
from attnlab.nn import hf
from attnlab.results import Result, machine, versions

LENGTHS = (12, 7)  # the batch: one full row and one left-padded row
NEW_TOKENS = 16


@dataclass
class ModelRow(Result):
    """One form on one model: the three checks."""

    form: str  # attnlab form
    impl: str  # its transformers name
    status: str  # pass | fail | error
    logits: rule.Comparison | None = None
    generation_match: bool | None = None
    generated: int = 0  # tokens compared
    first_difference: int | None = None  # index of the first generated token that differs
    grads: rule.Comparison | None = None
    seconds: float = 0.0
    detail: str = ""


@dataclass
class ModelCheck(Result):
    model: str
    model_type: str
    reference: str  # transformers' implementation the forms are compared with
    lengths: tuple[int, ...]
    new_tokens: int
    rows: list[ModelRow] = field(default_factory=list)
    floors: dict = field(default_factory=dict)  # {"logits": .., "grads": ..}: attention's rounding, through the model
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.status == "pass" for r in self.rows)


def reference_impl(config) -> str:
    """``eager`` for models whose attention soft-caps scores (sdpa refuses them), else ``sdpa``."""
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


def _batch(vocab: int, seed: int, pad: int):
    g = torch.Generator().manual_seed(seed)
    T = max(LENGTHS)
    ids = torch.randint(3, vocab, (len(LENGTHS), T), generator=g)
    mask = torch.zeros(len(LENGTHS), T, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, T - n:] = 1
    ids = ids.masked_fill(mask == 0, pad)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # positions count from each row's first real token
    return ids, mask, pos


def _loss(model, ids, mask, pos, count: int):
    """Next-token cross-entropy summed over the real positions (both token and next token unpadded) / count."""
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    real = (mask[:, :-1] == 1) & (mask[:, 1:] == 1)
    labels = ids[:, 1:].masked_fill(~real, -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).to(logits.dtype), labels.flatten(),
                                             ignore_index=-100, reduction="sum") / count


def _grads(model, ids, mask, pos, alone: bool = False) -> torch.Tensor:
    """Every parameter's gradient of the mean next-token loss, flattened; ``alone``: each row unpadded, alone."""
    count = int(((mask[:, :-1] == 1) & (mask[:, 1:] == 1)).sum())
    model.zero_grad(set_to_none=True)
    if alone:  # the oracle: the same loss, summed row by row without padding
        for b in range(ids.shape[0]):
            keep = mask[b].bool()
            _loss(model, ids[b:b + 1, keep], mask[b:b + 1, keep], pos[b:b + 1, keep], count).backward()
    else:
        _loss(model, ids, mask, pos, count).backward()
    g = [p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
         for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return torch.cat(g)


def _oracle(model64, ids, mask, pos):
    """Float64 logits, each row run alone without its padding; (B, T, V) with padded positions 0."""
    out = None
    for b in range(ids.shape[0]):
        keep = mask[b].bool()
        with torch.no_grad():
            lg = model64(input_ids=ids[b:b + 1, keep], position_ids=pos[b:b + 1, keep]).logits[0]
        if out is None:
            out = torch.zeros(ids.shape[0], ids.shape[1], lg.shape[-1], dtype=torch.float64)
        out[b, keep] = lg
    return out


def _generate(model, ids, mask, pad):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=pad)
    return out[:, ids.shape[1]:]


def load(name_or_path: str, dtype=torch.float32, attn_implementation: str | None = None):
    """A causal LM from the hub (through transformers' own cache) or a local folder."""
    transformers = hf.require("transformers")
    return hf.from_pretrained(transformers.AutoModelForCausalLM, name_or_path, dtype=dtype,
                              attn_implementation=attn_implementation).eval()  # the cache first: fast offline


@dataclass
class _Reference:
    """The fixed batch and the reference model's answers on it, that every form is compared with."""
    ids: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor
    pad: int
    logits64: torch.Tensor  # the float64 model's: the oracle
    logits: torch.Tensor  # the reference implementation's, in float32
    tokens: torch.Tensor  # its greedy continuation
    grads64: torch.Tensor
    grads: torch.Tensor
    floors: dict  # {"logits": .., "grads": ..}


def check_model(name_or_path: str, forms: list[str], *, seed: int = 0,
                progress: Callable[[str], None] | None = None) -> ModelCheck:
    """Run the three checks for each form on the model ``name_or_path`` (see the module docstring)."""
    by_form = {f: n for n, f in hf.register().items()}
    model = load(name_or_path)
    ref_impl = reference_impl(model.config)
    model.set_attn_implementation(ref_impl)
    ref = _reference(model, seed)
    result = ModelCheck(name_or_path, model.config.model_type, ref_impl, LENGTHS, NEW_TOKENS, floors=ref.floors,
                        machine=machine(), versions=versions())
    result.versions["transformers"] = hf.require("transformers").__version__
    for form in forms:
        if progress:
            progress(f"{form} on {name_or_path}")
        impl = by_form.get(form)
        if impl is None:
            result.rows.append(ModelRow(form, "", "error", detail=f"{form!r} is not a single-process form"))
            continue
        try:
            result.rows.append(_check_form(model, form, impl, ref))
        finally:
            model.set_attn_implementation(ref_impl)
    return result


def _reference(model, seed: int) -> _Reference:
    """The batch, and the answers of ``model`` (in its reference implementation) and of its float64 copy."""
    model64 = copy.deepcopy(model).double()
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    ids, mask, pos = _batch(model.config.vocab_size, seed, pad)
    logits64 = _oracle(model64, ids, mask, pos)
    with torch.no_grad():
        ref_logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    ref_tokens = _generate(model, ids, mask, pad)
    grads64 = _grads(model64, ids, mask, pos, alone=True)
    floors = _floors(model64, model.dtype, ids, mask, pos, logits64, grads64, seed)
    return _Reference(ids, mask, pos, pad, logits64, ref_logits, ref_tokens, grads64, _grads(model, ids, mask, pos),
                      floors)


PROBE = "attnlab_rounding_probe"  # the float64 attention moved by its rounding floor (registered while measuring)


class _Rounded(torch.autograd.Function):
    """Float64 attention (the oracle's) whose output, and in the backward dq, dk and dv, are each moved by the
    rule's rounding floor in ``dtype``, every element up or down at random (``gen``)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale, gqa, mod, dtype, gen):
        out, f = oracle.answer(q, k, v, mask, causal, scale, gqa, score_mod=mod)
        fl = rule.rounding_floor(q, k, v, mask, causal, scale, gqa, dtype=dtype, score_mod=mod, fwd=f, elementwise=True)
        ctx.save_for_backward(q, k, v)
        ctx.rest = (mask, causal, scale, gqa, mod, dtype, gen)
        return out + _moved(fl["out"], out, gen)

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        mask, causal, scale, gqa, mod, dtype, gen = ctx.rest
        with torch.enable_grad():
            (_, dq, dk, dv, *_), f = oracle.answer(q, k, v, mask, causal, scale, gqa, grad_out=grad, score_mod=mod)
        fl = rule.rounding_floor(q, k, v, mask, causal, scale, gqa, grad_out=grad, dtype=dtype, score_mod=mod,
                                 fwd=f, elementwise=True)
        moved = [g + _moved(fl[n], g, gen) for n, g in (("dq", dq), ("dk", dk), ("dv", dv))]
        return (*moved, None, None, None, None, None, None, None)


def _moved(bound, t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each element's own rounding bound (the rule's, element by element), up or down at random, in ``t``'s shape."""
    signs = torch.randint(0, 2, t.shape, generator=gen).to(t.dtype) * 2 - 1
    return signs * (bound.reshape(t.shape) if isinstance(bound, torch.Tensor) else bound)


def _probe(dtype: torch.dtype, gen: torch.Generator) -> Callable:
    """The attention function transformers calls for :data:`PROBE`: as :func:`attnlab.nn.hf.attention_forward`
    reads its arguments, computing :class:`_Rounded`."""

    def forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, softcap=None,
                **kwargs):
        key, value, m, causal = hf.arguments(module, query, key, value, attention_mask, is_causal, kwargs)
        mod = None if softcap is None else mods.softcap(float(softcap))
        out = _Rounded.apply(query, key, value, m, causal, scaling, key.shape[1] != query.shape[1], mod, dtype, gen)
        return out.transpose(1, 2).contiguous(), None

    return forward


def _floors(model64, dtype, ids, mask, pos, logits64, grads64, seed: int) -> dict:
    """How far the float64 model's logits and gradients move when every attention call is off by its rounding
    floor in ``dtype`` (the module docstring): the floors of the logits and gradients comparisons."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    impl = model64.config._attn_implementation
    AttentionInterface.register(PROBE, _probe(dtype, torch.Generator().manual_seed(seed)))
    AttentionMaskInterface.register(PROBE, sdpa_mask)
    try:
        model64.set_attn_implementation(PROBE)
        moved = _oracle(model64, ids, mask, pos)
        moved_grads = _grads(model64, ids, mask, pos, alone=True)
    finally:
        model64.set_attn_implementation(impl)
        for registry in (AttentionInterface, AttentionMaskInterface):  # the probe is this check's alone
            getattr(registry, "_global_mapping", {}).pop(PROBE, None)
    valid = mask.bool()
    return {"logits": rule.max_err(moved[valid], logits64[valid]), "grads": rule.max_err(moved_grads, grads64)}


def _check_form(model, form: str, impl: str, ref: _Reference) -> ModelRow:
    """The three checks of one form, run as ``model``'s attention implementation ``impl``; an error row when the
    form cannot run the model."""
    start = time.perf_counter()
    valid = ref.mask.bool()
    try:
        model.set_attn_implementation(impl)
        if model.config._attn_implementation != impl:  # transformers only warns: the form would not run
            raise RuntimeError(f"{type(model).__name__} does not let transformers switch its attention "
                               f"implementation (it does not use transformers' AttentionInterface)")
        with torch.no_grad():
            logits = model(input_ids=ref.ids, attention_mask=ref.mask, position_ids=ref.pos).logits
        comp_l = rule.compare("logits", logits[valid], ref.logits[valid], ref.logits64[valid], torch.float32,
                              ref.floors["logits"])
        tokens = _generate(model, ref.ids, ref.mask, ref.pad)
        same = torch.equal(tokens, ref.tokens)
        diff = None if same else int((tokens != ref.tokens).any(dim=0).nonzero()[0])
        comp_g = rule.compare("grads", _grads(model, ref.ids, ref.mask, ref.pos), ref.grads, ref.grads64,
                              torch.float32, ref.floors["grads"])
    except Exception as e:  # a form that cannot run this model fails it, with the reason
        return ModelRow(form, impl, "error", seconds=time.perf_counter() - start, detail=f"{type(e).__name__}: {e}")
    ok = comp_l.passed and same and comp_g.passed
    return ModelRow(form, impl, "pass" if ok else "fail", comp_l, same, tokens.numel(), diff, comp_g,
                    time.perf_counter() - start)
