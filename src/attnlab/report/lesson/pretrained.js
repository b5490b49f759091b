/* attnlab lesson page for a pretrained model: weights stored when the page was built, drawn here. No network. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e; };
  const f2 = (x) => (x === null || x === undefined ? "–" : x.toFixed(2));
  const S = { t: 0, layer: 0, head: 0, query: 0 };
  const cur = () => D.texts[S.t];
  const show = (tok) => `“${tok.replace(/\s/g, "␣")}”`;

  function options(sel, n, name) {
    sel.innerHTML = "";
    for (let i = 0; i < n; i++) { const o = el("option", "", name ? name(i) : String(i)); o.value = String(i); sel.appendChild(o); }
  }
  function pick(t) {
    S.t = t; const c = cur();
    S.query = c.query;
    if (c.best_layer !== null) { S.layer = c.best_layer; S.head = c.best_head; }
    options($("query"), c.tokens.length, (i) => `${i} ${show(c.tokens[i])}`);
    render();
  }

  // a heatmap on a canvas: rows are queries, columns keys; masked (future) cells grey; with opts.labels, each row's
  // token on its left and a readout of the cell under the pointer
  function heat(box, M, opts) {
    const T = M.length, fig = el("figure", "heat");
    if (opts.title) fig.appendChild(el("figcaption", "", opts.title));
    const gutter = opts.labels ? Math.min(90, 8 + 7 * Math.max(...opts.labels.map((t) => t.length + 3))) : 0;
    const maxPx = Math.min(opts.maxPx, (box.clientWidth || opts.maxPx) - gutter);
    const cell = Math.max(2, Math.floor(maxPx / T)), c = el("canvas"), W = gutter + cell * T, H = cell * T;
    const dpr = window.devicePixelRatio || 1;
    c.width = W * dpr; c.height = H * dpr; c.style.width = `${W}px`; c.style.height = `${H}px`;
    c.setAttribute("role", "img");
    c.setAttribute("aria-label", opts.title || "attention weights");
    const g = c.getContext("2d"); g.scale(dpr, dpr);
    for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
      if (j > i) { g.fillStyle = "#e6e8ec"; } else {
        const v = Math.max(0, Math.min(1, M[i][j])), l = 97 - 62 * Math.sqrt(v);
        g.fillStyle = `hsl(197, 64%, ${l}%)`;
      }
      g.fillRect(gutter + j * cell, i * cell, cell, cell);
    }
    if (opts.labels && cell >= 9) {
      g.fillStyle = "#1d2430"; g.textAlign = "right"; g.textBaseline = "middle";
      g.font = `${Math.min(13, cell - 1)}px system-ui, sans-serif`;
      opts.labels.forEach((t, i) => g.fillText(`${i} ${t}`, gutter - 4, i * cell + cell / 2, gutter - 6));
    }
    if (opts.query !== undefined) {
      g.strokeStyle = "#e76f51"; g.lineWidth = 2; g.strokeRect(gutter + 1, opts.query * cell + 1, cell * T - 2, cell - 2);
    }
    const at = (e) => { const r = c.getBoundingClientRect(), x = e.clientX - r.left - gutter * (r.width / W);
      return [Math.min(T - 1, Math.floor((e.clientY - r.top) / (r.height / T))), Math.floor(x / (cell * r.width / W))]; };
    if (opts.click) c.addEventListener("click", (e) => opts.click(at(e)[0]));
    fig.appendChild(c);
    if (opts.labels) {
      const read = el("p", "hint", "Point at a cell to read it.");
      c.addEventListener("mousemove", (e) => { const [i, j] = at(e);
        read.textContent = j < 0 || j >= T ? `row ${i} ${show(opts.labels[i])}` : j > i ?
          `${show(opts.labels[i])} cannot see ${show(opts.labels[j])}: masked` :
          `${show(opts.labels[i])} → ${show(opts.labels[j])}: ${M[i][j].toFixed(3)}`; });
      fig.appendChild(read);
    }
    box.appendChild(fig);
  }

  function bars(box, items) {
    box.innerHTML = "";
    const top = Math.max(1e-9, ...items.map((x) => x[1]));
    items.forEach(([name, v]) => {
      box.appendChild(el("span", "", name));
      const b = el("div", "bar"); b.style.width = `${(100 * v) / top}%`; box.appendChild(b);
      box.appendChild(el("span", "", v.toFixed(3)));
    });
  }

  function render() {
    const c = cur(), M = c.weights[S.layer][S.head], row = M[S.query], st = c.stats[S.layer][S.head];
    $("text").value = String(S.t); $("layer").value = String(S.layer); $("head").value = String(S.head);
    $("query").value = String(S.query);
    const strip = $("tokstrip"); strip.innerHTML = "";
    c.tokens.forEach((tok, i) => {
      const b = el("button", "tok" + (c.piece[i] ? " piece" : "") + (i === S.query ? " query" : ""));
      b.type = "button"; b.appendChild(el("small", "", String(i))); b.appendChild(document.createTextNode(tok));
      b.addEventListener("click", () => { S.query = i; render(); });
      strip.appendChild(b);
    });
    $("tokcount").textContent = `${c.tokens.length} tokens for ${c.text.length} characters; ${c.words.length} words.`;
    const hb = $("heat"); hb.innerHTML = "";
    heat(hb, M, { title: `layer ${S.layer}, head ${S.head}: ${c.tokens.length}×${c.tokens.length} weights (click a row)`,
      maxPx: 480, query: S.query, labels: c.tokens, click: (q) => { S.query = q; render(); } });
    $("row-h").textContent = `What ${show(c.tokens[S.query])} (token ${S.query}) listens to`;
    const order = row.map((v, j) => [v, j]).filter((x) => x[1] <= S.query).sort((a, b) => b[0] - a[0]).slice(0, 8);
    bars($("bars"), order.map(([v, j]) => [`${j} ${show(c.tokens[j])}`, v]));
    const pieces = c.words.map((_, k) => c.word_of.filter((x) => x === k).length);
    const byWord = c.words.map((w, k) => [pieces[k] > 1 ? `${w} (${pieces[k]} tokens)` : w,
      row.reduce((s, v, j) => s + (c.word_of[j] === k ? v : 0), 0)]);
    bars($("wordbars"), byWord.filter((x) => x[1] > 0).sort((a, b) => b[1] - a[1]).slice(0, 6));
    const qs = c.stats_query === S.query ? (st.word ? ` From ${show(c.tokens[S.query])} it puts ${st.word_share.toFixed(2)} ` +
      `of its weight on “${st.word}”.` : ` No word gets ${D.word_share} of the weight of ${show(c.tokens[S.query])} ` +
      `(the most: ${st.word_share.toFixed(2)}).`) : "";
    $("honest").textContent = `Over the whole text, layer ${S.layer} head ${S.head} is a ${st.label}.${qs}`;
    found(c);
    headView(c);
  }

  function found(c) {
    const t = $("listens"); t.innerHTML = "";
    if (c.best_layer === null) {
      $("found-text").textContent = `This text has no “${D.key_word}” followed by “${D.query_word}”, so nothing is ` +
        "measured here; choose the lesson sentence above.";
      return;
    }
    const pieces = c.key_tokens.map((i) => show(c.tokens[i])).join(" + ");
    $("found-text").textContent = `Layer ${c.best_layer}, head ${c.best_head} puts ${c.best_weight.toFixed(3)} of the ` +
      `weight of ${show(c.tokens[c.query_token])} (token ${c.query_token}) on “${D.key_word}” (${pieces}) — the most ` +
      `of all ${D.n_layer * D.n_head} heads. Spread evenly over the ${c.query_token + 1} tokens it can see, it would ` +
      `put ${(c.key_tokens.length / (c.query_token + 1)).toFixed(3)} there.` + (c.best_weight < D.word_share ? ` That is under ${D.word_share}: even ` +
      "this head gives most of its weight elsewhere." : "");
    const head = el("tr"); head.appendChild(el("th", "", "layer \\ head"));
    for (let h = 0; h < D.n_head; h++) head.appendChild(el("th", "", String(h)));
    t.appendChild(head);
    c.listens.forEach((r, l) => { const tr = el("tr"); tr.appendChild(el("th", "", String(l)));
      r.forEach((v, h) => tr.appendChild(el("td", l === c.best_layer && h === c.best_head ? "best" : "", v.toFixed(3))));
      t.appendChild(tr); });
  }

  function headView(c) {
    const box = $("headview"); box.innerHTML = "";
    c.stats.forEach((layer, l) => {
      const wrap = el("div", "hv-layer"); wrap.appendChild(el("h3", "", `Layer ${l}`));
      const row = el("div", "hv-row");
      layer.forEach((st, h) => {
        const isFound = l === c.best_layer && h === c.best_head;
        const card = el("div", "hv-card" + (l === S.layer && h === S.head ? " chosen" : "") + (isFound ? " found-head" : ""));
        card.dataset.layer = String(l); card.dataset.head = String(h);
        row.appendChild(card);
        const arrow = st.word ? ` · ${show(c.tokens[c.stats_query])} → “${st.word}” (${st.word_share.toFixed(2)})` : "";
        heat(card, c.weights[l][h], { title: `layer ${l}, head ${h}${arrow}`, maxPx: 200 });
        if (isFound) card.appendChild(el("p", "hv-label", `most weight from “${D.query_word}” on “${D.key_word}”: ` +
          c.best_weight.toFixed(3)));
        card.appendChild(el("p", "hv-label", st.label));
        card.appendChild(el("p", "hv-stats", `previous ${f2(st.previous)} · same ${f2(st.same)} · first ` +
          `${f2(st.first)} · spaces ${f2(st.boundary)} · entropy ${f2(st.entropy)} nats`));
        const b = el("button", "hv-pick", l === S.layer && h === S.head ? "shown above" : "show above");
        b.type = "button";
        b.addEventListener("click", () => { S.layer = l; S.head = h; render(); $("weights").scrollIntoView(); });
        card.appendChild(b);
      });
      wrap.appendChild(row); box.appendChild(wrap);
    });
  }

  options($("text"), D.texts.length, (i) => (i === 0 ? "the lesson sentence" : "your text") + `: ${D.texts[i].text}`);
  options($("layer"), D.n_layer); options($("head"), D.n_head);
  $("text").addEventListener("change", (e) => pick(Number(e.target.value)));
  $("layer").addEventListener("change", (e) => { S.layer = Number(e.target.value); render(); });
  $("head").addEventListener("change", (e) => { S.head = Number(e.target.value); render(); });
  $("query").addEventListener("change", (e) => { S.query = Number(e.target.value); render(); });
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(render, 150); });
  window.attnlab = { data: D, state: () => ({ ...S }), pick, render };
  pick(0);
})();
