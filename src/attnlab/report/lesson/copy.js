/* attnlab lesson page: two heads that copy. The learner's sequence, written twice, through the model in the page:
   how much weight each head puts one step back, and on the characters right after the earlier copies of each
   query's character -- the head view's own numbers (A.headStats, the one definition, attnlab.train.circuits in
   Python; the page test holds them together) -- every head of the layer, and the loss on each copy. */
(function () {
  "use strict";
  const A = window.attnlab, cfg = A.config, U = A.ui;
  const D = JSON.parse(document.getElementById("lesson-data").textContent), C = D.circuits;
  const $ = (id) => document.getElementById(id);
  const input = $("copy-text");
  const half = Math.floor(cfg.block_size / 2);
  const rule = { previous: C ? C.previous_share : 0.5, induction: C ? C.induction_share : 0.5,
    loss: C ? C.loss_ratio : 0.5 };
  const ok = (yes) => (yes ? "✓" : "✗");

  function scores(r) { // per head: the head view's previous-token and induction shares on this text
    return r.layers.flatMap((L, l) => L.weights.map((W, h) => {
      const st = A.headStats(r.tokens, W, null, l, h, true);
      return { layer: l, head: h, previous: st.previous, induction: st.induction === null ? 0 : st.induction };
    }));
  }
  function losses(r, n) { // nats per character predicting the first copy, and the repeat (its first character left out)
    const nll = (t) => -Math.log(A.probsAt(r.logits[t], 1)[r.ids[t + 1]]);
    let a = 0, b = 0;
    for (let t = 0; t < n - 1; t++) a += nll(t);
    for (let t = n; t < 2 * n - 1; t++) b += nll(t);
    return { first: a / (n - 1), repeat: b / (n - 1) };
  }
  function measure(seq) { // what the section shows, for a sequence the model can read
    const n = Array.from(seq).length, r = A.run(seq + seq), heads = scores(r);
    const best = (what, from) => heads.filter((h) => h.layer >= from).reduce((a, b) => (b[what] > a[what] ? b : a));
    const asked = Object.keys(A.afterCopies(r.tokens)).length; // the queries whose character appeared before
    return { n, r, heads, asked, prev: best("previous", 0), ind: best("induction", 1), loss: losses(r, n) };
  }
  function draw() {
    const status = $("copy-status"), nums = $("copy-numbers"), figs = $("copy-figs");
    if (cfg.n_layer < 2) {
      status.textContent = "This model has one layer: an induction head needs a layer before it to read from.";
      return;
    }
    let seq = Array.from(input.value);
    const { bad } = A.encode(input.value);
    if (bad.length) {
      status.textContent = `Not in the model's vocabulary: ${bad.map((c) => `“${c}”`).join(" ")}.`;
      status.className = "text-status refused"; return;
    }
    if (seq.length < 2) { status.textContent = "Type at least 2 characters."; status.className = "text-status refused"; return; }
    const cut = seq.length > half;
    seq = seq.slice(0, half).join("");
    const m = measure(seq);
    status.className = cut ? "text-status cut" : "text-status";
    status.textContent = (cut ? `The model reads ${cfg.block_size} characters, so the page keeps the first ${half} of ` +
      "yours. " : "") + `It reads: “${seq}${seq}” (${2 * m.n} characters).`;
    const copies = m.loss.repeat <= rule.loss * m.loss.first;
    nums.innerHTML = "";
    const others = (what, h) => { // every head of the best one's layer: the layer-wide picture
      const all = m.heads.filter((x) => x.layer === h.layer), sum = all.reduce((a, b) => a + b[what], 0);
      return ` Every head of layer ${h.layer}: ${all.map((x) => `head ${x.head} ${x[what].toFixed(2)}`).join(", ")}` +
        ` (together ${sum.toFixed(2)} of ${all.length}).`; };
    [[`Layer ${m.prev.layer}, head ${m.prev.head} puts ${m.prev.previous.toFixed(2)} of its weight one step back: ` +
      `${m.prev.previous >= rule.previous ? "a previous-token head" : "not a previous-token head"} (rule: at least ` +
      `${rule.previous}) ${ok(m.prev.previous >= rule.previous)}.` + others("previous", m.prev)],
    [`Layer ${m.ind.layer}, head ${m.ind.head} puts ${m.ind.induction.toFixed(2)} of its weight on the characters ` +
      `right after the earlier copies of each character (measured on your text: the ${m.asked} characters whose ` +
      `letter came before, in either copy, every earlier copy counted): ${m.ind.induction >= rule.induction ?
        "an induction head" : "not an induction head"} (rule: at least ${rule.induction}) ` +
      `${ok(m.ind.induction >= rule.induction)}.` + others("induction", m.ind)],
    [`Loss: ${m.loss.first.toFixed(2)} nats per character on the first copy, ${m.loss.repeat.toFixed(2)} on the repeat: ` +
      `${copies ? "the model copies" : "the model does not copy"} (rule: at most ${rule.loss} of the first copy's) ` +
      `${ok(copies)}`]].forEach(([t]) => nums.appendChild(U.el("span", "copy-line", t)));
    figs.innerHTML = "";
    const T = 2 * m.n, tokens = m.r.tokens;
    [[m.prev, `layer ${m.prev.layer}, head ${m.prev.head}: the weight one step back (the line just under the diagonal)`],
      [m.ind, `layer ${m.ind.layer}, head ${m.ind.head}: the stripe ${m.n - 1} steps back (after the earlier copy)`]]
      .forEach(([h, title]) => U.heat(figs, m.r.layers[h.layer].weights[h.head], { title, kind: "weights",
        rows: tokens.map((c, i) => `${i} ${U.show(c)}`), cols: tokens.map(U.show), rowName: "query", colName: "key",
        maxPx: 400, masked: (r, c) => c > r, bar: "weights from 0 to the largest" }));
    window.attnlab.copy = { n: m.n, heads: m.heads, asked: m.asked, loss: m.loss, text: seq + seq, T };
  }
  input.value = C ? C.example : "";
  input.addEventListener("input", draw);
  draw();
})();
