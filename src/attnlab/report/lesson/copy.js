/* attnlab lesson page: two heads that copy. The learner's sequence, written twice, through the model in the page:
   how much weight each head puts one step back, and on the character after the earlier copy, measured as
   attnlab.lab.train.circuits measures them (the page test holds the two together), and the loss on each copy. */
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

  function scores(r, n) { // per head: the weight one step back (every query but the first) and on the character
    const T = 2 * n, out = []; // after the earlier copy (the queries of the second copy)
    r.layers.forEach((L, l) => L.weights.forEach((W, h) => {
      let p = 0, q = 0;
      for (let i = 1; i < T; i++) p += W[i][i - 1];
      for (let i = n; i < T; i++) q += W[i][i - n + 1];
      out.push({ layer: l, head: h, previous: p / (T - 1), induction: q / n });
    }));
    return out;
  }
  function losses(r, n) { // nats per character predicting the first copy, and the repeat (its first character left out)
    const nll = (t) => -Math.log(A.probsAt(r.logits[t], 1)[r.ids[t + 1]]);
    let a = 0, b = 0;
    for (let t = 0; t < n - 1; t++) a += nll(t);
    for (let t = n; t < 2 * n - 1; t++) b += nll(t);
    return { first: a / (n - 1), repeat: b / (n - 1) };
  }
  function measure(seq) { // what the section shows, for a sequence the model can read
    const n = Array.from(seq).length, r = A.run(seq + seq), heads = scores(r, n);
    const best = (what, from) => heads.filter((h) => h.layer >= from).reduce((a, b) => (b[what] > a[what] ? b : a));
    return { n, r, heads, prev: best("previous", 0), ind: best("induction", 1), loss: losses(r, n) };
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
    [[`Layer ${m.prev.layer}, head ${m.prev.head} puts ${m.prev.previous.toFixed(2)} of its weight one step back: ` +
      `${m.prev.previous >= rule.previous ? "a previous-token head" : "not a previous-token head"} (rule: at least ` +
      `${rule.previous}) ${ok(m.prev.previous >= rule.previous)}`],
    [`Layer ${m.ind.layer}, head ${m.ind.head} puts ${m.ind.induction.toFixed(2)} of its weight, at each character of ` +
      `the second copy, on the character after its earlier copy: ${m.ind.induction >= rule.induction ? "an induction " +
      "head" : "not an induction head"} (rule: at least ${rule.induction}) ${ok(m.ind.induction >= rule.induction)}`],
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
    window.attnlab.copy = { n: m.n, heads: m.heads, loss: m.loss, text: seq + seq, T };
  }
  input.value = C ? C.example : "";
  input.addEventListener("input", draw);
  draw();
})();
