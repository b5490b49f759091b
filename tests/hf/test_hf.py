"""attnlab's forms inside tiny random Hugging Face models (built from configs, no downloads)."""

import json

import pytest
import torch

pytest.importorskip("transformers")

import transformers as T  # noqa: E402

import attnlab  # noqa: E402
import attnlab.hf  # noqa: E402
from attnlab.judge import hf_check  # noqa: E402

from . import tiny  # noqa: E402

# slow: each test that builds or runs a transformers model (its models fixture: seconds on 2 cores)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf-models")
    return {kind: tiny.build(kind, folder) for kind in tiny.KINDS}


@pytest.mark.slow(first="importing transformers' attention interface: seconds, once a worker")
def test_register_names_flash_plainly_and_never_says_flash():
    names = attnlab.hf.register()
    assert names["attnlab"] == "flash"
    assert names["attnlab_matrix"] == "matrix" and names["attnlab_loops"] == "loops"
    assert all("flash" not in n and "sdpa" not in n for n in names)
    assert "attnlab" in T.AttentionInterface._global_mapping


@pytest.mark.slow
@pytest.mark.parametrize("kind", tiny.KINDS)
def test_every_form_matches_the_models_own_attention(models, kind):
    """Logits within the tolerance rule on a left-padded batch, 16 identical greedy tokens, equal gradients."""
    result = hf_check.check_model(str(models[kind]), ["flash", "matrix", "loops"])
    assert result.reference == ("eager" if kind == "gemma2" else "sdpa")
    for r in result.rows:
        print(f"{kind} {r.form}: logits {r.logits.err:.2e} (limit {r.logits.allowed:.2e}, {result.reference} "
              f"{r.logits.torch_err:.2e}); tokens identical {r.generation_match}; grads {r.grads.err:.2e} "
              f"(limit {r.grads.allowed:.2e}); {r.seconds:.1f} s")
        assert r.status == "pass", r
        assert r.generation_match and r.generated == len(hf_check.LENGTHS) * hf_check.NEW_TOKENS


def test_the_model_really_runs_the_form(models):
    """A counting form registered under attnlab is what transformers calls, with GQA and a bool mask."""
    calls = []

    def counting(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        calls.append((tuple(q.shape), tuple(k.shape), None if attn_mask is None else attn_mask.dtype, enable_gqa))
        return attnlab.attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, impl="matrix")

    attnlab.register("counting", counting, "test: matrix, counted")
    try:
        attnlab.hf.register()
        model = T.AutoModelForCausalLM.from_pretrained(models["llama"], attn_implementation="attnlab_counting")
        ids = torch.randint(3, tiny.VOCAB, (2, 9))
        mask = torch.ones(2, 9, dtype=torch.long)
        mask[1, :4] = 0
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    finally:
        from attnlab import kernels

        kernels._REGISTRY.pop("counting")
    assert len(calls) == 2  # one per layer
    assert calls[0] == ((2, 4, 9, 8), (2, 2, 9, 8), torch.bool, True)


def test_packed_sequences_stay_apart(models):
    """position_ids that restart inside a row (and no cache): transformers builds a block mask the form obeys."""
    attnlab.hf.register()
    model = T.AutoModelForCausalLM.from_pretrained(models["llama"], attn_implementation="attnlab").eval()
    ids = torch.randint(3, tiny.VOCAB, (1, 11), generator=torch.Generator().manual_seed(1))
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4]])
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]  # no cache: a training setup
        first = model(input_ids=ids[:, :6]).logits[0]
        second = model(input_ids=ids[:, 6:]).logits[0]
    err = (packed - torch.cat([first, second])).abs().max().item()
    print(f"packed vs apart: {err:.2e}")
    assert err < 1e-5


def test_softcap_in_a_form_without_modifiers_is_a_clear_error(models):
    from attnlab import kernels

    attnlab.register("plain", kernels.get("sdpa").fn, "test: no score_mod")
    try:
        attnlab.hf.register()
        model = T.AutoModelForCausalLM.from_pretrained(models["gemma2"], attn_implementation="attnlab_plain")
        with pytest.raises(NotImplementedError, match=r"soft-caps its attention scores \(softcap=0.5\) and form "
                                                      r"'plain' has no score modifiers; use one of: attnlab_loops"):
            model(input_ids=torch.tensor([[5, 6, 7]]))
    finally:
        kernels._REGISTRY.pop("plain")


def test_dropout_in_training_reaches_the_form(models):
    """In train mode a model's attention dropout is passed on; attnlab's dropout is seeded by torch's generator."""
    attnlab.hf.register()
    cfg = tiny.config("llama")
    cfg.attention_dropout = 0.5
    model = T.AutoModelForCausalLM.from_config(cfg, attn_implementation="attnlab").train()
    ids = torch.randint(3, tiny.VOCAB, (1, 8))
    torch.manual_seed(0)
    a = model(input_ids=ids).logits
    torch.manual_seed(0)
    b = model(input_ids=ids).logits
    torch.manual_seed(1)
    c = model(input_ids=ids).logits
    assert torch.equal(a, b) and not torch.allclose(a, c)


