// The graph view: the chat's nodes and edges on a <canvas>, laid out by graph_layout.js. Drag a node to move it,
// drag the background to pan, wheel (or pinch) to zoom, click a node for its details. Colours follow the node
// type; archived nodes are hidden unless asked for.

import { chatPath, enc, get } from "./api.js";
import { clear, h, num } from "./dom.js";
import { layout } from "./graph_layout.js";
import { colourFor } from "./palette.js";

let state = null; // the graph on screen: data, positions, view transform, selection
let canvas = null;

export async function render(ctx, section) {
  const showArchived = state?.showArchived ?? false;
  const data = await get(chatPath(ctx.chat, `/graph/all?archived=${showArchived}`));
  const types = [...new Set(data.nodes.map((n) => n.type))].sort();
  const index = new Map(data.nodes.map((n, i) => [n.id, i]));
  const links = new Int32Array(data.edges.length * 2);
  data.edges.forEach((e, k) => { links[2 * k] = index.get(e.source); links[2 * k + 1] = index.get(e.target); });
  state = { ctx, data, index, links, types, showArchived, hiddenTypes: new Set(), x: null, y: null,
    scale: 1, tx: 0, ty: 0, selected: null, hover: null, neighbours: new Set(), frames: 0, drawMs: 0 };

  canvas = h("canvas", { "aria-label": "memory graph" });
  const status = h("div", { class: "status" }, `laying out ${num(data.nodes.length)} nodes…`);
  const details = h("div", { id: "graph-details" }, h("p", { class: "muted" }, "Click a node for its details."));
  const search = h("input", { type: "search", placeholder: "find a node by title", onkeydown: (e) => e.key === "Enter" && find(e.target.value) });
  clear(section, h("div", { class: "graph-layout" },
    h("div", { class: "graph-stage" }, canvas, status,
      h("div", { class: "zoom" }, h("button", { title: "Zoom in", onclick: () => zoom(1.4) }, "+"),
        h("button", { title: "Zoom out", onclick: () => zoom(1 / 1.4) }, "−"),
        h("button", { id: "graph-fit", title: "Fit the graph to the view", onclick: fitView }, "Fit"))),
    h("div", { class: "side" },
      h("div", { class: "row" }, search),
      h("label", {}, h("input", { type: "checkbox", id: "show-archived", checked: showArchived,
        onchange: (e) => { state.showArchived = e.target.checked; render(ctx, section); } }), " show archived"),
      h("p", { class: "muted" }, `${num(data.nodes.length)} nodes, ${num(data.edges.length)} edges`),
      legend(), details)));
  state.details = details;
  attach(canvas);
  resize();

  const result = await layout(data.nodes.length, links, {
    onSlice: (done, total) => { status.textContent = `layout ${done}/${total}`; fit(); draw(); },
  });
  state.x = result.x; state.y = result.y;
  fit();
  draw();
  status.textContent = `${num(data.nodes.length)} nodes laid out in ${Math.round(result.ms)} ms (${result.iterations} steps)`;
  window.__panel.metrics.graph = { nodes: data.nodes.length, edges: data.edges.length, layoutMs: result.ms,
    iterations: result.iterations, longestSliceMs: result.longestSliceMs };
}

function legend() {
  const counts = {};
  for (const n of state.data.nodes) counts[n.type] = (counts[n.type] || 0) + 1;
  return h("ul", { class: "legend" }, state.types.map((type) => h("li", {},
    h("input", { type: "checkbox", checked: true, "aria-label": `show ${type}`,
      onchange: (e) => { e.target.checked ? state.hiddenTypes.delete(type) : state.hiddenTypes.add(type); draw(); } }),
    h("span", { class: "swatch", style: `background:${colourFor(type, state.types)}` }), `${type} (${counts[type]})`)));
}

function resize() {
  const ratio = window.devicePixelRatio || 1;
  const rect = canvas.getBoundingClientRect();
  canvas.width = Math.max(1, Math.round(rect.width * ratio));
  canvas.height = Math.max(1, Math.round(rect.height * ratio));
}

function fit() {
  if (!state || !state.x || !state.x.length) return;
  let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
  for (let i = 0; i < state.x.length; i++) {
    minX = Math.min(minX, state.x[i]); maxX = Math.max(maxX, state.x[i]);
    minY = Math.min(minY, state.y[i]); maxY = Math.max(maxY, state.y[i]);
  }
  const w = canvas.width, hgt = canvas.height, pad = 90 * (window.devicePixelRatio || 1); // room for labels
  state.scale = Math.min((w - pad) / Math.max(maxX - minX, 1), (hgt - pad) / Math.max(maxY - minY, 1), 4);
  state.tx = w / 2 - ((minX + maxX) / 2) * state.scale;
  state.ty = hgt / 2 - ((minY + maxY) / 2) * state.scale;
}

