// Settings: the chat's own (overrides of config.yaml: cadence, channel, budget and caps, recall mode, rewrite and
// rerank, maintenance switches, injection position, the model profile per task) and the global ones (config.yaml:
// model profiles, tasks and the defaults every chat follows). The form is built from the service's list of
// settings (`/settings/fields`), so every setting it knows is editable here; saving sends a merge patch, which the
// service validates as a whole before storing anything.

import { chatPath, get, patch } from "./api.js";
import { clear, h, reportError, toast } from "./dom.js";

const PROFILE_KEYS = [["provider", "choice", ["openai", "cohere"]], ["model", "string"], ["base_url", "string"],
  ["api_key_env", "string"], ["temperature", "number"], ["max_tokens", "integer"], ["rpm", "integer"],
  ["timeout", "number"], ["output_mode", "choice", ["tool", "json"]]];
let scope = "chat"; // "chat" | "global"

export async function render(ctx, section) {
  const { fields } = await get("/settings/fields");
  const global = await get("/settings");
  const chat = ctx.chat && scope === "chat" ? await get(chatPath(ctx.chat, "/settings")) : null;
  const message = h("p", { id: "settings-message", role: "status" });
  const changes = {}; // path -> value (null: back to the inherited value)
  const effective = chat ? chat.effective : global.effective;
  const own = chat ? chat.overrides : global.config;
  const switcher = h("div", { class: "row" },
    h("button", { id: "settings-scope-chat", disabled: !ctx.chat, "aria-pressed": String(scope === "chat"),
      onclick: () => { scope = "chat"; render(ctx, section); } }, ctx.chat ? `This chat (${ctx.chat})` : "This chat"),
    h("button", { id: "settings-scope-global", "aria-pressed": String(scope === "global" || !chat),
      onclick: () => { scope = "global"; render(ctx, section); } }, "Global (config.yaml)"),
    h("button", { class: "primary", id: "settings-save", onclick: () => save(ctx, section, chat, changes, message) }, "Save"));
  const intro = chat
    ? "Values set for this chat override config.yaml; the others follow it. \u201cReset\u201d returns a setting to the global value."
    : `Saved to ${global.file} (the previous file is kept as config.yaml.bak). API keys are never stored: a profile names the environment variable that holds its key.`;
  const groups = {};
  for (const field of fields) {
    const [sectionName, second] = field.path.split(".");
    const group = field.path.split(".").length > 2 ? `${sectionName} \u203a ${second}` : sectionName;
    (groups[group] ||= []).push(field);
  }
  clear(section, switcher, h("p", { class: "muted" }, intro), message,
    chat ? null : profilesBox(global, changes),
    tasksBox(chat ? effective.tasks : global.tasks, chat ? chat.overrides.tasks || {} : global.config.tasks || {},
      Object.keys(global.effective.profiles), changes, Boolean(chat)),
    Object.entries(groups).map(([group, list]) => h("fieldset", { class: "settings-group", dataset: { group } },
      h("legend", {}, group),
      h("div", { class: "grid-form" }, list.map((f) => fieldRow(f, effective, own, changes))))));
}

function lookup(obj, path) {
  return path.split(".").reduce((o, k) => (o && typeof o === "object" ? o[k] : undefined), obj);
}

function fieldRow(field, effective, own, changes) {
  const value = lookup(effective, field.path);
  const set = lookup(own, field.path) !== undefined;
  const control = input(field, value, (v) => { changes[field.path] = v; row.classList.add("dirty"); });
  const reset = h("button", { class: "link", title: "Return to the inherited value", disabled: !set,
    onclick: () => { changes[field.path] = null; row.classList.add("dirty"); reset.textContent = "reset on save"; } }, "Reset");
  const row = h("label", { class: set ? "setting overridden" : "setting", dataset: { path: field.path }, title: field.description },
    h("span", {}, field.path.split(".").slice(1).join(".") || field.path, set ? h("b", { class: "badge" }, " set") : null),
    control, h("small", { class: "muted" }, field.description), reset);
  return row;
}

