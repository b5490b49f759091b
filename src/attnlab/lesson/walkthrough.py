"""One sentence through the model: the text the lesson page starts from, and what the model does with it.

"the animal did not cross the street because it was tired": what does "it" listen to? The page runs
the model itself (see :mod:`.model`) on this sentence, or on whatever the learner types, and shows
every step of one head. Here we choose the model, check it can read the sentence, and measure its
heads on it (:mod:`.heads`), so the page's prose and the tests have the same numbers the page shows
when it opens.

The model is a character-level one (``attnlab train`` trains on characters), so the query that
stands for "it" is the last character of "it", the "t": by then the model has read the whole word.
Whether that "t" listens to "animal" is for the measurements to say, not for the story to assume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.lesson import heads as H
from attnlab.lesson import model as M
from attnlab.lesson.model import CannotRead

SENTENCE = "the animal did not cross the street because it was tired"
QUERY_WORD = "it"
__all__ = ["SENTENCE", "QUERY_WORD", "CannotRead", "TooShort", "Walkthrough", "of", "find_checkpoint", "trained",
           "seeded"]
find_checkpoint = M.find_checkpoint


class TooShort(CannotRead):
    """The checkpoint's context is too short to read the sentence up to the query word."""


@dataclass
class Walkthrough:
    source: str  # "trained" or "seeded"
    label: str  # where the model came from, in words
    text: str  # the sentence as the model reads it (its last block_size characters)
    tokens: list[str]
    words: list[str]
    word_of: list[int]  # token -> index into words, -1 for spaces and punctuation
    query: int  # the last character of "it"
    layer: int  # the head the walkthrough follows
    head: int
    listens: list[float]  # per word: the share of the query's weight on that word's characters (layer 0, head 0)
    listens_mean: list[float]  # the same per character of the word
    heads: list[list[H.HeadStats]]  # [layer][head] on this text, for the query above


def of(m: M.Loaded) -> Walkthrough:
    """The walkthrough of ``m`` on the sentence; TooShort or CannotRead when the model cannot read it."""
    block = m.model.cfg.block_size
    text = SENTENCE[-block:]  # a model trained on short windows reads the last block_size characters
    if QUERY_WORD not in text.split():
        raise TooShort(f"the model reads at most {block} characters, too few to reach '{QUERY_WORD}' in the sentence")
    missing = M.unknown(text, m.chars)
    if missing:
        raise CannotRead(f"the model has no token for {''.join(missing)!r}, so it cannot read the sentence")
    ref = M.reference(m, text)
    tokens = ref["tokens"]
    word_of, words = H.words(tokens)
    it = len(words) - 1 - words[::-1].index(QUERY_WORD)
    query = max(i for i in range(len(tokens)) if word_of[i] == it)
    total, mean = H.word_shares(tokens, ref["weights"][0][0][query])
    return Walkthrough(m.source, m.label, text, tokens, words, word_of, query, 0, 0, [round(x, 4) for x in total],
                       [round(x, 4) for x in mean], H.all_heads(tokens, ref["weights"], query))


def trained(path: str | Path) -> tuple[M.Loaded, Walkthrough]:
    m = M.trained(path)
    try:
        return m, of(m)
    except CannotRead as e:
        raise type(e)(f"{path}: {e}") from None


def seeded(seed: int = 0, why: str = "") -> tuple[M.Loaded, Walkthrough]:
    m = M.seeded(seed, why)
    return m, of(m)
