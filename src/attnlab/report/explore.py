"""Figures for ``attnlab explore``: one picture per experiment, drawn from its result."""

from __future__ import annotations

from pathlib import Path

from attnlab._extras import require

from .plots import _plt, save_figure

np = require("numpy")

SEGMENT_COLOURS = {"trusted": "#2a9d8f", "untrusted": "#e76f51", "later": "#8d99ae"}


def _heat(ax, w, labels, title):
    w = np.asarray(w, dtype=float)
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title, fontsize=10)
    return im


def no_mask(r, path) -> Path:
    fig, axes = _plt().subplots(1, 2, figsize=(9.5, 4.4), dpi=110, layout="constrained")
    _heat(axes[0], r.causal, r.tokens, "causal (decoder): upper triangle is zero")
    im = _heat(axes[1], r.bidirectional, r.tokens, "no mask (encoder): it fills in")
    fig.colorbar(im, ax=list(axes), label="attention weight", shrink=0.8)
    return save_figure(fig, path)


def same_token(r, path) -> Path:
    fig, ax = _plt().subplots(figsize=(6.4, 3.8), dpi=110)
    names = ["query", "key", "value", "out"]
    x = np.arange(len(names))
    plain = [getattr(r.without_positions, n) for n in names]
    rope = [getattr(r.with_rope, n) for n in names]
    b1 = ax.bar(x - 0.2, plain, 0.4, label="no position information", color="#8d99ae")
    b2 = ax.bar(x + 0.2, rope, 0.4, label="with RoPE", color="#264653")
    ax.bar_label(b1, fmt="%.3g", fontsize=8)
    ax.bar_label(b2, fmt="%.3g", fontsize=8)
    ax.set_xticks(x, ["query", "key", "value", "output (no mask)"])
    i, j = r.positions
    ax.set_ylabel(f"max |copy at {i} - copy at {j}|")
    ax.set_title(f"'{r.tokens[i]}' at positions {i} and {j} of \"{' '.join(r.tokens)}\"", fontsize=10)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def inv_scale(r, path) -> Path:
    from attnlab.explore.inv_scale import LABELS

    fig, (a1, a2) = _plt().subplots(1, 2, figsize=(10, 3.9), dpi=110)
    for name in r.peak:
        a1.plot(r.widths, r.peak[name], marker="o", label=f"scale {LABELS[name]}")
        a2.plot(r.widths, r.entropy[name], marker="o", label=f"scale {LABELS[name]}")
    a1.axhline(1 / r.T, color="grey", ls=":", lw=1, label=f"uniform 1/{r.T}")
    a2.axhline(r.max_entropy, color="grey", ls=":", lw=1, label=f"uniform log {r.T}")
    a1.set_ylabel("mean peak weight")
    a2.set_ylabel("mean entropy (nats)")
    a1.set_ylim(0, 1.02)
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("head width d")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"How sharp is the softmax? {r.T} keys, unit-variance q and k", fontsize=10)
    return save_figure(fig, path)


def trust(r, path) -> Path:
    fig, (a1, a2) = _plt().subplots(1, 2, figsize=(11, 4), dpi=110, gridspec_kw={"width_ratios": [1, 1.6]})
    b0 = r.segments["later"][0]
    rows = r.tokens[b0:]
    bottom = np.zeros(len(rows))
    for seg, vals in r.mass.items():
        a1.barh(range(len(rows)), vals, left=bottom, color=SEGMENT_COLOURS[seg], label=seg)
        bottom += np.asarray(vals)
    a1.set_yticks(range(len(rows)), [f"{b0 + i}: {w}" for i, w in enumerate(rows)], fontsize=8)
    a1.invert_yaxis()
    a1.set_xlabel("attention mass (layer 1)")
    a1.set_title("where the later queries look", fontsize=10)
    a1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    pos = np.arange(len(r.tokens))
    a2.plot(pos, r.change_bidirectional, marker=".", color="#e9c46a", label="no mask (encoder)")
    a2.plot(pos, r.change_causal, marker="o", color="#e76f51", label="causal mask")
    a2.plot(pos, r.change_masked, marker="s", color="#2a9d8f", label="causal + untrusted keys hidden")
    for seg, (s, e) in r.segments.items():
        a2.axvspan(s - 0.5, e - 0.5, color=SEGMENT_COLOURS[seg], alpha=0.08)
    a2.set_xticks(pos, r.tokens, rotation=70, fontsize=7)
    a2.set_ylabel("max |out - out after the change|")
    a2.set_title("change only the untrusted words: which outputs move?", fontsize=10)
    a2.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)


def online_softmax(r, path) -> Path:
    fig, (a1, a2) = _plt().subplots(1, 2, figsize=(10, 3.9), dpi=110)
    keys = np.arange(r.S)
    a1.bar(keys, r.scores, color="#adb5bd", label="score of each key")
    for s in r.steps:
        k0, k1 = s.keys
        a1.hlines(s.m_new, k0 - 0.4, r.S - 0.6, colors="#e76f51", lw=1.5)
        a1.text(k0 - 0.4, s.m_new, f" m={s.m_new:.2f}, l={s.l:.2f}", va="bottom", fontsize=7, color="#e76f51")
        a1.axvline(k1 - 0.5, color="grey", ls=":", lw=1)
    a1.set_xlabel(f"key (tiles of {r.tile})")
    a1.set_ylabel("scaled score")
    a1.set_title("running max m after each tile", fontsize=10)
    a2.plot(keys, r.weights_softmax, "o", ms=9, mfc="none", color="#264653", label="softmax of the whole row")
    a2.plot(keys, r.weights_online, "x", color="#e76f51", label="online: exp(s - m) / l at the end")
    a2.set_xlabel("key")
    a2.set_ylabel("weight")
    a2.set_title(f"they agree to {r.weight_err:.1e}", fontsize=10)
    a2.legend(fontsize=8)
    return save_figure(fig, path)


def sinks(r, path) -> Path:
    heads = [(li, hi) for li in range(r.layers) for hi in range(r.heads)]
    x = np.arange(len(heads))
    fig, ax = _plt().subplots(figsize=(max(6.4, 1.1 * len(heads) + 2), 3.9), dpi=110)
    bars = [(r.first["plain"], "first token, without sinks", "#8d99ae"),
            (r.first["sinks"], "first token, with sinks", "#264653"),
            (r.sink, "the sink, with sinks", "#e76f51")]
    for k, (grid, label, colour) in enumerate(bars):
        b = ax.bar(x + (k - 1) * 0.27, [grid[li][hi] for li, hi in heads], 0.27, label=label, color=colour)
        ax.bar_label(b, fmt="%.2f", fontsize=7)
    ax.axhline(r.uniform, color="grey", ls=":", lw=1, label=f"an even head's first-token share ({r.uniform:.3f})")
    ax.set_xticks(x, [f"layer {li}\nhead {hi}" for li, hi in heads], fontsize=8)
    ax.set_ylabel("mean attention weight (queries 1 .. T-1)")
    ax.set_ylim(0, max(0.1, *(grid[li][hi] for grid, _, _ in bars for li, hi in heads)) * 1.2)
    ax.set_title(f"Where each head's attention goes on held-out text ({r.config['steps']} steps each, seed {r.seed})",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return save_figure(fig, path)


FIGURES = {"no-mask": no_mask, "same-token": same_token, "inv-scale": inv_scale, "trust": trust,
           "online-softmax": online_softmax, "sinks": sinks}


def figure(name: str, result, path) -> Path:
    """Draw experiment ``name``'s result to ``path`` (PNG)."""
    return FIGURES[name](result, path)
