// Inbox: new facts that contradict stored ones (found by consolidation, or linked `contradicts` by extraction).
// Nothing is decided silently: both stay active until you choose. Supersede: the new fact replaces the old one
// (which keeps its span of story time); keep both; drop: the new fact was wrong. Each choice is one commit.

import { chatPath, get, post } from "./api.js";
import { clear, h, reportError, toast } from "./dom.js";

const ACTIONS = [["supersede", "New replaces old"], ["keep_both", "Keep both"], ["drop", "Drop the new one"]];

export async function render(ctx, section) {
  const { contradictions } = await get(chatPath(ctx.chat, "/contradictions"));
  const side = (label, node) => h("div", { class: "box" },
    h("h3", {}, `${label}: ${node.title}`),
    h("p", { class: "muted" }, `${node.type} · floors ${node.floors.join("–")}` +
      (node.story_time && node.story_time.label ? ` · ${node.story_time.label}` : "")),
    h("dl", {}, Object.entries(node.fields).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
  clear(section,
    h("p", { class: "muted" }, "New facts that contradict stored ones wait here; both stay in memory until you decide."),
    contradictions.length ? contradictions.map((item) => h("div", { class: "contradiction", dataset: { id: item.id } },
      h("div", { class: "split" }, side("new", item.new), side("stored", item.old)),
      h("div", { class: "row" }, ACTIONS.map(([action, label]) => h("button", {
        class: action === "drop" ? "danger" : action === "supersede" ? "primary" : "",
        dataset: { action },
        onclick: async () => {
          try {
            const done = await post(chatPath(ctx.chat, `/contradictions/${encodeURIComponent(item.id)}`), { action });
            toast(`${label}: commit #${done.commit}`);
            render(ctx, section);
          } catch (err) { reportError(err); }
        } }, label))))) : h("p", { id: "inbox-empty" }, "No open contradictions."));
}
