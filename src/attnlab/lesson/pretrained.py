"""The lesson on a pretrained model's tokens: ``attnlab lesson --model NAME_OR_PATH [--text ...]``.

The built-in page runs attnlab's own character-level GPT live in the browser. A Hugging Face model
cannot run there, so for one the page shows weights measured here, when the page is built: for the
lesson sentence and any other text, the tokens as the model's tokenizer cut them, every head's
(T, T) weights (from :func:`attnlab.lesson.hf_heads.model_heads`, attnlab's matrix form inside the
model), each head's honest statistics (:func:`attnlab.lesson.heads.head_stats`, the same
numbers as the built-in model's head view) and the head that puts the most weight from "it" on
"animal", found by measuring every head. Scores, values and the weighted sum are not kept: the
page says so instead of showing numbers it does not have.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.lesson import heads, hf_heads
from attnlab.lesson.walkthrough import SENTENCE
from attnlab.results import machine, versions


@dataclass
class TextHeads:
    heads: hf_heads.ModelHeads  # tokens, weights and the "it" -> "animal" measurement (None when not in the text)
    marked: list[str]  # the tokens with a leading space where the text has one before them: where words start
    query: int  # the query the statistics' "-> word" is measured for: "it" when present, else the last token
    stats: list[list[heads.HeadStats]]  # [layer][head]


@dataclass
class ModelLesson:
    model: str
    created: str  # when the weights were computed (UTC)
    n_layer: int
    n_head: int
    texts: list[TextHeads]  # the lesson sentence first, then --text when given
    seconds: float
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)


def short(name_or_path: str) -> str:
    """A hub name as it is; a local folder by its own name."""
    path = Path(name_or_path)
    return path.resolve().name if path.exists() else str(name_or_path)


def slug(name_or_path: str) -> str:
    """A file-name-safe short name of a model: ``openai-community/gpt2`` -> ``openai-community-gpt2``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", short(name_or_path)).strip("-.") or "model"


def marked(tokens: list[str], spans: list[tuple[int, int]]) -> list[str]:
    """Each token with " " in front when a gap (a space the tokenizer dropped) separates it from the one before.

    Tokenizers that split on spaces (and GPT-2's, whose offsets leave out the space of "Ġanimal") give tokens
    without their space; :func:`attnlab.lesson.heads.words` needs it to tell a new word from a piece.
    A special token (``<s>``, an empty span) is a word of its own: the token after it starts a new one.
    """
    out, end, special = [], None, False
    for tok, (a, b) in zip(tokens, spans, strict=True):
        starts = (special or (end is not None and a > end)) and b > a and not tok.startswith(heads.PIECE_MARKS)
        out.append((" " if starts else "") + tok)
        special = b <= a
        end = b if b > a else end
    return out


def collect_model(name_or_path: str, text: str | None = None, log=lambda msg: None) -> ModelLesson:
    """Load the model once and measure it on the lesson sentence and ``text``; ``log`` hears each step.

    Raises ValueError (text the tokenizer maps to nothing, a model that is not a causal LM), OSError (no
    such model) or :class:`attnlab.nn.hf.MissingExtra`.
    """
    t0 = time.perf_counter()
    if text is not None and not text.strip():
        raise ValueError("--text must hold some characters other than spaces")
    log(f"loading {name_or_path}")
    loaded = hf_heads.load(name_or_path)
    import transformers  # present: load() needs it
    texts = [SENTENCE] + ([text] if text is not None and text != SENTENCE else [])
    measured = []
    for t in texts:
        log(f"measuring every head on {t!r}")
        mh = hf_heads.model_heads(name_or_path, t, loaded=loaded, need_words=False)
        if mh.text != t:  # longer than the model reads (or the page holds): measured on its beginning, said so
            log(f"the text has more tokens than {hf_heads.token_limit(loaded[1].config)}, the most measured with "
                f"this model: measured on its first {len(mh.text)} of {len(t)} characters")
        query = mh.query_token if mh.query_token is not None else len(mh.tokens) - 1
        toks = marked(mh.tokens, mh.spans)
        measured.append(TextHeads(mh, toks, query, heads.all_heads(toks, mh.weights, query)))
    first = measured[0].heads
    return ModelLesson(str(name_or_path), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), len(first.weights),
                       len(first.weights[0]), measured, time.perf_counter() - t0, machine(),
                       {**versions(), "transformers": transformers.__version__})
