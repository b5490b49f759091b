"""One sentence through attention, every number kept: the data behind the lesson's walkthrough.

"the animal did not cross the street because it was tired": what does "it" listen to? We run the
sentence through one attention head and keep every intermediate matrix -- the token vectors X, the
queries Q = X Wq, keys K = X Wk and values V = X Wv, the scores Q K^T, the scaled scores, the
causal mask, the softmax weights and the output (weights @ V) -- plus the weights of every head of
every layer for the head view.

The head is either from a model trained by ``attnlab train`` (its checkpoint, character by
character, since that model reads characters) or, when there is no checkpoint, a *seeded* model:
random weights from a fixed seed, word by word. A seeded head computes real attention on real
vectors, but nobody taught it which words matter, and the page says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab.kernels import matrix
from attnlab.nn.probe import entropy

SENTENCE = "the animal did not cross the street because it was tired"
QUERY_WORD = "it"


class CannotRead(ValueError):
    """The checkpoint is fine but cannot read the sentence: the page falls back to a seeded head and says why."""


class TooShort(CannotRead):
    """The checkpoint's context is too short to read the sentence up to the query word."""


@dataclass
class Walkthrough:
    source: str  # "trained" or "seeded"
    label: str  # where the head came from, in words
    tokens: list[str]  # one label per token (characters for a trained model, words for the seeded one)
    word_of: list[int]  # token -> index into words, -1 for spaces
    words: list[str]
    query: int  # the token that stands for "it": its last character, or the word
    layer: int
    head: int
    d_model: int
    d_head: int
    scale: float
    x: list[list[float]]  # (T, d_model): what the head reads
    q: list[list[float]]  # (T, d_head)
    k: list[list[float]]
    v: list[list[float]]
    scores: list[list[float]]  # (T, T): q k^T
    scaled: list[list[float]]  # scores * scale
    masked: list[list[float | None]]  # scaled with the future removed (None stands for -inf)
    weights: list[list[float]]  # softmax of each row
    out: list[list[float]]  # (T, d_head): weights @ v
    listens: list[float]  # per word: the weight the query puts on that word's tokens
    heads: list[list[list[list[float]]]]  # [layer][head] (T, T) weights: the head view
    head_entropy: list[list[float]]  # [layer][head] mean row entropy (nats)


def _r(t: torch.Tensor) -> list:
    """Round for the page: 4 significant digits is all a reader needs, and keeps the file small."""
    return [_r(x) for x in t] if t.dim() > 1 else [float(f"{v:.4g}") for v in t.tolist()]


def _words(tokens: list[str], char_level: bool) -> tuple[list[int], list[str]]:
    if not char_level:
        return list(range(len(tokens))), list(tokens)
    word_of, words, cur = [], [], None
    for i, c in enumerate(tokens):
        if c == " ":
            word_of.append(-1)
            cur = None
            continue
        if cur is None:
            words.append("")
            cur = len(words) - 1
        words[cur] += c
        word_of.append(cur)
        del i
    return word_of, words


def _build(source, label, tokens, char_level, layer, head, x, q, k, v, scale, heads) -> Walkthrough:
    """Everything the page shows, from X, Q, K, V of the chosen head (float tensors)."""
    T = len(tokens)
    word_of, words = _words(tokens, char_level)
    it = words.index(QUERY_WORD)
    query = max(i for i in range(T) if word_of[i] == it)  # the last token of "it": it has read the whole word
    scores = q @ k.T  # (T, T)
    scaled = scores * scale
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    out, w = matrix.attention(q, k, v, is_causal=True, scale=scale, return_weights=True)
    masked = [[None if future[i, j] else float(f"{scaled[i, j].item():.4g}") for j in range(T)] for i in range(T)]
    listens = [0.0] * len(words)
    for j in range(T):
        if word_of[j] >= 0:
            listens[word_of[j]] += float(w[query, j])
    return Walkthrough(source, label, tokens, word_of, words, query, layer, head, x.shape[1], q.shape[1], scale,
                       _r(x), _r(q), _r(k), _r(v), _r(scores), _r(scaled), masked, _r(w), _r(out),
                       [round(m, 4) for m in listens], [[_r(h) for h in layer_w] for layer_w in heads],
                       [[round(float(entropy(h).mean()), 4) for h in layer_w] for layer_w in heads])


