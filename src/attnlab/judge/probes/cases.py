"""The probes of each API: a handful of small cases with designed inputs (:mod:`.design`), each reading one part
of the semantics -- who sees whom under each of the API's masks, the bias, the score function, the head map, the
weights the backward uses. Sizes are off the tile sizes kernels use (9, 23, 37 keys) so that a tile's edge shows,
and small (at most 64 keys: one value dim holds a one-hot per key)."""

from __future__ import annotations

from dataclasses import replace

from attnlab.judge.apis import words
from attnlab.judge.cases import Case

E = 64  # the head dim of every probe: a one-hot per key (and per query, for the gradients) fits in it
LONG = 160  # ... of the probes with 150 keys: longer than the tiles kernels use, 32 to 128


def _p(name: str, probe: str, **kw) -> Case:
    return Case(f"probe: {name}", probe=probe, **{"batch": (1,), "H": 2, "E": E, **kw})


def sdpa() -> list[Case]:
    return [
        _p("weights, causal, L<S", "weights", L=9, S=23, is_causal=True),
        _p("weights, causal, L>S", "weights", L=23, S=9, is_causal=True),
        _p("weights, causal, L=S=37", "weights", H=1, L=37, is_causal=True),
        _p("weights, bool mask with empty rows", "weights", batch=(2,), L=12, S=20, mask="dead-rows"),
        _p("weights, float mask", "weights", L=10, S=17, mask="float"),
        _p("weights, is_causal with a padding mask", "weights", batch=(2,), H=1, L=12, is_causal=True,
           mask="padding"),
        _p("weights, lower-right mask, L<S", "weights", L=9, S=23, mask="lower-right"),
        _p("weights, causal, L=S=150: tiles of 32 to 128", "weights", H=1, L=150, E=LONG, is_causal=True),
        _p("heads, GQA 6/2", "heads", H=6, Hkv=2, L=5, S=7),
        _p("heads, 4 heads, no GQA", "heads", H=4, L=5, S=7),
        _p("heads, GQA 6/2, S=128: whole tiles", "heads", H=6, Hkv=2, L=5, S=128),  # (read where a tile edge
        # slip leaves S=7 unseen)
        _p("scores", "scores", H=1, L=25, S=3),
        _p("scores, scale=0.3", "scores", H=1, L=25, S=3, scale=0.3),
        _p("scores, scale=0.5, large", "scores", H=1, L=25, S=3, scale=0.5, magnitude=10.0),
        _p("gradients, causal", "grads", H=1, L=20, S=20, is_causal=True),
        _p("gradients, causal, L=S=150: tiles of 32 to 128", "grads", H=1, L=150, E=LONG, is_causal=True),
    ]


def flash(name: str = "flash-attn") -> list[Case]:
    def api(**args):
        return words(name, **args)

    return [
        _p("weights, causal, L<S", "weights", L=9, S=23, mask="lower-right", api=api(causal=True)),
        _p("weights, causal, L>S", "weights", L=23, S=9, mask="lower-right", api=api(causal=True)),
        _p("weights, window (3, 2)", "weights", H=1, L=24, api=api(window=(3, 2))),
        _p("weights, window (4, -1), L<S", "weights", H=1, L=13, S=29, api=api(window=(4, -1))),
        _p("weights, window (-1, 3), L>S", "weights", H=1, L=29, S=13, api=api(window=(-1, 3))),
        # a side of 0 (no key on that side), not causal: one read as unbounded, as -1, shows
        _p("weights, window (4, 0), L<S", "weights", H=1, L=13, S=29, api=api(window=(4, 0))),
        _p("weights, window (0, 3)", "weights", H=1, L=20, api=api(window=(0, 3))),
        _p("weights, window (5, 0), causal, L<S", "weights", H=1, L=9, S=23, mask="lower-right",
           api=api(causal=True, window=(5, 0))),
        _p("weights, window (3, 2), causal", "weights", H=1, L=16, mask="lower-right",
           api=api(causal=True, window=(3, 2))),  # (causal sets the right side to 0: one that is dropped shows)
        _p("weights, ALiBi (H,), L<S", "weights", H=4, L=9, S=23, mod="flash: alibi", api=api(alibi=True)),
        _p("weights, ALiBi (B, H), causal, L>S", "weights", batch=(2,), H=2, L=23, S=9, mask="lower-right",
           mod="flash: alibi", api=api(causal=True, **{"alibi-batch": True})),
        _p("weights, ALiBi (H,), softcap", "weights", H=4, L=9, S=23, mod="flash: softcap, alibi",
           api=api(alibi=True, softcap=True)),
        _p("weights, ALiBi (H,), causal, L<S", "weights", H=4, L=9, S=23, mask="lower-right", mod="flash: alibi",
           api=api(alibi=True, causal=True)),
        _p("weights, window (3, 2), L=S=150: tiles of 32 to 128", "weights", H=1, L=150, E=LONG,
           api=api(window=(3, 2))),  # (a window's first key tile placed from the wrong row of a query tile shows)
        _p("weights, window (5, 0), causal, L=S=150", "weights", H=1, L=150, E=LONG, mask="lower-right",
           api=api(causal=True, window=(5, 0))),
        _p("heads, GQA 6/2", "heads", H=6, Hkv=2, L=5, S=7, api=api()),
        _p("heads, 4 heads, no GQA", "heads", H=4, L=5, S=7, api=api()),
        _p("heads, GQA 6/2, S=128: whole tiles", "heads", H=6, Hkv=2, L=5, S=128, api=api()),
        _p("scores", "scores", H=1, L=25, S=3, api=api()),
        _p("scores, softmax_scale=0.3", "scores", H=1, L=25, S=3, scale=0.3, api=api()),
        _p("scores, softcap", "scores", H=1, L=25, S=3, mod="flash: softcap", api=api(softcap=True)),
        _p("scores, softmax_scale=0.5, large", "scores", H=1, L=25, S=3, scale=0.5, magnitude=10.0, api=api()),
        _p("gradients, causal, L<S", "grads", H=1, L=12, S=20, mask="lower-right", api=api(causal=True)),
        _p("gradients, ALiBi (H,), L<S", "grads", H=2, L=12, S=20, mod="flash: alibi", api=api(alibi=True)),
        # a backward's tiles over 150 keys: a key tile that skips query tiles it should visit shows
        _p("gradients, causal, L=130, S=150: tiles of 32 to 128", "grads", H=1, L=130, S=150, E=LONG,
           mask="lower-right", api=api(causal=True)),
    ]


