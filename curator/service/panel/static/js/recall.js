// Recall: the last injection as the model saw it (blocks, nodes, scores, reasons, tokens), and a box to try a
// query with each recall mode (a try does not replace the "last injection").

import { ApiError, chatPath, get, post } from "./api.js";
import { clear, h, num, reportError, table } from "./dom.js";

const MODES = ["hybrid", "rag", "llm"];

export async function render(ctx, section) {
  const last = h("div", { id: "recall-last" });
  const results = h("div", { id: "recall-results", class: "split" });
  const query = h("textarea", { id: "recall-query", rows: 3, placeholder: "what the user just said" });
  const mode = h("select", { id: "recall-mode", "aria-label": "mode" },
    [...MODES, "all modes"].map((m) => h("option", { value: m }, m)));
  const at = h("input", { id: "recall-at", placeholder: "at story time (e.g. day 5): optional", "aria-label": "at story time" });
  const speaker = h("input", { id: "recall-speaker", placeholder: "speaker: optional", "aria-label": "speaker" });
  const run = h("button", { class: "primary", id: "recall-run",
    onclick: () => tryQuery(ctx, query.value, mode.value, results, run, { at: at.value.trim() || undefined, speaker: speaker.value.trim() || undefined }) }, "Recall");
  clear(section,
    h("h2", {}, "Try a query"),
    h("div", { class: "box" }, query, h("div", { class: "row" }, mode, at, speaker, run,
      h("span", { class: "muted" }, "Runs recall as the next generation would, without becoming the last injection."))),
    results,
    h("h2", {}, "Last injection"), last);
  try {
    clear(last, injectionView(await get(chatPath(ctx.chat, "/injection/last"))));
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    clear(last, h("p", { class: "muted" }, `${err.message}. ${err.hint}`));
  }
}

async function tryQuery(ctx, text, mode, results, button, extra = {}) {
  if (!text.trim()) { reportError(new Error("Type a query first.")); return; }
  const modes = mode === "all modes" ? MODES : [mode];
  button.disabled = true;
  clear(results, modes.map((m) => h("div", { class: "box", dataset: { mode: m } }, h("p", { class: "muted" }, `${m}: recalling…`))));
  await Promise.all(modes.map(async (m, i) => {
    const box = results.children[i];
    try {
      const injection = await post(chatPath(ctx.chat, "/recall/try"), { query: text, mode: m, ...extra });
      clear(box, h("h2", {}, `mode ${m}`), injectionView(injection));
      box.dataset.done = "true";
    } catch (err) {
      clear(box, h("h2", {}, `mode ${m}`), h("p", { class: "error" }, err.hint ? `${err.message}\n${err.hint}` : err.message));
      box.dataset.done = "error";
    }
  }));
  button.disabled = false;
}

export function injectionView(inj) {
  const t = inj.tokens;
  const u = inj.usage || {};
  const blocks = ["persistent", "recalled"].map((name) => h("div", { class: "block", dataset: { block: name } },
    h("h3", {}, `${name} (${inj.blocks[name].length} nodes, ${num(t[name])} tokens)`),
    inj.blocks[name].length ? table([
      { label: "node", render: (c) => c.title || c.id }, { label: "type", key: "type" },
      { label: "score", render: (c) => c.score.toFixed(3) }, { label: "reason", key: "reason" },
      { label: "tokens", key: "tokens" }, { label: "floors", render: (c) => c.floors.join("–") },
    ], inj.blocks[name]) : h("p", { class: "muted" }, "none")));
  return h("div", { class: "injection" },
    h("p", {}, `query “${inj.query}” · mode ${inj.mode}${inj.reused ? " (reused for a swipe)" : ""} · ` +
      `${num(t.total)} of ${num(t.budget)} tokens (${t.tokenizer}) · LLM calls ${u.calls || 0}, ` +
      `${num((u.input_tokens || 0) + (u.output_tokens || 0))} tokens` + (inj.at ? ` · at ${inj.at}` : "") +
      (inj.as_of ? ` · memory as of ${inj.as_of.story_time || inj.as_of.asked} (floor ${inj.as_of.floor})` : "") +
      (inj.speaker ? ` · speaker ${inj.speaker}` : "")),
    inj.dropped_count ? h("p", { class: "muted" }, `${inj.dropped_count} node(s) left out for the budget`) : null,
    blocks,
    h("details", { open: true }, h("summary", {}, "As the model sees it"), h("pre", { class: "injection-text" }, inj.text || "(empty)")));
}
