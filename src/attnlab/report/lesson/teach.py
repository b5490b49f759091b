"""The page's teaching sections that need no measurement: plain words, the worked example, the shapes of
several heads, the code, and the reading list."""

from __future__ import annotations

from html import escape

from attnlab.lesson import heads as H


def plain_words() -> str:
    rows = "".join(f"<tr><th>{n}</th><td>{a}</td><td>{b}</td></tr>" for n, a, b in (
        ("query q", "what this position is looking for", "“a noun that something could be tired about”"),
        ("key k", "what a position offers to be found by", "“I am a noun, an animal”"),
        ("value v", "what a position hands over once it is listened to", "“animal: alive, four legs, …”"),
        ("weight", "how much the query listens to that key, after the softmax (a row adds up to 1)", "0.6")))
    return ("<p>Think of a library search. Every book (position) has a label on its spine, the <b>key</b>, and "
            "content inside, the <b>value</b>. You arrive with a <b>query</b>. You compare your query with every "
            "label, turn the matches into shares that add up to 1, and leave with a blend of the contents, mostly "
            "from the books that matched best. Attention does exactly this, for every position at once, with "
            "vectors instead of words.</p>"
            '<table class="qkv-table"><thead><tr><th></th><th>what it is</th><th>for “it”, in a model that had learned '
            f"it</th></tr></thead><tbody>{rows}</tbody></table>"
            '<p class="key-fact"><b>Attention is the only place information moves between positions.</b> Everything '
            "else in a transformer -- the embeddings, the LayerNorms, the MLP -- works on one position at a time. If "
            "a word is to affect another, it happens here, through a weight in a row of this softmax.</p>")


def _matrix(m, digits: int = 3, names: list[str] | None = None, keys: bool = False) -> str:
    """An HTML table of ``m``; ``names`` label the rows, and with ``keys`` the columns too (query rows, key columns)."""
    def cell(v):
        if v is None:
            return '<td class="masked">−∞</td>'
        return f"<td>{v:.{digits}g}</td>" if isinstance(v, float) else f"<td>{v}</td>"

    body = "".join("<tr>" + (f"<th>{escape(names[i])}</th>" if names else "") + "".join(cell(v) for v in row)
                   + "</tr>" for i, row in enumerate(m))
    head = ("<tr><th>query ↓ key →</th>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>"
            if keys and names else "")
    return f'<div class="matwrap"><table class="mat">{head}{body}</table></div>'


def worked(w) -> str:
    """Three tokens, head width 4, every step beside the line of Python that computes it."""
    t = w.tokens
    exps = [[f"e^{(x - max(v for v in row if v is not None)):g} = {e:.3f}" if x is not None else "0"
             for x, e in zip(row, erow, strict=True)] for row, erow in zip(w.masked, w.exps, strict=True)]
    last = len(t) - 1
    terms = " + ".join(f"{w.weights[last][j]:.3f} × {[int(x) for x in w.v[j]]}" for j in range(len(t)))
    steps = [
        ("Q, K and V: 3 tokens × 4 numbers (V has 2; values may have their own width)",
         "q, k, v = torch.tensor(Q), torch.tensor(K), torch.tensor(V)",
         '<div class="mats">' + "".join(f"<div><b>{n}</b>{_matrix(m, names=t)}</div>" for n, m in
                                        (("Q", w.q), ("K", w.k), ("V", w.v))) + "</div>"),
        ("Scores: each query's dot product with each key. Row “sat”, column “the”: "
         f"{' + '.join(f'{int(a)}·{int(b)}' for a, b in zip(w.q[2], w.k[0], strict=True))} = {w.scores[2][0]:g}",
         w.code["scores"], _matrix(w.scores, names=t, keys=True)),
        (f"Scale: d = 4, so multiply by 1/√4 = {w.scale:g}", w.code["scaled"], _matrix(w.scaled, names=t, keys=True)),
        ("Mask: a token may not look at later tokens", w.code["masked"], _matrix(w.masked, names=t, keys=True)),
        ("Exponentials: subtract each row's largest score, then e^x", w.code["exps"],
         _matrix(exps, names=t, keys=True) + "<p>Row sums: " + ", ".join(f"{s:.3f}" for s in w.sums) + "</p>"),
        ("Softmax: divide each row by its sum, so it adds up to 1", w.code["weights"],
         _matrix(w.weights, names=t, keys=True)),
        (f"Output: the weighted sum of the values. For “{t[last]}”: {terms} = "
         f"[{', '.join(f'{x:.3f}' for x in w.out[last])}]", w.code["out"], _matrix(w.out, names=t)),
    ]
    out = "".join(f'<div class="wstep"><p>{i}. {escape(text)}</p><pre class="code">{escape(code)}</pre>{table}</div>'
                  for i, (text, code, table) in enumerate(steps, 1))
    return (out + f"<p>The same three tokens through attnlab's matrix form and PyTorch's "
            f"<code>F.scaled_dot_product_attention(q, k, v, is_causal=True)</code>: largest difference "
            f"{w.err_matrix:.1e} and {w.err_torch:.1e}. The pencil and the library agree.</p>")


