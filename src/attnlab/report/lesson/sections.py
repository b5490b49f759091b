"""The page's prose sections as HTML, with this machine's numbers written in."""

from __future__ import annotations

from html import escape

from attnlab.report.fmt import fmt_bytes, fmt_time
from attnlab.train import summary as train_summary
from attnlab.train import verdict as train_verdict

from . import numbers as num
from . import verdicts

LABELS = {"sqrt": "1/√d", "none": "no scale", "inv": "1/d"}


def badge(part) -> str:
    kind = {"file": "measured", "computed now": "measured", "quick run": "quick run"}.get(part.origin, "not measured")
    return f'<p class="source {kind.replace(" ", "-")}"><strong>{escape(kind)}</strong> — {escape(part.note)}</p>'


def how(part) -> str:
    """Where a part's numbers came from, in a few words: 'bench.json' or 'a quick run'."""
    if part.origin == "file":
        return part.note.removeprefix("from ").replace("\\", "/").rsplit("/", 1)[-1]
    return "a quick run" if part.origin == "quick run" else part.origin


def figure(img: dict | None, alt: str, caption: str) -> str:
    """A figure (``img``: src, width, height in CSS px) that enlarges to twice its size on a click."""
    if not img:
        return ""
    return (f'<figure class="zoom"><div class="figscroll"><img src="{img["src"]}" width="{img["width"]}" '
            f'height="{img["height"]}" alt="{escape(alt)}" title="click to enlarge"></div>'
            f"<figcaption>{escape(caption)} (click to enlarge)</figcaption></figure>")


def demo(part, imgs) -> str:
    d = part.result
    rows = "".join(f"<tr><td>{escape(c.form)}</td><td>{'yes' if c.causal else 'no'}</td>"
                   f"<td>{c.max_err:.2e}</td><td>{'OK' if c.ok else 'FAIL'}</td></tr>" for c in d.checks)
    p = num.demo_peaks(d)
    peak = (f"<p>At head width d = {p['d']} the mean peak attention weight is <b>{p['none']:.2f}</b> unscaled, "
            f"<b>{p['sqrt']:.2f}</b> with 1/√d and <b>{p['inv']:.3f}</b> with 1/d (uniform would be "
            f"{p['uniform']:.3f}).</p>") if p else ""
    return (f'<h3>demo: the hand-written forms against PyTorch</h3>{badge(part)}'
            f'<table><thead><tr><th>form</th><th>causal</th><th>max |mine − F.sdpa|</th><th></th></tr></thead>'
            f"<tbody>{rows}</tbody></table>{peak}<div class=\"figs\">"
            + figure(imgs.get("demo_map"), "causal attention map", "One causal head: the upper triangle is zero.")
            + figure(imgs.get("demo_scale"), "peak weight against head width",
                     "Mean peak weight against head width for the three scales.") + "</div>")


_SHORT = (" At lengths this short the fixed cost of each call is a large part of the time, so these exponents can "
          "sit well below the 2 that a T × T score matrix implies (noise on a busy machine can even make one "
          "negative); <code>attnlab bench</code> measures at lengths where the growth shows.")


def _busy(result) -> str:
    """Why these times may not be trusted, when bench recorded it: a loaded machine, a growth no exact form has."""
    why = []
    load, cpus = result.machine.get("load_average"), result.machine.get("cpu_count") or 1
    if load is not None and load >= cpus:
        why.append(f"the machine was busy when bench started (load {load:.1f} on {cpus} cores)")
    odd = [f"{escape(i)} T<sup>{e['time']:.2f}</sup>" for i, e in sorted(result.exponents.items())
           if isinstance(e, dict) and e.get("time") is not None and not 0.5 <= e["time"] <= 3.5]
    if odd:
        why.append(f"some fitted time growths are not what any exact form can do ({', '.join(odd)}; 2 is expected)")
    if not why:
        return ""
    return (f'<p class="source quick-run"><strong>noisy</strong> — {"; ".join(why)}: other programs\' work is in '
            "these times. Run <code>attnlab bench --threads 1</code> on a quiet machine for numbers to quote.</p>")


