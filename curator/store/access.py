"""Access counts: how often recall brought each node back, and when last (forgetting weighs them). Not part of
the commit log: a count is a fact about reading, not a change to memory."""

from __future__ import annotations

from curator.store.store import Store


def add_access(store: Store, touched: dict[tuple[str, str], tuple[int, str]]) -> None:
    """(chat, node) -> (recalls to add, time of the last): one transaction for all."""
    with store.transaction() as conn:
        conn.executemany("UPDATE nodes SET access_count = access_count + ?, last_access=? WHERE chat_id=? AND id=?",
                         [(count, last, chat, node) for (chat, node), (count, last) in touched.items()])
