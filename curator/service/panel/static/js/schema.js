// Schema editor: add and remove types and fields, cadence (extract every N floors), always-inject and its caps,
// compression settings, or the whole schema as JSON. Every save is validated by the service first; a chat with
// memory takes only changes that keep its nodes valid (the service lists what would break).

import { chatPath, get, post, put } from "./api.js";
import { clear, h, reportError, toast } from "./dom.js";

const BUCKETS = ["state", "episodic", "reflection", "rules"];
const IDENTITIES = ["entity", "event", "latest_only"];
let draft = null; // the schema being edited (plain data, types keyed by name)

export async function render(ctx, section) {
  draft = structuredClone(await get(chatPath(ctx.chat, "/schema")));
  const message = h("p", { id: "schema-message", role: "status" });
  const editor = h("div", { id: "schema-types" });
  const raw = h("textarea", { id: "schema-json", rows: 24, hidden: true, spellcheck: false });
  const rawToggle = h("button", { onclick: () => toggleRaw(raw, editor, rawToggle, message) }, "Edit as JSON");
  const presets = (await get("/schemas")).presets;
  const preset = h("select", { "aria-label": "preset" }, h("option", { value: "" }, "load a preset…"),
    presets.map((p) => h("option", { value: p }, p)));
  preset.onchange = async () => {
    if (!preset.value) return;
    draft = await get(`/schemas/${preset.value}`);
    drawTypes(editor); raw.value = JSON.stringify(draft, null, 2);
  };
  clear(section,
    h("div", { class: "row" },
      h("label", {}, "name ", h("input", { id: "schema-name", value: draft.name, oninput: (e) => { draft.name = e.target.value; } })),
      h("button", { id: "schema-add-type", onclick: () => addType(editor) }, "Add type"), rawToggle, preset,
      h("button", { id: "schema-validate", onclick: () => validate(raw, message) }, "Validate"),
      h("button", { class: "primary", id: "schema-save", onclick: () => save(ctx, raw, message) }, "Validate and save")),
    message, editor, raw);
  drawTypes(editor);
}

function current(raw) {
  if (!raw.hidden) draft = JSON.parse(raw.value); // a JSON syntax error is reported by the caller
  return draft;
}

function toggleRaw(raw, editor, button, message) {
  try {
    if (raw.hidden) { raw.value = JSON.stringify(draft, null, 2); } else { draft = JSON.parse(raw.value); drawTypes(editor); }
  } catch (err) { message.className = "error"; message.textContent = `Not valid JSON: ${err.message}`; return; }
  raw.hidden = !raw.hidden;
  editor.hidden = !raw.hidden;
  button.textContent = raw.hidden ? "Edit as JSON" : "Edit as form";
}

async function validate(raw, message) {
  try {
    const result = await post("/schemas/validate", current(raw));
    message.className = "ok";
    message.textContent = `Valid: ${result.name}, types ${result.types.join(", ")}`;
    return true;
  } catch (err) {
    message.className = "error";
    message.textContent = err.hint ? `${err.message}\n${err.hint}` : String(err.message || err);
    return false;
  }
}

async function save(ctx, raw, message) {
  if (!(await validate(raw, message))) return;
  try {
    const result = await put(chatPath(ctx.chat, "/schema/compatible"), draft);
    await ctx.refreshSchema();
    message.className = "ok";
    message.textContent = `Saved: ${result.schema} with types ${result.types.join(", ")}`;
    toast("Schema saved");
  } catch (err) {
    message.className = "error";
    message.textContent = reportError(err);
  }
}

function addType(editor) {
  let name = "new_type", n = 1;
  while (draft.types[name]) name = `new_type_${++n}`;
  draft.types[name] = { description: "", identity: "entity", fields: [{ name: "name", hint: "", required: true, embedded: true }],
    primary_key: ["name"], bucket: "state", extract_every: 1 };
  drawTypes(editor);
}