def bench_table(result) -> str:
    """Forms down, lengths across; each cell the median time and the extra peak memory, or why it is empty."""
    rows = {(r.impl, r.seq): r for r in result.results}
    seqs = sorted({s for _, s in rows})
    impls = list(dict.fromkeys(i for i, _ in rows))
    reasons: dict[str, int] = {}
    quick = not any(r.peak_bytes for r in rows.values())

    def cell(impl, T):
        r = rows.get((impl, T))
        if r and r.time_s and not r.skipped:
            mem = fmt_bytes(r.peak_bytes) if r.peak_bytes is not None else "—"
            return f'<td>{fmt_time(r.time_s)}<br><span class="mem">{mem}</span></td>'
        why = (r.skipped if r else None) or "not in this run"
        n = reasons.setdefault(f"{impl} at T = {T}: {why}", len(reasons) + 1)
        return f'<td class="skipped">skipped <sup>{n}</sup></td>'

    body = "".join(f"<tr><th>{escape(i)}</th>" + "".join(cell(i, T) for T in seqs) + "</tr>" for i in impls)
    notes = "".join(f"<li>{escape(text)}</li>" for text in reasons)
    mem_note = "memory was not measured (a quick run times only)" if quick else \
        "memory: the extra peak above what was allocated before the call"
    return (f'<table class="bench"><thead><tr><th>form</th>{"".join(f"<th>T = {T}</th>" for T in seqs)}</tr>'
            f"</thead><tbody>{body}</tbody></table><p class=\"note\">Each cell: median forward time, then {mem_note}."
            "</p>" + (f'<ol class="reasons">{notes}</ol>' if notes else ""))


def quadratic(result) -> str:
    """The lab's sentence: how the matrix form's memory grows, as measured."""
    e = result.exponents.get("matrix") or {}
    p, what = e.get("memory"), "memory"
    if p is None:
        p, what = e.get("time"), "time"
    if p is None:
        return ""
    verb = "quadruples" if abs(p - 2) < 0.25 else f"multiplies by {2 ** p:.2f}"
    return (f'<p class="key-fact">Doubling the context {verb} the matrix form\'s {what}: measured T<sup>{p:.2f}</sup>. '
            "It holds the whole T × T matrix of scores; the flash form keeps a few tiles and grows like T.</p>")


def bench(part, imgs) -> str:
    exps = part.result.exponents
    exp_txt = "; ".join(f"{escape(i)}: time ∝ T<sup>{e['time']:.2f}</sup>"
                        + (f", memory ∝ T<sup>{e['memory']:.2f}</sup>" if e.get("memory") is not None else "")
                        for i, e in sorted(exps.items()) if isinstance(e, dict) and e.get("time") is not None)
    return (f"<h3>bench: time and memory against sequence length</h3>{badge(part)}{_busy(part.result)}"
            + bench_table(part.result) + quadratic(part.result)
            + (f"<p>Fitted growth: {exp_txt}.{_SHORT if part.origin == 'quick run' else ''}</p>" if exp_txt else "")
            + figure(imgs.get("bench"), "time and memory against length",
                     "Time (and memory, when measured) against length, both axes logarithmic."))


def train(scale, tie, imgs) -> str:
    out = f"<h3>train: the 1/√d ablation</h3>{badge(scale)}"
    if scale.result:
        fv, ent = num.final_val(scale.result), num.entropy_ends(scale.result)
        rows = "".join(f"<tr><td>{LABELS.get(n, escape(n))}</td><td>{fv.get(n, float('nan')):.3f}</td>"
                       f"<td>{ent[n][0]:.2f} → {ent[n][1]:.2f}</td></tr>" for n in fv if n in ent)
        out += ("<table><thead><tr><th>scale</th><th>final validation loss</th><th>entropy, start → end (nats)</th>"
                f"</tr></thead><tbody>{rows}</tbody></table>")
        out += verdicts.scale(scale.result) + verdicts.small_scale(scale.result)
        out += figure(imgs.get("train"), "loss and entropy curves", "Validation loss and softmax entropy per step.")
    out += f"<h3>train: tying the value to the key</h3>{badge(tie)}"
    if tie.result:
        fv = num.final_val(tie.result)
        out += "<ul>" + "".join(f"<li>{escape(n)}: final validation loss <b>{v:.3f}</b></li>" for n, v in fv.items())
        out += "</ul>" + verdicts.tie_kv(tie.result)
        out += figure(imgs.get("tie_kv"), "tied against untied", "Keys and values tied against separate.")
    return out


