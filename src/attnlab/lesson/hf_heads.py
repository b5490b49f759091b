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
from pathlib import Path

import torch

from attnlab.lesson.walkthrough import QUERY_WORD, SENTENCE
from attnlab.nn import hf
from attnlab.nn.probe import head_stats
from attnlab.results import Result, machine, versions

KEY_WORD = "animal"
# The most tokens one text is measured on: every head's (T, T) weights are kept (and the page carries them), so a
# long text would fill memory; a model that reads fewer positions (max_position_embeddings) sets a lower limit.
MAX_TOKENS = 256
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model",
                   "vocab.txt")


class WordNotFound(ValueError):
    """The query or key word is not a whole word of the text (in that order)."""


@dataclass
class ModelHeads(Result):
    model: str
    text: str
    impl: str  # the transformers attention implementation that produced the weights
    tokens: list[str]  # each token as the text it covers (special tokens as the tokenizer writes them)
    spans: list[tuple[int, int]]  # (start, end) character offsets of each token in the text
    query_word: str
    key_word: str
    query_token: int | None  # the token standing for the query word: its last piece (None: words not in the text)
    key_tokens: list[int]  # every piece of the key word
    listens: list[list[float]]  # [layer][head]: weight from the query token on the key word's tokens
    best_layer: int | None
    best_head: int | None
    best_weight: float | None
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


def load(name_or_path: str, impl: str = "matrix"):
    """(tokenizer, model, attention implementation) of a causal LM, ready for :func:`model_heads`."""
    transformers = hf.require("transformers")
    if impl not in ("matrix", "eager"):
        raise ValueError(f"impl must be 'matrix' or 'eager' (the forms that keep the weights), got {impl!r}")
    path = Path(name_or_path)
    if not path.exists() and (str(name_or_path).startswith((".", "/", "~")) or str(name_or_path).count("/") > 1):
        raise ValueError(f"{name_or_path}: no such folder (and not a hub name, which reads owner/name)")
    if path.is_file() or (path.is_dir() and not (path / "config.json").exists()):
        raise ValueError(f"{name_or_path} is not a saved model (a folder with config.json, or a hub name)")
    if path.is_dir() and not any((path / f).exists() for f in TOKENIZER_FILES):
        raise ValueError(f"{name_or_path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save it beside the "
                         "model, e.g. tokenizer.save_pretrained(folder)")
    hf.register()
    attn = "attnlab_matrix" if impl == "matrix" else "eager"
    tok = hf.from_pretrained(transformers.AutoTokenizer, name_or_path)  # the cache first: fast offline
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"the tokenizer of {name_or_path!r} is not a fast tokenizer; the head view needs its "
                         f"character offsets")
    try:
        model = hf.from_pretrained(transformers.AutoModelForCausalLM, name_or_path, attn_implementation=attn).eval()
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
        kind = transformers.AutoConfig.from_pretrained(name_or_path).model_type
        raise ValueError(f"{name_or_path} is not a causal language model (its type, {kind!r}, has no "
                         f"AutoModelForCausalLM class)") from None
    return tok, model, attn


def token_limit(config) -> int:
    """The most tokens a text is measured on: MAX_TOKENS, or fewer when the model reads fewer positions."""
    most = [getattr(config, k, None) for k in ("max_position_embeddings", "n_positions", "n_ctx")]
    return min([MAX_TOKENS] + [m for m in most if isinstance(m, int) and m > 0])


def _fitted(text: str, tok, limit: int) -> str:
    """``text``, or its beginning up to the end of token ``limit`` when the tokenizer makes more of it."""
    while True:
        spans = tok(text, return_offsets_mapping=True)["offset_mapping"]
        if len(spans) <= limit:
            return text
        end = max(int(b) for _, b in spans[:limit])
        text = text[: end if end < len(text) else len(text) - 1]  # cut again should the cut text tokenize longer


def model_heads(name_or_path: str, text: str = SENTENCE, *, query_word: str = QUERY_WORD,
                key_word: str = KEY_WORD, impl: str = "matrix", loaded=None, need_words: bool = True) -> ModelHeads:
    """Run the model on ``text`` and measure its heads (see the module docstring).

    ``impl``: ``"matrix"`` (attnlab's matrix form inside the model) or ``"eager"`` (transformers' own).
    ``loaded``: what :func:`load` returned, to run one model on several texts. ``need_words=False``: a text
    without the two words still gets its weights and statistics, with the measurement fields None. A text of
    more tokens than :func:`token_limit` allows is measured on its beginning: ``text`` of the result is what was.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    tok, model, attn = loaded if loaded is not None else load(name_or_path, impl)
    text = _fitted(text, tok, token_limit(model.config))
    try:
        key_lo, key_hi = word_span(text, key_word)
        q_lo, q_hi = word_span(text, query_word, key_hi)  # "it" after "animal": what it may refer back to
    except WordNotFound:
        if need_words:
            raise
        key_lo = key_hi = q_lo = q_hi = None
    enc = tok(text, return_offsets_mapping=True, return_tensors="pt")
    ids = enc["input_ids"]
    if ids.shape[-1] == 0:
        raise ValueError(f"the model's tokenizer maps the text {text!r} to no tokens")
    spans = [tuple(int(x) for x in s) for s in enc["offset_mapping"][0]]
    names = tok.convert_ids_to_tokens(ids[0].tolist())
    tokens = [text[a:b] if b > a else names[i] for i, (a, b) in enumerate(spans)]
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=enc.get("attention_mask"), output_attentions=True)
    if not out.attentions or out.attentions[0] is None:
        raise ValueError(f"{name_or_path!r} returned no attention weights with attn_implementation={attn!r}")
    att = torch.stack([a[0].double() for a in out.attentions])  # (layers, H, T, T)
    query_token, key_tokens, listens, layer, head, weight = None, [], [], None, None, None
    if key_lo is not None:
        key_tokens = _overlapping(spans, key_lo, key_hi)
        query_token = _overlapping(spans, q_lo, q_hi)[-1]
        listened = att[:, :, query_token][..., key_tokens].sum(dim=-1)  # (layers, H)
        layer, head = divmod(int(listened.argmax()), listened.shape[1])
        listens, weight = listened.tolist(), float(listened[layer, head])
    stats = [head_stats(a[None]) for a in att]
    return ModelHeads(
        model=str(name_or_path), text=text, impl=attn, tokens=tokens, spans=spans, query_word=query_word,
        key_word=key_word, query_token=query_token, key_tokens=key_tokens, listens=listens,
        best_layer=layer, best_head=head, best_weight=weight,
        entropy=[e for e, _ in stats], peak=[p for _, p in stats],
        weights=[[[[float(f"{w:.4g}") for w in row] for row in h] for h in a.tolist()] for a in att],
        machine=machine(), versions=versions())
