/* attnlab lesson page: the walkthrough, heatmaps, head view and the test. No network, no libraries. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("lesson-data").textContent);
  const W = D.walk;
  const T = W.tokens.length;
  const $ = (id) => document.getElementById(id);
  const tip = $("tip");

  // ---- small helpers -------------------------------------------------------------------------------------------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const tok = (i) => (W.tokens[i] === " " ? "␣" : W.tokens[i]);
  const lastTok = (w) => { let j = -1; W.word_of.forEach((x, i) => { if (x === w) j = i; }); return j; };
  function fmt(v) {
    if (v === null || v === undefined) return "−∞";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1000 || a < 0.001)) return v.toExponential(2);
    return v.toFixed(a >= 100 ? 1 : 3);
  }
  const flat = (M) => M.flat().filter((v) => v !== null);
  function std(xs) {
    const m = xs.reduce((a, b) => a + b, 0) / xs.length;
    return Math.sqrt(xs.reduce((a, b) => a + (b - m) * (b - m), 0) / xs.length);
  }
  const QW = W.words[W.word_of[W.query]];
  const animal = lastTok(W.words.indexOf("animal"));
  const street = lastTok(W.words.indexOf("street"));
  const listensTop = () => W.listens.indexOf(Math.max.apply(null, W.listens));

  // ---- colours -------------------------------------------------------------------------------------------------
  const VIR = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function viridis(t) {
    t = Math.max(0, Math.min(1, t)) * (VIR.length - 1);
    const i = Math.min(VIR.length - 2, Math.floor(t)), f = t - i, a = VIR[i], b = VIR[i + 1];
    return `rgb(${a.map((x, k) => Math.round(x + (b[k] - x) * f)).join(",")})`;
  }
  function diverging(t) { // -1 blue, 0 white, +1 red
    t = Math.max(-1, Math.min(1, t));
    const c = t < 0 ? [33, 102, 172] : [178, 24, 43], f = Math.abs(t);
    return `rgb(${c.map((x) => Math.round(255 + (x - 255) * f)).join(",")})`;
  }

  // ---- heatmaps ------------------------------------------------------------------------------------------------
  const maps = [];
  const highlight = () => ($("hl-it").checked ? W.query : -1);

  function heat(parent, M, o) {
    const fig = el("figure", "heat");
    fig.appendChild(el("figcaption", "", o.title));
    const cv = el("canvas");
    cv.tabIndex = 0;
    cv.setAttribute("role", "img");
    cv.setAttribute("aria-label", `${o.title}: ${M.length} by ${M[0].length}. Use the arrow keys to read the cells.`);
    const out = el("div", "readout", "\u00a0");
    out.setAttribute("aria-live", "polite");
    fig.append(cv, out);
    parent.appendChild(fig);
    const R = M.length, C = M[0].length, signed = o.kind === "signed";
    const span = signed ? Math.max(1e-12, ...flat(M).map(Math.abs)) : Math.max(1e-12, ...flat(M));
    const state = { r: -1, c: -1 };
    const labW = o.compact ? 0 : 64;
    const avail = Math.max(120, Math.min(o.maxPx || 560, (parent.clientWidth || 560) - 4));
    const cell = Math.max(2, Math.min(o.compact ? 40 : 26, Math.floor((avail - labW) / C)));  // cell width
    const ch = o.compact ? cell : Math.max(cell, 11);  // cell height: tall enough to label every row
    const w = labW + cell * C, h = ch * R;
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    cv.style.width = `${w}px`; cv.style.height = `${h}px`;
    const ctx = cv.getContext("2d");
    function draw() {
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) {
        const v = M[r][c];
        if (v === null) {
          ctx.fillStyle = "#e4e6ea"; ctx.fillRect(labW + c * cell, r * ch, cell, ch);
          if (cell >= 6) { ctx.strokeStyle = "#c3c8cf"; ctx.beginPath(); ctx.moveTo(labW + c * cell, (r + 1) * ch);
            ctx.lineTo(labW + (c + 1) * cell, r * ch); ctx.stroke(); }
        } else {
          ctx.fillStyle = signed ? diverging(v / span) : viridis(v / span);
          ctx.fillRect(labW + c * cell, r * ch, cell + 0.5, ch + 0.5);
        }
      }
      if (labW) {
        ctx.fillStyle = "#1d2430"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
        ctx.font = `${Math.min(13, Math.max(8, ch - 2))}px system-ui, sans-serif`;
        for (let r = 0; r < R; r++) ctx.fillText(o.rows[r], labW - 4, r * ch + ch / 2);
      }
      const hl = o.rowsAreTokens ? highlight() : -1;
      if (hl >= 0 && hl < R) {
        ctx.strokeStyle = "#e76f51"; ctx.lineWidth = 2;
        ctx.strokeRect(labW + 1, hl * ch + 1, C * cell - 2, ch - 2);
      }
      if (state.r >= 0) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
        ctx.strokeRect(labW + state.c * cell + 1, state.r * ch + 1, cell - 2, ch - 2);
      }
    }
    function describe(r, c) {
      const v = M[r][c];
      const val = v === null ? "−∞ (masked: the future)" : fmt(v);
      return `${o.rowName} ${r} “${o.rows[r]}”, ${o.colName} ${c}${o.cols ? ` “${o.cols[c]}”` : ""}: ${val}`;
    }
    function show(r, c) { state.r = r; state.c = c; out.textContent = describe(r, c); draw(); }
    cv.addEventListener("mousemove", (e) => {
      const b = cv.getBoundingClientRect();
      const c = Math.floor((e.clientX - b.left - labW) / cell), r = Math.floor((e.clientY - b.top) / ch);
      if (r < 0 || c < 0 || r >= R || c >= C) { tip.hidden = true; return; }
      show(r, c);
      tip.textContent = describe(r, c);
      tip.hidden = false;
      tip.style.left = `${Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 6)}px`;
      tip.style.top = `${e.clientY + 16}px`;
    });
    cv.addEventListener("mouseleave", () => { tip.hidden = true; });
    cv.addEventListener("focus", () => { if (state.r < 0) show(Math.max(0, o.rowsAreTokens ? highlight() : 0), 0); });
    cv.addEventListener("keydown", (e) => {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      if (!moves[e.key]) return;
      e.preventDefault(); e.stopPropagation();
      const [dr, dc] = moves[e.key];
      show(Math.max(0, Math.min(R - 1, state.r + dr)), Math.max(0, Math.min(C - 1, state.c + dc)));
    });
    draw();
    maps.push(draw);
    return fig;
  }

  const tokens = W.tokens.map((_, i) => tok(i));
  const features = (n) => Array.from({ length: n }, (_, i) => `feature ${i}`);
  const tokMap = (p, M, title, kind, cols, colName, maxPx) => heat(p, M, { title, kind, rows: tokens, cols,
    rowName: "token", colName: colName || "key", rowsAreTokens: true, maxPx });

  // ---- the explanations behind each box ------------------------------------------------------------------------
  const unit = W.source === "trained" ? "character" : "word";
  const BOX = {
    x: ["Token vectors X", `Each ${unit} enters as a vector of ${W.d_model} numbers: what the model knows about it so ` +
        `far (here: layer ${W.layer}'s input). One row per ${unit}, ${T} rows.`],
    q: ["Query Q = X·Wq", `What each ${unit} is looking for. A learned matrix turns each row of X into ` +
        `${W.d_head} numbers. The query at “${QW}” asks the question this page follows.`],
    k: ["Key K = X·Wk", `What each ${unit} offers to be found by: ${W.d_head} numbers per ${unit}. A key that ` +
        "points the same way as a query gets a high score."],
    v: ["Value V = X·Wv", `What each ${unit} hands over when it is listened to: ${W.d_head} numbers. It is separate ` +
        "from the key, so what a word is found by and what it passes on can differ."],
    scores: ["Scores Q·Kᵀ", `Every query against every key: a ${T}×${T} table of dot products. Bigger means ` +
        "“this key matches what I am looking for”."],
    scale: ["Scale ÷√d", `Multiply every score by 1/√${W.d_head} = ${fmt(W.scale)}. A dot product of d numbers ` +
        "grows like √d; the scale keeps the softmax from saturating in wide heads."],
    mask: ["Causal mask", "A decoder predicts the next word, so it may not look ahead: every key after the query " +
        "gets −∞, which the softmax turns into a weight of exactly 0."],
    softmax: ["Softmax", "Each row becomes weights: exp(score − row max), divided by the row's sum. They are " +
        "positive and add up to 1, so they say how much the query listens to each key."],
    out: ["Weighted sum of V", "The output at each position is the weights times the values: an average of the " +
        `value vectors, weighted by how much the query listens to each. ${W.d_head} numbers per ${unit}.`],
  };
  function explain(name) {
    const [title, text] = BOX[name];
    const box = $("explain");
    box.innerHTML = "";
    box.append(el("h4", "", title), el("p", "", text));
    document.querySelectorAll(".box").forEach((b) => b.classList.toggle("open", b.dataset.box === name));
  }
  document.querySelectorAll(".box").forEach((b) => b.addEventListener("click", () => explain(b.dataset.box)));

  // ---- the six stages ------------------------------------------------------------------------------------------
  const q = W.query, sd0 = std(flat(W.scores)), sd1 = std(flat(W.scaled));
  const masked = W.masked.flat().filter((v) => v === null).length;
  const rowSum = W.weights[q].reduce((a, b) => a + b, 0);
  const top = listensTop();
  function bars(p) {
    const box = el("div", "bars");
    box.appendChild(el("p", "", `What “${QW}” listens to (weight per word, summed over its ${unit}s):`));
    const mx = Math.max(...W.listens);
    W.words.forEach((w, i) => {
      const row = el("div", "bar" + (i === top ? " top" : ""));
      const track = el("span"), fill = el("span", "fill");
      fill.style.width = `${(100 * W.listens[i]) / Math.max(mx, 1e-9)}%`;
      track.appendChild(fill);
      row.append(el("span", "", w), track, el("span", "v", W.listens[i].toFixed(3)));
      box.appendChild(row);
    });
    p.appendChild(box);
  }
  function calc(p) {
    const order = W.weights[q].map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    const dims = Math.min(4, W.d_head);
    const vec = (r) => `[${r.slice(0, dims).map(fmt).join(", ")}${W.d_head > dims ? ", …" : ""}]`;
    const lines = order.map(([w, j]) => `${w.toFixed(3)} × v(“${tok(j)}”) ${vec(W.v[j])}`);
    const pre = el("pre", "calc");
    pre.textContent = `out(“${tok(q)}”) = Σ weight × value\n  = ${lines.join("\n  + ")}\n  + … (${T - 3} more)` +
      `\n  = ${vec(W.out[q])}`;
    p.appendChild(pre);
  }
  const qName = W.source === "trained" ? `“${tok(q)}” (the end of “${QW}”)` : `“${tok(q)}”`;
  const seededNote = W.source === "seeded" ? " This head is seeded, not trained: which word wins means nothing yet." : "";
  const STAGES = [
    { title: "Token vectors → queries, keys and values", boxes: ["x", "q", "k", "v"],
      text: `Each of the ${T} ${unit}s is a vector of ${W.d_model} numbers. Three matrices turn each one into a ` +
        `query, a key and a value of ${W.d_head} numbers.`,
      figs: (p) => { tokMap(p, W.x, "X: token vectors", "signed", null, "feature");
        ["q", "k", "v"].forEach((n) => tokMap(p, W[n], `${n.toUpperCase()} = X·W${n}`, "signed", null, "feature",
          260)); } },
    { title: "Scores: every query against every key", boxes: ["scores"],
      text: `Row i, column j holds q_i · k_j. The query at ${qName} scores ${fmt(W.scores[q][animal])} against ` +
        `“animal” and ${fmt(W.scores[q][street])} against “street”. All scores run from ` +
        `${fmt(Math.min(...flat(W.scores)))} to ${fmt(Math.max(...flat(W.scores)))}.`,
      figs: (p) => tokMap(p, W.scores, "Q·Kᵀ (rows: queries, columns: keys)", "signed", tokens) },
    { title: "Scale by 1/√d", boxes: ["scale"],
      text: `d = ${W.d_head}, so every score is multiplied by ${fmt(W.scale)}. Their spread (standard deviation) ` +
        `goes from ${fmt(sd0)} to ${fmt(sd1)}.`,
      figs: (p) => tokMap(p, W.scaled, "Q·Kᵀ / √d", "signed", tokens) },
    { title: "The causal mask", boxes: ["mask"],
      text: `${masked} of the ${T * T} cells are keys in the future of their query; they become −∞ (grey). ` +
        `The query at ${qName} may see ${q + 1} keys.`,
      figs: (p) => tokMap(p, W.masked, "masked scores (grey: −∞)", "signed", tokens) },
    { title: "Softmax: scores become weights", boxes: ["softmax"],
      text: `Each row now adds up to 1 (the row of ${qName}: ${rowSum.toFixed(4)}). “${QW}” listens most to ` +
        `“${W.words[top]}” (${W.listens[top].toFixed(3)}).${seededNote}`,
      figs: (p) => { tokMap(p, W.weights, "softmax weights", "weights", tokens); bars(p); } },
    { title: "The weighted sum of the values", boxes: ["out"],
      text: `Each output row is an average of the value rows, weighted by that query's weights: ${W.d_head} numbers ` +
        `per ${unit}. This is what the head adds back to ${qName}.`,
      figs: (p) => { tokMap(p, W.out, "output = weights · V", "signed", null, "feature", 300); calc(p); } },
  ];
  let stage = 0;
  function render() {
    const s = STAGES[stage];
    $("stage-ind").textContent = `${stage + 1}/${STAGES.length}`;
    $("stage-title").textContent = `${stage + 1}. ${s.title}`;
    $("stage-text").textContent = s.text;
    const figs = $("stage-figs");
    figs.innerHTML = "";
    maps.length = 0;
    s.figs(figs);
    drawHeads();
    document.querySelectorAll(".box").forEach((b) => b.classList.toggle("active", s.boxes.includes(b.dataset.box)));
    $("prev").setAttribute("aria-disabled", String(stage === 0));
    $("next").setAttribute("aria-disabled", String(stage === STAGES.length - 1));
  }
  function go(delta) {
    const n = Math.max(0, Math.min(STAGES.length - 1, stage + delta));
    if (n !== stage) { stage = n; render(); }
  }
  $("prev").addEventListener("click", () => go(-1));
  $("next").addEventListener("click", () => go(1));
  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target.closest && e.target.closest("input, textarea, select, canvas, details")) return;
    if (e.key === "ArrowRight") { e.preventDefault(); go(1); }
    if (e.key === "ArrowLeft") { e.preventDefault(); go(-1); }
  });
  $("hl-it").addEventListener("change", () => maps.forEach((d) => d()));

  // ---- the head view -------------------------------------------------------------------------------------------
  function drawHeads() {
    const box = $("headview");
    box.innerHTML = "";
    W.heads.forEach((layer, l) => {
      const wrap = el("div", "hv-layer");
      wrap.appendChild(el("h3", "", `Layer ${l}`));
      const row = el("div", "hv-row");
      layer.forEach((M, h) => {
        const per = W.words.map(() => 0);
        M[q].forEach((w, j) => { if (W.word_of[j] >= 0) per[W.word_of[j]] += w; });
        const best = per.indexOf(Math.max(...per));
        const cell = el("div");
        row.appendChild(cell);
        heat(cell, M, { title: `head ${h}: entropy ${W.head_entropy[l][h].toFixed(2)}; “${QW}” → “${W.words[best]}”`,
          kind: "weights", rows: tokens, cols: tokens, rowName: "query", colName: "key", compact: true,
          maxPx: 200, rowsAreTokens: true });
      });
      wrap.appendChild(row);
      box.appendChild(wrap);
    });
  }
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(render, 150); });

  // ---- the test ------------------------------------------------------------------------------------------------
  const form = $("quiz");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const qs = Array.from(form.querySelectorAll(".quiz-q"));
    let right = 0;
    qs.forEach((fs) => {
      const answer = fs.dataset.answer;
      const chosen = fs.querySelector("input:checked");
      const labels = Array.from(fs.querySelectorAll("label"));
      const correct = labels[Number(answer)];
      labels.forEach((lb) => lb.classList.toggle("answer", lb === correct));
      const ok = chosen !== null && chosen.value === answer;
      if (ok) right += 1;
      fs.classList.toggle("right", ok);
      fs.classList.toggle("wrong", !ok);
      const text = correct.textContent.trim();
      fs.querySelector(".quiz-feedback").textContent = ok ? "Right." :
        `${chosen ? "Not quite" : "Not answered"}: the answer is “${text}”.`;
    });
    const need = Math.ceil(0.6 * qs.length), pass = right >= need;
    const res = $("quiz-result");
    res.textContent = `You scored ${right}/${qs.length} (${Math.round((100 * right) / qs.length)} %): ` +
      `${pass ? "passed" : "not passed yet"}. The pass mark is ${need}/${qs.length} (60 %). ` +
      "The right answers are marked in green.";
    res.className = `quiz-result ${pass ? "pass" : "fail"}`;
    res.focus();
  });
  $("quiz-reset").addEventListener("click", () => {
    form.reset();
    form.querySelectorAll(".quiz-q").forEach((fs) => {
      fs.classList.remove("right", "wrong");
      fs.querySelectorAll("label").forEach((lb) => lb.classList.remove("answer"));
      fs.querySelector(".quiz-feedback").textContent = "";
    });
    $("quiz-result").textContent = "";
    $("quiz-result").className = "quiz-result";
  });

  render();
})();