const visible = (i) => !state.hiddenTypes.has(state.data.nodes[i].type);

/** Draw the graph once; returns the milliseconds it took. */
export function draw() {
  if (!state || !state.x || !canvas) return 0;
  const started = performance.now();
  const g = canvas.getContext("2d");
  const css = getComputedStyle(document.documentElement);
  const { x, y, scale, tx, ty, links } = state;
  g.setTransform(1, 0, 0, 1, 0, 0);
  g.fillStyle = css.getPropertyValue("--canvas");
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.setTransform(scale, 0, 0, scale, tx, ty);
  g.lineWidth = 1 / scale;
  g.strokeStyle = css.getPropertyValue("--edge");
  g.beginPath(); // every edge in one path: one stroke call for thousands of lines
  for (let e = 0; e < links.length; e += 2) {
    const s = links[e], t = links[e + 1];
    if (!visible(s) || !visible(t)) continue;
    g.moveTo(x[s], y[s]); g.lineTo(x[t], y[t]);
  }
  g.stroke();
  const radius = (i) => 3 + Math.min(state.data.nodes[i].importance, 10) * 0.45;
  for (const type of state.types) { // one path per type colour
    if (state.hiddenTypes.has(type)) continue;
    g.fillStyle = colourFor(type, state.types);
    g.beginPath();
    state.data.nodes.forEach((n, i) => {
      if (n.type !== type) return;
      const r = radius(i);
      g.moveTo(x[i] + r, y[i]); g.arc(x[i], y[i], r, 0, Math.PI * 2);
    });
    g.fill();
  }
  const archivedDash = state.showArchived;
  g.strokeStyle = css.getPropertyValue("--text");
  for (const i of [state.selected, state.hover, ...state.neighbours]) {
    if (i === null || i === undefined) continue;
    g.lineWidth = (i === state.selected ? 2.5 : 1.2) / scale;
    g.beginPath(); g.arc(x[i], y[i], radius(i) + 2 / scale, 0, Math.PI * 2); g.stroke();
  }
  // Labels only when they can be read, or for the nodes in focus.
  g.fillStyle = css.getPropertyValue("--text");
  g.font = `${12 / scale}px system-ui, sans-serif`;
  const labelAll = scale > 1.2 && state.data.nodes.length < 3000;
  state.data.nodes.forEach((n, i) => {
    const focus = i === state.selected || i === state.hover || state.neighbours.has(i);
    if (!(focus || labelAll) || !visible(i)) return;
    g.globalAlpha = archivedDash && n.archived ? 0.5 : 1;
    g.fillText(n.title || n.id, x[i] + radius(i) + 2 / scale, y[i] + 4 / scale);
  });
  g.globalAlpha = 1;
  state.frames++;
  const ms = performance.now() - started;
  state.drawMs += ms;
  return ms;
}

export function redraw() { if (state && canvas) requestAnimationFrame(() => draw()); }

/** For the browser test: redraw every animation frame for `ms`, panning a little; frames drawn and their cost. */
export function benchFrames(ms = 1000) {
  return new Promise((resolve) => {
    let frames = 0, drawMs = 0, worst = 0;
    const started = performance.now();
    const tick = (now) => {
      state.tx += 1; // a slow pan: every frame is a full redraw
      const cost = draw();
      frames++; drawMs += cost; worst = Math.max(worst, cost);
      if (now - started < ms) requestAnimationFrame(tick);
      else resolve({ frames, seconds: (performance.now() - started) / 1000, avgDrawMs: drawMs / frames, worstDrawMs: worst });
    };
    requestAnimationFrame(tick);
  });
}

function toLayout(event) {
  const rect = canvas.getBoundingClientRect();
  const ratio = canvas.width / rect.width;
  const px = (event.clientX - rect.left) * ratio, py = (event.clientY - rect.top) * ratio;
  return [(px - state.tx) / state.scale, (py - state.ty) / state.scale, px, py];
}

function hit(event) {
  const [lx, ly] = toLayout(event);
  let best = null, bestD = (8 / state.scale + 6) ** 2;
  for (let i = 0; i < state.x.length; i++) {
    if (!visible(i)) continue;
    const d = (state.x[i] - lx) ** 2 + (state.y[i] - ly) ** 2;
    if (d < bestD) { best = i; bestD = d; }
  }
  return best;
}

/** Zoom by `factor` around the canvas point (px, py) (canvas pixels; default: the centre). */
export function zoom(factor, px = canvas.width / 2, py = canvas.height / 2) {
  state.tx = px - (px - state.tx) * factor;
  state.ty = py - (py - state.ty) * factor;
  state.scale *= factor;
  redraw();
}

export function fitView() { fit(); redraw(); }

