// Operations: extract now, rebuild, rebuild vectors, the maintenance passes (curate, compact, consolidate,
// summarize, forget with a dry run) where this service offers them, import / export, rollback to a floor, the
// commit history and the jobs. Long operations run as jobs and show their progress.

import { chatPath, enc, get, post, servicePaths, waitJob } from "./api.js";
import { clear, download, h, jobProgress, reportError, table, toast } from "./dom.js";
import { trashTable } from "./trash.js";

// Maintenance passes: [label, id, path under the chat, the API path it needs, takes a dry run]. Offered when the
// service has the endpoint.
const MAINTAIN = "/maintenance/{op}";
const PASSES = [
  ["Curate", "curate", "/curate", "/curate", true],
  ["Compact", "compact", "/maintenance/compact", MAINTAIN, false],
  ["Consolidate", "consolidate", "/maintenance/consolidate", MAINTAIN, false],
  ["Summarize", "summarize", "/maintenance/summarize", MAINTAIN, false],
  ["Reflect", "reflect", "/maintenance/reflect", MAINTAIN, false],
  ["Plan next beats", "plan", "/maintenance/plan", MAINTAIN, false],
  ["Forget", "forget", "/maintenance/forget", MAINTAIN, true],
];

export async function render(ctx, section) {
  const jobsBox = h("div", { id: "ops-jobs" });
  const progress = h("div", { id: "ops-progress" });
  const history = h("div", { id: "ops-history" });
  const trashBox = h("div", { id: "ops-trash" });
  const paths = await servicePaths().catch(() => new Set());
  const chat = ctx.chat;
  const has = (rest) => paths.has(`/api/v1/chats/{chat_id}${rest}`);
  const runJob = async (label, path, body) => {
    try {
      const answer = await post(chatPath(chat, path), body);
      if (answer && answer.id && answer.state) { // a job: follow it
        const [bar, update] = jobProgress();
        progress.prepend(bar);
        const job = await waitJob(answer, update);
        // a dry run's report (what would be archived, ...) is the job's result: show it under its bar
        if (job.result) bar.after(h("details", { class: "job-result", open: Boolean(body && body.dry_run) }, h("summary", {}, `${label} result`),
          h("pre", {}, JSON.stringify(job.result, null, 2))));
        toast(`${label}: ${job.state}${job.error ? ` — ${job.error}` : ""}`, job.state === "done" ? "info" : "error");
      } else {
        progress.prepend(h("pre", {}, `${label}: ${JSON.stringify(answer, null, 2)}`));
      }
      await Promise.all([showJobs(chat, jobsBox), showHistory(ctx, history, runJob)]);
    } catch (err) { reportError(err); }
  };
  const full = h("input", { type: "checkbox", id: "vectors-full" });
  const passButtons = PASSES.map(([label, id, path, needs, dry]) => {
    const offered = has(needs);
    const dryRun = dry ? h("input", { type: "checkbox", checked: true, id: `${id}-dry` }) : null;
    return h("span", { class: "row" },
      h("button", { id: `op-${id}`, disabled: !offered || !chat,
        title: offered ? "" : "This service version does not offer it yet.",
        onclick: () => runJob(label, path, dry ? { dry_run: dryRun.checked } : {}) }, label),
      dryRun && h("label", {}, dryRun, " dry run"));
  });
  const importFile = h("input", { type: "file", accept: ".json,application/json", id: "import-file" });
  const importChat = h("input", { id: "import-chat", placeholder: "into chat (new id)", value: chat ? `${chat}-copy` : "" });
  const importMode = h("select", { id: "import-mode" }, ["restore", "bind_latest", "bind_floor"].map((m) => h("option", { value: m }, m)));
  const importFloor = h("input", { type: "number", min: 0, placeholder: "floor", style: "width:6em" });
  const floor = h("input", { type: "number", min: 0, id: "rollback-floor", placeholder: "floor", style: "width:7em" });

  clear(section,
    chat ? h("div", { class: "box" }, h("h2", {}, "Memory"),
      h("div", { class: "row" },
        h("button", { class: "primary", id: "op-extract", onclick: () => runJob("Extract", "/extract") }, "Extract now"),
        h("button", { id: "op-rebuild", onclick: () => confirm(`Clear all memory of ${chat} and extract every floor again?`) && runJob("Rebuild", "/rebuild") }, "Rebuild memory"),
        h("button", { id: "op-vectors", onclick: () => runJob("Rebuild vectors", "/vectors/rebuild", { full: full.checked }) }, "Rebuild vectors"),
        h("label", {}, full, " full")),
      h("div", { class: "row" }, passButtons),
      progress) : null,
    chat ? h("div", { class: "box" }, h("h2", {}, "Roll back"),
      h("div", { class: "row" }, floor,
        h("button", { class: "danger", id: "op-rollback", onclick: () => rollback(ctx, floor.value, history, runJob) }, "Undo every commit at or after this floor"))) : null,
    h("div", { class: "box" }, h("h2", {}, "Import and export"),
      chat ? h("div", { class: "row" },
        h("button", { id: "export-graph", onclick: () => exportAs(chat, "/export", `${chat}.graph.json`) }, "Export graph JSON"),
        h("button", { id: "export-wi", onclick: () => exportAs(chat, "/worldinfo", `${chat}.worldinfo.json`) }, "Export World Info")) : null,
      h("div", { class: "row" }, importFile, importChat, importMode, importFloor,
        h("button", { id: "import-run", onclick: () => importGraph(importFile, importChat.value, importMode.value, importFloor.value) }, "Import graph"))),
    chat ? h("div", { class: "box" }, h("h2", {}, "Jobs"), jobsBox) : null,
    chat ? h("div", { class: "box" }, h("h2", {}, "Reverted (the trash: every rollback can be undone)"), trashBox) : null,
    chat ? h("div", { class: "box" }, h("h2", {}, "History (commits, newest first)"), history) : null);
  if (chat) await Promise.all([showJobs(chat, jobsBox), showHistory(ctx, history, runJob)]);
}