def varlen() -> list[Case]:
    from attnlab.judge.apis import varlen as V

    def c(name, probe, lq, lk, **kw):
        return replace(V.case(f"probe: {name}", lq, lk, **{"H": 2, "E": E, **kw}), probe=probe)

    return [
        c("weights, 4 sequences, one with no queries, one with no keys", "weights", (3, 0, 5, 4), (6, 4, 0, 9)),
        c("weights, causal, 3 sequences", "weights", (4, 6, 1), (9, 3, 7), causal=True),
        c("weights, window (2, 1), 2 sequences", "weights", (5, 7), (8, 7), window=(2, 1)),
        c("weights, window (0, 2), 2 sequences", "weights", (5, 7), (8, 7), window=(0, 2)),
        c("weights, window (2, 0), causal, more queries than keys", "weights", (9, 6), (4, 6), causal=True,
          window=(2, 0)),
        c("weights, window (2, 2), causal, 2 sequences", "weights", (6, 8), (6, 8), causal=True, window=(2, 2)),
        replace(c("weights, ALiBi (H,), 3 sequences", "weights", (3, 5, 4), (6, 4, 9), H=4), mod="flash: alibi",
                api=V.words(V.NAME, q=(3, 5, 4), k=(6, 4, 9), alibi=True)),
        replace(c("weights, ALiBi (H,), softcap, 3 sequences", "weights", (3, 5, 4), (6, 4, 9), H=4),
                mod="flash: softcap, alibi", api=V.words(V.NAME, q=(3, 5, 4), k=(6, 4, 9), softcap=True, alibi=True)),
        # (flash-attn's own probe of the two together: which comes first, the bias or the cap, shows in the weights)
        c("weights, window (3, 2), a sequence of 140 and one of a single query", "weights", (140, 1), (140, 9),
          window=(3, 2), E=LONG),  # (tiles of a long sequence; a decode path's own mask)
        c("heads, GQA 4/2", "heads", (3, 4), (5, 6), H=4, Hkv=2),
        c("heads, 4 heads, no GQA", "heads", (3, 4), (5, 6), H=4),
        c("heads, GQA 4/2, 2 sequences of 64 keys: whole tiles", "heads", (3, 4), (64, 64), H=4, Hkv=2),
        c("scores", "scores", (25,), (3,), H=1),
        c("scores, softcap", "scores", (25,), (3,), H=1, softcap=True),
    ]


def paged() -> list[Case]:
    from attnlab.judge.apis import paged as P

    def c(name, probe, lens, block, **kw):
        return replace(P.case(f"probe: {name}", lens, block, **{"H": 2, "E": E, **kw}), probe=probe)

    return [
        c("weights, 3 sequences of 1, 13, 20 keys, pages of 8", "weights", (1, 13, 20), 8),
        c("weights, 3 queries, causal, 2 appended, pages of 4", "weights", (5, 12), 4, L=3, new=2, causal=True),
        c("weights, window (4, 0), causal, 2 queries", "weights", (9, 17), 8, L=2, causal=True, window=(4, 0)),
        c("heads, GQA 4/2, pages of 4", "heads", (6, 9), 4, H=4, Hkv=2),
        c("heads, 4 heads, no GQA, pages of 4", "heads", (6, 9), 4, H=4),
        c("heads, GQA 4/2, 2 sequences of 64 keys, pages of 16: whole pages", "heads", (64, 64), 16, H=4, Hkv=2),
        # the score function on whole pages: a slot past a sequence's length read too does not cloud it
        c("scores", "scores", (3,), 3, L=25, H=1),
        c("scores, softcap", "scores", (3,), 3, L=25, H=1, softcap=True),
    ]