def seeded(seed: int = 0, d_model: int = 32, n_head: int = 4, n_layer: int = 2, why: str = "") -> Walkthrough:
    """A word-level model with random weights from ``seed``: sinusoidal positions, pre-norm layers of n_head heads."""
    tokens = SENTENCE.split()
    T, d = len(tokens), d_model // n_head
    g = torch.Generator().manual_seed(seed)
    vocab = sorted(set(tokens))
    table = torch.randn(len(vocab), d_model, generator=g)
    pos = torch.arange(T)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)  # (T, d_model/2)
    pe = torch.stack([pos.sin(), pos.cos()], dim=-1).reshape(T, d_model)  # (T, d_model)
    x = table[[vocab.index(w) for w in tokens]] + pe  # (T, d_model)
    heads, first = [], None
    for layer in range(n_layer):
        h = F.layer_norm(x, (d_model,))
        wq, wk, wv = (torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(3))
        wo = torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model)
        q, k, v = ((h @ w).view(T, n_head, d).transpose(0, 1) for w in (wq, wk, wv))  # (H, T, d)
        y, w = matrix.attention(q, k, v, is_causal=True, return_weights=True)  # (H, T, d), (H, T, T)
        heads.append(list(w))
        if layer == 0:
            first = (h, q[0], k[0], v[0])
        x = x + y.transpose(0, 1).reshape(T, d_model) @ wo
    h, q, k, v = first
    return _build("seeded", f"a seeded model (random weights, seed {seed}, never trained): layer 0, head 0{why}",
                  tokens, False, 0, 0, h, q, k, v, 1 / math.sqrt(d), heads)


def find_checkpoint(out: str | Path) -> Path | None:
    """The trained model in ``out/checkpoints``: the 1/sqrt(d) run of ``attnlab train`` first, else any."""
    folder = Path(out) / "checkpoints"
    if not folder.is_dir():
        return None
    for name in ("scale-sqrt.pt", "tie-kv-untied.pt", "tie-kv-tied.pt"):  # the 1/sqrt(d) models first
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob("*.pt"))
    return found[0] if found else None


@torch.no_grad()
def trained(path: str | Path) -> Walkthrough:
    """Layer 0, head 0 of the model in checkpoint ``path``, on the sentence, character by character."""
    from attnlab.lab import checkpoint
    from attnlab.nn.gpt import GPT, GPTConfig

    state = checkpoint.load(path)
    cfg = GPTConfig(**state["model_config"])
    model = GPT(cfg)
    model.load_state_dict(state["model"])
    model.eval()
    chars = list(state["chars"])
    if cfg.scale != "sqrt":  # the walkthrough's "scale" step explains 1/sqrt(d)
        raise CannotRead(f"the model in {path} was trained with scale {cfg.scale!r}, not the 1/sqrt(d) the "
                         "walkthrough explains")
    text = SENTENCE[-cfg.block_size:]  # a model trained on short windows reads the last block_size characters
    if QUERY_WORD not in text.split():
        raise TooShort(f"the model in {path} reads at most {cfg.block_size} characters, too few to reach "
                       f"'{QUERY_WORD}' in the sentence")
    missing = sorted({c for c in text if c not in chars})
    if missing:
        raise CannotRead(f"the model in {path} has no token for {''.join(missing)!r}, so it cannot read the "
                         "sentence")
    idx = torch.tensor([[chars.index(c) for c in text]])  # (1, T)
    x = model.wte(idx)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(idx.shape[1]))
    heads, first = [], None
    for block in model.blocks:
        h = block.ln_1(x)  # (1, T, C): what attention reads
        heads.append(list(block.attn.attention_weights(h)[0]))  # H x (T, T)
        if first is None:
            q, k, v = block.attn.project(h)  # (1, H, T, d)
            first = (h[0], q[0, 0], k[0, 0], v[0, 0], block.attn.scale)
        x = block(x)
    h, q, k, v, scale = first
    step = state.get("step", "?")
    trained_for = "its initial weights, not trained yet" if step == 0 else f"step {step}"
    layers = f"{cfg.n_layer} layer{'s' if cfg.n_layer != 1 else ''}"
    label = (f"the model from attnlab train ({Path(path).name}, {trained_for}, {layers} x "
             f"{cfg.n_head} heads, head width {cfg.head_dim}): layer 0, head 0, one token per character")
    return _build("trained", label, list(text), True, 0, 0, h, q, k, v, float(scale), heads)