function input(obj, key, attrs = {}) {
  const isNumber = attrs.type === "number";
  const isBool = attrs.type === "checkbox";
  const el = h("input", { ...attrs, value: isBool ? undefined : obj[key] ?? "", checked: isBool ? Boolean(obj[key]) : undefined });
  el.addEventListener(isBool ? "change" : "input", () => {
    obj[key] = isBool ? el.checked : isNumber ? Number(el.value) : el.value;
  });
  return el;
}

function choice(obj, key, options) {
  const el = h("select", {}, options.map((o) => h("option", { value: o, selected: (obj[key] ?? options[0]) === o }, o)));
  el.addEventListener("change", () => { obj[key] = el.value; });
  return el;
}

function drawTypes(editor) {
  clear(editor, Object.entries(draft.types).map(([name, spec]) => typeCard(editor, name, spec)));
}

function typeCard(editor, name, spec) {
  spec.always_inject ??= { enabled: false, max_per_type: 0, max_floor_distance: 0 };
  spec.compression ??= { mode: "none", fan_in: 3, threshold: 9, keep_recent_leaves: 0, max_depth: 1, instruction: "" };
  const rename = h("input", { value: name, "aria-label": "type name" });
  rename.addEventListener("change", () => {
    const next = rename.value.trim();
    if (!next || next === name || draft.types[next]) { rename.value = name; return; }
    // keep the order of types: rebuild the object with the new key in place
    draft.types = Object.fromEntries(Object.entries(draft.types).map(([k, v]) => [k === name ? next : k, v]));
    drawTypes(editor);
  });
  const ai = spec.always_inject, c = spec.compression;
  const label = (text, el) => h("label", {}, text, el);
  return h("fieldset", { class: "type-card", dataset: { type: name } },
    h("legend", {}, name),
    h("div", { class: "row" }, rename,
      h("button", { class: "danger", onclick: () => { delete draft.types[name]; drawTypes(editor); } }, "Remove type")),
    h("div", { class: "grid-form" },
      label("description", input(spec, "description")),
      label("identity", choice(spec, "identity", IDENTITIES)),
      label("bucket", choice(spec, "bucket", BUCKETS)),
      label("extract every N floors", input(spec, "extract_every", { type: "number", min: 1, max: 1000, class: "cadence" })),
      label("always inject", input(ai, "enabled", { type: "checkbox", class: "always-inject" })),
      label("max per type (0 = the recall default, 8)", input(ai, "max_per_type", { type: "number", min: 0 })),
      label("max floor distance (0 = no cap)", input(ai, "max_floor_distance", { type: "number", min: 0 })),
      label("compression", choice(c, "mode", ["none", "hierarchical"])),
      label("fan in", input(c, "fan_in", { type: "number", min: 2, max: 20 })),
      label("threshold", input(c, "threshold", { type: "number", min: 2 })),
      label("keep recent leaves", input(c, "keep_recent_leaves", { type: "number", min: 0 })),
      label("max depth", input(c, "max_depth", { type: "number", min: 1, max: 20 }))),
    label("extraction instructions", h("textarea", { rows: 2, oninput: (e) => { spec.extraction_instructions = e.target.value; } },
      spec.extraction_instructions || "")),
    h("table", {}, h("thead", {}, h("tr", {}, ["field", "hint", "required", "embedded", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, spec.fields.map((f, i) => h("tr", {},
        h("td", {}, input(f, "name")), h("td", {}, input(f, "hint")),
        h("td", {}, input(f, "required", { type: "checkbox" })), h("td", {}, input(f, "embedded", { type: "checkbox" })),
        h("td", {}, h("button", { class: "danger", onclick: () => { spec.fields.splice(i, 1); drawTypes(editor); } }, "Remove")))))),
    h("button", { onclick: () => { spec.fields.push({ name: `field_${spec.fields.length + 1}`, hint: "", required: false, embedded: false }); drawTypes(editor); } }, "Add field"));
}
