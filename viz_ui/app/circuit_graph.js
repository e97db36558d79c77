// The Circuits page's graph (viz_ui/app/circuit_graph.py): an attribution graph drawn as Neuronpedia draws it
// (x = token position, y = layer, embeddings at the bottom, logits on top; features as circles, error nodes as
// diamonds, edges coloured by sign and as wide as their weight), or a contribution graph (the LLM Transparency
// Tool's). Plotly draws; this file only places the nodes on the grid and filters. Hover, pinning, supernodes and the
// node/edge thresholds are answered here, in the browser, from the graph the server sent; the server hears of the
// view (to keep it in the link, score the pinned subgraph, run interventions, show a feature's card, split an edge by
// head) after the user stops (DEBOUNCE_MS). Every text from the model or a file is shown as plain text.

const DEBOUNCE_MS = 350;
const MAX_MARKS = 60; // edges between positions that get a mark to hover and click
const FIRST_EDGES = 1500; // the quick first drawing of a large graph (see draw)
const FULL_DELAY_MS = 120;

function unpack(raw) {
  // live_chart.py's pack: one line of JSON, then the texts it names, as bytes
  const end = raw.indexOf(10);
  const decoder = new TextDecoder();
  const head = decoder.decode(raw.subarray(0, end));
  const data = JSON.parse(head);
  let at = end + 1;
  for (const [name, length] of data.parts) {
    data[name] = decoder.decode(raw.subarray(at, at + length));
    at += length;
  }
  return [head, data];
}

