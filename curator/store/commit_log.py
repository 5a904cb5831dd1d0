"""Reads of the commit log beyond `Store.commits`: the processed-floor pointers, the newest commits of an origin,
the commits whose undo records name a node. The log is the source of truth, so these are never stale: a rollback
moves them back by itself."""

from __future__ import annotations

import json
from typing import Any

from curator.store.db import Row
from curator.store.store import Store


def last_anchor(store: Store, chat_id: str, origin: str | None = None) -> int | None:
    """The newest floor a commit (of `origin`) is anchored at, or None when there is none."""
    where, params = (" AND origin=?", (chat_id, origin)) if origin else ("", (chat_id,))
    floor: int | None = store.conn.execute(f"SELECT MAX(anchor_floor) FROM commits WHERE chat_id=?{where}",
                                           params).fetchone()[0]
    return floor


def last_floor(store: Store, chat_id: str) -> int | None:
    """The chat's last message floor, or None without messages."""
    floor: int | None = store.conn.execute("SELECT MAX(floor) FROM messages WHERE chat_id=?", (chat_id,)).fetchone()[0]
    return floor


def newest_ops(store: Store, chat_id: str, origin: str, limit: int, note_prefix: str | None = None) -> list[list[Any]]:
    """The ops of the newest `limit` commits of `origin` (whose note starts with `note_prefix`), newest first."""
    where, params = (" AND note LIKE ?", (chat_id, origin, note_prefix + "%", limit)) if note_prefix is not None \
        else ("", (chat_id, origin, limit))
    rows = store.conn.execute(f"SELECT ops_json FROM commits WHERE chat_id=? AND origin=?{where} ORDER BY id DESC "
                              "LIMIT ?", params)
    return [json.loads(r[0]) for r in rows]


def newest_ops_and_notes(store: Store, chat_id: str, origin: str, note_prefix: str,
                         upto: int | None = None) -> list[tuple[int, str]]:
    """(anchor floor, note) of the commits of `origin` whose note starts with `note_prefix` (anchored at `upto` or
    before), newest first."""
    where, params = (" AND anchor_floor <= ?", (chat_id, origin, note_prefix + "%", upto)) if upto is not None \
        else ("", (chat_id, origin, note_prefix + "%"))
    rows = store.conn.execute(f"SELECT anchor_floor, note FROM commits WHERE chat_id=? AND origin=? AND note LIKE ?"
                              f"{where} ORDER BY id DESC LIMIT 20", params)
    return [(r[0], r[1]) for r in rows]


def anchored_between(
    store: Store, chat_id: str, origin: str, after: int, upto: int
) -> list[tuple[int, str, list[Any]]]:
    """(anchor floor, note, ops) of the commits of `origin` anchored in (after, upto], by floor then id."""
    rows = store.conn.execute("SELECT anchor_floor, note, ops_json FROM commits WHERE chat_id=? AND origin=? AND "
                              "anchor_floor > ? AND anchor_floor <= ? ORDER BY anchor_floor, id",
                              (chat_id, origin, after, upto))
    return [(floor, note, json.loads(ops)) for floor, note, ops in rows]


def touching(store: Store, chat_id: str, node_id: str) -> list[tuple[int, str, str, int, str, list[Any]]]:
    """(id, origin, at, anchor floor, note, undo records) of the commits whose undo records may name the node
    (a text match: the caller checks each record), oldest first."""
    rows = store.conn.execute(
        "SELECT id, origin, at, anchor_floor, note, undo_json FROM commits WHERE chat_id=? AND undo_json LIKE ? "
        "ORDER BY id", (chat_id, f"%{json.dumps(node_id)}%"))
    return [(*r[:5], json.loads(r[5])) for r in rows]


def floor_stamp(store: Store, chat_id: str, floor: int) -> tuple[int, int]:
    """(newest id, count) of the commits anchored at `floor` or before: what the memory up to that floor is made
    of. Commits anchored later (the reply after it, its maintenance) leave it unchanged."""
    row = store.conn.execute("SELECT MAX(id), COUNT(*) FROM commits WHERE chat_id=? AND anchor_floor <= ?",
                             (chat_id, floor)).fetchone()
    return (row[0] or 0, row[1])


def newest_commit(store: Store, chat_id: str) -> Row | None:
    """id, anchor_floor, origin and at of the chat's newest commit."""
    row: Row | None = store.conn.execute("SELECT id, anchor_floor, origin, at FROM commits WHERE chat_id=? "
                                         "ORDER BY id DESC LIMIT 1", (chat_id,)).fetchone()
    return row


def count_from(store: Store, chat_id: str, floor: int) -> int:
    """How many commits are anchored at or after `floor` (what a rollback of that floor would revert)."""
    return int(store.conn.execute("SELECT COUNT(*) FROM commits WHERE chat_id=? AND anchor_floor >= ?",
                                  (chat_id, floor)).fetchone()[0])