def several_heads(cfg: dict, T: int) -> str:
    """Why several heads, with the split and the join written out in this model's shapes."""
    C, Hn = cfg["d_model"], cfg["n_head"]
    d = C // Hn
    rows = [("x", f"({T}, {C})", f"one row of C numbers per character (T = {T} for the sentence)"),
            ("q, k, v = split(x @ W_qkv)", f"({T}, {C}) each", "one fused projection, cut in three"),
            ("q.view(T, H, d)", f"({T}, {Hn}, {d})", f"each row cut into H = {Hn} pieces of d = {d}"),
            (".transpose(0, 1)", f"({Hn}, {T}, {d})", "H separate small attentions, side by side"),
            ("attention(q, k, v, causal)", f"({Hn}, {T}, {d})", "each head its own T × T weights"),
            ("y.transpose(0, 1).reshape(T, C)", f"({T}, {C})", "the heads' outputs joined (concatenated) again"),
            ("y @ W_o", f"({T}, {C})", "the output projection mixes what the heads found")]
    table = "".join(f"<tr><td><code>{escape(a)}</code></td><td>{b}</td><td>{escape(c)}</td></tr>" for a, b, c in rows)
    return ("<p>One head gives each position one weighted average. But a position may need several things at once: "
            "the character before it, the start of its word, the subject of the sentence. So the width C is cut into "
            f"H heads of d = C / H numbers, here {C} = {Hn} × {d}; each head has its own queries and keys, so it can "
            "listen for something different, at no extra cost: H heads of width d do the same arithmetic as one of "
            "width C. The batch dimension is left out below.</p>"
            f'<table class="shapes"><thead><tr><th>line</th><th>shape</th><th>what happens</th></tr></thead>'
            f"<tbody>{table}</tbody></table>")


def heads_intro() -> str:
    return (f"<p>Every head of every layer on the text in the box above (rows: queries, columns: keys). Under each, "
            f"what it measurably does on this text: the share of its weight one step back (previous), on the "
            f"query's own character (same), on the first character (first), on spaces and punctuation, and its mean "
            f"entropy -- averaged over every query after the first. A head is named after a pattern only when that "
            f"pattern takes at least {H.PATTERN_SHARE} of its weight; “→ word” appears only when the chosen query "
            f"puts at least {H.WORD_SHARE} of its weight on one word. Press “follow this head” to walk it through "
            "the steps above.</p>")


def _listing(s, summary: str, open_: bool = False) -> str:
    """A whole listing, each line with its number in the file, in order; the summary says where it starts and ends."""
    where = f"{s.file}, lines {s.lines[0]}–{s.lines[-1]}" if s.lines else s.file
    body = "\n".join(f"{n:>3}  {line}" for n, line in zip(s.lines, s.code, strict=True))
    return (f'<details class="listing"{" open" if open_ else ""}><summary>{escape(summary)} '
            f'<span class="where">{escape(where)}</span></summary><pre class="code">{escape(body)}</pre></details>')


def code_blocks(code) -> str:
    links = ", ".join(f'<a href="{escape(u)}">{escape(n)}</a>' for n, u in code.links.items())
    return (_listing(code.module, "The lesson's module: CausalSelfAttention, every step on its own line", True)
            + "<p class=\"note\">The model in the page runs attnlab's MultiHeadAttention, which computes the same "
              "thing (the tests load the same weights into both and compare) and adds grouped-query attention, rotary "
              "positions, a KV cache and a choice of kernel. For the curious, the production code: "
              f"{links}.</p>"
            + _listing(code.starter, "The lab's starter: attention_by_hand with its TODOs (attnlab lab start writes "
                       "it; the matrix form is level 2's)"))


READING = [
    ("Vaswani et al. (2017), Attention Is All You Need", "https://arxiv.org/abs/1706.03762"),
    ("Jay Alammar, The Illustrated Transformer", "https://jalammar.github.io/illustrated-transformer/"),
    ("3Blue1Brown, Attention in transformers, visually explained (Deep Learning, chapter 6)",
     "https://www.youtube.com/watch?v=eMlx5fFNoYc"),
    ("Andrej Karpathy, Let's build GPT: from scratch, in code, spelled out", "https://www.youtube.com/watch?v=kCc8FmEb1nY"),
    ("Clark et al. (2019), What Does BERT Look At? An Analysis of BERT's Attention", "https://arxiv.org/abs/1906.04341"),
]


def reading() -> str:
    """Plain links: followed only when clicked; the page itself fetches nothing."""
    return '<ul class="reading">' + "".join(f'<li><a href="{escape(u)}" rel="noopener noreferrer">{escape(t)}</a>'
                                            f"</li>" for t, u in READING) + "</ul>"