async function exportAs(chat, path, name) {
  try { download(name, await get(chatPath(chat, path))); } catch (err) { reportError(err); }
}

async function importGraph(fileInput, target, mode, floor) {
  const file = fileInput.files[0];
  if (!file || !target.trim()) { reportError(new Error("Choose a graph file and the chat to import into.")); return; }
  try {
    const graph = JSON.parse(await file.text());
    const body = { graph, mode, ...(mode === "bind_floor" ? { floor: Number(floor) } : {}) };
    const result = await post(chatPath(target.trim(), "/import"), body);
    toast(`Imported ${result.ops} ops into ${target} (commit #${result.commit}); pick it with the chat selector after Reload.`);
  } catch (err) { reportError(err); }
}

async function rollback(ctx, floor, history, runJob) {
  if (floor === "" || Number(floor) < 0) { reportError(new Error("Give the floor to roll back to.")); return; }
  if (!confirm(`Undo every commit of ${ctx.chat} anchored at floor ${floor} or later?`)) return;
  try {
    const result = await post(chatPath(ctx.chat, "/rollback"), { floor: Number(floor) });
    toast(`Rolled back ${result.reverted.length} commit(s)` + (result.batch ? ` — kept as batch #${result.batch}: Restore brings it back` : ""));
    await showHistory(ctx, history, runJob);
  } catch (err) { reportError(err); }
}

async function showJobs(chat, box) {
  const { jobs } = await get(`/jobs?chat=${enc(chat)}&limit=10`);
  clear(box, jobs.length ? table([
    { label: "kind", key: "kind" }, { label: "state", key: "state" },
    { label: "progress", render: (j) => `${j.progress.done}${j.progress.total ? "/" + j.progress.total : ""}` },
    { label: "message", render: (j) => j.error || j.message || "" }, { label: "updated", key: "updated_at" },
    { label: "", render: (j) => (["queued", "running"].includes(j.state)
      ? h("button", { onclick: async () => { await post(`/jobs/${enc(j.id)}/cancel`).catch(reportError); showJobs(chat, box); } }, "Cancel") : "") },
  ], jobs) : h("p", { class: "muted" }, "No jobs yet."));
}

async function showHistory(ctx, box, runJob) {
  const trashBox = document.getElementById("ops-trash");
  if (trashBox) {
    const { batches } = await get(chatPath(ctx.chat, "/trash"));
    clear(trashBox, trashTable(ctx, batches, () => showHistory(ctx, box, runJob)));
  }
  const { commits } = await get(chatPath(ctx.chat, "/commits"));
  const newest = commits.slice(-200).reverse();
  clear(box, newest.length ? table([
    { label: "#", key: "id" }, { label: "floor", key: "anchor_floor" }, { label: "origin", key: "origin" },
    { label: "ops", key: "ops" }, { label: "note", key: "note" }, { label: "at", key: "at" },
    { label: "", render: (c) => h("button", { class: "danger", title: "Undo this commit and every later one at or after its floor",
      onclick: () => rollback(ctx, String(c.anchor_floor), box, runJob) }, `Undo from floor ${c.anchor_floor}`) },
  ], newest) : h("p", { class: "muted" }, "No commits yet."));
}
