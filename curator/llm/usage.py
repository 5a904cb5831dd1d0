"""Where costs are kept: one row per LLM call, per-chat totals, and the failed extraction steps (the extractor writes
its steps). The rows live in the store (`curator/store/usage.py`); here they get their types."""

from __future__ import annotations

from typing import Any

from curator.llm.records import CallRecord, Usage
from curator.store import usage as rows
from curator.store.store import Store


def log_calls(store: Store, chat_id: str | None, records: list[CallRecord]) -> None:
    rows.insert_calls(store, chat_id, [(r.task, r.model, r.input_tokens, r.output_tokens, r.latency_ms, r.ok,
                                        r.error) for r in records])


def usage_totals(store: Store, chat_id: str) -> dict[str, dict[str, Any]]:
    """LLM usage of a chat, per task and in all."""
    totals = {task: Usage(calls, tokens_in, tokens_out, latency, failed)
              for task, calls, tokens_in, tokens_out, latency, failed in rows.totals_per_task(store, chat_id)}
    overall = Usage()
    for usage in totals.values():
        overall.merge(usage)
    return {"total": overall.to_dict(), **{task: u.to_dict() for task, u in sorted(totals.items())}}


def extraction_failures(store: Store, chat_id: str) -> list[dict[str, Any]]:
    """The floors whose extraction failed and that no later run has extracted: one row per floor, with its latest
    reason, how many attempts failed, and the LLM calls the latest attempt made (a step can fail with every call
    answered, e.g. output that stayed invalid, so failed steps and failed calls are counted apart)."""
    return rows.failed_steps(store, chat_id)
