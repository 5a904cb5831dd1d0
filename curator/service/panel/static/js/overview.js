// Overview: counts and fragmentation, chat / vector / history status, recent extractions and recalls with cost.

import { chatPath, get } from "./api.js";
import { card, clear, h, num, pct, table } from "./dom.js";
import { trashTable } from "./trash.js";

export async function render(ctx, section) {
  if (!ctx.chat) return;
  const [o, planned, health] = await Promise.all([get(chatPath(ctx.chat, "/overview")),
    get(chatPath(ctx.chat, "/plan")).catch(() => ({ plan: null, settings: {} })), get("/health").catch(() => null)]);
  const extraction = health && health.extraction;
  const s = o.stats;
  const v = o.vectors;
  const usage = o.usage.total || {};
  clear(section,
    extraction && extraction.warning ? h("div", { class: `box banner ${extraction.ok ? "warn" : "error"}`, id: "extraction-warning", role: "alert" },
      h("strong", {}, extraction.ok ? "Note: " : "Extraction will fail: "), extraction.warning) : null,
    h("h2", {}, `Chat ${o.chat.id}`),
    h("div", { class: "cards" },
      card(num(s.nodes_active), "active nodes"), card(num(s.edges), "edges"), card(num(s.nodes_archived), "archived"),
      card(pct(s.fragmentation), `fragmentation (${num(s.isolated)} nodes linked to nothing)`),
      card(num(s.commits), "commits"), card(num(o.chat.floors), "floors"),
      card(num(usage.calls), "LLM calls"), card(num((usage.input_tokens || 0) + (usage.output_tokens || 0)), "tokens")),
    h("div", { class: "split" },
      h("div", { class: "box" }, h("h2", {}, "Status"),
        h("dl", { class: "fields" },
          h("dt", {}, "chat"), h("dd", {}, `schema ${o.chat.schema}; ${o.chat.types.length} types; graph version ${o.chat.graph_version}; extraction channel ${o.chat.settings.channel || "builtin"}`),
          o.chat.created_by === "proxy" ? h("dt", {}, "created") : null,
          o.chat.created_by === "proxy" ? h("dd", { class: "notice", id: "overview-created" },
            `by the proxy at ${o.chat.created_at}: a request named this chat id and there was no such chat yet (a misspelt id makes a new chat)`) : null,
          h("dt", {}, "vectors"), h("dd", { class: v.ok && !v.stale_profile ? "" : "error" },
            v.ok ? `${num(v.indexed)} of ${num(v.nodes)} nodes indexed (profile ${v.profile || "none yet"}${v.stale_profile ? `, stale: current is ${v.current_profile}` : ""})`
              : `unavailable: ${v.error}`),
          h("dt", {}, "history"), h("dd", { class: o.history.failed_steps ? "error" : "" },
            `${num(o.history.floors)} floors; extracted to floor ${o.history.extracted_to ?? "—"}` +
            (o.history.due.length ? ` (${o.history.due.length} step(s) due, from floor ${o.history.due[0]})` : "") + "; " +
            `${o.history.failed_steps} failed step(s); last commit ` +
            (o.history.last_commit ? `#${o.history.last_commit.id} at floor ${o.history.last_commit.anchor_floor} (${o.history.last_commit.origin})` : "none")),
          h("dt", {}, "jobs"), h("dd", {}, o.jobs.length ? o.jobs.map((j) => `${j.kind} ${j.state}`).join(", ") : "none"))),
      h("div", { class: "box" }, h("h2", {}, "Nodes per type"),
        table([{ label: "type", key: "type" }, { label: "active", key: "active" }, { label: "archived", key: "archived" }],
          Object.entries(s.by_type).map(([type, c]) => ({ type, ...c }))))),
    planned.plan ? h("div", { class: "box", id: "overview-plan" },
      h("h2", {}, `Plot plan (after floor ${planned.plan.floor}${planned.settings.inject ? ", injected after the memory" : ", shown only"})`),
      h("ol", {}, planned.plan.beats.map((b) => h("li", {}, b)))) : null,
    h("div", { class: "box", id: "overview-reverted" }, h("h2", {}, "Recently reverted (restore in one click)"),
      trashTable(ctx, o.reverted || [], () => render(ctx, section))),
    h("h2", {}, "LLM usage per task"),
    Object.keys(o.usage).length > 1 ? table([
      { label: "task", key: "task" }, { label: "calls", key: "calls" }, { label: "failed", key: "failed_calls" },
      { label: "tokens in", render: (r) => num(r.input_tokens) }, { label: "tokens out", render: (r) => num(r.output_tokens) },
      { label: "latency ms", render: (r) => num(Math.round(r.latency_ms)) },
    ], Object.entries(o.usage).map(([task, u]) => ({ task, ...u }))) : h("p", { class: "muted" }, "No LLM call yet."),
    h("h2", {}, "Recent extractions"),
    o.recent_extractions.length ? table([
      { label: "floor", key: "floor" }, { label: "ok", render: (r) => (r.ok ? "yes" : `no: ${r.reason}`) },
      { label: "commit", key: "commit_id" }, { label: "types", key: "active_types" }, { label: "LLM calls", key: "calls" },
      { label: "tokens in/out", render: (r) => `${num(r.input_tokens)} / ${num(r.output_tokens)}` },
      { label: "ms", render: (r) => Math.round(r.latency_ms) }, { label: "at", key: "at" },
    ], o.recent_extractions) : h("p", { class: "muted" }, "No extraction yet."),
    h("h2", {}, "Recent recalls (since the service started)"),
    o.recent_recalls.length ? table([
      { label: "query", key: "query" }, { label: "mode", key: "mode" }, { label: "nodes", key: "nodes" },
      { label: "tokens", key: "tokens" }, { label: "reused", render: (r) => (r.reused ? "yes" : "") },
      { label: "LLM calls", render: (r) => r.usage.calls || 0 },
      { label: "LLM tokens", render: (r) => num((r.usage.input_tokens || 0) + (r.usage.output_tokens || 0)) },
      { label: "at", key: "at" },
    ], o.recent_recalls) : h("p", { class: "muted" }, "No recall yet."));
}