@pytest.mark.slow
def test_verify_model_cli_table_and_json(models, run_cli, tmp_path, round_trip):
    r = run_cli("verify", "--model", models["mistral"], "--impl", "matrix,flash", "--json", tmp_path / "m.json")
    print(r.stdout[-3000:], r.stderr[-2000:])
    assert r.returncode == 0, r.stderr
    assert "ALL PASS: 2 of 2 form(s)" in r.stdout and "identical" in r.stdout
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["model_type"] == "mistral" and data["reference"] == "sdpa"
    assert {row["form"] for row in data["rows"]} == {"matrix", "flash"}
    assert all(row["logits"]["err"] <= row["logits"]["allowed"] for row in data["rows"])
    assert round_trip(data, hf_check.ModelCheck).rows[0].logits.passed


def test_verify_model_cli_bad_input_is_one_line(tmp_path, capsys):
    from attnlab.cli import main

    for args, says in ([tmp_path / "no-such-model"], "cannot load a causal LM"), \
            ([tmp_path, "--impl", "sdpa"], "--model runs registered single-process forms"):
        assert main(["verify", "--model", *map(str, args)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err and err.startswith("attnlab verify: error:"), err


@pytest.mark.slow
def test_without_transformers_the_message_names_the_extra(run_cli, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "transformers.py").write_text("raise ImportError('not here')\n")
    r = run_cli("verify", "--model", "x", env={"PYTHONPATH": str(fake)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "pip install 'attnlab[hf]'" in r.stderr


def test_adapter_against_transformers_sdpa_function_directly():
    """The layer function itself: a T5-style position_bias with a bool mask, GQA, the model's scaling."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = torch.Generator().manual_seed(0)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    q = torch.randn(2, 4, 6, 8, generator=g)
    k, v = torch.randn(2, 2, 9, 8, generator=g), torch.randn(2, 2, 9, 8, generator=g)
    mask = torch.rand(2, 1, 6, 9, generator=g) > 0.3
    mask[..., 0] = True
    bias = torch.randn(1, 4, 6, 9, generator=g)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3, position_bias=bias)
    for form in ("flash", "matrix", "loops"):
        got, weights = attnlab.hf.attention_forward(form)(module, q, k, v, mask, scaling=0.3, position_bias=bias)
        err = (got - want).abs().max().item()
        print(f"{form}: {err:.2e}")
        assert got.shape == (2, 6, 4, 8) and err < 1e-5
        assert (weights is not None) == (form == "matrix")
    # attention sinks (gpt-oss's s_aux) in a form that takes none: a clear error naming those that do
    # (tests/hf/test_hf_sinks.py runs gpt-oss through the forms that take them)
    attnlab.register("nosinks", lambda *a, **kw: attnlab.attention(*a, impl="matrix"), "test: no sinks")
    try:
        with pytest.raises(NotImplementedError, match="attention sinks .* form 'nosinks' takes none; use one of: "
                                                      "attnlab_loops, attnlab_matrix, attnlab"):
            attnlab.hf.attention_forward("nosinks")(module, q, k, v, None, s_aux=torch.zeros(4))
    finally:
        from attnlab import kernels

        kernels._REGISTRY.pop("nosinks")


@pytest.mark.slow(first="transformers' import and the tiny models' first passes, which the worker keeps")
def test_the_floor_is_the_models_own_rounding_and_a_form_slightly_off_fails(models):
    """The logits' and gradients' floors are measured through the model (hf_check's docstring): above the model's
    own float32 error (the floor bounds rounding, it does not guess it), and far enough below a wrong form's error
    that a form whose scale is off by 0.1 % fails both comparisons."""

    def off(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        scale = (q.shape[-1] ** -0.5 if scale is None else scale) * 1.001
        return attnlab.attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, impl="matrix")

    attnlab.register("offscale", off, "test: the matrix form with its scale 0.1 % off")
    try:
        result = hf_check.check_model(str(models["llama"]), ["offscale", "matrix"])
    finally:
        from attnlab import kernels

        kernels._REGISTRY.pop("offscale")
    bad, good = result.rows
    print(f"floors {result.floors}; matrix: logits {good.logits.err:.2e} (sdpa {good.logits.torch_err:.2e}), "
          f"grads {good.grads.err:.2e} (sdpa {good.grads.torch_err:.2e}); 0.1 % off: logits {bad.logits.err:.2e} "
          f"(limit {bad.logits.allowed:.2e}), grads {bad.grads.err:.2e} (limit {bad.grads.allowed:.2e})")
    assert set(result.floors) == {"logits", "grads"}
    for name in ("logits", "grads"):  # measured, not zero, and not what lets a wrong form through
        assert getattr(good, name).torch_err < result.floors[name] < getattr(bad, name).err / 5, name
        c = getattr(bad, name)  # the rule: 2x the model's own error + this floor + storing the answer in float32
        assert 0 < c.allowed - 2 * c.torch_err - result.floors[name] < 1e-6, name
    assert good.status == "pass"
    assert bad.status == "fail" and not bad.logits.passed and not bad.grads.passed
    assert bad.logits.err > 10 * bad.logits.allowed and bad.grads.err > 10 * bad.grads.allowed
    assert hf_check.PROBE not in T.AttentionInterface._global_mapping  # the probe is the check's alone