function attach(el) {
  let drag = null; // {node, moved} or {pan: [px, py], moved}
  const touches = new Map(); // pointer id -> [px, py]: two of them pinch-zoom
  let pinch = null;
  const spread = () => { const [a, b] = [...touches.values()]; return [Math.hypot(a[0] - b[0], a[1] - b[1]), (a[0] + b[0]) / 2, (a[1] + b[1]) / 2]; };
  el.addEventListener("pointerdown", (event) => {
    if (!state.x) return;
    el.setPointerCapture(event.pointerId);
    touches.set(event.pointerId, toLayout(event).slice(2));
    if (touches.size === 2) { pinch = spread()[0]; drag = null; return; }
    const node = hit(event);
    const [, , px, py] = toLayout(event);
    drag = node !== null ? { node, moved: false, start: [px, py] } : { pan: [px, py], moved: false, start: [px, py] };
  });
  el.addEventListener("pointermove", (event) => {
    if (!state.x) return;
    const [lx, ly, px, py] = toLayout(event);
    if (touches.has(event.pointerId)) touches.set(event.pointerId, [px, py]);
    if (pinch && touches.size === 2) {
      const [distance, mx, my] = spread();
      zoom(distance / pinch, mx, my);
      pinch = distance;
      return;
    }
    if (!drag) {
      const over = hit(event);
      if (over !== state.hover) { state.hover = over; el.style.cursor = over === null ? "grab" : "pointer"; redraw(); }
      return;
    }
    if (Math.hypot(px - drag.start[0], py - drag.start[1]) > 3) drag.moved = true;
    if (drag.node !== undefined) { state.x[drag.node] = lx; state.y[drag.node] = ly; }
    else { state.tx += px - drag.pan[0]; state.ty += py - drag.pan[1]; drag.pan = [px, py]; }
    redraw();
  });
  const release = (event) => { touches.delete(event.pointerId); if (touches.size < 2) pinch = null; };
  el.addEventListener("pointercancel", (event) => { release(event); drag = null; });
  el.addEventListener("pointerup", (event) => {
    release(event);
    if (drag && drag.node !== undefined && !drag.moved) select(drag.node);
    else if (drag && !drag.moved && drag.pan) select(null);
    drag = null;
  });
  el.addEventListener("wheel", (event) => {
    event.preventDefault();
    const [, , px, py] = toLayout(event);
    zoom(Math.exp(-event.deltaY * 0.0015), px, py);
  }, { passive: false });
  new ResizeObserver(() => { resize(); redraw(); }).observe(el);
}

function find(text) {
  const wanted = text.trim().toLowerCase();
  if (!wanted) return;
  const i = state.data.nodes.findIndex((n) => (n.title || "").toLowerCase().includes(wanted));
  if (i < 0) { clear(state.details, h("p", { class: "error" }, `No node titled like “${text}”.`)); return; }
  state.tx = canvas.width / 2 - state.x[i] * state.scale;
  state.ty = canvas.height / 2 - state.y[i] * state.scale;
  select(i);
}

async function select(i) {
  state.selected = i;
  state.neighbours = new Set();
  if (i === null) { clear(state.details, h("p", { class: "muted" }, "Click a node for its details.")); redraw(); return; }
  const id = state.data.nodes[i].id;
  for (let e = 0; e < state.links.length; e += 2) {
    if (state.links[e] === i) state.neighbours.add(state.links[e + 1]);
    if (state.links[e + 1] === i) state.neighbours.add(state.links[e]);
  }
  redraw();
  const node = await get(chatPath(state.ctx.chat, `/nodes/${enc(id)}`));
  const edges = state.data.edges.filter((e) => e.source === id || e.target === id);
  const title = (nid) => state.data.nodes[state.index.get(nid)]?.title || nid;
  clear(state.details,
    h("h2", {}, node.title || node.id),
    h("p", {}, h("span", { class: "swatch", style: `background:${colourFor(node.type, state.types)}` }), ` ${node.type}`,
      node.archived ? " (archived)" : "", ` · floors ${node.floor_from}–${node.floor_to} · importance ${node.importance}`),
    h("dl", { class: "fields" }, Object.entries(node.fields).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, `Links (${edges.length})`),
    h("ul", {}, edges.map((e) => h("li", {}, e.source === id ? `→ ${e.relation} → ${title(e.target)}` : `← ${e.relation} ← ${title(e.source)}`))),
    h("button", { onclick: () => state.ctx.show("nodes", { type: node.type, edit: node.id }) }, "Edit in the table"));
}

/** Where node `id` is on the page (client pixels): for the browser tests, which click nodes like a user. */
export function screenPosition(id) {
  const i = state.index.get(id);
  const rect = canvas.getBoundingClientRect();
  const ratio = canvas.width / rect.width;
  return { x: rect.left + (state.x[i] * state.scale + state.tx) / ratio, y: rect.top + (state.y[i] * state.scale + state.ty) / ratio };
}
