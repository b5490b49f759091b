"""Each API's own causes: a flash-attn or flex kernel with one bug (or two) gets the line that names it first, and no
line names a bug it does not have (tests/api_bugs.py holds the kernels, tests/api_functions.py the right ones)."""

import pytest

from attnlab.judge import apis, verify
from tests import api_bugs
from tests.helpers import named

pytestmark = pytest.mark.slow  # each kernel over its API's quick grid in float32 (~5 s)

ALSO = {"api-top-left": {"dead-rows"}}  # a line that may come with a bug's own, truthfully


@pytest.mark.parametrize("name", list(api_bugs.BUGS))
def test_each_api_bug_is_named_first_and_no_other(name):
    fn, api, want = api_bugs.BUGS[name]
    cases = [c for c in apis.cases(api, ["float32"], long=False) if not apis.skip_reason(c)]
    r = verify.verify({name: apis.Adapted(fn, api)}, cases, timeout=None, check_dropout=False)
    keys = named(r.diagnoses.get(name, []))
    print(name, keys)
    assert not r.passed and keys, keys
    if len(want) == 1:
        assert keys[0] == want[0], keys
    assert set(want) <= set(keys), keys
    allowed = set(want) | {k for w in want for k in ALSO.get(w, ())}
    assert set(keys) <= allowed, keys
