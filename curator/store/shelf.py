"""The swipe shelf: commits rolled back because the newest reply was swiped (or regenerated, or deleted to be
regenerated) are kept per (chat, floor, reply text). Swiping back to that text puts them back with no model call.

Shelved commits are only valid on top of the same history below their floor, so any change below a floor
drops the shelf entries at and after it. The table is derived, disposable state: losing it costs model calls,
never correctness.
"""

from __future__ import annotations

import json
from typing import Any

from curator.store.db import Connection
from curator.errors import CuratorError, OpError
from curator.store.messages import Message, floor_hash
from curator.store.store import CommitRecord, Store, utc_now


def text_key(message: Message) -> int:
    """What identifies a reply on the shelf: its role, name and text (not the swipe index, which shifts when a
    swipe is deleted)."""
    return floor_hash(message.role, message.name, message.text, 0)


class Shelf:
    """The swipe shelf of every chat in one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, chat_id: str, floor: int, message: Message, commits: list[CommitRecord]) -> None:
        """Keep `commits` (as reverted, newest first) for the reply `message` at `floor`."""
        if not commits:
            return
        data = [{"anchor_floor": c.anchor_floor, "origin": c.origin, "note": c.note, "ops": c.ops}
                for c in reversed(commits)]  # oldest first: the order they are replayed in
        with self.store.transaction(chat_id) as conn:
            conn.execute("INSERT INTO swipe_shelf (chat_id, floor, text_key, commits_json, at) VALUES (?, ?, ?, ?, ?) "
                         "ON CONFLICT (chat_id, floor, text_key) DO UPDATE SET commits_json = excluded.commits_json, "
                         "at = excluded.at",
                         (chat_id, floor, text_key(message), json.dumps(data, ensure_ascii=False), utc_now()))

    def take(self, chat_id: str, floor: int, message: Message) -> list[dict[str, Any]] | None:
        """The shelved commits for this reply at this floor (removed from the shelf), or None."""
        with self.store.transaction(chat_id) as conn:
            row = conn.execute("SELECT commits_json FROM swipe_shelf WHERE chat_id=? AND floor=? AND text_key=?",
                               (chat_id, floor, text_key(message))).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM swipe_shelf WHERE chat_id=? AND floor=? AND text_key=?",
                         (chat_id, floor, text_key(message)))
        shelved: list[dict[str, Any]] = json.loads(row[0])
        return shelved

    def restore(self, chat_id: str, floor: int, message: Message) -> list[CommitRecord] | None:
        """Commit the shelved commits again. If one no longer applies (history below moved on), undo what was
        restored and return None: the floor is then extracted again like any other."""
        shelved = self.take(chat_id, floor, message)
        if not shelved:
            return None
        restored: list[CommitRecord] = []
        try:
            for c in shelved:
                restored.append(self.store.commit(chat_id, c["ops"], c["anchor_floor"], c["origin"],
                                                  note=(c["note"] + " (restored from the swipe shelf)").strip()))
        except (OpError, CuratorError):
            if restored:
                self.store.rollback(chat_id, floor, reason="swipe shelf",
                                    detail=f"a shelved reply of floor {floor} no longer applied")
            return None
        return restored

    def drop(self, chat_id: str, from_floor: int, keep_floor: int | None = None) -> int:
        """Forget the entries at or after `from_floor` (except those at `keep_floor`); returns how many."""
        with self.store.transaction(chat_id) as conn:
            cursor = conn.execute("DELETE FROM swipe_shelf WHERE chat_id=? AND floor >= ? AND floor IS DISTINCT FROM ?",
                                  (chat_id, from_floor, keep_floor))
        return cursor.rowcount

    def entries(self, chat_id: str) -> list[tuple[int, int, int]]:
        """(floor, text key, commits) of each entry, for reports and tests."""
        rows = self.store.conn.execute(
            "SELECT floor, text_key, commits_json FROM swipe_shelf WHERE chat_id=? ORDER BY floor", (chat_id,))
        return [(r[0], r[1], len(json.loads(r[2]))) for r in rows]


def delete_chat_rows(conn: Connection, chat_id: str) -> None:
    conn.execute("DELETE FROM swipe_shelf WHERE chat_id=?", (chat_id,))
