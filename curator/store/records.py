"""What the commit log's readers and writers share: its records, the results of a rollback and of an undo, and the
small helpers every write uses (parsing ops, the stored JSON form, the chat's graph version, a floor's row)."""

from __future__ import annotations

from typing import Any

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from curator.store.dbtypes import Connection, Row
from curator.errors import OpError
from curator.store.messages import Message


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass
class CommitRecord:
    """One entry of the commit log."""

    id: int
    chat_id: str
    anchor_floor: int
    origin: str
    at: str
    ops: list[dict[str, Any]]
    note: str = ""


@dataclass
class RollbackResult:
    """What a rollback did: the commits it reverted (newest first), and any lower-anchored commits that had
    been made after them and were replayed (`reapplied`) or could not be, because they built on what was
    reverted (`dropped`). `batch` is the trash batch that keeps all of it for `undo` (None: nothing reverted)."""

    chat_id: str
    floor: int
    reverted: list[CommitRecord] = field(default_factory=list)
    reapplied: list[int] = field(default_factory=list)
    dropped: list[CommitRecord] = field(default_factory=list)
    batch: int | None = None


@dataclass
class UndoResult:
    """What an undo did: the trash batch it restored (its commits are back in the log with their ids, its floors
    in the chat), and the batch that now keeps what the undo displaced (the commits made since the rollback, the
    floors that had replaced the restored ones), so the undo can be undone in turn."""

    chat_id: str
    batch: int
    floor: int
    restored: list[int] = field(default_factory=list)  # commit ids back in the log, oldest first
    messages: int | None = None  # floors put back from `floor` on (None: the batch kept no floors)
    displaced: list[int] = field(default_factory=list)  # commit ids the undo took out (now in `displaced_batch`)
    displaced_batch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def record_of(row: Row) -> CommitRecord:
    return CommitRecord(row["id"], row["chat_id"], row["anchor_floor"], row["origin"], row["at"],
                        json.loads(row["ops_json"]), row["note"])


def dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def bump_version(conn: Connection, chat_id: str) -> int:
    return int(conn.execute("UPDATE chats SET graph_version = graph_version + 1 WHERE id=? RETURNING graph_version",
                            (chat_id,)).fetchone()[0])


_OP_TAGS = {"create_node", "update_node", "archive_node", "delete_node", "link", "unlink", "compact"}


def parse_any(ops: list[Any]) -> list[Any]:
    """Ops given as dicts or as op models, parsed (OpError naming the op and the field when one is invalid)."""
    if all(hasattr(op, "op") and not isinstance(op, dict) for op in ops):
        return ops
    from pydantic import ValidationError  # here, not at import: reading the store loads no pydantic

    from curator.store.ops import parse_ops  # here too: reading the store builds no op model

    try:
        return parse_ops([op if isinstance(op, dict) else op.model_dump(exclude_unset=True) | {"op": op.op}
                          for op in ops])
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        first = loc.pop(0) if loc and isinstance(loc[0], int) else None
        index = first if isinstance(first, int) else None
        where = ".".join(str(p) for p in loc if p not in _OP_TAGS)
        raise OpError(f"{where + ': ' if where else ''}{err['msg']}", index=index) from None


def write_messages(conn: Connection, chat_id: str, floor: int, messages: Sequence[Message]) -> int:
    """Replace the chat's floors from `floor` on with `messages` inside the caller's transaction; returns the new
    messages version."""
    conn.execute("DELETE FROM messages WHERE chat_id=? AND floor >= ?", (chat_id, floor))
    conn.executemany(
        "INSERT INTO messages (chat_id, floor, role, name, text, swipe_id, swipes_json, hash, sent_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(chat_id, f, m.role, m.name, m.text, m.swipe_id,
          json.dumps(m.swipes, ensure_ascii=False) if m.swipes else None, m.hash, m.sent_at)
         for f, m in enumerate(messages, start=floor)],
    )
    return int(conn.execute("UPDATE chats SET messages_version = messages_version + 1 WHERE id=? "
                            "RETURNING messages_version", (chat_id,)).fetchone()[0])


def read_messages(conn: Connection, chat_id: str, floor: int = 0) -> list[Message]:
    """The chat's stored floors from `floor` on."""
    rows = conn.execute("SELECT * FROM messages WHERE chat_id=? AND floor >= ? ORDER BY floor", (chat_id, floor))
    return [Message(role=r["role"], name=r["name"], text=r["text"], swipe_id=r["swipe_id"],
                    swipes=json.loads(r["swipes_json"]) if r["swipes_json"] else [], sent_at=r["sent_at"])
            for r in rows]
