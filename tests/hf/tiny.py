"""Tiny random causal LMs built from configs (no downloads), saved to a folder for `verify --model PATH`, and a
word-piece tokenizer trained here, offline, to save beside one (for the head view and `lesson --model`)."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 96
TEXT = "the dog saw the cat and it ran"  # the second text of the model lesson page (the first is the lesson's)


def config(kind: str):
    import transformers as T

    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, intermediate_size=48,
                  max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if kind == "gpt2":
        return T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    if kind == "llama":  # GQA: 4 query heads share 2 key/value heads
        return T.LlamaConfig(num_attention_heads=4, num_key_value_heads=2, **common)
    if kind == "mistral":  # a sliding window shorter than the prompts
        return T.MistralConfig(num_attention_heads=4, num_key_value_heads=2, sliding_window=5, **common)
    if kind == "gemma2":  # soft-capped attention scores, sliding window on alternate layers, GQA
        return T.Gemma2Config(num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=6,
                              attn_logit_softcapping=0.5, final_logit_softcapping=30.0,
                              query_pre_attn_scalar=8, **common)
    if kind == "gpt_oss":  # attention sinks (s_aux), sliding and full layers, GQA, a mixture of experts
        return T.GptOssConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=4,
                              num_local_experts=4, num_experts_per_tok=2,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    raise ValueError(kind)


KINDS = ("gpt2", "llama", "mistral", "gemma2")  # gpt_oss has no sdpa (its sinks): tests/hf/test_hf_sinks.py


def gpt_oss(dtype=torch.float64, seed: int = 0):
    """A random gpt-oss (:func:`config`), its sinks drawn from N(0, 2) instead of the init's N(0, 0.02) and its
    attention projections enlarged, so that the sinks take a share of each row and attention moves the logits.
    Its experts run transformers' eager loop (the grouped matmul takes no float64)."""
    import transformers as T

    cfg = config("gpt_oss")
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = T.GptOssForCausalLM(cfg).to(dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.copy_(torch.randn_like(p) * 2.0)
            elif any(s in name for s in ("q_proj", "k_proj")):
                p.mul_(4.0)
            elif any(s in name for s in ("v_proj", "o_proj")):
                p.mul_(10.0)
    return model


def build(kind: str, folder: Path, seed: int = 0) -> Path:
    """A randomly initialised model of ``kind`` saved under ``folder / kind``."""
    import transformers as T

    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(config(kind))
    with torch.no_grad():  # larger weights than the init: sharper attention, so a wrong mask shows
        for name, p in model.named_parameters():
            if any(s in name for s in ("q_proj", "k_proj", "c_attn")):
                p.mul_(4.0)
    path = Path(folder) / kind
    model.save_pretrained(path)
    return path


CORPUS = ["the cat sat on the mat because it was tired", "a dog did not run across the road",
          "the street was wide and the night was long", "because it rained the cat did not cross",
          "an ant and a mammal met at the corner"] * 20


def tokenizer(vocab_size: int = 60):
    """A BPE tokenizer trained on :data:`CORPUS`; small, so words it rarely saw ("animal") come out in pieces.

    It strips accents, so a text of combining accents alone ("\\u0301") is mapped to no tokens at all."""
    import transformers as T
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])  # as uncased BERT's
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]"]))
    return T.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")


def with_tokenizer(folder: Path, seed: int = 0) -> Path:
    """A random Llama-style model (GQA: 4 query heads, 2 key/value heads) and :func:`tokenizer`, saved in ``folder``."""
    import transformers as T

    tok = tokenizer()
    torch.manual_seed(seed)
    cfg = T.LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=48, pad_token_id=0)
    T.AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return Path(folder)