def flex() -> list[Case]:
    def c(name, probe, api="flex", **kw):
        return _p(name, probe, api=api, **kw)

    return [
        c("weights, causal, L=S=37", "weights", H=1, L=37, mask="causal"),
        c("weights, causal, L=S=200: full and partial blocks", "weights", H=1, L=200, E=256, mask="causal"),
        c("weights, documents and causal, L=S=256", "weights", H=1, L=256, E=256, mask="document & causal"),
        c("weights, causal, BLOCK_SIZE (32, 64), L=S=120", "weights", H=1, L=120, E=128, mask="causal",
          api="flex block=32,64"),
        c("weights, documents per batch row, causal, B=2", "weights", batch=(2,), H=1, L=24,
          mask="documents per batch row & causal"),
        c("weights, sliding window | prefix", "weights", H=1, L=30, mask="sliding_window | prefix_lm"),
        c("weights, relative bias score_mod, causal, GQA 4/2", "weights", H=4, Hkv=2, L=12, mask="causal",
          mod="relative_bias"),
        c("weights, relative bias score_mod, causal, L=S=200: two query blocks", "weights", H=1, L=200, E=256,
          mask="causal", mod="relative_bias"),
        c("weights, documents per batch row, causal, B=2, L=S=256: blocks differ by row", "weights", batch=(2,), H=1,
          L=256, E=256, mask="documents per batch row & causal"),
        c("weights, documents per head, causal, GQA 4/2, L=S=256: blocks differ by head", "weights", H=4, Hkv=2,
          L=256, E=256, mask="documents per head & causal"),
        c("heads, GQA 6/2", "heads", H=6, Hkv=2, L=5, S=7),
        c("heads, 4 heads, no GQA", "heads", H=4, L=5, S=7),
        c("scores", "scores", H=1, L=25, S=3),
        c("scores, softcap score_mod", "scores", H=1, L=25, S=3, mod="softcap"),
    ]


def sinks(api: str | None) -> list[Case]:
    """The sink probes of an API that takes sinks (attnlab.judge.sink_cases): the weights probes with sinks spread
    over the heads (each head's its own, so a row that reads another head's shows it), so that each row's output
    gives its keys' weights and, by what they leave of 1, the sink's -- on causal rows, rows with no key, GQA (kv
    head h // G is not query head h), long rows (several key tiles of a tiled kernel), packed and paged sequences;
    and the gradients probe, whose dV holds the weights the backward uses beside the sinks' own gradient."""
    from attnlab.judge.apis import paged as P
    from attnlab.judge.apis import varlen as V

    def p(name, probe, **kw):
        return _p(f"sinks, {name}", probe, **{"H": 4, "sinks": "spread", **kw})

    A = "flash-attn"
    cases = {
        "sdpa": [p("weights, causal, L=S=37", "weights", L=37, is_causal=True),
                 p("weights, GQA 4/2, rows with no key", "weights", batch=(2,), Hkv=2, L=12, S=20, mask="dead-rows"),
                 p("weights, L=S=150: several key tiles", "weights", H=2, L=150, E=152),
                 p("gradients, causal", "grads", L=20, is_causal=True)],
        A: [p("weights, causal, L>S: rows with no key", "weights", L=23, S=9, mask="lower-right",
              api=words(A, causal=True)),
            p("weights, GQA 4/2, window (3, 2)", "weights", Hkv=2, L=24, api=words(A, window=(3, 2))),
            p("weights, L=S=150: several key tiles", "weights", H=2, L=150, E=152, api=words(A)),
            p("gradients, causal, L<S", "grads", L=12, S=20, mask="lower-right", api=words(A, causal=True))],
        "flash-attn-varlen": [replace(V.case("probe: sinks, weights, 3 sequences, one without keys", (3, 5, 4),
                                             (6, 0, 7), H=4, E=E), probe="weights", sinks="spread")],
        "paged-decode": [replace(P.case("probe: sinks, weights, an empty cache, pages of 8", (0, 13, 20), 8, H=4,
                                        E=E), probe="weights", sinks="spread"),
                         replace(P.case("probe: sinks, weights, GQA 4/2, 2 queries, causal", (6, 9), 4, L=2,
                                        causal=True, H=4, Hkv=2, E=E), probe="weights", sinks="spread")],
    }
    return cases.get(api or "sdpa", [])


def of(api: str | None) -> list[Case]:
    """The probe cases of an API (None or "sdpa": SDPA's), in no dtype yet."""
    return {None: sdpa, "sdpa": sdpa, "flash-attn": flash, "flash-attn-varlen": varlen, "paged-decode": paged,
            "flex": flex}[api]()


def for_dtypes(api: str | None, dtypes, with_sinks: bool = False) -> list[Case]:
    """The probes in each of ``dtypes`` (``with_sinks``: the API's sink probes after them)."""
    return [replace(c, dtype=dt) for dt in dtypes for c in of(api) + (sinks(api) if with_sinks else [])]
