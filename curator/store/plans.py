"""The plot planner's plans in the commit log (`curator/maintenance/planner.py` writes them, recall reads them).

A plan is a commit without ops whose note is `plot plan: {"beats": [...], "seq": N}`, anchored at the reply it
follows, so rollbacks and swipes take it away with that reply's memory."""

from __future__ import annotations

import json
from typing import Any

from curator.store.commit_log import newest_ops_and_notes
from curator.store.store import Store

NOTE = "plot plan: "


def latest_plan(store: Store, chat_id: str, upto: int | None = None) -> dict[str, Any] | None:
    """The newest plan (anchored at `upto` or before): {beats, floor, seq}, or None."""
    for floor, note in newest_ops_and_notes(store, chat_id, "maintenance", NOTE, upto):
        try:
            data = json.loads(note.removeprefix(NOTE))
        except json.JSONDecodeError:
            continue
        return {"beats": [b for b in data.get("beats", []) if isinstance(b, str)], "floor": floor,
                "seq": data.get("seq")}
    return None
