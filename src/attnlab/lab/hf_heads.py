"""A pretrained model's heads on a sentence: its tokens, every head's weights, and who listens where.

The lesson asks what "it" listens to in "the animal did not cross the street because it was
tired". The built-in model reads characters and was trained for a few minutes; a pretrained
model reads *tokens* -- words and pieces of words, as its tokenizer cut them -- and was trained on
far more text. This module runs such a model (a Hugging Face causal LM, a hub name or a local
folder) on a text and keeps, for every layer and head, the (T, T) attention weights, computed by
attnlab's matrix form inside the model (or by transformers' ``eager`` attention).

Then it *measures*: for each head, the weight that the query word's token puts on the key word's
tokens (summed over the pieces of the key word; the query word's last piece stands for it, since
in a causal model only the last piece has read the whole word), and names the head where that
weight is largest, with the number. Nothing is claimed about a head that was not measured on this
text; the same entropy and peak-weight statistics as the built-in model's head view
(:func:`attnlab.nn.probe.head_stats`) describe how spread out each head is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from attnlab.nn import hf
from attnlab.nn.probe import head_stats

from .lesson.walkthrough import QUERY_WORD, SENTENCE
from .results import machine, versions

KEY_WORD = "animal"


class WordNotFound(ValueError):
    """The query or key word is not a whole word of the text (in that order)."""


@dataclass
class ModelHeads:
    model: str
    text: str
    impl: str  # the transformers attention implementation that produced the weights
    tokens: list[str]  # each token as the text it covers (special tokens as the tokenizer writes them)
    spans: list[tuple[int, int]]  # (start, end) character offsets of each token in the text
    query_word: str
    key_word: str
    query_token: int  # the token standing for the query word: its last piece
    key_tokens: list[int]  # every piece of the key word
    listens: list[list[float]]  # [layer][head]: weight from the query token on the key word's tokens
    best_layer: int
    best_head: int
    best_weight: float
    entropy: list[list[float]]  # [layer][head] mean row entropy (nats)
    peak: list[list[float]]  # [layer][head] mean max weight
    weights: list[list[list[list[float]]]]  # [layer][head] (T, T)
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)


def word_span(text: str, word: str, start: int = 0) -> tuple[int, int]:
    """The first whole-word occurrence of ``word`` in ``text`` at or after ``start`` (case-insensitive)."""
    m = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE).search(text, start)
    if m is None:
        raise WordNotFound(f"{word!r} is not a word of the text {text!r}" + (" after the key word" if start else ""))
    return m.span()


def _overlapping(spans, lo: int, hi: int) -> list[int]:
    return [i for i, (a, b) in enumerate(spans) if a < hi and b > lo and b > a]


def model_heads(name_or_path: str, text: str = SENTENCE, *, query_word: str = QUERY_WORD,
                key_word: str = KEY_WORD, impl: str = "matrix") -> ModelHeads:
    """Run the model on ``text`` and measure its heads (see the module docstring).

    ``impl``: ``"matrix"`` (attnlab's matrix form inside the model) or ``"eager"`` (transformers' own).
    """
    transformers = hf.require("transformers")
    if impl not in ("matrix", "eager"):
        raise ValueError(f"impl must be 'matrix' or 'eager' (the forms that keep the weights), got {impl!r}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    key_lo, key_hi = word_span(text, key_word)
    q_lo, q_hi = word_span(text, query_word, key_hi)  # "it" after "animal": what it may refer back to
    hf.register()
    attn = "attnlab_matrix" if impl == "matrix" else "eager"
    tok = transformers.AutoTokenizer.from_pretrained(name_or_path)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"the tokenizer of {name_or_path!r} is not a fast tokenizer; the head view needs its "
                         f"character offsets")
    model = transformers.AutoModelForCausalLM.from_pretrained(name_or_path, attn_implementation=attn).eval()
    enc = tok(text, return_offsets_mapping=True, return_tensors="pt")
    spans = [tuple(int(x) for x in s) for s in enc["offset_mapping"][0]]
    ids = enc["input_ids"]
    names = tok.convert_ids_to_tokens(ids[0].tolist())
    tokens = [text[a:b] if b > a else names[i] for i, (a, b) in enumerate(spans)]
    key_tokens = _overlapping(spans, key_lo, key_hi)
    query_token = _overlapping(spans, q_lo, q_hi)[-1]
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=enc.get("attention_mask"), output_attentions=True)
    if not out.attentions or out.attentions[0] is None:
        raise ValueError(f"{name_or_path!r} returned no attention weights with attn_implementation={attn!r}")
    att = torch.stack([a[0].double() for a in out.attentions])  # (layers, H, T, T)
    listens = att[:, :, query_token][..., key_tokens].sum(dim=-1)  # (layers, H)
    best = int(listens.argmax())
    layer, head = divmod(best, listens.shape[1])
    stats = [head_stats(a[None]) for a in att]
    return ModelHeads(
        model=str(name_or_path), text=text, impl=attn, tokens=tokens, spans=spans, query_word=query_word,
        key_word=key_word, query_token=query_token, key_tokens=key_tokens, listens=listens.tolist(),
        best_layer=layer, best_head=head, best_weight=float(listens[layer, head]),
        entropy=[e for e, _ in stats], peak=[p for _, p in stats],
        weights=[[[[float(f"{w:.4g}") for w in row] for row in h] for h in a.tolist()] for a in att],
        machine=machine(), versions=versions())
