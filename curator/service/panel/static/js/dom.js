// Small DOM helpers: an element builder (text is always set as text, never parsed as HTML), toasts, formatting.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) if (child) el.append(child);
  return el;
}

export function toast(message, kind = "info", ms = 4500) {
  const el = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, message);
  document.getElementById("toasts").append(el);
  setTimeout(() => el.remove(), ms);
}

/** Show an error (ApiError or other) as a toast and return its text. */
export function reportError(err) {
  const text = err.hint ? `${err.message} — ${err.hint}` : String(err.message || err);
  toast(text, "error", 8000);
  return text;
}

export const num = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en"));
export const pct = (x) => `${(100 * (x || 0)).toFixed(1)}%`;

export function table(columns, rows, rowAttrs) {
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c.label)))),
    h("tbody", {}, rows.map((row) => h("tr", rowAttrs ? rowAttrs(row) : {},
      columns.map((c) => h("td", { class: "cell" }, c.render ? c.render(row) : String(row[c.key] ?? "")))))),
  ));
}

export function card(value, label) {
  return h("div", { class: "card" }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
}

export function download(name, data) {
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
  const link = h("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(link);
  link.click();
  setTimeout(() => { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
}

/** A progress bar bound to a job: returns [element, update(job)]. */
export function jobProgress() {
  const bar = h("div", { style: "width:0%" });
  const label = h("span", { class: "muted" }, "queued");
  const el = h("div", { class: "row job-progress" }, h("div", { class: "progress" }, bar), label);
  const update = (job) => {
    const { done = 0, total } = job.progress || {};
    bar.style.width = total ? `${Math.round((100 * done) / total)}%` : job.state === "done" ? "100%" : "5%";
    label.textContent = `${job.kind}: ${job.state} ${done}${total ? "/" + total : ""}` +
      (job.message ? ` — ${job.message}` : "") + (job.error ? ` — ${job.error}` : "");
    el.dataset.state = job.state;
  };
  return [el, update];
}
