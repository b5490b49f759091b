/* attnlab lesson page: the live walkthrough, heatmaps, head view, prediction and the test. No network, no libraries.
   The numbers come from window.attnlab (model.js), which runs the model in this page on the text in the box. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("lesson-data").textContent);
  const A = window.attnlab, cfg = A.config, CODE = D.code;
  const $ = (id) => document.getElementById(id);
  const tip = $("tip");
  const S = { text: D.walk.text, scale: "sqrt", causal: true, layer: 0, head: 0, query: D.walk.query, stage: 0,
    temp: 1, r: null, userQuery: false };

  // ---- small helpers -------------------------------------------------------------------------------------------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const SHOW = { " ": "␣", "\n": "⏎", "\t": "⇥" };  // characters that would print as nothing
  const show = (c) => SHOW[c] || c;
  const tokName = (i) => `${i} “${show(S.r.tokens[i])}”`;
  function fmt(v) {
    if (v === null || v === undefined || v === -Infinity) return "masked";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1000 || a < 0.001)) return v.toExponential(2);
    return v.toFixed(a >= 100 ? 1 : 3);
  }
  const f2 = (v) => (v === null ? "–" : v.toFixed(2));
  const flat = (M) => M.flatMap((r) => Array.from(r)).filter((v) => v !== null && v !== -Infinity);
  function std(xs) {
    const m = xs.reduce((a, b) => a + b, 0) / xs.length;
    return Math.sqrt(xs.reduce((a, b) => a + (b - m) * (b - m), 0) / xs.length);
  }
  const Hd = () => S.r.layers[S.layer];
  const scaleName = { sqrt: `1/√${cfg.d_model / cfg.n_head}`, none: "1 (no scale)", inv: `1/${cfg.d_model / cfg.n_head}` };

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
  function colourBar(parent, o) { // the key to a heatmap's colours, with its range written out
    const wrap = el("div", "cbar");
    const cv = el("canvas"), w = 180, h = 12, dpr = window.devicePixelRatio || 1;
    cv.width = w * dpr; cv.height = h * dpr; cv.style.width = `${w}px`; cv.style.height = `${h}px`;
    const ctx = cv.getContext("2d"); ctx.scale(dpr, dpr);
    for (let x = 0; x < w; x++) {
      ctx.fillStyle = o.signed ? diverging((2 * x) / (w - 1) - 1) : viridis(x / (w - 1)); ctx.fillRect(x, 0, 1, h);
    }
    const lo = o.signed ? -o.span : 0;
    wrap.append(el("span", "", fmt(lo)), cv, el("span", "", fmt(o.span)), el("span", "cbar-note", o.note));
    parent.appendChild(wrap);
  }

  // ---- heatmaps ------------------------------------------------------------------------------------------------
  const maps = [];
  function heat(parent, M, o) {
    const fig = el("figure", "heat");
    fig.appendChild(el("figcaption", "", o.title));
    const cv = el("canvas");
    cv.tabIndex = 0;
    cv.setAttribute("role", "img");
    cv.setAttribute("aria-label", `${o.title}. Use the arrow keys to read the cells.`);
    const out = el("div", "readout", "\u00a0");
    out.setAttribute("aria-live", "polite");
    fig.append(cv, out);
    parent.appendChild(fig);
    const R = M.length, C = M[0].length, signed = o.kind === "signed";
    const span = o.span || (signed ? Math.max(1e-12, ...flat(M).map(Math.abs)) : Math.max(1e-12, ...flat(M)));
    const state = { r: -1, c: -1 };
    const labW = o.compact ? 0 : 58, labH = o.cols && !o.compact ? 30 : 0;
    const avail = Math.max(120, Math.min(o.maxPx || 900, (parent.clientWidth || 560) - 4));
    const cell = Math.max(2, Math.min(o.compact ? 40 : 16, Math.floor((avail - labW) / C)));
    const ch = o.compact ? cell : Math.max(cell, 13);  // rows tall enough to label every one
    const w = labW + cell * C, h = labH + ch * R;
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    cv.style.width = `${w}px`; cv.style.height = `${h}px`;
    const ctx = cv.getContext("2d");
    function draw() {
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) {
        const v = M[r][c], x = labW + c * cell, y = labH + r * ch;
        if (v === null || v === -Infinity || (o.masked && o.masked(r, c))) {
          ctx.fillStyle = "#e4e6ea"; ctx.fillRect(x, y, cell, ch);
          if (cell >= 6) { ctx.strokeStyle = "#c3c8cf"; ctx.beginPath(); ctx.moveTo(x, y + ch); ctx.lineTo(x + cell, y); ctx.stroke(); }
        } else {
          ctx.fillStyle = signed ? diverging(v / span) : viridis(v / span);
          ctx.fillRect(x, y, cell + 0.5, ch + 0.5);
        }
      }
      ctx.fillStyle = "#1d2430"; ctx.textBaseline = "middle";
      if (labW) {
        ctx.textAlign = "right"; ctx.font = `${Math.min(13, Math.max(11, ch - 2))}px system-ui, sans-serif`;
        for (let r = 0; r < R; r++) ctx.fillText(o.rows[r], labW - 4, labH + r * ch + ch / 2);
      }
      if (labH) { // key labels: the character in each column, its position every few columns
        ctx.textAlign = "center"; ctx.font = "11px system-ui, sans-serif";
        const every = Math.max(1, Math.ceil(12 / cell)), pos = Math.max(every, Math.ceil(26 / cell));
        for (let c = 0; c < C; c++) {
          if (c % every === 0) ctx.fillText(o.cols[c], labW + c * cell + cell / 2, 21);
          if (c % pos === 0) ctx.fillText(String(c), labW + c * cell + cell / 2, 7);
        }
      }
      const hl = o.rowsAreTokens ? S.query : -1;
      if (hl >= 0 && hl < R) {
        ctx.strokeStyle = "#e76f51"; ctx.lineWidth = 2;
        ctx.strokeRect(labW + 1, labH + hl * ch + 1, C * cell - 2, ch - 2);
      }
      if (state.r >= 0) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
        ctx.strokeRect(labW + state.c * cell + 1, labH + state.r * ch + 1, cell - 2, ch - 2);
      }
    }
    function describe(r, c) {
      const v = M[r][c], masked = v === null || v === -Infinity || (o.masked && o.masked(r, c));
      const val = masked ? "masked (a future key: weight exactly 0)" : fmt(v);
      return `${o.rowName} ${r} “${o.rows[r].replace(/^\d+ /, "")}”, ${o.colName} ${c}` +
        `${o.cols ? ` “${o.cols[c]}”` : ""}: ${val}`;
    }
    function pick(r, c) { state.r = r; state.c = c; out.textContent = describe(r, c); draw(); }
    const cellAt = (e) => { const b = cv.getBoundingClientRect();
      return [Math.floor((e.clientY - b.top - labH) / ch), Math.floor((e.clientX - b.left - labW) / cell)]; };
    cv.addEventListener("mousemove", (e) => {
      const [r, c] = cellAt(e);
      if (r < 0 || c < 0 || r >= R || c >= C) { tip.hidden = true; return; }
      pick(r, c);
      tip.textContent = describe(r, c);
      tip.hidden = false;
      tip.style.left = `${Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 6)}px`;
      tip.style.top = `${e.clientY + 16}px`;
    });
    cv.addEventListener("mouseleave", () => { tip.hidden = true; });
    if (o.rowsAreTokens && o.onRow) cv.addEventListener("click", (e) => { const [r] = cellAt(e); if (r >= 0 && r < R) o.onRow(r); });
    cv.addEventListener("focus", () => { if (state.r < 0) pick(Math.max(0, o.rowsAreTokens ? S.query : 0), 0); });
    cv.addEventListener("keydown", (e) => {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      if (!moves[e.key]) return;
      e.preventDefault(); e.stopPropagation();
      const [dr, dc] = moves[e.key];
      pick(Math.max(0, Math.min(R - 1, state.r + dr)), Math.max(0, Math.min(C - 1, state.c + dc)));
    });
    draw();
    maps.push(draw);
    if (o.bar) colourBar(fig, { signed, span, note: o.bar });
    return fig;
  }

  // ---- the code behind each step -------------------------------------------------------------------------------
  function quote(parent, s, what) { // where it is, then the lines with their numbers
    const many = s.lines.length > 1;
    parent.appendChild(el("p", "code-where", `${s.file}:${s.lines.join(", ")} — ${what}`));
    const pre = el("pre", "code");
    pre.textContent = s.code.map((line, i) => `${String(s.lines[i]).padStart(3)}  ${line}`).join("\n");
    parent.appendChild(pre);
    return many;
  }
  function code(parent, step) { // the lesson's module, then the same step in the lab's starter
    quote(parent, CODE.steps[step], "in the lesson's module, CausalSelfAttention");
    if (CODE.lab_steps[step]) quote(parent, CODE.lab_steps[step], "in the lab's starter, one query and one key at a " +
      "time (attnlab lab start writes it; you fill in the TODOs)");
  }

  // ---- the explanations behind each box ------------------------------------------------------------------------
  const d = cfg.d_model / cfg.n_head;
  const BOX = {
    x: ["Token vectors X", `Each character enters as a vector of ${cfg.d_model} numbers: what the model knows about it ` +
        "so far (the input of the chosen layer, after its LayerNorm). One row per character."],
    q: ["Query Q = X·Wq", `What each character is looking for: a learned matrix turns each row of X into ${d} numbers.`],
    k: ["Key K = X·Wk", `What each character offers to be found by: ${d} numbers. A key that points the same way as a ` +
        "query gets a high score."],
    v: ["Value V = X·Wv", `What each character hands over when it is listened to: ${d} numbers. It is separate from ` +
        "the key, so what a character is found by and what it passes on can differ."],
    scores: ["Scores Q·Kᵀ", "Every query against every key: a T×T table of dot products. Bigger means “this key " +
        "matches what I am looking for”."],
    scale: ["Scale ÷√d", `Multiply every score by 1/√${d}. A dot product of d numbers grows like √d; the scale keeps ` +
        "the softmax from saturating in wide heads. Try “none” in the scale control and watch the weights."],
    mask: ["Causal mask", "A decoder predicts the next character, so it may not look ahead: every key after the query " +
        "gets −∞, which the softmax turns into a weight of exactly 0. Switch the mask off and the upper triangle fills in."],
    softmax: ["Softmax", "Each row becomes weights: exp(score − row max), divided by the row's sum. They are positive " +
        "and add up to 1: how much the query listens to each key."],
    out: ["Weighted sum of V", "The output at each position is the weights times the values: an average of the value " +
        "vectors, weighted by how much the query listens to each."],
  };
  const STEP_OF = { x: 0, q: 0, k: 0, v: 0, scores: 1, scale: 2, mask: 3, softmax: 4, out: 5 };
  const SCALE_BOX = { sqrt: "Scale ÷√d", none: "No scale (×1)", inv: "Scale ÷d" };
  const maskBox = () => (S.causal ? "Causal mask" : "No mask (off)");
  function labelBoxes() { // the diagram says what is switched on now
    document.querySelector("[data-box=scale]").textContent = SCALE_BOX[S.scale];
    document.querySelector("[data-box=mask]").textContent = maskBox();
    const trained = cfg.scale === undefined ? "sqrt" : cfg.scale, note = $("trained-note");
    const off = [];
    if (S.scale !== trained) off.push(`the scale ${scaleName[S.scale]} (it was trained with ${scaleName[trained] || trained})`);
    if (!S.causal) off.push("no causal mask (it was trained with one)");
    note.hidden = !off.length;
    note.textContent = off.length ? `This model was never trained with ${off.join(" or ")}: the page runs the same ` +
      "weights anyway, to show what that switch alone does to their scores and weights. It is not what a model " +
      "trained that way would do (section 5 has models trained with each scale)." : "";
  }
  function explain(name) {
    const title = name === "scale" ? SCALE_BOX[S.scale] : name === "mask" ? maskBox() : BOX[name][0];
    const text = name === "mask" && !S.causal ? `Now off: every query sees every key, the future too. ${BOX.mask[1]}` :
      BOX[name][1];
    const box = $("explain");
    box.innerHTML = "";
    box.append(el("h4", "", title), el("p", "", text));
    document.querySelectorAll(".box").forEach((b) => b.classList.toggle("open", b.dataset.box === name));
  }
  document.querySelectorAll(".box").forEach((b) => b.addEventListener("click", () => {
    goTo(STEP_OF[b.dataset.box], b.dataset.box);
  }));

  // ---- the six stages, drawn from the live forward pass ----------------------------------------------------------
  const rowsOf = () => S.r.tokens.map((c, i) => `${i} ${show(c)}`);
  const colsOf = () => S.r.tokens.map(show);
  const onRow = (r) => { S.query = r; S.userQuery = true; syncQuery(); render(); };
  const tokMap = (p, M, title, kind, extra) => heat(p, M, Object.assign({ title, kind, rows: rowsOf(), cols: colsOf(),
    rowName: "query", colName: "key", rowsAreTokens: true, onRow }, extra || {}));
  function compact(p) { // the selected query's row of X, Q and a few keys' K and V: readable, not a wall of numbers
    const L = Hd(), g = Math.floor(S.head / L.groups), q = S.query, n = window.innerWidth < 600 ? 3 : 6;
    const w = L.weights[S.head][q].map((v, j) => [v, j]).sort((a, b) => b[0] - a[0]).slice(0, 3).map((x) => x[1]);
    const keys = Array.from(new Set([q, ...w])).sort((a, b) => a - b);
    const vec = (r) => `[${Array.from(r).slice(0, n).map(fmt).join(", ")}${r.length > n ? `, … ${r.length - n} more` : ""}]`;
    const t = el("table", "vecs");
    t.innerHTML = "<thead><tr><th></th><th>position</th><th>numbers</th></tr></thead>";
    const body = el("tbody");
    const add = (name, i, r) => { const tr = el("tr"); tr.append(el("td", "", name), el("td", "", tokName(i)), el("td", "num", vec(r))); body.appendChild(tr); };
    add(`x (1×${cfg.d_model})`, q, L.h[q]);
    add(`q = x·Wq (1×${d})`, q, L.q[S.head][q]);
    keys.forEach((j) => add(`k (1×${d})`, j, L.k[g][j]));
    keys.forEach((j) => add(`v (1×${d})`, j, L.v[g][j]));
    t.appendChild(body);
    p.appendChild(el("p", "shape", `X ${S.r.tokens.length}×${cfg.d_model} · Wq ${cfg.d_model}×${d} → Q ` +
      `${S.r.tokens.length}×${d} (the same for K and V). Below: the query at ${tokName(q)} and the keys it listens to most.`));
    p.appendChild(t);
    const more = el("details", "full");
    more.appendChild(el("summary", "", "Show the full matrices X, Q, K and V"));
    more.addEventListener("toggle", () => {
      if (!more.open || more.dataset.drawn) return;
      more.dataset.drawn = "1";
      const box = el("div", "stage-figs"); more.appendChild(box);
      tokMap(box, L.h, `X: ${L.h.length}×${cfg.d_model} (rows: characters, columns: features)`, "signed",
        { cols: null, colName: "feature", bar: "each matrix on its own scale" });
      [["Q", L.q[S.head]], ["K", L.k[g]], ["V", L.v[g]]].forEach(([name, M]) => tokMap(box, M,
        `${name}: ${M.length}×${d}`, "signed", { cols: null, colName: "feature", maxPx: 420 }));
    });
    p.appendChild(more);
  }
  function wordBars(p, row) { // per word: the total share and the mean per character, so long words do not win by length
    const sh = A.wordShares(S.r.tokens, row);
    const box = el("div", "bars");
    box.appendChild(el("p", "", `What ${tokName(S.query)} listens to, per word: the mean weight per character (bar) and ` +
      "the word's total (right)."));
    const mx = Math.max(1e-9, ...sh.mean), top = sh.mean.indexOf(Math.max(...sh.mean));
    sh.words.forEach((wd, i) => {
      const bar = el("div", "bar" + (i === top ? " top" : ""));
      const track = el("span"), fill = el("span", "fill");
      fill.style.width = `${(100 * sh.mean[i]) / mx}%`;
      track.appendChild(fill);
      bar.append(el("span", "", wd), track, el("span", "v", `${sh.mean[i].toFixed(3)} · ${sh.total[i].toFixed(3)}`));
      box.appendChild(bar);
    });
    p.appendChild(box);
  }
  function honest(row) { // what this head really does with the query, in words
    const order = row.map((v, j) => [v, j]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    const st = A.headStats(S.r.tokens, Hd().weights[S.head], S.query, S.layer, S.head, S.causal);
    const top = order.map(([v, j]) => `${tokName(j)} ${v.toFixed(3)}`).join(", ");
    const word = st.word ? ` It puts ${st.word_share.toFixed(2)} of its weight on “${st.word}”, above the ` +
      `${D.heads.word_share} threshold, so the head view names it.` : ` No word gets ${D.heads.word_share} of its weight ` +
      `(the most: ${st.word_share.toFixed(2)}), so the head view names none.`;
    const seeded = D.walk.source === "seeded" ? " This model is seeded, never trained: its weights are random, so " +
      "whatever it attends to means nothing yet." : "";
    return `Its largest weights: ${top}.${word} Over the whole text this head is a ${st.label}.${seeded} This is a ` +
      "small model that reads characters: expect it to watch nearby characters, spaces and word starts. A head " +
      "that links “it” to “animal” is something large pretrained models learn from billions of words (Clark et al., " +
      "2019, found such coreference heads in BERT); do not expect it of a 2-layer model trained for minutes.";
  }
  function calc(p) { // the weighted sum, with positions named and the rest counted
    const L = Hd(), g = Math.floor(S.head / L.groups), q = S.query, row = L.weights[S.head][q];
    const order = row.map((v, j) => [v, j]).filter((x) => x[0] > 0).sort((a, b) => b[0] - a[0]);
    const dims = Math.min(4, d), vec = (r) => `[${Array.from(r).slice(0, dims).map(fmt).join(", ")}${d > dims ? ", …" : ""}]`;
    const shown = order.slice(0, 4), rest = order.slice(4);
    const restW = rest.reduce((a, x) => a + x[0], 0);
    let text = `out[${tokName(q)}] = Σ weight × v\n  = ` +
      shown.map(([v, j]) => `${v.toFixed(3)} × v[${tokName(j)}] ${vec(L.v[g][j])}`).join("\n  + ");
    if (rest.length) text += `\n  + ${rest.length} more (their weights add up to ${restW.toFixed(3)})`;
    text += `\n  = ${vec(L.outs[S.head][q])}   (${d} numbers)`;
    p.appendChild(el("pre", "calc", text));
  }
  function scoreRange(M) { const f = flat(M); return `${fmt(Math.min(...f))} to ${fmt(Math.max(...f))}`; }
  const STAGES = [
    { title: "Token vectors → queries, keys and values", box: "x", step: "qkv",
      text: () => `Each of the ${S.r.tokens.length} characters is a vector of ${cfg.d_model} numbers. Three matrices ` +
        `turn each one into a query, a key and a value of ${d} numbers for each of the ${cfg.n_head} heads.`,
      figs: compact },
    { title: "Scores: every query against every key", box: "scores", step: "scores",
      text: () => { const M = Hd().scores[S.head]; return `Row i, column j holds q_i · k_j, before any scale. The ` +
        `scores run from ${scoreRange(M)} (spread ${fmt(std(flat(M)))}). Click a row to follow another query.`; },
      figs: (p) => tokMap(p, Hd().scores[S.head], `Q·Kᵀ: ${S.r.tokens.length}×${d} · ${d}×${S.r.tokens.length}`, "signed",
        { span: sharedSpan(), bar: "one colour scale for steps 2, 3 and 4" }) },
    { title: "Scale", box: "scale", step: "scale",
      text: () => { const M = Hd().scores[S.head], s = S.r.scale;
        return `Scale: ${scaleName[S.scale]} = ${fmt(s)}. The spread (standard deviation) of the scores goes from ` +
          `${fmt(std(flat(M)))} to ${fmt(std(flat(M)) * s)}; same colours as step 2, so the map fades when the scale shrinks it.`; },
      figs: (p) => tokMap(p, Hd().scores[S.head].map((r) => r.map((v) => v * S.r.scale)),
        `Q·Kᵀ × ${scaleName[S.scale]}: ${S.r.tokens.length}×${S.r.tokens.length}`, "signed",
        { span: sharedSpan(), bar: "one colour scale for steps 2, 3 and 4" }) },
    { title: () => (S.causal ? "The causal mask" : "No mask: the causal mask is switched off"), box: "mask", step: "mask",
      text: () => { const T = S.r.tokens.length, n = S.causal ? (T * (T - 1)) / 2 : 0;
        return S.causal ? `${n} of the ${T * T} cells are keys in the future of their query; they become −∞ (grey, ` +
          `“masked”). The query at ${tokName(S.query)} may see ${S.query + 1} keys.` :
          "The mask is off: every query sees every key, the future too. A model trained with the mask never saw this."; },
      figs: (p) => tokMap(p, Hd().scores[S.head].map((r) => r.map((v) => v * S.r.scale)),
        S.causal ? "masked scores (grey: masked)" : "scores with nothing masked (the mask is off)",
        "signed", { span: sharedSpan(), bar: "one colour scale for steps 2, 3 and 4",
          masked: (r, c) => S.causal && c > r }) },
    { title: "Softmax: scores become weights", box: "softmax", step: "softmax",
      text: () => { const row = Hd().weights[S.head][S.query];
        return `Each row now adds up to 1 (the row of ${tokName(S.query)}: ${row.reduce((a, b) => a + b, 0).toFixed(4)}). ` +
          honest(row); },
      figs: (p) => { tokMap(p, Hd().weights[S.head], `softmax weights: ${S.r.tokens.length}×${S.r.tokens.length}`,
        "weights", { bar: "weights from 0 to the largest", masked: (r, c) => S.causal && c > r });
        wordBars(p, Hd().weights[S.head][S.query]); } },
    { title: "The weighted sum of the values", box: "out", step: "out",
      text: () => `Each output row is an average of the value rows, weighted by that query's weights: ${d} numbers per ` +
        `character. This is what head ${S.head} adds back at ${tokName(S.query)}, before the heads are joined.`,
      figs: (p) => { calc(p); tokMap(p, Hd().outs[S.head], `output = weights · V: ${S.r.tokens.length}×${S.r.tokens.length}` +
        ` · ${S.r.tokens.length}×${d} → ${S.r.tokens.length}×${d}`, "signed", { cols: null, colName: "feature", maxPx: 520 }); } },
  ];
  function sharedSpan() { return Math.max(1e-12, ...flat(Hd().scores[S.head]).map(Math.abs)); }

  // ---- the controls: text, scale, mask, layer, head, query --------------------------------------------------------
  function defaultQuery(tokens) { // the last character of the last "it", else the last character
    const { wordOf, words } = A.words(tokens);
    const it = words.lastIndexOf("it");
    if (it < 0) return tokens.length - 1;
    let q = 0; wordOf.forEach((w, i) => { if (w === it) q = i; });
    return q;
  }
  function syncQuery() {
    const sel = $("query");
    sel.innerHTML = "";
    S.r.tokens.forEach((c, i) => { const o = el("option", "", `${i} “${show(c)}”`); o.value = String(i); sel.appendChild(o); });
    sel.value = String(S.query);
  }
  function compute() {
    const status = $("text-status"), input = $("text");
    const typed = Array.from(input.value), cut = typed.length > cfg.block_size;
    const text = cut ? typed.slice(-cfg.block_size).join("") : input.value;  // the model's context: the last block_size
    const { bad } = A.encode(text);
    if (bad.length) {
      status.textContent = `Not in the model's vocabulary: ${bad.map((c) => `“${c}”`).join(" ")}. It knows ` +
        `${A.chars.length} characters; remove these to go on (the page still shows the last text it could read).`;
      status.className = "text-status refused"; return false;
    }
    if (!text.length) { status.textContent = "Type at least one character."; status.className = "text-status refused"; return false; }
    const changed = text !== S.text;
    S.text = text;
    S.r = A.run(text, { scale: S.scale, causal: S.causal });
    if (changed && !S.userQuery) S.query = defaultQuery(S.r.tokens);
    S.query = Math.min(S.query, S.r.tokens.length - 1);
    status.textContent = cut ? `Your text has ${typed.length} characters; the model reads at most ${cfg.block_size} ` +
      `(the context it was trained on), so it reads the last ${cfg.block_size}: “${text}”.` :
      `${S.r.tokens.length} of at most ${cfg.block_size} characters, all in the vocabulary.`;
    status.className = cut ? "text-status cut" : "text-status";
    syncQuery();
    return true;
  }
  function update() { if (compute()) render(); }
  $("text").addEventListener("input", () => { S.userQuery = false; update(); });
  $("scale").addEventListener("change", (e) => { S.scale = e.target.value; update(); });
  $("causal").addEventListener("change", (e) => { S.causal = e.target.checked; update(); });
  $("layer").addEventListener("change", (e) => { S.layer = Number(e.target.value); render(); });
  $("head").addEventListener("change", (e) => { S.head = Number(e.target.value); render(); });
  $("query").addEventListener("change", (e) => { S.query = Number(e.target.value); S.userQuery = true; render(); });
  $("temp").addEventListener("input", (e) => { S.temp = Number(e.target.value); predict(); });
  $("reset-text").addEventListener("click", () => { $("text").value = D.walk.text; S.userQuery = false; update(); });
  ["layer", "head"].forEach((id) => {
    const n = id === "layer" ? cfg.n_layer : cfg.n_head, sel = $(id);
    for (let i = 0; i < n; i++) { const o = el("option", "", `${id} ${i}`); o.value = String(i); sel.appendChild(o); }
  });

  // ---- the next-token prediction ------------------------------------------------------------------------------------
  function predict() {
    const T = S.r.tokens.length, p = A.probsAt(S.r.logits[T - 1], S.temp);
    const top = p.map((v, i) => [v, i]).sort((a, b) => b[0] - a[0]).slice(0, 8);
    const box = $("predict-list");
    box.innerHTML = "";
    $("temp-value").textContent = S.temp.toFixed(2);
    $("predict-after").textContent = `After “${S.text.slice(-24)}” the model's next character (temperature ${S.temp.toFixed(2)}):`;
    top.forEach(([v, i]) => {
      const bar = el("div", "bar");
      const track = el("span"), fill = el("span", "fill");
      fill.style.width = `${100 * v}%`;
      track.appendChild(fill);
      bar.append(el("span", "tokc", `“${show(A.chars[i])}”`), track, el("span", "v", v.toFixed(3)));
      box.appendChild(bar);
    });
  }

  // ---- render --------------------------------------------------------------------------------------------------
  function render() {
    const s = STAGES[S.stage];
    $("stage-ind").textContent = `${S.stage + 1}/${STAGES.length}`;
    $("stage-title").textContent = `${S.stage + 1}. ${typeof s.title === "function" ? s.title() : s.title} ` +
      `(layer ${S.layer}, head ${S.head})`;
    labelBoxes();
    $("stage-text").textContent = s.text();
    const figs = $("stage-figs");
    figs.innerHTML = "";
    maps.length = 0;
    s.figs(figs);
    const c = $("stage-code"); c.innerHTML = ""; code(c, s.step);
    $("layer").value = String(S.layer); $("head").value = String(S.head);
    drawHeads();
    predict();
    document.querySelectorAll(".box").forEach((b) => b.classList.toggle("active", STEP_OF[b.dataset.box] === S.stage));
    $("prev").setAttribute("aria-disabled", String(S.stage === 0));
    $("next").setAttribute("aria-disabled", String(S.stage === STAGES.length - 1));
  }
  function goTo(n, box) {
    n = Math.max(0, Math.min(STAGES.length - 1, n));
    const moved = n !== S.stage;
    S.stage = n;
    explain(box || STAGES[n].box);
    render();
    if (moved) reveal();
  }
  function reveal() { // the step's title in sight, below the sticky Back/Next bar (never hidden under it)
    const bar = document.querySelector(".controls").getBoundingClientRect();
    const t = $("stage-title").getBoundingClientRect();
    // hidden under the bar, or low on the screen: scroll until it sits just under the bar, which sticks at the top
    if (t.top < bar.bottom + 8 || t.bottom > window.innerHeight * 0.7) window.scrollBy(0, t.top - (bar.height + 8));
  }
  const go = (delta) => { if (S.stage + delta >= 0 && S.stage + delta < STAGES.length) goTo(S.stage + delta); };
  $("prev").addEventListener("click", () => go(-1));
  $("next").addEventListener("click", () => go(1));
  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target.closest && e.target.closest("input, textarea, select, canvas, details")) return;
    if (e.key === "ArrowRight") { e.preventDefault(); go(1); }
    if (e.key === "ArrowLeft") { e.preventDefault(); go(-1); }
  });

  // ---- the head view: every head, with what it measurably does ----------------------------------------------------
  function drawHeads() {
    const box = $("headview");
    box.innerHTML = "";
    S.r.layers.forEach((L, l) => {
      const wrap = el("div", "hv-layer");
      wrap.appendChild(el("h3", "", `Layer ${l}`));
      const row = el("div", "hv-row");
      L.weights.forEach((M, h) => {
        const st = A.headStats(S.r.tokens, M, S.query, l, h, S.causal);
        const card = el("div", "hv-card" + (l === S.layer && h === S.head ? " chosen" : ""));
        card.dataset.layer = String(l); card.dataset.head = String(h);
        row.appendChild(card);
        const arrow = st.word ? ` · ${show(S.r.tokens[S.query])} → “${st.word}” (${st.word_share.toFixed(2)})` : "";
        heat(card, M, { title: `layer ${l}, head ${h}${arrow}`, kind: "weights", rows: rowsOf(), cols: colsOf(),
          rowName: "query", colName: "key", compact: true, maxPx: 200, rowsAreTokens: true,
          masked: (r, c) => S.causal && c > r });
        card.appendChild(el("p", "hv-label", st.label));
        card.appendChild(el("p", "hv-stats", `previous ${f2(st.previous)} · same ${f2(st.same)} · first ` +
          `${f2(st.first)} · spaces ${f2(st.boundary)} · after an earlier copy ${f2(st.induction)} · entropy ` +
          `${f2(st.entropy)} nats`));
        const pickBtn = el("button", "hv-pick", l === S.layer && h === S.head ? "followed above" : "follow this head");
        pickBtn.type = "button";
        pickBtn.addEventListener("click", () => { S.layer = l; S.head = h; render(); });
        card.appendChild(pickBtn);
      });
      wrap.appendChild(row);
      box.appendChild(wrap);
    });
  }
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(render, 150); });
  window.attnlab.ui = { heat, el, show };  // for the page's other scripts (copy.js)
  window.attnlab.label = show;
  window.attnlab.current = () => ({ tokens: S.r.tokens, query: S.query, layer: S.layer, head: S.head, scale: S.scale,
    causal: S.causal, stage: S.stage, weights: S.r.layers.map((L) => L.weights.map((M) => M.map((r) => Array.from(r)))) });

  $("text").value = D.walk.text;
  compute();
  S.query = D.walk.query;
  syncQuery();
  explain(STAGES[0].box);
  render();
})();
