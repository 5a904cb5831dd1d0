"""Forking a chat at a floor: a new chat whose messages are the parent's up to that floor and whose memory is the
parent's memory of those floors, as a copied commit log. The parent is not touched.

The fork's commit log is the parent's commits anchored at or below the floor, copied (new ids, same order, same
ops), and its graph is the parent's graph as a rollback to the next floor would leave it: the projection rows are
copied, the commits from the first one anchored above the floor are reverted on the copy (newest first, from their
undo records), and the lower-anchored commits made after them are replayed on top (dropped when they built on
what was reverted), exactly as `Store.rollback` does. So a fork is equal, commit for commit and row for row, to the
parent rolled back to `floor + 1`, without the parent moving. Everything happens in one transaction.

A copied log, not copy-on-write: each chat stays self-contained (its own rollback, export, delete and migration
need nothing from another chat), and the copy is cheap next to the graph rows a fork must own anyway
(`docs/sillytavern.md` gives the measured figures of both).

Copied along: the swipe shelf and the message vectors of the shared floors (so swiping back, and recall's event
sources, cost nothing in the fork), and the recall cards of the shared replies. Not copied: LLM usage and the
extraction log (the fork spent nothing), jobs, and the vector index's own bookkeeping (the index embeds the fork's
nodes on first use).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from curator.errors import ChatExists, ChatNotFound, CuratorError, OpError
from curator.schemas import Schema
from curator.store.db import Connection
from curator.store.graph import EDGE_COLUMNS, NODE_COLUMNS
from curator.store.ops import parse_ops
from curator.store.projection import Applier
from curator.store.store import Store, _check_chat_id, utc_now

_MESSAGE_COLUMNS = ("floor", "role", "name", "text", "swipe_id", "swipes_json", "hash", "sent_at")
_COMMIT_COLUMNS = ("anchor_floor", "origin", "at", "ops_json", "undo_json", "note")
# (table, columns besides chat_id, which floor column limits it to the shared floors, or None)
_COPIED = (("nodes", NODE_COLUMNS, None), ("node_names", ("name", "node_id"), None), ("edges", EDGE_COLUMNS, None),
           ("messages", _MESSAGE_COLUMNS, "floor"),
           ("swipe_shelf", ("floor", "text_key", "commits_json", "at"), "floor"),
           ("message_vectors", ("floor", "hash", "vector"), "floor"),
           ("recall_cards", ("floor", "card_json", "at"), "floor"))


@dataclass
class ForkResult:
    """What a fork made: the new chat, its parent and the last floor they share, and its commit log."""

    chat_id: str
    parent_id: str
    floor: int  # the last floor the fork shares with its parent (-1: none; the fork starts empty)
    commits: int = 0  # commits in the fork's log
    copied: int = 0  # of those, copied as they were (made before any commit anchored above the floor)
    replayed: int = 0  # ... replayed on the reverted copy (made after one anchored above the floor)
    reverted: int = 0  # the parent's commits anchored above the floor, undone on the copy
    dropped: list[int] = field(default_factory=list)  # the parent's low-anchored commits that no longer applied
    messages: int = 0
    nodes: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "seconds": round(self.seconds, 4)}


def fork_chat(store: Store, parent_id: str, chat_id: str, floor: int) -> ForkResult:
    """Make `chat_id` a fork of `parent_id` sharing floors 0..`floor` (see the module docstring)."""
    _check_chat_id(chat_id)
    if not isinstance(floor, int) or isinstance(floor, bool) or floor < -1:
        raise CuratorError(f"cannot fork at floor {floor!r}: give the last floor to share (0 or more, or -1 for "
                           "none)")
    began = time.perf_counter()
    result = ForkResult(chat_id, parent_id, floor)
    with store.transaction(parent_id) as conn:
        conn.lock_chat(chat_id)
        parent = conn.execute("SELECT * FROM chats WHERE id=?", (parent_id,)).fetchone()
        if parent is None:
            raise ChatNotFound(f"no chat {parent_id!r} to fork in {store.data_dir}")
        if conn.execute("SELECT 1 FROM chats WHERE id=?", (chat_id,)).fetchone():
            raise ChatExists(f"chat {chat_id!r} already exists", "Fork into a new chat id.")
        now = utc_now()
        conn.execute("INSERT INTO chats (id, schema_name, schema_json, settings_json, created_at, updated_at, "
                     "graph_version, messages_version) VALUES (?, ?, ?, ?, ?, ?, 1, 1)",
                     (chat_id, parent["schema_name"], parent["schema_json"], parent["settings_json"], now, now))
        for table, columns, floor_column in _COPIED:
            if floor_column is None and floor < 0:
                continue  # nothing shared: no graph either
            cols = ", ".join(columns)
            where = f" AND {floor_column} <= ?" if floor_column else ""
            conn.execute(f"INSERT INTO {table} (chat_id, {cols}) SELECT ?, {cols} FROM {table} WHERE chat_id=?{where}",
                         (chat_id, parent_id, *((floor,) if floor_column else ())))
        if floor >= 0:
            _copy_log(conn, store.chat(parent_id).schema, parent_id, chat_id, floor, result)
        result.commits = conn.execute("SELECT COUNT(*) FROM commits WHERE chat_id=?", (chat_id,)).fetchone()[0]
        result.messages = conn.execute("SELECT COUNT(*) FROM messages WHERE chat_id=?", (chat_id,)).fetchone()[0]
        result.nodes = conn.execute("SELECT COUNT(*) FROM nodes WHERE chat_id=?", (chat_id,)).fetchone()[0]
        conn.execute("INSERT INTO chat_forks (chat_id, parent_id, floor, commits, at) VALUES (?, ?, ?, ?, ?)",
                     (chat_id, parent_id, floor, result.commits, now))
    store.changes.graph_changed(chat_id, 1, everything=True)
    store._changed(chat_id)  # derived state (the vector index) follows, as after any commit
    result.seconds = time.perf_counter() - began
    return result


def _copy_log(conn: Connection, schema: Schema, parent_id: str, chat_id: str, floor: int,
              result: ForkResult) -> None:
    """The parent's commit log as a rollback to `floor + 1` leaves it, written as the fork's (module docstring)."""
    cols = ", ".join(_COMMIT_COLUMNS)
    first = conn.execute("SELECT MIN(id) FROM commits WHERE chat_id=? AND anchor_floor > ?",
                         (parent_id, floor)).fetchone()[0]
    bound = "" if first is None else " AND id < ?"
    # ORDER BY id: the copies take new ids in the parent's order (both engines number an INSERT ... SELECT's rows
    # in the order the SELECT gives them)
    result.copied = conn.execute(
        f"INSERT INTO commits (chat_id, {cols}) SELECT ?, {cols} FROM commits WHERE chat_id=?{bound} ORDER BY id",
        (chat_id, parent_id, *(() if first is None else (first,)))).rowcount
    if first is None:
        return
    suffix = conn.execute(f"SELECT id, {cols} FROM commits WHERE chat_id=? AND id >= ? ORDER BY id DESC",
                          (parent_id, first)).fetchall()
    for row in suffix:  # newest first: the copied graph goes back to where it stood before `first`
        Applier(conn, chat_id, schema, row["anchor_floor"], row["at"]).restore(json.loads(row["undo_json"]))
    for row in reversed(suffix):
        if row["anchor_floor"] > floor:
            result.reverted += 1
            continue
        conn.execute("SAVEPOINT fork_replay")
        applier = Applier(conn, chat_id, schema, row["anchor_floor"], row["at"])
        try:
            applier.apply(parse_ops(json.loads(row["ops_json"])))
        except OpError:  # it built on what was reverted: as a rollback does, it is left out
            conn.execute("ROLLBACK TO fork_replay")
            conn.execute("RELEASE fork_replay")
            result.dropped.append(row["id"])
            continue
        conn.execute("RELEASE fork_replay")
        conn.execute(f"INSERT INTO commits (chat_id, {cols}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (chat_id, row["anchor_floor"], row["origin"], row["at"], row["ops_json"],
                      json.dumps(applier.undo_record(), ensure_ascii=False, separators=(",", ":")), row["note"]))
        result.replayed += 1


def fork_of(store: Store, chat_id: str) -> dict[str, Any] | None:
    """Where a chat was forked from: {parent, floor, commits, at}, or None."""
    row = store.conn.execute("SELECT parent_id, floor, commits, at FROM chat_forks WHERE chat_id=?",
                             (chat_id,)).fetchone()
    return None if row is None else {"parent": row[0], "floor": row[1], "commits": row[2], "at": row[3]}


def shared_floors(stored: list[int], incoming: list[int]) -> int:
    """How many leading floors two chats share, by their floor hashes."""
    count = 0
    for old, new in zip(stored, incoming):
        if old != new:
            break
        count += 1
    return count
