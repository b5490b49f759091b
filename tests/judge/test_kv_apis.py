"""flash-attn-varlen and paged-decode (attnlab.judge.apis.varlen, .paged, .pages): the cases they run, their
semantics against FlashAttention's documented ones and PyTorch's, the paged cache a call receives and the check of
the cache it leaves, and the alternatives written beside them."""

import pytest
import torch

import attnlab.testing
from attnlab.judge import apis
from attnlab.judge.apis import paged, pages, telling, varlen
from tests.helpers import named


def _args(api):
    return [(c, apis.parse(c.api)[1]) for c in apis.module(api).extra()]


def test_varlen_runs_thirty_packed_cases_where_kernels_break():
    cs = _args("flash-attn-varlen")
    lq = [varlen.lengths(c, a)[0] for c, a in cs]
    lk = [varlen.lengths(c, a)[1] for c, a in cs]
    print(f"{len(cs)} varlen cases")
    assert len(cs) >= 30
    assert any(0 in q for q in lq) and any(0 in k for k in lk)  # an empty sequence, queries with no keys
    assert any(1 in q for q in lq) and any(len(q) >= 10 and len(set(q)) >= 8 for q in lq)  # one token; many, mixed
    assert any(a.get("causal") for _, a in cs) and any("window" in a for _, a in cs)
    assert any(a.get("softcap") for _, a in cs) and any(c.gqa for c, _ in cs)
    assert any(q != k for q, k in zip(lq, lk, strict=True))  # keys and queries of different lengths
    assert any(all(n == 1 for n in q) and any(n > 1 for n in k) for q, k in zip(lq, lk, strict=True))  # decoding


def test_paged_decode_runs_thirty_cases_where_kernels_break():
    cs = _args("paged-decode")
    print(f"{len(cs)} paged cases")
    assert len(cs) >= 30
    lens = [paged.seqlens(c, a) for c, a in cs]
    assert any(0 in n for n in lens) and any(1 in n for n in lens) and any(len(n) >= 8 for n in lens)
    new = [(c, a) for c, a in cs if a.get("new")]
    assert len(new) >= 10 and any(c.L > 1 for c, _ in new) and any(c.L == 1 for c, _ in new)  # appended k, v
    assert any(c.L > 1 and not a.get("new") for c, a in cs)  # several queries on the cache alone
    assert any(a["new"] < c.L for c, a in new)  # fewer new keys than queries
    assert any(a.get("causal") for _, a in cs) and any("window" in a for _, a in cs)
    assert any(a.get("softcap") for _, a in cs) and any(c.gqa and a.get("new") for c, a in cs)  # GQA with pages
    assert {a["block"] for _, a in cs} >= {1, 4, 8, 16, 64}
    for c, a in cs:  # pages out of order: no table lists its pages as they lie in memory
        t = paged.layout(c, a).table
        assert not torch.equal(t.reshape(-1), t.reshape(-1).sort().values), c.name


@pytest.mark.parametrize("api", ["flash-attn-varlen", "paged-decode"])
def test_the_testing_module_runs_the_same_cases(api):
    ids = {p.id for p in attnlab.testing.cases(["float32"], api=api)}
    for c in apis.module(api).extra():
        assert f"{c.name} [float32]" in ids


def test_the_paged_mask_is_flash_attns_bottom_right_over_each_sequences_keys():
    c = paged.case("t", (5, 0, 13), 4, L=3, new=2, causal=True, H=2)
    a = apis.parse(c.api)[1]
    seen = paged.visible(c, a)
    for b, n in enumerate(paged.totals(c, a)):  # the cache's keys and the new ones: n = cache_seqlens[b] + 2
        i, j = torch.arange(3)[:, None], torch.arange(c.S)[None, :]
        want = (j <= i + n - 3) & (j < n)  # FlashAttention's docstring: query i sees keys j <= i + n - Lq
        assert torch.equal(seen[b, 0], want), b
    c = paged.case("w", (9,), 4, L=2, window=(3, -1), H=2)
    seen = paged.visible(c, apis.parse(c.api)[1])[0, 0]
    assert seen.nonzero().tolist() == [[0, j] for j in range(4, 9)] + [[1, j] for j in range(5, 9)]


def test_a_varlen_mask_is_one_flash_attn_func_mask_per_sequence():
    c = varlen.case("t", (2, 0, 3), (4, 2, 3), causal=True, H=2)
    seen = varlen.visible(c, apis.parse(c.api)[1])
    want = torch.zeros(5, 9, dtype=torch.bool)
    want[0:2, 0:4] = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)  # query i sees j <= i + 2
    want[2:5, 6:9] = torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(seen, want)


def test_the_cache_a_call_receives():
    c = paged.case("layout", (3, 9), 4, L=2, new=2, causal=True, H=2)
    lay = paged.layout(c, apis.parse(c.api)[1])
    assert 0 not in lay.table and lay.blocks - 1 not in lay.table  # the first and last pages are spare
    assert len(set(lay.table.reshape(-1).tolist())) == lay.table.numel()
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(2, 2, c.S, 8, generator=g)
    mem = pages.memory(lay, keys, "k", 2)
    read = pages.gather(mem, pages.codes(lay))  # (B, Hkv, S, D) read back through the table
    for b, n in enumerate(lay.lens):
        assert torch.equal(read[b, :, :n], keys[b, :, :n])  # the cached keys where the table says
        assert not torch.isclose(read[b, :, n:n + 2], keys[b, :, n:n + 2]).any()  # the new keys' slots hold others
    done = pages.gather(pages.write(lay, mem, pages.appended(lay, pages.codes(lay)), pages.new_keys(lay, keys)),
                        pages.codes(lay))
    assert torch.equal(done, keys)  # once written, the cache reads back as the oracle's keys