def sinks_table(r) -> str:
    """Per layer and head: the first token's share without and with sinks, the sink's share and its logit; the
    means over every head last."""
    from attnlab.explore.sinks import HEAVY

    def cell(x: float) -> str:
        return f"<td><b>{x:.3f}</b></td>" if x >= HEAVY else f"<td>{x:.3f}</td>"

    rows = "".join(f"<tr><th>layer&nbsp;{li} head&nbsp;{hi}</th>{cell(r.first['plain'][li][hi])}"
                   f"{cell(r.first['sinks'][li][hi])}{cell(r.sink[li][hi])}<td>{r.sink_logit[li][hi]:+.2f}</td></tr>"
                   for li in range(r.layers) for hi in range(r.heads))
    n = r.layers * r.heads
    mean = [sum(x for row in g for x in row) / n for g in (r.first["plain"], r.first["sinks"], r.sink)]
    rows += ('<tr class="mean"><th>mean</th>' + "".join(f"<td>{m:.3f}</td>" for m in mean) + "<td></td></tr>")
    return ('<table class="sinks"><thead><tr><th></th><th>first token, without sinks</th><th>first token, with '
            "sinks</th><th>the sink</th><th>its logit</th></tr></thead>"
            f"<tbody>{rows}</tbody></table><p class=\"note\">Mean attention weight over the queries at positions "
            f"1 .. {r.held_out['T'] - 1} of {r.held_out['batches']} × {r.held_out['rows']} held-out windows; a head "
            f"spreading its weight evenly would give the first token {r.uniform:.3f}; bold: {HEAVY} or more.</p>")


_SINKS = ("A softmax row must sum to 1, so a head with nothing to add still has to put its weight somewhere. Large "
          "trained models park it on the first token (StreamingLLM called those tokens <em>attention sinks</em>); "
          "gpt-oss gives every head a learned sink logit instead, a column with no value behind it. The tiny GPT was "
          "trained twice, without and with sinks, the same seed, batches and steps; then each head's weight was read "
          "on held-out text.")


def explore(parts, imgs) -> str:
    out = ""
    for name, part in parts.items():
        quote = ('<blockquote class="key-fact">“Attention has no trust boundary.” To attention a trusted instruction, '
                 "a pasted web page and the model's own answer are all just positions: every later query scores every "
                 "earlier key the same way, and only a mask can keep a key out. The numbers:</blockquote>"
                 if name == "trust" else f"<p>{_SINKS}</p>" if name == "sinks" else "")
        out += f'<h3 id="explore-{name}">explore {escape(name)}</h3>{badge(part)}{quote}'
        if part.result is None:  # not measured: the badge says how to run it
            continue
        out += (f'<p class="finding">{escape(part.finding)}</p>'
                + (sinks_table(part.result) if name == "sinks" else "")
                + figure(imgs.get(f"explore-{name}"), name, f"attnlab explore {name}"))
    return out


def _qa(q: str, a: str) -> str:
    return f'<div class="qa"><h3>{q}</h3><p>{a}</p></div>'


