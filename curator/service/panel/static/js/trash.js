// The trash of the commit log: what rollbacks, syncs, proxy edits and rebuilds reverted, each restorable in one
// click (POST /chats/{id}/undo). Shown on the Overview (the newest) and under Operations (all of them).

import { chatPath, post } from "./api.js";
import { h, reportError, table, toast } from "./dom.js";

function why(b) { return b.reason + (b.detail ? ` (${b.detail})` : ""); }

function what(b) {
  const titles = b.titles.length ? `: ${b.titles.join(", ")}${b.reverted > b.titles.length ? " …" : ""}` : "";
  return `${b.reverted} commit(s)` + (b.floors !== null ? `, ${b.floors} floor(s)` : "") + titles;
}

export async function restore(ctx, batch, after) {
  if (!confirm(`Restore batch #${batch.id} (${why(batch)}) of ${ctx.chat}? Memory and floors go back to how they were ` +
    "before it; what was committed since is kept as a batch of its own.")) return;
  try {
    const result = await post(chatPath(ctx.chat, "/undo"), { batch: batch.id });
    toast(`Restored batch #${result.batch}: ${result.restored.length} commit(s)` +
      (result.messages !== null ? `, ${result.messages} floor(s)` : "") +
      (result.displaced_batch ? `; what it displaced is batch #${result.displaced_batch}` : ""));
    if (after) await after();
  } catch (err) { reportError(err); }
}

/** A table of reverted batches, each with its Restore button. */
export function trashTable(ctx, batches, after) {
  if (!batches.length) return h("p", { class: "muted" }, "Nothing reverted yet: rollbacks, syncs, proxy edits and rebuilds keep what they revert here.");
  return table([
    { label: "#", key: "id" }, { label: "at", render: (b) => b.at.slice(0, 19).replace("T", " ") },
    { label: "why", render: why }, { label: "from floor", key: "floor" }, { label: "what", render: what },
    { label: "", render: (b) => h("button", { class: "restore", dataset: { batch: String(b.id) },
      title: "Put this back exactly: memory and floors as before it", onclick: () => restore(ctx, b, after) }, "Restore") },
  ], batches, (b) => ({ dataset: { batch: String(b.id) } }));
}