def _left(c, write):
    """(k_cache, v_cache) as a call that writes the new keys with ``write(lay, mem, rows)`` leaves them."""
    a = apis.parse(c.api)[1]
    lay = paged.layout(c, a)
    g = torch.Generator().manual_seed(1)
    kv = [torch.randn(len(lay.lens), 2, c.S, 8, generator=g) for _ in range(2)]
    mems = [pages.memory(lay, t, w, 2) for t, w in zip(kv, "kv", strict=True)]
    new = [pages.new_keys(lay, t) for t in kv]
    got = [pages.cache(lay, write(lay, m, t)) for m, t in zip(mems, new, strict=True)]
    return [p[0] for p in paged.cache_problems(c, a, got, mems, new)]


def test_the_cache_check_names_how_the_cache_was_left():
    c = paged.case("cache", (3, 9, 14), 4, L=2, new=2, causal=True, H=2)

    def right(lay, m, t):
        return pages.write(lay, m, pages.appended(lay, pages.codes(lay)), t)

    def late(lay, m, t):
        return pages.write(lay, m, pages.appended(lay, pages.codes(lay), 1), t)

    def through_memory_order(lay, m, t):
        read = pages.codes(lay, torch.arange(lay.table.numel()).view_as(lay.table))
        return pages.write(lay, m, pages.appended(lay, read), t)

    def and_zeros(lay, m, t):
        m = right(lay, m, t)
        m[pages.codes(lay)[0, -1]] = 0  # a slot past sequence 0's end
        return m

    assert _left(c, right) == []
    assert _left(c, lambda lay, m, t: m) == ["paged-cache-not-written"]
    assert _left(c, late) == ["paged-new-kv-wrong-slot"]
    assert _left(c, through_memory_order) == ["paged-table-ignored"]
    assert _left(c, and_zeros) == ["paged-cache-touched"]
    decode = paged.case("cache, no new keys", (3, 9), 4, H=2)
    assert _left(decode, lambda lay, m, t: m) == []
    assert _left(decode, lambda lay, m, t: m * 0) == ["paged-cache-touched"]


def test_a_kernel_that_keeps_the_new_keys_to_itself_fails_with_that_line_alone():
    from tests import api_functions as A

    def attends_but_writes_a_copy(q, k_cache, v_cache, **kw):
        return A.paged_decode(q, k_cache.clone(), v_cache.clone(), **kw)

    cases = [c for c in apis.cases("paged-decode", ["float32"], long=False) if "append 4, causal" in c.name]
    from attnlab.judge import verify

    r = verify.verify({"copy": apis.Adapted(attends_but_writes_a_copy, "paged-decode")}, cases, timeout=None)
    assert [row.status for row in r.rows] == ["fail"] and all(c.passed for c in r.rows[0].comparisons)
    assert named(r.diagnoses["copy"]) == ["paged-cache-not-written"]


def test_telling_ties_causes_that_give_one_answer_and_drops_a_bug_on_top_of_its_own():
    groups = [({"a"}, 1), ({"b", "c"}, 2), ({"d", "d+e"}, 3), ({"f+g"}, 4)]
    assert sorted(telling(groups)) == [("a", 1), ("b", 2), ("c", 2), ("d", 3), ("f+g", 4)]


@pytest.mark.slow
def test_every_alternative_changes_the_answer_on_the_case_it_is_given():
    """No alternative is the right semantics in disguise: each, applied to the case's own arguments, gives another
    mask, other keys or other queries than the right ones."""
    for api in ("flash-attn-varlen", "paged-decode"):
        for c in apis.module(api).extra():
            a = apis.parse(c.api)[1]
            right = apis.module(api).visible(c, a)
            g = torch.Generator().manual_seed(0)
            q = torch.randn(*c.batch, c.H, c.L, 8, generator=g, dtype=torch.float64)
            k = torch.randn(*c.batch, c.Hkv or c.H, c.S or c.L, 8, generator=g, dtype=torch.float64)
            base = {"attn_mask": right, "query": q, "key": k, "value": k.clone(), "score_mod": None}
            for alt in apis.module(api).alternatives(c, a):
                kw = alt.change(dict(base))
                same = all(kw[n] is base[n] or (kw[n] is not None and torch.equal(kw[n], base[n]))
                           for n in ("attn_mask", "query", "key", "value"))
                assert not same or kw["score_mod"] is not None, (api, c.name, alt.key)


def test_the_docs_say_how_many_cases_each_api_runs():
    from pathlib import Path

    text = " ".join((Path(__file__).parents[2] / "docs" / "verify.md").read_text().split())
    for api, n, words in (("flash-attn-varlen", 36, "Its 36 cases × dtypes (`attnlab.judge.apis.varlen.extra`"),
                          ("paged-decode", 35, "Its 35 cases × dtypes: empty and one-key caches")):
        assert len(apis.module(api).extra()) == n and words in text, api
