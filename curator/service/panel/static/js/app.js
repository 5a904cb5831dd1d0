// The panel's shell: token, theme, chat picker and tabs. Each tab module exports `render(ctx, section)`; a tab is
// rendered when shown and again when the chat changes or "Reload" is pressed.

import { ApiError, chatPath, get, setToken, token } from "./api.js";
import { clear, h, reportError } from "./dom.js";
import * as graph from "./graph_view.js";
import * as inbox from "./inbox.js";
import * as nodes from "./nodes.js";
import * as ops from "./ops.js";
import * as overview from "./overview.js";
import * as prompts from "./prompts.js";
import * as recall from "./recall.js";
import * as schema from "./schema.js";
import * as settings from "./settings.js";

const TABS = { overview, graph, nodes, recall, inbox, schema, ops, settings, prompts };
const NO_CHAT_NEEDED = ["ops", "settings", "prompts"];
const THEME_KEY = "curator.theme";
const CHAT_KEY = "curator.chat";

const ctx = {
  chat: null,
  schema: null, // the chat's schema data (types keyed by name)
  show: (tab, arg) => showTab(tab, arg),
  refreshSchema: async () => { ctx.schema = ctx.chat ? await get(chatPath(ctx.chat, "/schema")) : null; },
};
window.__panel = { ctx, ready: false, metrics: {}, graph }; // read by the browser tests

let current = null;

function readHashToken() {
  // `/panel/#token=...` passes the token without it reaching any server log; it is then removed from the URL.
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    setToken(decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem(THEME_KEY, theme);
}

function askToken() {
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  input.value = token();
  dialog.showModal();
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "ok") { setToken(input.value.trim()); start(); }
  }, { once: true });
}

async function showTab(name, arg) {
  current = name;
  for (const button of document.querySelectorAll(".tabs button")) {
    button.setAttribute("aria-selected", String(button.dataset.tab === name));
  }
  for (const section of document.querySelectorAll("main .tab")) section.hidden = section.id !== `tab-${name}`;
  const section = document.getElementById(`tab-${name}`);
  if (!ctx.chat && !NO_CHAT_NEEDED.includes(name)) {
    clear(section, h("p", { class: "muted" }, "No chat yet. Create one through the API, or import a graph under Operations."));
    if (name !== "overview") return;
  }
  section.dataset.loaded = "false";
  try {
    await TABS[name].render(ctx, section, arg);
  } catch (err) {
    clear(section, h("p", { class: "error" }, err.hint ? `${err.message}\n${err.hint}` : String(err.message || err)));
    if (err instanceof ApiError && err.status === 401) askToken();
  } finally {
    section.dataset.loaded = "true";
  }
}

async function loadChats() {
  const select = document.getElementById("chat-select");
  const { chats } = await get("/chats");
  // `/panel/?chat=ID` (SillyTavern's Memory drawer embeds the panel that way) picks the chat on first load
  const wanted = ctx.chat || new URLSearchParams(location.search).get("chat") || localStorage.getItem(CHAT_KEY);
  clear(select, chats.map((id) => h("option", { value: id }, id)));
  ctx.chat = chats.includes(wanted) ? wanted : chats[0] || null;
  if (ctx.chat) select.value = ctx.chat;
  await ctx.refreshSchema();
}

async function start() {
  try {
    await loadChats();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { askToken(); return; }
    reportError(err);
  }
  const fromHash = location.hash.replace("#", "");
  await showTab(TABS[fromHash] ? fromHash : current || "overview");
  window.__panel.ready = true;
}

readHashToken();
applyTheme(localStorage.getItem(THEME_KEY) || (matchMedia("(prefers-color-scheme: light)").matches ? "light" : "dark"));
document.getElementById("theme-toggle").addEventListener("click", () => {
  applyTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark");
  if (current === "graph") graph.redraw();
});
document.getElementById("token-button").addEventListener("click", askToken);
document.getElementById("refresh").addEventListener("click", async () => { await loadChats().catch(reportError); showTab(current); });
document.getElementById("chat-select").addEventListener("change", async (event) => {
  ctx.chat = event.target.value;
  localStorage.setItem(CHAT_KEY, ctx.chat);
  await ctx.refreshSchema().catch(reportError);
  showTab(current);
});
for (const button of document.querySelectorAll(".tabs button")) {
  button.addEventListener("click", () => { history.replaceState(null, "", "#" + button.dataset.tab); showTab(button.dataset.tab); });
}
start();
