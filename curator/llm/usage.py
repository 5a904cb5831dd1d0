"""Where costs are kept: one row per LLM call, per-chat totals, and the failed extraction steps (the extractor writes its steps)."""

from __future__ import annotations

from curator.llm.records import CallRecord, Usage
from curator.store.store import Store, utc_now


def log_calls(store: Store, chat_id: str | None, records: list[CallRecord]) -> None:
    if not records:
        return
    at = utc_now()
    with store.transaction() as conn:
        conn.executemany(
            "INSERT INTO llm_calls (chat_id, task, model, input_tokens, output_tokens, latency_ms, ok, error, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(chat_id, r.task, r.model, r.input_tokens, r.output_tokens, r.latency_ms, int(r.ok), r.error, at)
             for r in records])


def usage_totals(store: Store, chat_id: str) -> dict[str, dict]:
    """LLM usage of a chat, per task and in all."""
    totals: dict[str, Usage] = {}
    rows = store.conn.execute(
        "SELECT task, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(latency_ms), SUM(1 - ok) "
        "FROM llm_calls WHERE chat_id=? GROUP BY task", (chat_id,))
    for task, calls, tokens_in, tokens_out, latency, failed in rows:
        totals[task] = Usage(calls, tokens_in or 0, tokens_out or 0, latency or 0.0, failed or 0)
    overall = Usage()
    for usage in totals.values():
        overall.merge(usage)
    return {"total": overall.to_dict(), **{task: u.to_dict() for task, u in sorted(totals.items())}}


def extraction_failures(store: Store, chat_id: str) -> list[dict]:
    """The floors whose extraction failed and that no later run has extracted: one row per floor, with its latest
    reason, how many attempts failed, and the LLM calls the latest attempt made (a step can fail with every call
    answered, e.g. output that stayed invalid, so failed steps and failed calls are counted apart)."""
    rows = store.conn.execute(
        "SELECT f.floor, f.seq, f.reason, f.at, f.calls, (SELECT COUNT(*) FROM extraction_log a WHERE "
        "a.chat_id=f.chat_id AND a.floor=f.floor AND a.ok=0) AS attempts FROM extraction_log f "
        "WHERE f.chat_id=? AND f.ok=0 AND f.id=(SELECT MAX(id) FROM extraction_log l WHERE l.chat_id=f.chat_id "
        "AND l.floor=f.floor) ORDER BY f.id", (chat_id,))
    return [dict(r) for r in rows]
