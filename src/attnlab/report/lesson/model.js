/* attnlab lesson page: the model's whole forward pass, in plain JavaScript, from the weights in the page.
   The same computation as attnlab.nn.gpt.GPT (token + position embedding, pre-norm blocks of LayerNorm,
   multi-head causal attention and a GELU MLP, a final LayerNorm, the tied output layer), in float64.
   Also the head statistics of attnlab.lesson.heads, so every label in the head view is measured. */
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("lesson-data").textContent);
  const MD = D.model, cfg = MD.config;
  const C = cfg.d_model, H = cfg.n_head, HKV = cfg.n_kv_head || cfg.n_head, d = C / H;

  // ---- the weights: one base64 string of little-endian float32, a table says where each tensor starts ----------
  const bytes = Uint8Array.from(atob(MD.blob), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const all = new Float64Array(bytes.length / 4);
  for (let i = 0; i < all.length; i++) all[i] = view.getFloat32(4 * i, true);
  const P = {};
  MD.tensors.forEach((t) => {
    const n = t.shape.reduce((a, b) => a * b, 1);
    P[t.name] = { shape: t.shape, w: all.subarray(t.offset, t.offset + n) };
  });
  const has = (name) => Object.prototype.hasOwnProperty.call(P, name);

  // ---- the pieces ---------------------------------------------------------------------------------------------
  function linear(X, name) { // (T, in) -> (T, out): x W^T + b, as torch.nn.Linear
    const W = P[`${name}.weight`], [out, inp] = W.shape, b = has(`${name}.bias`) ? P[`${name}.bias`].w : null;
    return X.map((x) => {
      const y = new Float64Array(out);
      for (let o = 0; o < out; o++) {
        let s = b ? b[o] : 0;
        const row = o * inp;
        for (let i = 0; i < inp; i++) s += W.w[row + i] * x[i];
        y[o] = s;
      }
      return y;
    });
  }
  function layerNorm(X, name) { // over the last dim, eps 1e-5, as torch.nn.LayerNorm
    const g = P[`${name}.weight`].w, b = has(`${name}.bias`) ? P[`${name}.bias`].w : null;
    return X.map((x) => {
      let m = 0; for (let i = 0; i < x.length; i++) m += x[i]; m /= x.length;
      let v = 0; for (let i = 0; i < x.length; i++) v += (x[i] - m) * (x[i] - m); v /= x.length;
      const r = 1 / Math.sqrt(v + 1e-5), y = new Float64Array(x.length);
      for (let i = 0; i < x.length; i++) y[i] = (x[i] - m) * r * g[i] + (b ? b[i] : 0);
      return y;
    });
  }
  function erf(x) { // the Maclaurin series below 3 (error ~1e-12), Abramowitz & Stegun 7.1.26 above (~1e-7 of 1e-5)
    const a = Math.abs(x);
    let y;
    if (a < 3) {
      let sum = 0, term = a, n = 0; // erf(a) = 2/sqrt(pi) sum_n (-1)^n a^(2n+1) / (n! (2n+1))
      while (Math.abs(term) > 1e-17 && n < 200) { sum += term / (2 * n + 1); n += 1; term *= -a * a / n; }
      y = (2 / Math.sqrt(Math.PI)) * sum;
    } else {
      const t = 1 / (1 + 0.3275911 * a);
      y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t *
        Math.exp(-a * a);
    }
    return x < 0 ? -y : y;
  }
  const gelu = (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)); // exact GELU, torch's default
  function softmaxRow(row) {
    let m = -Infinity; for (const v of row) if (v > m) m = v;
    if (m === -Infinity) return row.map(() => 0);
    const e = row.map((v) => Math.exp(v - m)), s = e.reduce((a, b) => a + b, 0);
    return e.map((v) => v / s);
  }
  function rope(rows, offset) { // half-split pairs (i, i + d/2), theta_i = 10000^(-2i/d), as attnlab.nn.rope
    return rows.map((x, t) => {
      const y = new Float64Array(d), h = d / 2;
      for (let i = 0; i < h; i++) {
        const a = (t + offset) * Math.pow(10000, -(2 * i) / d), c = Math.cos(a), s = Math.sin(a);
        y[i] = x[i] * c - x[i + h] * s; y[i + h] = x[i] * s + x[i + h] * c;
      }
      return y;
    });
  }
  const SCALES = { sqrt: 1 / Math.sqrt(d), none: 1, inv: 1 / d };

  // ---- the forward pass: every intermediate kept for the walkthrough -----------------------------------------
  function encode(text) {
    const ids = [], bad = [];
    for (const ch of Array.from(text)) {
      const i = MD.chars.indexOf(ch);
      if (i < 0) { if (!bad.includes(ch)) bad.push(ch); } else ids.push(i);
    }
    return { ids, bad };
  }
  function run(text, opts) {
    const o = Object.assign({ scale: "sqrt", causal: true }, opts || {});
    const { ids, bad } = encode(text);
    if (bad.length) throw new Error(`the model has no token for ${bad.map((c) => JSON.stringify(c)).join(", ")}`);
    const T = ids.length;
    if (T < 1 || T > cfg.block_size) throw new Error(`the model reads 1 to ${cfg.block_size} characters, got ${T}`);
    const wte = P["wte.weight"], wpe = has("wpe.weight") ? P["wpe.weight"] : null;
    let x = ids.map((id, t) => {
      const v = new Float64Array(C);
      for (let i = 0; i < C; i++) v[i] = wte.w[id * C + i] + (wpe ? wpe.w[t * C + i] : 0);
      return v;
    });
    const scale = SCALES[o.scale], layers = [];
    for (let l = 0; l < cfg.n_layer; l++) {
      const pre = `blocks.${l}`, input = x, h = layerNorm(x, `${pre}.ln_1`), qkv = linear(h, `${pre}.attn.qkv`);
      const part = (start, n) => Array.from({ length: n }, (_, hh) =>
        qkv.map((r) => r.slice(start + hh * d, start + (hh + 1) * d)));
      let q = part(0, H), k = part(H * d, HKV);
      const v = cfg.tie_kv ? k : part(H * d + HKV * d, HKV);  // tied: v is k before any rotation
      if (cfg.position === "rope") { q = q.map((r) => rope(r, 0)); k = k.map((r) => rope(r, 0)); }
      const scores = [], weights = [], outs = [];
      for (let hh = 0; hh < H; hh++) {
        const g = Math.floor(hh / (H / HKV)), K = k[g], V = v[g];
        const S = q[hh].map((qi) => K.map((kj) => { let s = 0; for (let i = 0; i < d; i++) s += qi[i] * kj[i]; return s; }));
        const Wt = S.map((row, i) => softmaxRow(row.map((s, j) => (o.causal && j > i ? -Infinity : s * scale))));
        scores.push(S); weights.push(Wt);
        outs.push(Wt.map((row) => { const y = new Float64Array(V[0].length);
          row.forEach((w, j) => { if (w) for (let i = 0; i < y.length; i++) y[i] += w * V[j][i]; }); return y; }));
      }
      const merged = Array.from({ length: T }, (_, t) => { const y = new Float64Array(C);
        for (let hh = 0; hh < H; hh++) y.set(outs[hh][t], hh * d); return y; });
      const attnOut = linear(merged, `${pre}.attn.proj`);
      x = x.map((r, t) => r.map((val, i) => val + attnOut[t][i]));
      const mlp = linear(linear(layerNorm(x, `${pre}.ln_2`), `${pre}.mlp.fc`).map((r) => r.map(gelu)), `${pre}.mlp.proj`);
      x = x.map((r, t) => r.map((val, i) => val + mlp[t][i]));
      layers.push({ input, h, q, k, v, scores, weights, outs, groups: H / HKV });
    }
    const f = layerNorm(x, "ln_f"), V = MD.chars.length;
    const logits = f.map((r) => { const y = new Float64Array(V);
      for (let c = 0; c < V; c++) { let s = 0; for (let i = 0; i < C; i++) s += r[i] * wte.w[c * C + i]; y[c] = s; } return y; });
    return { tokens: Array.from(text), ids, layers, logits, scale, opts: o };
  }
  const probsAt = (logits, temp) => softmaxRow(Array.from(logits, (z) => z / (temp || 1)));

  // ---- what a head measurably does (attnlab.lesson.heads, line for line) --------------------------------
  const HD = D.heads, MARKS = [" ", "Ġ", "▁"];
  const isWordToken = (t) => /[A-Za-z0-9]/.test(t);
  function words(tokens) {
    const wordOf = [], found = []; let cur = -1;
    tokens.forEach((t) => {
      if (!isWordToken(t)) { wordOf.push(-1); cur = -1; return; }
      if (cur < 0 || MARKS.some((m) => t.startsWith(m))) { found.push(""); cur = found.length - 1; }
      let s = t; while (s && MARKS.includes(s[0])) s = s.slice(1);
      found[cur] += s; wordOf.push(cur);
    });
    return { wordOf, words: found };
  }
  function wordShares(tokens, row) {
    const { wordOf, words: ws } = words(tokens), total = ws.map(() => 0), count = ws.map(() => 0);
    row.forEach((w, j) => { if (wordOf[j] >= 0) { total[wordOf[j]] += w; count[wordOf[j]] += 1; } });
    return { words: ws, total, mean: total.map((t, i) => (count[i] ? t / count[i] : 0)) };
  }
  function afterCopies(tokens) { // query i -> the keys j < i right after an earlier copy of its token (circuits.py)
    const out = {};
    for (let i = 2; i < tokens.length; i++) {
      const after = [];
      for (let j = 1; j < i; j++) if (tokens[j - 1] === tokens[i]) after.push(j);
      if (after.length) out[i] = after;
    }
    return out;
  }
  function induction(tokens, W) { // over the queries whose token appeared before: weight just after those copies
    const shares = Object.entries(afterCopies(tokens)).map(([i, after]) => after.reduce((a, j) => a + W[i][j], 0));
    return shares.length ? shares.reduce((a, b) => a + b, 0) / shares.length : null;
  }
  function evenSpread(T, causal) { let u = 0; for (let i = 1; i < T; i++) u += Math.log(causal ? i + 1 : T); return u / (T - 1); }
  function headStats(tokens, W, query, layer, head, causal) {
    const T = tokens.length, q = query === undefined || query === null ? T - 1 : query;
    const masked = causal === undefined ? true : causal;
    const { wordOf } = words(tokens), sh = wordShares(tokens, W[q]);
    let best = -1; sh.total.forEach((t, i) => { if (best < 0 || t > sh.total[best]) best = i; });
    const wordShare = best >= 0 ? sh.total[best] : 0, word = best >= 0 && wordShare >= HD.word_share ? sh.words[best] : null;
    const base = { layer, head, word, word_share: wordShare };
    if (T < 2) return Object.assign(base, { previous: null, same: null, first: null, boundary: null, induction: null,
      entropy: null, pattern: "mixed", label: "one token: nothing to measure" });
    const s = { previous: 0, same: 0, first: 0, boundary: 0 }; let ent = 0;
    for (let i = 1; i < T; i++) {
      s.previous += W[i][i - 1]; s.same += W[i][i]; s.first += W[i][0];
      for (let j = 0; j < T; j++) { if (wordOf[j] < 0) s.boundary += W[i][j]; if (W[i][j] > 0) ent -= W[i][j] * Math.log(W[i][j]); }
    }
    Object.keys(s).forEach((key) => { s[key] /= T - 1; }); ent /= T - 1;
    s.induction = induction(tokens, W);
    let name = "previous";
    ["same", "first", "boundary", "induction"].forEach((key) => { if (s[key] !== null && s[key] > s[name]) name = key; });
    const share = s[name], f2 = (v) => v.toFixed(2);
    let pattern, label;
    if (share >= HD.pattern_share) {
      const what = { previous: ["previous-token head", "one step back"], same: ["same-token head", "on the query's own token"],
        first: ["first-token head", "on the first token"], boundary: ["boundary head", "on spaces and punctuation"],
        induction: ["induction head", "on the token after an earlier copy of the query's"] }[name];
      pattern = name; label = `${what[0]}: ${f2(share)} of its weight ${what[1]}`;
    } else {
      const uni = evenSpread(T, masked);
      if (ent >= 0.75 * uni) { pattern = "broad"; label = `broad head: spreads its weight (entropy ${f2(ent)} nats; even spread ${f2(uni)})`; }
      else { pattern = "mixed"; label = `mixed head: no pattern reaches ${HD.pattern_share} (largest: ${name} ${f2(share)})`; }
    }
    return Object.assign(base, s, { entropy: ent, pattern, label });
  }

  const plain = (M) => M.map((r) => Array.from(r));
  window.attnlab = {
    config: cfg, chars: MD.chars, run, probsAt, words, wordShares, headStats, encode, afterCopies, induction,
    /** {tokens, weights[layer][head][T][T], probs[T][vocab]} with 1/sqrt(d) and the causal mask. */
    forward(text) {
      const r = run(text);
      return { tokens: r.tokens, weights: r.layers.map((L) => L.weights.map(plain)),
        probs: r.logits.map((z) => probsAt(z, 1)) };
    },
    /** [layer][head] head statistics on ``text`` for ``query`` (default: the last token). */
    stats(text, query) {
      const r = run(text);
      return r.layers.map((L, l) => L.weights.map((W, h) => headStats(r.tokens, W, query, l, h)));
    },
  };
})();
