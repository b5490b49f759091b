"""What an API kernel returns or raises that cannot be read the ordinary way is a row that says so, never a
traceback: an exception whose ``__str__`` itself raises is named by its type; an output, log-sum-exp or gradient
on the meta device (a shape without numbers) fails its row naming the device. A paged-decode kernel may return
more than (out, softmax_lse): FlashAttention 3's flash_attn_with_kvcache returns ``(out, softmax_lse, *rest)``,
its split-KV accumulators, so what follows the log-sum-exp is not judged."""

import pytest

from attnlab.judge import apis, verify
from attnlab.judge.apart import remote
from tests import kv_bugs as K

V, P = "flash-attn-varlen", "paged-decode"


class Unreadable(Exception):
    def __str__(self):
        raise RuntimeError("no message here")


def raises_unreadable(*args, **kwargs):
    raise Unreadable()


def varlen_on_meta(*args, return_attn_probs=False, **kwargs):
    out, lse, _ = K.varlen(*args, return_attn_probs=True, **kwargs)
    return out.to("meta"), lse, None


def paged_on_meta(*args, return_softmax_lse=False, **kwargs):
    out, lse = K.paged(*args, return_softmax_lse=True, **kwargs)
    return out.to("meta"), lse


def paged_lse_on_meta(*args, return_softmax_lse=False, **kwargs):
    out, lse = K.paged(*args, return_softmax_lse=True, **kwargs)
    return out, lse.to("meta")


def paged_with_a_third(*args, return_softmax_lse=False, **kwargs):
    out, lse = K.paged(*args, return_softmax_lse=True, **kwargs)
    return out, lse, None


def judged(fn, api, backward=True):
    cases = [c for c in apis.cases(api, ["float32"], long=False) if apis.skip_reason(c) is None][:2]
    r = verify.verify({"k": apis.Adapted(fn, api)}, cases, check_dropout=False, timeout=None, backward=backward)
    for row in r.rows:
        print(row.status, row.case, row.detail)
    return r


def test_an_exception_whose_message_raises_is_told_by_its_type():
    assert remote.raised(Unreadable())["type"] == "Unreadable"  # what the judged process sends (it crashed there)
    assert remote.told(Unreadable()) == "Unreadable: (its message cannot be read: str() of it raised RuntimeError)"
    r = judged(raises_unreadable, V)
    assert [row.status for row in r.rows] == ["error", "error"]
    assert all(row.detail.startswith("Unreadable: (its message cannot be read") for row in r.rows)
    assert r.diagnoses["k"][0].text.startswith("raises Unreadable: (its message cannot be read")


@pytest.mark.parametrize(("fn", "api", "says"), [
    (paged_on_meta, P, "the output is on meta; PyTorch returns it on the inputs' device cpu"),
    (varlen_on_meta, V, "the output is on meta; PyTorch returns it on the inputs' device cpu"),
    (paged_lse_on_meta, P, "the log-sum-exp came back on meta (a shape without numbers); return it on the inputs' "
                           "device cpu"),
])
def test_a_result_on_meta_fails_its_row_naming_the_device(fn, api, says):
    r = judged(fn, api)
    assert [row.status for row in r.rows] == ["fail", "fail"] and all(row.detail == says for row in r.rows)
    assert r.diagnoses["k"][0].key == "device"


def test_a_paged_kernel_may_return_more_after_the_log_sum_exp():
    assert judged(paged_with_a_third, P).passed