def questions(data) -> str:
    p = num.demo_peaks(data.demo.result)
    inv = data.explore["inv-scale"].result
    i = len(inv.widths) - 1
    fv = num.final_val(data.train_scale.result)
    why_sqrt = (f"A dot product of d unit-variance features has variance d. Unscaled, wide heads push the softmax onto "
                f"one key and its gradient vanishes. On this machine, at d = {p['d']} the mean peak weight was "
                f"{p['none']:.2f} without a scale and {p['sqrt']:.2f} with 1/√d; at d = {inv.widths[i]} the "
                f"softmax entropy was {inv.entropy['none'][i]:.2f} nats unscaled, {inv.entropy['sqrt'][i]:.2f} "
                f"with 1/√d and {inv.entropy['inv'][i]:.2f} with 1/d (uniform: {inv.max_entropy:.2f}). "
                "1/√d is the one scale that keeps the spread of the scores the same at every width.")
    if fv:
        why_sqrt += " Trained: final validation loss " + ", ".join(f"{LABELS.get(n, n)} {v:.3f}" for n, v in fv.items())
        _, preds = train_summary.summarise(data.train_scale.result)
        if preds:
            why_sqrt += ("; that run shows the destabilising the lesson predicts (saturation and a worse loss, rules "
                         "in section 5)." if train_summary.destabilised(preds) else
                         "; that run does <b>not</b> show the destabilising the lesson predicts at these settings "
                         "(section 5 says which rule failed).")
        else:
            why_sqrt += "."
    memory = ("No. The weights are recomputed from the current context on every forward pass and thrown away; nothing "
              "is stored between calls except what is in the context itself. A KV cache keeps the keys and values "
              "of the tokens so far, to avoid recomputing them, not to remember anything new. In the walkthrough "
              f"above, '{escape(data.walkthrough.words[data.walkthrough.word_of[data.walkthrough.query]])}' spreads "
              "its weight over the words it can see right now; change the sentence and the weights change.")
    tie = num.final_val(data.train_tie_kv.result)
    kv = ("The key is what a token advertises for matching; the value is what it hands over once matched. Tie them "
          "and a token can only pass on the same thing it is found by. ")
    if {"tied", "untied"} <= set(tie):
        v = train_verdict.compare(data.train_tie_kv.result, "tied", "untied", "tying reduces capability")
        kv += (f"Measured here ({escape(how(data.train_tie_kv))}): "
               + "; ".join(escape(verdicts.reading_text(r, v)) for r in v.readings) + ". ")
        kv += ("That supports the argument: the tied model learned measurably worse on every measurement."
               if v.holds else
               "That does <b>not</b> support the argument at these settings: by every rule (section 5), tying cost "
               "nothing measurable here." if v.holds is False else
               escape(verdicts.disagreement_text(v)) + " So this run does not show that tying is free.")
    else:
        kv += f"The tied model has not been trained on this machine yet ({escape(data.train_tie_kv.note)})."
    r_m, r_l = num.ratio(data.bench.result, "matrix"), num.ratio(data.bench.result, "loops")
    yourself = ("Not for real work: use <code>torch.nn.functional.scaled_dot_product_attention</code>. Write it to "
                "learn it: the lab (<code>attnlab lab start</code>, then <code>attnlab lab check</code>) grades "
                "yours, and <code>attnlab verify</code> checks any function with PyTorch's signature. ")
    if r_m:
        yourself += (f"On this machine ({escape(how(data.bench))}, fastest of the repeats) the four-line matrix form "
                     f"took {r_m[0]:.2g}× as long as PyTorch's kernel at T = {r_m[1]}")
        yourself += f", and the explicit loops {r_l[0]:.0f}× as long at T = {r_l[1]}." if r_l else "."
    return "".join(_qa(q, a) for q, a in (
        ("Why divide by the square root of the head width?", why_sqrt),
        ("Is attention memory?", memory),
        ("Why is the value separate from the key?", kv),
        ("Do I need to write attention myself?", yourself)))


def _reveal(i: int, q: str, a: str) -> str:
    return (f'<details class="hard" id="hard-{i}"><summary>{q}</summary>'
            f'<div class="answer"><p>{a}</p></div></details>')


def hard(data) -> str:
    inv = data.explore["inv-scale"].result
    ent = num.entropy_ends(data.train_scale.result)
    i = len(inv.widths) - 1
    scale_a = (f"The scores of a d-wide head spread like √d, so the softmax saturates: one key takes almost all the "
               f"weight, the entropy falls toward 0 and the gradient through the softmax vanishes. Measured here: at "
               f"d = {inv.widths[i]} the mean entropy of a softmax row over {inv.T} keys is "
               f"{inv.entropy['none'][i]:.2f} nats unscaled against {inv.entropy['sqrt'][i]:.2f} with 1/√d.")
    if ent:
        scale_a += " In training: " + "; ".join(f"{LABELS.get(n, escape(n))} {a:.2f} → {b:.2f} nats"
                                               for n, (a, b) in ent.items()) + " (first log → last)."
    nm, st, tr, on = (data.explore[k].result for k in ("no-mask", "same-token", "trust", "online-softmax"))
    mean_future = sum(nm.future_mass[:-1]) / (len(nm.future_mass) - 1)
    maxes = " → ".join(f"{s.m_new:.2f}" for s in on.steps)
    items = [
        ("Remove the 1/√d scale: predict the failure.", scale_a),
        ("Why mask with −∞ before the softmax instead of zeroing weights after it?",
         f"Zeroing after the softmax leaves rows that no longer sum to 1, and the future still shaped the normaliser. "
         f"With −∞ the future key gets exp(−∞) = 0 in the sum too. Without any mask, queries here put "
         f"{mean_future:.0%} of their weight on later words."),
        ("Flash attention never holds a whole row of scores. How can it take a softmax of the row?",
         f"It keeps a running max and a running sum per query and rescales what it has summed when the max grows. "
         f"Here the max went {maxes} over {len(on.steps)} tiles and "
         f"the result matched the full softmax to {on.weight_err:.1e}."),
        ("A word appears twice and the model has no position information. Can attention tell the copies apart?",
         f"Not without a mask: queries, keys and outputs were identical (differences "
         f"{st.without_positions.out:g}). RoPE separates them (output difference "
         f"{st.with_rope.out:.3f}); so, oddly, does a causal mask "
         f"({st.without_positions.out_causal:.3f}), because each copy sees a different prefix."),
        ("Can a trusted instruction at the start protect the answer from text pasted after it?",
         f"No: the later queries put {sum(tr.mass['untrusted']) / len(tr.mass['untrusted']):.0%} of their "
         f"weight on the untrusted words, and changing only those words moved every later output (by at least "
         f"{min(tr.change_causal[tr.segments['later'][0]:]):.3f}). Only a mask that hides them did not "
         f"(change {max(tr.change_masked[tr.segments['later'][0]:]):g})."),
    ]
    return "".join(_reveal(i, q, a) for i, (q, a) in enumerate(items, 1))


