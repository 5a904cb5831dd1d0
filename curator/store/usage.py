"""The cost tables: `llm_calls` (one row per model request) and `extraction_log` (one row per extraction step).
Rows go in and come out as plain tuples and dicts; `curator.llm.usage` gives them their types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curator.store.store import Store, utc_now

CallRow = tuple[str, str, int, int, float, bool, "str | None"]  # task, model, tokens in/out, latency, ok, error


def insert_calls(store: Store, chat_id: str | None, calls: Sequence[CallRow]) -> None:
    if not calls:
        return
    at = utc_now()
    with store.transaction() as conn:
        conn.executemany(
            "INSERT INTO llm_calls (chat_id, task, model, input_tokens, output_tokens, latency_ms, ok, error, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(chat_id, task, model, tokens_in, tokens_out, latency, int(ok), error, at)
             for task, model, tokens_in, tokens_out, latency, ok, error in calls])


def totals_per_task(store: Store, chat_id: str) -> list[tuple[str, int, int, int, float, int]]:
    """(task, calls, input tokens, output tokens, latency ms, failed calls) per task of the chat."""
    rows = store.conn.execute(
        "SELECT task, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(latency_ms), SUM(1 - ok) "
        "FROM llm_calls WHERE chat_id=? GROUP BY task", (chat_id,))
    return [(task, calls, tokens_in or 0, tokens_out or 0, latency or 0.0, failed or 0)
            for task, calls, tokens_in, tokens_out, latency, failed in rows]


def insert_step(store: Store, chat_id: str, floor: int, seq: int, ok: bool, reason: str | None,
                commit_id: int | None, active_types: Sequence[str], calls: int, input_tokens: int,
                output_tokens: int, latency_ms: float) -> None:
    """One extraction step, done or failed."""
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO extraction_log (chat_id, floor, seq, ok, reason, commit_id, active_types, calls, "
            "input_tokens, output_tokens, latency_ms, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (chat_id, floor, seq, int(ok), reason, commit_id, ",".join(active_types), calls, input_tokens,
             output_tokens, latency_ms, utc_now()))


def failed_steps(store: Store, chat_id: str) -> list[dict[str, Any]]:
    """The floors whose extraction failed and that no later run has extracted: one row per floor, with its latest
    reason, how many attempts failed, and the LLM calls the latest attempt made."""
    rows = store.conn.execute(
        "SELECT f.floor, f.seq, f.reason, f.at, f.calls, (SELECT COUNT(*) FROM extraction_log a WHERE "
        "a.chat_id=f.chat_id AND a.floor=f.floor AND a.ok=0) AS attempts FROM extraction_log f "
        "WHERE f.chat_id=? AND f.ok=0 AND f.id=(SELECT MAX(id) FROM extraction_log l WHERE l.chat_id=f.chat_id "
        "AND l.floor=f.floor) ORDER BY f.id", (chat_id,))
    return [dict(r) for r in rows]


def recent_steps(store: Store, chat_id: str, limit: int) -> list[dict[str, Any]]:
    """The newest extraction steps of the chat, newest first."""
    return [dict(r) for r in store.conn.execute(
        "SELECT floor, seq, ok, reason, commit_id, active_types, calls, input_tokens, output_tokens, latency_ms, at "
        "FROM extraction_log WHERE chat_id=? ORDER BY id DESC LIMIT ?", (chat_id, limit))]
