"""The lesson page for a pretrained model (``attnlab lesson --model``): one offline HTML file.

:func:`build` takes the :class:`attnlab.lesson.pretrained.ModelLesson` measured in Python and writes
the template ``pretrained.html`` with the lesson's style sheet, the script ``pretrained.js`` and the
weights and head statistics as JSON. The page draws them; it computes no statistic itself and runs no
model, and says so at the top.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from attnlab.lesson import heads
from attnlab.lesson.pretrained import short
from attnlab.results import to_dict

from . import _asset, _fill, _script_json, _write


def _text(th) -> dict:
    mh = th.heads
    word_of, words = heads.words(th.marked)
    piece = [i > 0 and w >= 0 and word_of[i - 1] == w for i, w in enumerate(word_of)]
    return {"text": mh.text, "tokens": mh.tokens, "words": words, "word_of": word_of, "piece": piece,
            "weights": mh.weights, "stats": to_dict(th.stats), "stats_query": th.query, "query": th.query,
            "query_token": mh.query_token, "key_tokens": mh.key_tokens, "listens": mh.listens,
            "best_layer": mh.best_layer, "best_head": mh.best_head, "best_weight": mh.best_weight}


def render(lesson) -> str:
    """The whole page as one string."""
    first = lesson.texts[0].heads
    m, v = lesson.machine, lesson.versions
    data = {"model": lesson.model, "n_layer": lesson.n_layer, "n_head": lesson.n_head,
            "query_word": first.query_word, "key_word": first.key_word, "word_share": heads.WORD_SHARE,
            "texts": [_text(t) for t in lesson.texts]}
    fill = {"css": _asset("lesson.css"), "js": _asset("pretrained.js"), "data": _script_json(data),
            "model": escape(lesson.model), "name": escape(short(lesson.model)), "created": escape(lesson.created),
            "where": escape(f"{m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores"),
            "shape": f"{lesson.n_layer} layers × {lesson.n_head} heads", "n_heads": str(lesson.n_layer * lesson.n_head),
            "and_text": " and your text" if len(lesson.texts) > 1 else "",
            "pattern_share": str(heads.PATTERN_SHARE), "word_share": str(heads.WORD_SHARE),
            "attnlab": escape(v.get("attnlab", "?")), "torch": escape(v.get("torch", "?")),
            "transformers": escape(v.get("transformers", "?"))}
    return _fill(_asset("pretrained.html"), fill)


def build(lesson, path: str | Path) -> Path:
    """Write the page to ``path`` (atomically) and return the path."""
    return _write(render(lesson), path)