function esc(text) {
  // Plotly reads <b>, <br>, <a> ... in its texts as markup: a text typed here is shown as it is
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function raw(text) {
  // the payload's texts come escaped for Plotly (viz_ui.analysis.text.plotly_text): back to the text itself for
  // the DOM's textContent
  return String(text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; // plain text: labels come from files
  return e;
}

function build(parent) {
  const root = el("div", "viz-cg");
  root.dataset.testid = "vizCircuitGraph";
  const bar = el("div", "cg-bar");
  const slider = (cls, label, help) => {
    const box = el("label", "cg-slider " + cls);
    box.title = help;
    box.append(el("span", "cg-name", label));
    const input = document.createElement("input");
    input.type = "range";
    input.step = "0.01";
    input.setAttribute("aria-label", label);
    box.append(input, el("output", "cg-value"));
    return box;
  };
  bar.append(
    slider("node-t", "Node threshold", "Keep the nodes that make up this share of the influence on the logits"),
    slider("edge-t", "Edge threshold", "Keep the edges that make up this share of the edge influence"),
  );
  const view = el("div", "cg-buttons");
  const button = (cls, text, help) => {
    const b = el("button", "cg-button " + cls, text);
    b.type = "button";
    b.title = help;
    return b;
  };
  view.append(
    button("show-pinned", "Pinned only", "Draw only the pinned nodes and supernodes (the subgraph)"),
    button("clear-pins", "Clear pins", "Unpin every node"),
  );
  const group = el("div", "cg-group");
  const name = document.createElement("input");
  name.type = "text";
  name.className = "cg-supername";
  name.placeholder = "Supernode name";
  name.maxLength = 60;
  name.setAttribute("aria-label", "Supernode name");
  group.append(name, button("make-super", "Group pinned", "Group the pinned nodes into one named supernode"));
  bar.append(view, group);
  const main = el("div", "cg-main");
  const plot = el("div", "cg-plot");
  const side = el("aside", "cg-side");
  side.setAttribute("aria-live", "polite");
  main.append(plot, side);
  const help = el("p", "cg-help", "Hover a node for its card. Click: its inputs and outputs (and, below the graph, " +
    "its full card). Shift-click or the Pin button: pin it. Click an edge's midpoint mark: the heads that carry it.");
  root.append(bar, main, help);
  parent.appendChild(root);
  return root;
}

// ------------------------------------------------------------------ what is shown

function visible(cg) {
  // attribution: nodes under the node threshold (tokens and logits always), links under the edge threshold between
  // them, then features and errors with no outgoing link (and features with no incoming one) dropped until nothing
  // changes, as circuit-tracer's prune_graph; contribution: links at or above the threshold that lead to the output
  const {payload, state} = cg;
  const nodes = payload.nodes;
  const show = new Uint8Array(nodes.length);
  let links;
  if (payload.mode === "contribution") {
    const t = state.node_t;
    const into = new Map();
    payload.links.forEach((l, i) => {
      if (l[2] >= t) {
        if (!into.has(l[1])) into.set(l[1], []);
        into.get(l[1]).push(i);
      }
    });
    const out = nodes.findIndex(n => n.kind === "resid" && n.layer === payload.n_layers && n.pos === payload.tokens.length - 1);
    const keep = new Set();
    const stack = [out];
    show[out] = 1;
    while (stack.length) {
      const n = stack.pop();
      for (const i of into.get(n) || []) {
        keep.add(i);
        const s = payload.links[i][0];
        if (!show[s]) { show[s] = 1; stack.push(s); }
      }
    }
    nodes.forEach((n, i) => { if (n.kind === "resid" && n.layer === 0) show[i] = 1; });
    links = [...keep];
    return {show, links};
  }
  const pinnedOnly = state.view === "pinned";
  const pinned = new Set(state.pinned);
  nodes.forEach((n, i) => {
    if (pinnedOnly) show[i] = pinned.has(n.id) ? 1 : 0;
    else show[i] = n.kind === "token" || n.kind === "logit" || n.share < state.node_t ? 1 : 0;
  });
  links = [];
  payload.links.forEach((l, i) => {
    if (show[l[0]] && show[l[1]] && (pinnedOnly || l[3] < state.edge_t)) links.push(i);
  });
  if (!pinnedOnly) {
    for (let changed = true; changed;) {
      changed = false;
      const hasOut = new Uint8Array(nodes.length), hasIn = new Uint8Array(nodes.length);
      for (const i of links) { hasOut[payload.links[i][0]] = 1; hasIn[payload.links[i][1]] = 1; }
      nodes.forEach((n, i) => {
        if (!show[i] || n.kind === "token" || n.kind === "logit") return;
        if (!hasOut[i] || (n.kind === "feature" && !hasIn[i])) { show[i] = 0; changed = true; }
      });
      if (changed) links = links.filter(i => show[payload.links[i][0]] && show[payload.links[i][1]]);
    }
  }
  return {show, links};
}

function rowOf(payload, n) {
  if (payload.mode === "contribution") return n.kind === "resid" ? 2 * n.layer : 2 * n.layer + 1;
  if (n.kind === "token") return 0;
  if (n.kind === "logit") return payload.n_layers + 1;
  return n.layer + 1;
}

function place(cg, show) {
  // each (row, position) cell's nodes side by side, most influential in the middle
  const {payload} = cg;
  const cells = new Map();
  payload.nodes.forEach((n, i) => {
    if (!show[i]) return;
    const key = rowOf(payload, n) + ":" + n.pos;
    if (!cells.has(key)) cells.set(key, []);
    cells.get(key).push(i);
  });
  const xy = new Map();
  for (const [key, members] of cells) {
    const [row, pos] = key.split(":").map(Number);
    members.sort((a, b) => (payload.nodes[b].infl || 0) - (payload.nodes[a].infl || 0));
    const k = members.length;
    const spread = Math.min(0.84, 0.12 * (k - 1));
    members.forEach((i, j) => {
      const order = j % 2 === 0 ? j / 2 : -(j + 1) / 2; // centre first, then alternately right and left
      const dx = k > 1 ? (order / Math.max(1, Math.ceil((k - 1) / 2))) * spread / 2 : 0;
      const n = payload.nodes[i];
      const shift = payload.mode === "contribution" && n.kind === "mlp" ? 0.3 : 0;
      xy.set(i, [pos + dx + shift, row + (payload.mode === "contribution" && n.kind === "mlp" ? 0.5 : 0)]);
    });
  }
  return xy;
}

function supernodeOf(state) {
  const of = new Map();
  (state.supernodes || []).forEach((group, g) => group.slice(1).forEach(id => of.set(id, g)));
  return of;
}

// ------------------------------------------------------------------ drawing

function figure(cg, maxEdges = Infinity) {
  // maxEdges: draw only the strongest edges (the first, quick drawing of a large graph; see draw)
  const {payload, state, data} = cg;
  const pal = data.palette;
  const {show, links: all} = visible(cg);
  const links = all.length <= maxEdges ? all
    : [...all].sort((p, q) => Math.abs(payload.links[q][2]) - Math.abs(payload.links[p][2])).slice(0, maxEdges);
  const xy = place(cg, show);
  const nodes = payload.nodes;
  const pinned = new Set(state.pinned);
  const clicked = nodes.findIndex(n => n.id === state.clicked);
  const supers = state.view === "pinned" ? supernodeOf(state) : new Map();
  // a supernode is drawn once, where its members are on average
  const superXY = new Map();
  for (const [id, g] of supers) {
    const i = nodes.findIndex(n => n.id === id);
    if (i < 0 || !xy.has(i)) continue;
    const acc = superXY.get(g) || [0, 0, 0];
    const [x, y] = xy.get(i);
    superXY.set(g, [acc[0] + x, acc[1] + y, acc[2] + 1]);
  }
  const at = i => {
    const g = supers.get(nodes[i].id);
    if (g !== undefined && superXY.has(g)) {
      const [sx, sy, k] = superXY.get(g);
      return [sx / k, sy / k];
    }
    return xy.get(i);
  };
  const traces = [];
  const maxW = Math.max(1e-12, ...links.map(i => Math.abs(payload.links[i][2])));
  const scale = data.scale || 1;
  const buckets = new Map();
  const mids = {x: [], y: [], text: [], customdata: [], color: []};
  // marks only on the strongest edges between positions (and on the clicked node's): a mark on every edge hides the
  // graph
  const cross = links.filter(i => nodes[payload.links[i][0]].pos !== nodes[payload.links[i][1]].pos);
  cross.sort((p, q) => Math.abs(payload.links[q][2]) - Math.abs(payload.links[p][2]));
  const marked = new Set(cross.slice(0, MAX_MARKS));
  if (clicked >= 0) cross.forEach(i => { if (payload.links[i][0] === clicked || payload.links[i][1] === clicked) marked.add(i); });
  for (const i of links) {
    const [s, t, w, extra] = payload.links[i];
    const a = at(s), b = at(t);
    if (!a || !b || (a[0] === b[0] && a[1] === b[1])) continue;
    const sign = payload.mode === "contribution" ? extra : (w >= 0 ? "pos" : "neg");
    // five strengths: width and opacity grow with |weight| (relative to the strongest edge shown), so that the
    // few strong edges stand out of the many weak ones
    const level = Math.min(4, Math.floor(5 * Math.sqrt(Math.abs(w) / maxW)));
    const faded = clicked >= 0 && s !== clicked && t !== clicked;
    const key = `${sign}:${level}:${faded}`;
    if (!buckets.has(key)) buckets.set(key, {x: [], y: [], sign, level, faded});
    const bk = buckets.get(key);
    bk.x.push(a[0], b[0], null);
    bk.y.push(a[1], b[1], null);
    if (marked.has(i)) { // a cross-position edge: a mark to hover and click
      mids.x.push((a[0] + b[0]) / 2);
      mids.y.push((a[1] + b[1]) / 2);
      mids.customdata.push([nodes[s].id, nodes[t].id]);
      mids.color.push(pal[sign] || pal.pos);
      const heads = payload.heads ? payload.heads[`${nodes[s].id}>${nodes[t].id}`] : null;
      mids.text.push(`${nodes[s].label} (${nodes[s].pos}) → ${nodes[t].label} (${nodes[t].pos})<br>` +
        (payload.mode === "contribution" ? `importance ${w.toFixed(3)}` : `weight ${w.toPrecision(3)}`) +
        (heads && heads.length ? `<br>heads: ${heads.map(([h, v]) => `H${h} ${v.toFixed(2)}`).join(", ")}` : ""));
    }
  }
  // weak edges first, so that strong ones are drawn over them; a clicked node's edges over all the others
  const order = bk => (bk.faded ? 0 : 10) + bk.level;
  for (const bk of [...buckets.values()].sort((p, q) => order(p) - order(q))) {
    traces.push({type: "scatter", mode: "lines", x: bk.x, y: bk.y, hoverinfo: "skip", showlegend: false,
                 line: {color: pal[bk.sign] || pal.pos, width: (0.6 + 0.9 * bk.level) * scale},
                 opacity: bk.faded ? 0.08 : [0.12, 0.25, 0.45, 0.7, 0.9][bk.level]});
  }
  traces.push({type: "scatter", mode: "markers", x: mids.x, y: mids.y, text: mids.text, customdata: mids.customdata,
               hovertemplate: "%{text}<extra></extra>", showlegend: false, name: "edges",
               marker: {symbol: "line-ew", size: 9 * scale, color: mids.color, line: {width: 2, color: mids.color},
                        opacity: 0.55}});
  const symbols = payload.mode === "contribution"
    ? {resid: "circle", attn: "circle", mlp: "square"}
    : {feature: "circle", error: "diamond", token: "square", logit: "triangle-up"};
  const drawnSupers = new Set();
  for (const [kind, symbol] of Object.entries(symbols)) {
    const tr = {x: [], y: [], text: [], customdata: [], line: [], size: []};
    nodes.forEach((n, i) => {
      if (!show[i] || n.kind !== kind) return;
      const g = supers.get(n.id);
      if (g !== undefined) {
        if (drawnSupers.has(g)) return;
        drawnSupers.add(g);
      }
      const [x, y] = at(i);
      tr.x.push(x);
      tr.y.push(y);
      tr.customdata.push(n.id);
      tr.text.push(g !== undefined ? esc(state.supernodes[g][0]) : n.label);
      tr.line.push(pinned.has(n.id) ? pal.accent : (i === clicked ? pal.ink : pal.surface));
      tr.size.push((g !== undefined ? 20 : kind === "logit" || kind === "token" ? 13 : 11) * scale);
    });
    if (!tr.x.length) continue;
    traces.push({type: "scatter", mode: "markers", x: tr.x, y: tr.y, text: tr.text, customdata: tr.customdata,
                 name: kind, hovertemplate: "%{text}<extra></extra>", showlegend: false,
                 marker: {symbol, size: tr.size, color: pal[kind] || pal.feature,
                          line: {color: tr.line, width: 2.5 * scale}}});
  }
  const n = payload.tokens.length;
  const rows = payload.mode === "contribution" ? 2 * payload.n_layers + 1 : payload.n_layers + 2;
  const rowNames = [];
  for (let r = 0; r < rows; r++) {
    if (payload.mode === "contribution") rowNames.push(r % 2 === 0 ? (r === 0 ? "Emb" : r === rows - 1 ? "Out" : `L${r / 2}`) : "");
    else rowNames.push(r === 0 ? "Emb" : r === rows - 1 ? "Logit" : `L${r - 1}`);
  }
  const font = {size: Math.round(13 * scale), color: pal.ink, family: "sans-serif"};
  const layout = {
    autosize: true, height: data.height, margin: {l: 54 * scale, r: 12, t: 10, b: Math.round(70 * scale)},
    paper_bgcolor: pal.surface, plot_bgcolor: pal.surface, font, hovermode: "closest", dragmode: "pan",
    hoverlabel: {font: {size: Math.round(13 * scale)}},
    xaxis: {tickmode: "array", tickvals: [...Array(n).keys()], ticktext: payload.tokens, tickangle: -60,
            range: [-0.7, n - 0.3], showgrid: false, zeroline: false, color: pal.ink, fixedrange: false},
    yaxis: {tickmode: "array", tickvals: [...Array(rows).keys()], ticktext: rowNames, range: [-0.6, rows - 0.4],
            showgrid: true, gridcolor: pal.grid, zeroline: false, color: pal.ink, fixedrange: true},
  };
  return {traces, layout, shown: show, complete: links.length === all.length};
}

function draw(root) {
  // Plotly draws about 75 edges a millisecond: a graph with thousands of edges is drawn first with its strongest
  // FIRST_EDGES (and every node), then in full a frame later, unless another change comes first (a slider being
  // dragged redraws at the pace of the quick drawing, and in full once it rests)
  const cg = root.__cg;
  if (!window.Plotly) return;
  clearTimeout(cg.full);
  const quick = figure(cg, FIRST_EDGES);
  performance.mark("viz-cg-figured");
  cg.shown = quick.shown;
  const plot = root.querySelector(".cg-plot");
  const config = {displaylogo: false, responsive: true, scrollZoom: false, displayModeBar: !cg.data.lecture,
                  toImageButtonOptions: {format: cg.data.export || "png", filename: cg.data.filename || "circuit", scale: 3},
                  modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"]};
  window.Plotly.react(plot, quick.traces, quick.layout, config);
  performance.mark("viz-cg-drawn");
  plot.dataset.complete = String(quick.complete);
  if (!quick.complete) {
    cg.full = setTimeout(() => {
      const whole = figure(cg);
      window.Plotly.react(plot, whole.traces, whole.layout, config);
      plot.dataset.complete = "true";
      performance.mark("viz-cg-complete");
    }, FULL_DELAY_MS);
  }
  if (!plot.__cgBound) {
    plot.__cgBound = true;
    let width = 0;
    new ResizeObserver(entries => { // the column's width changes with the window and the sidebar
      const w = Math.round(entries[0].contentRect.width);
      if (w && w !== width && plot._fullLayout) window.Plotly.Plots.resize(plot);
      width = w;
    }).observe(plot);
    plot.on("plotly_hover", ev => {
      const p = ev.points && ev.points[0];
      if (p && typeof p.customdata === "string") card(root, p.customdata, false);
    });
    plot.on("plotly_click", ev => {
      const p = ev.points && ev.points[0];
      if (!p) return;
      const c = root.__cg;
      if (Array.isArray(p.customdata)) { // an edge's midpoint
        c.state.edge = p.customdata;
        report(root, true);
        renderSide(root);
        return;
      }
      const id = p.customdata;
      if (ev.event && ev.event.shiftKey) togglePin(root, id);
      else {
        c.state.clicked = c.state.clicked === id ? "" : id;
        c.state.edge = null;
        report(root, true);
      }
      draw(root);
      card(root, id, true);
    });
  }
  renderBar(root);
  renderSide(root);
}

// ------------------------------------------------------------------ side panel: card, inputs and outputs

function nodeIndex(cg, id) {
  if (!cg.index) cg.index = new Map(cg.payload.nodes.map((n, i) => [n.id, i]));
  return cg.index.get(id);
}

function describe(cg, n) {
  if (cg.payload.mode === "contribution") return `${raw(n.label)}, layer ${n.layer}, position ${n.pos}`;
  const where = `position ${n.pos} (${raw(cg.payload.tokens[n.pos])})`;
  if (n.kind === "feature") return `Feature ${n.feature} of layer ${n.layer}'s transcoder, ${where}`;
  if (n.kind === "error") return `Error of layer ${n.layer}'s transcoder (what it misses of the MLP), ${where}`;
  if (n.kind === "token") return `Token embedding, ${where}`;
  return `Logit of "${raw(n.label)}"`;
}

function card(root, id, sticky) {
  const cg = root.__cg;
  if (!sticky && cg.state.clicked) return; // a clicked node's card stays until another click
  cg.hover = id;
  renderSide(root);
}

function renderSide(root) {
  const cg = root.__cg;
  const side = root.querySelector(".cg-side");
  const id = cg.state.clicked || cg.hover;
  const i = id === undefined ? undefined : nodeIndex(cg, id);
  side.replaceChildren();
  if (i === undefined) {
    side.append(el("p", "cg-muted", cg.payload.mode === "contribution"
      ? "Hover a node or an edge's mark. The threshold keeps the edges whose importance is at least its value."
      : "Hover a node to see its card here."));
    return;
  }
  const n = cg.payload.nodes[i];
  side.append(el("h4", "cg-title", raw(n.label || n.id)));
  side.append(el("p", "cg-what", describe(cg, n)));
  if (cg.payload.mode !== "contribution") {
    const facts = el("dl", "cg-facts");
    const fact = (k, v) => { facts.append(el("dt", "", k), el("dd", "", v)); };
    if (n.kind === "feature") fact("activation", Number(n.act).toPrecision(3));
    if (n.kind === "logit") fact("probability", Number(n.act).toFixed(3));
    fact("influence", Number(n.infl).toPrecision(3));
    side.append(facts);
    const pin = el("button", "cg-button cg-pin", cg.state.pinned.includes(n.id) ? "Unpin" : "Pin");
    pin.type = "button";
    pin.addEventListener("click", () => togglePin(root, n.id));
    side.append(pin);
  }
  if (n.card) {
    if (n.card.promoted.length) {
      side.append(el("h5", "", "Promotes"));
      side.append(el("p", "cg-tokens", n.card.promoted.map(raw).join("  ")));
    }
    if (n.card.contexts.length) {
      side.append(el("h5", "", "Top contexts (held-out stories)"));
      const list = el("ol", "cg-contexts");
      for (const c of n.card.contexts) list.append(el("li", "", raw(c)));
      side.append(list);
    }
  }
  const links = cg.payload.links;
  const ins = [], outs = [];
  links.forEach(l => {
    if (l[1] === i) ins.push(l);
    if (l[0] === i) outs.push(l);
  });
  const table = (title, rows, other) => {
    if (!rows.length) return;
    rows.sort((a, b) => Math.abs(b[2]) - Math.abs(a[2]));
    side.append(el("h5", "", title));
    const list = el("ol", "cg-edges");
    for (const l of rows.slice(0, 12)) {
      const m = cg.payload.nodes[l[other]];
      const item = el("li", "");
      const text = el("span", "", `${raw(m.label)} (${m.kind}, pos ${m.pos}) `);
      const w = el("span", l[2] >= 0 ? "cg-pos" : "cg-neg", Number(l[2]).toPrecision(3));
      item.append(text, w);
      if (cg.payload.mode !== "contribution" && m.pos !== n.pos) {
        const b = el("button", "cg-button cg-heads", "Heads");
        b.type = "button";
        b.title = "Which attention heads carry this edge, and why they attend there";
        b.addEventListener("click", () => {
          cg.state.edge = other === 0 ? [m.id, n.id] : [n.id, m.id];
          report(root, true);
        });
        item.append(b);
      }
      list.append(item);
    }
    side.append(list);
  };
  table("Inputs (largest first)", ins, 0);
  table("Outputs (largest first)", outs, 1);
}

function renderBar(root) {
  const cg = root.__cg;
  const {state, payload} = cg;
  const contribution = payload.mode === "contribution";
  const node = root.querySelector(".node-t"), edge = root.querySelector(".edge-t");
  node.querySelector(".cg-name").textContent = contribution ? "Importance threshold" : "Node threshold";
  node.title = contribution ? "Keep the edges whose importance is at least this value, on paths to the output"
    : "Keep the nodes that make up this share of the influence on the logits";
  const ni = node.querySelector("input"), ei = edge.querySelector("input");
  ni.min = contribution ? "0.01" : "0.05";
  ni.max = contribution ? "0.5" : String(payload.node_max);
  ei.min = "0.5";
  ei.max = String(payload.edge_max || 1);
  ei.step = "0.005";
  if (document.activeElement !== ni) ni.value = String(state.node_t);
  if (document.activeElement !== ei) ei.value = String(state.edge_t);
  node.querySelector("output").textContent = Number(state.node_t).toFixed(2);
  edge.querySelector("output").textContent = Number(state.edge_t).toFixed(3);
  edge.hidden = contribution;
  root.querySelector(".cg-buttons").hidden = contribution;
  root.querySelector(".cg-group").hidden = contribution;
  root.querySelector(".cg-help").hidden = contribution;
  const only = root.querySelector(".show-pinned");
  only.textContent = state.view === "pinned" ? "Whole graph" : "Pinned only";
  only.disabled = !state.pinned.length && state.view !== "pinned";
  root.querySelector(".make-super").disabled = state.pinned.length < 2;
  for (const [k, v] of Object.entries(cg.data.palette)) root.style.setProperty(`--cg-${k}`, v);
  root.style.setProperty("--cg-scale", String(cg.data.scale || 1));
  root.classList.toggle("cg-large", (cg.data.scale || 1) > 1.2); // lecture mode: the card under the graph
}

// ------------------------------------------------------------------ state and the server

function togglePin(root, id) {
  const {state} = root.__cg;
  const at = state.pinned.indexOf(id);
  if (at >= 0) {
    state.pinned.splice(at, 1);
    state.supernodes = state.supernodes.map(g => [g[0], ...g.slice(1).filter(x => x !== id)]).filter(g => g.length > 2);
  } else state.pinned.push(id);
  if (!state.pinned.length) state.view = "full";
  report(root, false);
  draw(root);
}

function report(root, now) {
  const cg = root.__cg;
  clearTimeout(cg.timer);
  const send = () => {
    const s = cg.state;
    cg.sent = JSON.stringify(s);
    cg.send("view", JSON.parse(cg.sent));
  };
  if (now) send();
  else cg.timer = setTimeout(send, DEBOUNCE_MS);
}

function bind(root) {
  const on = (sel, ev, fn) => root.querySelector(sel).addEventListener(ev, fn);
  on(".node-t input", "input", e => { root.__cg.state.node_t = Number(e.target.value); draw(root); report(root, false); });
  on(".edge-t input", "input", e => { root.__cg.state.edge_t = Number(e.target.value); draw(root); report(root, false); });
  on(".show-pinned", "click", () => {
    const s = root.__cg.state;
    s.view = s.view === "pinned" ? "full" : "pinned";
    draw(root);
    report(root, true);
  });
  on(".clear-pins", "click", () => {
    const s = root.__cg.state;
    s.pinned = [];
    s.supernodes = [];
    s.view = "full";
    draw(root);
    report(root, true);
  });
  on(".make-super", "click", () => {
    const s = root.__cg.state;
    const input = root.querySelector(".cg-supername");
    const grouped = new Set(s.supernodes.flatMap(g => g.slice(1)));
    const members = s.pinned.filter(id => !grouped.has(id));
    if (members.length < 2) return;
    const name = (input.value || "").trim().slice(0, 60) || `group ${s.supernodes.length + 1}`;
    s.supernodes.push([name, ...members]);
    input.value = "";
    draw(root);
    report(root, true);
  });
}

export default function (component) {
  const {parentElement, setStateValue} = component;
  performance.mark("viz-cg-data"); // bench/circuits.py reads these marks
  const [head, data] = unpack(component.data);
  let root = parentElement.querySelector(":scope > .viz-cg");
  if (!root) {
    root = build(parentElement);
    root.__cg = {};
    bind(root);
  }
  const cg = root.__cg;
  cg.send = setStateValue;
  if (cg.head === head) return undefined; // the same graph and view, already drawn
  cg.head = head;
  if (cg.revision !== data.revision) {
    cg.payload = JSON.parse(data.payload);
    performance.mark("viz-cg-parsed");
    cg.index = null;
    cg.hover = undefined;
  }
  cg.revision = data.revision;
  cg.data = data;
  // the server's view (a link, a new graph) unless the browser has moved since it last reported
  const server = JSON.stringify(data.state);
  if (!cg.state || (cg.serverState !== server && server !== cg.sent)) cg.state = JSON.parse(server);
  cg.serverState = server;
  root.querySelector(".cg-plot").style.height = `${data.height}px`;
  loadPlotly(data.src).then(() => draw(root)).catch(err => {
    root.querySelector(".cg-side").textContent = String(err.message || err);
  });
  return () => {
    clearTimeout(cg.timer);
    clearTimeout(cg.full);
  };
}
