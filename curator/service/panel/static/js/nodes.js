// Nodes: one table per type with the type's fields as columns; search and filters; create, edit, archive and
// delete, each one commit through the API (so each shows in the chat's history and can be rolled back).

import { chatPath, del, enc, get, patch, post } from "./api.js";
import { clear, h, num, reportError, table, toast } from "./dom.js";

const view = { type: null, search: "", archived: "active", floorMin: "", floorMax: "" };

export async function render(ctx, section, arg) {
  const types = Object.keys(ctx.schema.types);
  if (arg && arg.type) view.type = arg.type;
  if (!types.includes(view.type)) view.type = types[0];
  const body = h("div", { id: "nodes-body" });
  const typeSelect = h("select", { id: "nodes-type", "aria-label": "type", onchange: (e) => { view.type = e.target.value; load(ctx, body); } },
    types.map((t) => h("option", { value: t, selected: t === view.type }, t)));
  const search = h("input", { id: "nodes-search", type: "search", placeholder: "search title and fields", value: view.search,
    oninput: (e) => { view.search = e.target.value; draw(ctx, body); } });
  const archived = h("select", { id: "nodes-archived", "aria-label": "archived", onchange: (e) => { view.archived = e.target.value; load(ctx, body); } },
    ["active", "archived", "all"].map((v) => h("option", { value: v, selected: v === view.archived }, v)));
  const floor = (key, label) => h("input", { type: "number", min: 0, placeholder: label, style: "width:7em", value: view[key],
    oninput: (e) => { view[key] = e.target.value; draw(ctx, body); } });
  clear(section,
    h("div", { class: "row" }, typeSelect, search, archived, floor("floorMin", "from floor"), floor("floorMax", "to floor"),
      h("button", { class: "primary", id: "node-create", onclick: () => editDialog(ctx, null, () => load(ctx, body)) }, "New node")),
    h("p", { class: "muted" }, ctx.schema.types[view.type]?.description || ""),
    body);
  await load(ctx, body);
  if (arg && arg.edit) {
    const node = await get(chatPath(ctx.chat, `/nodes/${enc(arg.edit)}`));
    editDialog(ctx, node, () => load(ctx, body));
  }
}

let loaded = [];

async function load(ctx, body) {
  const base = chatPath(ctx.chat, `/nodes?type=${enc(view.type)}&limit=5000`);
  const wanted = view.archived === "all" ? ["false", "true"] : [view.archived === "archived" ? "true" : "false"];
  const parts = await Promise.all(wanted.map((a) => get(`${base}&archived=${a}`)));
  loaded = parts.flatMap((p) => p.nodes);
  draw(ctx, body);
}

function matches(node) {
  const q = view.search.trim().toLowerCase();
  if (q && ![node.title, node.id, ...Object.values(node.fields)].some((v) => String(v || "").toLowerCase().includes(q))) return false;
  if (view.floorMin !== "" && node.floor_to < Number(view.floorMin)) return false;
  if (view.floorMax !== "" && node.floor_from > Number(view.floorMax)) return false;
  return true;
}

function draw(ctx, body) {
  const spec = ctx.schema.types[view.type];
  const rows = loaded.filter(matches);
  const columns = [
    { label: "title", render: (n) => n.title },
    ...spec.fields.map((f) => ({ label: f.required ? `${f.name} *` : f.name, render: (n) => n.fields[f.name] || "" })),
    { label: "importance", key: "importance" },
    { label: "floors", render: (n) => `${n.floor_from}–${n.floor_to}` },
    { label: "", render: (n) => h("span", { class: "row" },
      h("button", { class: "edit", onclick: () => editDialog(ctx, n, () => load(ctx, body)) }, "Edit"),
      h("button", { class: "danger delete", onclick: () => remove(ctx, n, () => load(ctx, body)) }, "Delete")) },
  ];
  clear(body, h("p", { class: "muted" }, `${num(rows.length)} of ${num(loaded.length)} ${view.type} nodes`),
    table(columns, rows, (n) => ({ class: n.archived ? "archived" : "", dataset: { id: n.id } })));
}

async function remove(ctx, node, done) {
  if (!confirm(`Delete “${node.title || node.id}”? (One commit: a rollback past it brings the node back.)`)) return;
  try {
    const result = await del(chatPath(ctx.chat, `/nodes/${enc(node.id)}`));
    toast(`Deleted (commit #${result.commit})`);
    done();
  } catch (err) { reportError(err); }
}

/** The create / edit form: every field of the type, title, importance, archived. `node` null = create. */
function editDialog(ctx, node, done) {
  const dialog = document.getElementById("node-dialog");
  const form = document.getElementById("node-form");
  const type = node ? node.type : view.type;
  const spec = ctx.schema.types[type];
  const error = h("p", { class: "error", id: "node-error" });
  const inputs = {};
  const fieldRows = spec.fields.map((f) => {
    inputs[f.name] = h("textarea", { name: f.name, rows: 2, placeholder: f.hint }, node ? node.fields[f.name] || "" : "");
    return h("label", {}, `${f.name}${f.required ? " (required)" : ""}`, inputs[f.name]);
  });
  const title = h("input", { name: "title", value: node ? node.title : "", placeholder: "default: from the fields" });
  const importance = h("input", { name: "importance", type: "number", min: 0, max: 10, step: 0.5, value: node ? node.importance : 5 });
  const archived = h("input", { name: "archived", type: "checkbox", checked: node ? node.archived : false });
  const save = h("button", { class: "primary", id: "node-save", type: "submit", value: "save" }, node ? "Save (one commit)" : "Create");
  clear(form,
    h("h2", {}, node ? `Edit ${type} “${node.title || node.id}”` : `New ${type}`),
    h("label", {}, "title", title), ...fieldRows,
    h("div", { class: "row" }, h("label", {}, "importance", importance), node && h("label", {}, archived, " archived")),
    error,
    h("menu", {}, h("button", { value: "cancel", formnovalidate: true, onclick: () => dialog.close() }, "Cancel"), save));
  form.onsubmit = async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value.trim()]));
    try {
      let result;
      if (!node) {
        const fields = Object.fromEntries(Object.entries(values).filter(([, v]) => v));
        result = await post(chatPath(ctx.chat, "/nodes"), { type, fields, title: title.value.trim() || null,
          importance: Number(importance.value) });
      } else {
        const change = changes(node, values, title.value.trim(), Number(importance.value), archived.checked);
        if (!change) { dialog.close(); return; }
        result = await patch(chatPath(ctx.chat, `/nodes/${enc(node.id)}`), change);
      }
      dialog.close();
      toast(`${node ? "Saved" : "Created"} (commit #${result.commit})`);
      done();
    } catch (err) {
      error.textContent = err.hint ? `${err.message}\n${err.hint}` : String(err.message || err);
    }
  };
  dialog.showModal();
}

function changes(node, values, title, importance, archived) {
  const change = {};
  const setFields = {};
  const clearFields = [];
  for (const [k, v] of Object.entries(values)) {
    const before = node.fields[k] || "";
    if (v === before) continue;
    if (v) setFields[k] = v; else clearFields.push(k);
  }
  if (Object.keys(setFields).length) change.set_fields = setFields;
  if (clearFields.length) change.clear_fields = clearFields;
  if (title && title !== node.title) change.title = title;
  if (importance !== node.importance) change.importance = importance;
  if (archived !== node.archived) change.archived = archived;
  return Object.keys(change).length ? change : null;
}