QUIZ = [  # (question, options, the right one, why it is right)
    ("What does dividing the scores by √d keep the same as the head width d grows?",
     ["the sum of each row of weights", "the variance of the scores", "the number of keys", "the size of the values"],
     1, "A dot product of d unit-variance numbers has variance d; dividing by √d brings it back to 1, so the softmax "
        "sees scores of the same spread at every width. The rows sum to 1 with or without the scale."),
    ("In a causal (decoder) attention map, what is above the diagonal?",
     ["the largest weights", "a copy of the lower triangle", "exactly zero", "negative weights"], 2,
     "Those cells are keys after the query. The mask sets their scores to −∞ and e^−∞ = 0, so their weights are "
     "exactly zero, not small: the model cannot see the future."),
    ("The scores of one head are a (T, T) matrix, a row per query. Over which dimension does the softmax normalise?",
     ["the last one: each row, over the keys that query sees",
      "the first one: each column, over the queries that see one key",
      "both at once: the whole matrix sums to 1", "neither: dividing by √d already normalises them"], 0,
     "The softmax divides each exponential by its row's sum (dim=-1), so a row is a set of shares: how much one "
     "query listens to each key, 100 % in all. Normalising each column instead makes weights that do not sum to 1 "
     "per query, and a query's output then depends on queries after it."),
    ("How can flash attention go through the keys one tile at a time?",
     ["it approximates the softmax with a cheaper function of the scores that needs no sum",
      "it drops the weights too small to matter and keeps only the largest few per query",
      "it skips the softmax and divides each partial output by the number of keys seen so far",
      "it keeps a running max and sum and rescales its partial sums when the max grows"], 3,
     "exp(s − m) for a new, larger max m is the old value times exp(m_old − m), so the partial sums can be corrected "
     "exactly: the result is the full softmax, to rounding, without holding a whole row."),
    ("Untrusted text sits in the middle of a prompt. What stops it from changing the outputs after it?",
     ["a mask that hides its keys from the later queries", "putting the trusted instruction first, before all of it",
      "the 1/√d scale, which keeps each score small", "separate value and key projections in every head"], 0,
     "Attention has no trust boundary: every later query scores every earlier key alike. Only a mask that removes "
     "those keys keeps their values out of the later outputs (the trust experiment above measures it)."),
    ("In a causal mask, mask[i, j] is True where query i may see key j. Which cells are True?",
     ["j ≥ i: the key is at or after the query", "j ≤ i: the key is at or before the query",
      "j < i: every key strictly before the query", "all of them: the softmax keeps the order"], 1,
     "Query i may see itself and every earlier key, so j ≤ i: the lower triangle with its diagonal (torch.tril). "
     "j ≥ i is the mask turned the wrong way, letting each query see the future; j < i leaves the first query "
     "no key at all, a row of −∞ that the softmax turns into NaN."),
    ("A head of width d scores a query against T keys. What should the scores be divided by?",
     ["√T, the square root of the number of keys", "T, the number of keys", "√d, the square root of the head width",
      "d, the head width itself"], 2,
     "Each score is a dot product of d numbers, so its spread grows like √d, whatever the number of keys; dividing "
     "by √d keeps it at 1. Dividing by √T makes the scale change with the length of the context: a longer prompt "
     "would flatten every row. Dividing by d shrinks the scores too far, toward uniform weights."),
]


def test() -> str:
    out = []
    for qi, (q, options, right, why) in enumerate(QUIZ):
        opts = "".join(f'<label><input type="radio" name="q{qi}" value="{oi}"> {escape(o)}</label>'
                       for oi, o in enumerate(options))
        out.append(f'<fieldset class="quiz-q" data-answer="{right}" data-why="{escape(why)}" id="quiz-q{qi}">'
                   f"<legend>{qi + 1}. {escape(q)}</legend>{opts}"
                   '<p class="quiz-feedback" aria-live="polite"></p></fieldset>')
    return "".join(out)
