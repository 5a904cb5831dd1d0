"""A node's history: every commit that changed it, with the node as it was before that commit. It is read from
the commit log's undo records, so evolution and merges keep every previous text without a history column."""

from __future__ import annotations

import json
from typing import Any

from curator.store.commit_log import touching
from curator.store.store import Store


def node_history(store: Store, chat_id: str, node_id: str) -> list[dict[str, Any]]:
    """Oldest first: {commit, origin, at, anchor_floor, note, before} where `before` is the node's title and
    fields before the commit (None when the commit created it)."""
    store.chat(chat_id)
    found = []
    for commit_id, origin, at, anchor, note, undo in touching(store, chat_id, node_id):
        for kind, key, before in undo:
            if kind == "n" and key == node_id:
                found.append({"commit": commit_id, "origin": origin, "at": at, "anchor_floor": anchor, "note": note,
                              "before": None if before is None else {
                                  "title": before["title"], "fields": json.loads(before["fields_json"]),
                                  "archived": bool(before["archived"])}})
    return found
