"""What a head measurably does on one text: the numbers behind every label in the head view.

A label on a figure is a claim. "This head links 'it' to 'animal'" is only true if, on this text,
that head puts a large share of its weight there. So each head is described by five numbers,
measured on its (T, T) weights, averaged over the queries 1 .. T-1 (query 0 can only see itself):

    previous  the weight on the token just before the query       w[i, i-1]
    same      the weight on the query's own token                  w[i, i]
    first     the weight on the first token                        w[i, 0]
    boundary  the weight on spaces and punctuation                 sum of w[i, j] over those j
    induction the weight on the token just after an earlier copy    sum of w[i, j] over j < i with
              of the query's token (averaged over the queries       tokens[j-1] == tokens[i]
              that have an earlier copy)
    entropy   how spread the weights are, in nats                  -sum w log w

and a plain label from the largest of the first five when it reaches :data:`PATTERN_SHARE`
("previous-token head: 0.71 of its weight one step back"). A word is named ("-> animal") only when
the chosen query puts at least :data:`WORD_SHARE` of its weight on that word's tokens.

It takes token strings and weights, not a model, so it describes the heads of any model: the
lesson's character-level GPT here, a pretrained model's word pieces elsewhere. The lesson page's
script computes the same numbers for the text a learner types (the page test checks they agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlab.train.circuits import after_copies

PATTERN_SHARE = 0.5  # a head is named after a pattern that takes at least this share of its weight
WORD_SHARE = 0.5  # "-> word" only when the query puts at least this share of its weight on that word
PIECE_MARKS = (" ", "Ġ", "▁")  # a token starting with one of these starts a new word (GPT-2, SentencePiece)


@dataclass
class HeadStats:
    layer: int
    head: int
    previous: float | None  # None when the text has a single token
    same: float | None
    first: float | None
    boundary: float | None
    induction: float | None  # None when no query's token appeared before
    entropy: float | None  # nats
    pattern: str  # "previous", "same", "first", "boundary", "induction", "broad" or "mixed"
    label: str  # the plain sentence the page shows
    word: str | None  # the word the query listens to, when its share reaches WORD_SHARE
    word_share: float  # the largest share of the query's weight on one word


def is_word_token(token: str) -> bool:
    """A token that holds a letter or digit (ASCII); spaces and punctuation are word boundaries."""
    return any(c.isascii() and c.isalnum() for c in token)


def words(tokens: list[str]) -> tuple[list[int], list[str]]:
    """token -> index of its word (-1 for boundaries), and the words.

    A word is a run of word tokens; a token that starts with a space (or GPT-2's Ġ, SentencePiece's ▁)
    starts a new one.
    """
    word_of, found, cur = [], [], -1
    for t in tokens:
        if not is_word_token(t):
            word_of.append(-1)
            cur = -1
            continue
        if cur < 0 or t.startswith(PIECE_MARKS):
            found.append("")
            cur = len(found) - 1
        found[cur] += t.lstrip("".join(PIECE_MARKS))
        word_of.append(cur)
    return word_of, found


def word_shares(tokens: list[str], row: list[float]) -> tuple[list[float], list[float]]:
    """One query's weights summed per word, and the same as a mean per token (long words do not win by length)."""
    word_of, ws = words(tokens)
    total, count = [0.0] * len(ws), [0] * len(ws)
    for j, w in enumerate(row):
        if word_of[j] >= 0:
            total[word_of[j]] += w
            count[word_of[j]] += 1
    return total, [t / c if c else 0.0 for t, c in zip(total, count, strict=True)]


def even_spread(T: int, causal: bool = True) -> float:
    """The mean entropy over queries 1..T-1 of weights spread evenly over every key each query sees."""
    return sum(math.log(i + 1 if causal else T) for i in range(1, T)) / (T - 1)


def _label(s: dict, entropy: float, T: int, causal: bool) -> tuple[str, str]:
    name, share = max(((k, v) for k, v in s.items() if v is not None), key=lambda kv: kv[1])
    if share >= PATTERN_SHARE:
        what = {"previous": ("previous-token head", "one step back"),
                "same": ("same-token head", "on the query's own token"),
                "first": ("first-token head", "on the first token"),
                "boundary": ("boundary head", "on spaces and punctuation"),
                "induction": ("induction head", "on the token after an earlier copy of the query's")}[name]
        return name, f"{what[0]}: {share:.2f} of its weight {what[1]}"
    uniform = even_spread(T, causal)
    if entropy >= 0.75 * uniform:
        return "broad", f"broad head: spreads its weight (entropy {entropy:.2f} nats; even spread {uniform:.2f})"
    return "mixed", f"mixed head: no pattern reaches {PATTERN_SHARE} (largest: {name} {share:.2f})"


def induction(tokens, w) -> float | None:
    """Mean over the queries whose token appeared before of the weight on the tokens right after those copies
    (:func:`after_copies`); None when no token appeared before."""
    shares = [sum(w[i][j] for j in after) for i, after in after_copies(tokens).items()]
    return sum(shares) / len(shares) if shares else None


def head_stats(tokens: list[str], weights, query: int | None = None, layer: int = 0, head: int = 0,
               causal: bool = True) -> HeadStats:
    """The numbers of one head: ``weights`` is its (T, T) matrix (nested lists or a tensor), rows sum to 1;
    ``causal=False`` when they were computed without the mask (the even spread then covers every key)."""
    w = weights.tolist() if hasattr(weights, "tolist") else weights
    T = len(tokens)
    if len(w) != T or any(len(r) != T for r in w):
        raise ValueError(f"weights must be {T} x {T} for {T} tokens, got {len(w)} rows")
    query = T - 1 if query is None else query
    word_of, ws = words(tokens)
    total, _ = word_shares(tokens, w[query]) if T else ([], [])
    best = max(range(len(ws)), key=lambda i: total[i]) if ws else None
    word_share = total[best] if best is not None else 0.0
    word = ws[best] if best is not None and word_share >= WORD_SHARE else None
    if T < 2:
        return HeadStats(layer, head, None, None, None, None, None, None, "mixed", "one token: nothing to measure",
                         word, word_share)
    rows = range(1, T)
    s = {"previous": sum(w[i][i - 1] for i in rows) / (T - 1),
         "same": sum(w[i][i] for i in rows) / (T - 1),
         "first": sum(w[i][0] for i in rows) / (T - 1),
         "boundary": sum(w[i][j] for i in rows for j in range(T) if word_of[j] < 0) / (T - 1),
         "induction": induction(tokens, w)}
    entropy = sum(-sum(x * math.log(x) for x in w[i] if x > 0) for i in rows) / (T - 1)
    pattern, label = _label(s, entropy, T, causal)
    return HeadStats(layer, head, s["previous"], s["same"], s["first"], s["boundary"], s["induction"], entropy,
                     pattern, label, word, word_share)


def all_heads(tokens: list[str], weights, query: int | None = None, causal: bool = True) -> list[list[HeadStats]]:
    """:func:`head_stats` for weights[layer][head] (T, T)."""
    return [[head_stats(tokens, h, query, li, hi, causal) for hi, h in enumerate(layer)]
            for li, layer in enumerate(weights)]