function input(field, value, onChange) {
  const attrs = { "aria-label": field.path, name: field.path };
  let el;
  if (field.type === "boolean") {
    el = h("input", { ...attrs, type: "checkbox", checked: Boolean(value) });
    el.addEventListener("change", () => onChange(el.checked));
    return el;
  }
  if (field.type === "choice") {
    el = h("select", attrs, field.choices.map((c) => h("option", { value: c, selected: c === value }, c)));
    el.addEventListener("change", () => onChange(el.value));
    return el;
  }
  if (field.type === "integer" || field.type === "number") {
    el = h("input", { ...attrs, type: "number", step: field.type === "integer" ? 1 : "any", min: field.ge ?? field.gt,
      max: field.le ?? field.lt, value: value ?? "", placeholder: value === null ? "(automatic)" : "" });
    el.addEventListener("input", () => onChange(el.value === "" ? null : Number(el.value)));
    return el;
  }
  if (field.type === "list") {
    el = h("input", { ...attrs, value: (value || []).join(", ") });
    el.addEventListener("input", () => onChange(el.value.split(",").map((x) => x.trim()).filter(Boolean)
      .map((x) => (Number.isNaN(Number(x)) ? x : Number(x)))));
    return el;
  }
  if (field.type === "object") {
    el = h("textarea", { ...attrs, rows: 2, placeholder: "JSON, or empty for none" }, value ? JSON.stringify(value) : "");
    el.addEventListener("input", () => { try { onChange(el.value.trim() ? JSON.parse(el.value) : null); el.classList.remove("invalid"); } catch { el.classList.add("invalid"); } });
    return el;
  }
  el = h("input", { ...attrs, value: value ?? "" });
  el.addEventListener("input", () => onChange(el.value === "" && field.nullable ? null : el.value));
  return el;
}

function tasksBox(effective, own, profiles, changes, forChat) {
  return h("fieldset", { class: "settings-group", dataset: { group: "tasks" } },
    h("legend", {}, "Models per task"),
    h("p", { class: "muted" }, forChat ? "The model profile each task uses for this chat (profiles are global)."
      : "The profile each task uses; a task without one uses the profile named \u201cdefault\u201d."),
    h("div", { class: "grid-form" }, Object.keys(effective).map((task) => {
      const select = h("select", { "aria-label": `tasks.${task}`, name: `tasks.${task}` },
        h("option", { value: "" }, forChat ? `(global: ${effective[task] || "default"})` : "default"),
        profiles.map((p) => h("option", { value: p, selected: own[task] === p }, p)));
      select.addEventListener("change", () => { changes[`tasks.${task}`] = select.value || null; });
      return h("label", {}, task, select);
    })));
}

function profilesBox(global, changes) {
  const body = h("tbody");
  const row = (name, profile) => {
    const cells = PROFILE_KEYS.map(([key, type, choices]) => {
      const field = { path: `profiles.${name}.${key}`, type, choices, nullable: true };
      return h("td", {}, input(field, profile[key], (v) => { changes[`profiles.${name}.${key}`] = v; }));
    });
    const tr = h("tr", { dataset: { profile: name } }, h("td", {}, name), cells,
      h("td", {}, profile.key_set === undefined ? "" : profile.key_set ? "key set" : h("span", { class: "warn" }, "key not set")),
      h("td", {}, h("button", { class: "danger", onclick: () => { changes[`profiles.${name}`] = null; tr.remove(); } }, "Remove")));
    return tr;
  };
  for (const [name, profile] of Object.entries(global.effective.profiles)) body.append(row(name, profile));
  const newName = h("input", { id: "profile-new-name", placeholder: "new profile name" });
  return h("fieldset", { class: "settings-group", dataset: { group: "profiles" } },
    h("legend", {}, "Model profiles"),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["name", ...PROFILE_KEYS.map(([k]) => k), "key", ""].map((t) => h("th", {}, t)))), body)),
    h("div", { class: "row" }, newName, h("button", { id: "profile-add", onclick: () => {
      const name = newName.value.trim();
      if (!name) return;
      changes[`profiles.${name}.model`] = changes[`profiles.${name}.model`] || "";
      body.append(row(name, { provider: "openai" }));
      newName.value = "";
    } }, "Add profile")));
}

function asPatch(changes) {
  const out = {};
  for (const [path, value] of Object.entries(changes)) {
    const keys = path.split(".");
    let node = out;
    for (const key of keys.slice(0, -1)) {
      if (node[key] === null) break; // the whole object is removed
      node = node[key] ||= {};
    }
    node[keys[keys.length - 1]] = value;
  }
  return out;
}

async function save(ctx, section, chat, changes, message) {
  if (!Object.keys(changes).length) { toast("Nothing changed"); return; }
  try {
    const body = asPatch(changes);
    if (chat) await patch(chatPath(ctx.chat, "/settings"), body);
    else await patch("/settings", body);
    toast("Settings saved");
    await render(ctx, section);
  } catch (err) {
    message.className = "error";
    message.textContent = reportError(err);
  }
}
