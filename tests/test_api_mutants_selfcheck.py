"""The API corpus is what its table says, checked apart from the judge (nothing here imports attnlab.judge).

- Every right kernel agrees with PyTorch's float64 answer (F.scaled_dot_product_attention with the API's dense mask;
  plain operations where a soft-cap or score_mod bends the scores) to 1e-10, output, log-sum-exp and gradients.
- Every wrong kernel differs from that answer by more than 1e-6 on at least one input the API is used with.
- Every precision kernel is right in exact arithmetic where its cause is a half-precision one (float64 within 1e-10),
  and in the dtype its cause bites it is at least 4 times as far from the answer as the right kernel of its API on
  the same rounded inputs.
- The table: known labels and APIs, a docstring per kernel, and the corpus's counts per API and per precision cause.
"""

import pytest
import torch
import torch.nn.functional as F

from tests.api_corpus.inputs import CASES, SDPA, difference, reference, run
from tests.api_mutants import APIS, CORPUS, LABELS, PRECISION

RIGHT_OF = {"flash-attn": "flash_tiled", "flash-attn-varlen": "varlen_tiled", "flex": "flex_tiled",
            "paged-decode": "paged_pages", "sdpa": "sdpa_tiled"}
RIGHT = [n for n, (_, _, labels) in CORPUS.items() if not labels]
PRECISE_BUGS = [n for n, (_, _, labels) in CORPUS.items() if set(labels) & set(PRECISION)]
WRONG = [n for n, (_, _, labels) in CORPUS.items() if labels and n not in PRECISE_BUGS]


def _bites(name):
    """The dtype a precision kernel's cause shows in, and whether it is exact in float64."""
    labels = CORPUS[name][2]
    if "float32-in-float64" in labels:
        return torch.float64, False
    if name == "sdpa_softmax_float16":  # float16 whatever the input: every dtype loses
        return torch.float32, False
    return torch.bfloat16, True


def _errors(name, dtype):
    fn, api, _ = CORPUS[name]
    found = {}
    for case in CASES[api]:
        try:
            found[case.name] = difference(run(api, fn, case, dtype), reference(api, case, dtype))
        except Exception as e:  # noqa: BLE001 - a wrong kernel may also raise; the right ones must not
            found[case.name] = e
    return found


def test_table_labels_apis_docstrings_and_counts():
    for name, (fn, api, labels) in CORPUS.items():
        assert api in APIS, (name, api)
        assert all(lab in LABELS or (lab.startswith("new:") and len(lab) > 4) for lab in labels), (name, labels)
        assert fn.__doc__ and fn.__doc__.strip(), name
        assert fn.__name__ == name, (name, fn.__name__)
    for api in APIS[1:]:
        kernels = [labels for _, a, labels in CORPUS.values() if a == api]
        singles = [lab for lab in kernels if len(lab) == 1 and not set(lab) & set(PRECISION)]
        assert sum(1 for lab in kernels if not lab) >= 2, api
        assert len(singles) >= 6, (api, len(singles))
        assert sum(1 for lab in kernels if len(lab) == 2) >= 3, api
    for cause in PRECISION:
        assert sum(1 for _, _, labels in CORPUS.values() if cause in labels) >= 2, cause


@pytest.mark.parametrize("name", RIGHT)
def test_right_kernel_agrees_with_pytorch_in_float64(name):
    errors = _errors(name, torch.float64)
    print(name, {c: f"{e:.1e}" if isinstance(e, float) else e for c, e in errors.items()})
    raised = {c: e for c, e in errors.items() if not isinstance(e, float)}
    assert not raised, raised
    assert max(errors.values()) <= 1e-10, errors


@pytest.mark.parametrize("name", WRONG)
def test_wrong_kernel_differs_somewhere(name):
    errors = _errors(name, torch.float64)
    numeric = {c: e for c, e in errors.items() if isinstance(e, float)}
    print(name, CORPUS[name][2], {c: f"{e:.1e}" if isinstance(e, float) else type(e).__name__
                                 for c, e in errors.items()})
    assert max(numeric.values(), default=0.0) > 1e-6, errors


@pytest.mark.parametrize("name", PRECISE_BUGS)
def test_precision_kernel_loses_more_than_the_right_one(name):
    api = CORPUS[name][1]
    dtype, exact_in_float64 = _bites(name)
    if exact_in_float64:
        in_float64 = _errors(name, torch.float64)
        print(name, "float64:", max(in_float64.values()))
        assert max(in_float64.values()) <= 1e-10, in_float64
    bug, right = _errors(name, dtype), _errors(RIGHT_OF[api], dtype)
    ratios = {c: bug[c] / max(right[c], 1e-300) for c in bug}
    worst = max(ratios, key=ratios.get)
    print(name, dtype, f"worst on {worst!r}: {bug[worst]:.2e} against the right kernel's {right[worst]:.2e}")
    assert ratios[worst] >= 4 and bug[worst] > 1e-12, ratios


def test_bfloat16_kernel_with_float32_statistics_is_as_close_as_pytorch():
    """sdpa_tiled in bfloat16: at most twice PyTorch's own bfloat16 error, plus one bfloat16 rounding of the answer."""
    fn = CORPUS["sdpa_tiled"][0]
    for case in SDPA:
        ref = reference("sdpa", case, torch.bfloat16)
        ours = difference(run("sdpa", fn, case, torch.bfloat16), ref)
        theirs = difference(run("sdpa", F.scaled_dot_product_attention, case, torch.bfloat16), ref)
        floor = 2 * torch.finfo(torch.bfloat16).eps * max(float(t.abs().max()) for t in ref.values())
        print(case.name, f"ours {ours:.2e}, PyTorch's {theirs:.2e}, floor {floor:.2e}")
        assert ours <= 2 * theirs + floor, (case.name, ours, theirs)
