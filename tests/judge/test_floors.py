"""Every judged quantity has its rounding floor from the rule: nothing is held to a floor of zero by default.

``rule.compare`` takes the floor as a required argument, and the judge's budget holds one for every quantity it
compares -- the score modifiers' own tensors (ALiBi's slopes, T5's table, a learnable bias) included, each the
error the scores' gradient may carry through the modifier into that tensor.
"""

import inspect

import pytest
import torch

from attnlab.judge import judge, mod_cases, rule, verify


def test_compare_has_no_default_floor():
    p = inspect.signature(rule.compare).parameters["rounding"]
    assert p.default is inspect.Parameter.empty, p
    with pytest.raises(TypeError):
        rule.compare("out", torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.float32)  # the floor left out


@pytest.mark.parametrize("name", ["score_mod alibi slopes, learnable, padding",
                                  "score_mod relative_bias, learnable, L<S"])
def test_each_modifier_tensor_has_a_positive_floor_that_still_judges(name):
    case = next(c for c in verify.default_cases(["float32", "float64"], long=False)
                if c.name == name and (c.dtype == "float64" or name.startswith("score_mod relative")))
    seed = case.seed(0)
    exp = judge.expect(case, seed, verify.inputs(case, seed), None)
    names = mod_cases.PARAM_NAMES[case.mod]
    floors = {n: exp.budget[n] for n in names}
    print(case.label, floors, {n: float(exp.ref[judge.quantities(case).index(n)].abs().max()) for n in names})
    for n in names:  # a floor above zero that still judges: far below the gradient's own size
        grad = float(exp.ref[judge.quantities(case).index(n)].abs().max())
        assert 0 < floors[n] < 1e-2 * grad, (n, floors[n], grad)
