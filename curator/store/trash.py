"""The trash of the commit log: what a rollback took away, kept so that an undo can put it back exactly.

A batch holds the commit log's rows from the first commit the rollback reverted on, as they were (the reverted
commits, and the lower-anchored ones made after them, which the rollback replayed or dropped), and, when the
rollback also replaced the chat's floors (a sync, the proxy, an ingest), those floors as they were. It records why
(`reason`: rollback, sync, proxy, ingest, rebuild, undo, swipe shelf) and when.

A batch rests on what lay below it: the commits before its first one and the floors before its floor. Both are
fingerprinted when it is made; an undo whose base has changed since (another rollback reached below it) is refused,
because it could not be exact, and names the batch to undo first. `rewind.py` makes and restores batches; this
module is their table. Batches older than the retention (`history.keep_days`) or beyond the newest
`history.keep_batches` of a chat are dropped when a new one is kept; `purge` drops them on request.
"""

from __future__ import annotations

from typing import Any

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from curator.store.dbtypes import Connection, Row
from curator.errors import NotFound
from curator.store.messages import Message

REASONS = ("rollback", "sync", "proxy", "ingest", "rebuild", "undo", "swipe shelf")
KEEP_DAYS = 30.0  # defaults of `history.keep_days` and `history.keep_batches` (curator.settings)
KEEP_BATCHES = 200
TITLES = 5  # titles of created nodes named in a batch's summary


@dataclass
class TrashBatch:
    id: int
    chat_id: str
    floor: int
    first_commit: int
    reason: str
    detail: str
    at: str
    summary: dict[str, Any]
    undoes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "floor": self.floor, "reason": self.reason, "detail": self.detail, "at": self.at,
                **self.summary, "undoes": self.undoes}


@dataclass(frozen=True)
class Retention:
    """How long batches are kept: at most `days` old and the newest `batches` of each chat (0: no such limit)."""

    days: float = KEEP_DAYS
    batches: int = KEEP_BATCHES


def commits_below(conn: Connection, chat_id: str, first: int) -> str:
    """A fingerprint of the commit ids before `first` (ids are never reused; a commit's ops never change)."""
    ids = [str(r[0]) for r in conn.execute("SELECT id FROM commits WHERE chat_id=? AND id < ? ORDER BY id",
                                           (chat_id, first))]
    return f"{len(ids)}:{_digest(ids)}"


def floors_print(conn: Connection, chat_id: str, floor: int | None, rows: list[Any]) -> str:
    """A fingerprint of the floors a batch rests on, as `cover|digest`: the floors before `floor` when the batch
    keeps the floors from there on; else (the floors stay in the chat) those its commits were made from, up to
    its highest anchor (or the chat's end). Floors appended later do not count."""
    if floor is None:
        count = conn.execute("SELECT COUNT(*) FROM messages WHERE chat_id=?", (chat_id,)).fetchone()[0]
        floor = min(max((r["anchor_floor"] for r in rows), default=-1) + 1, count)
    return f"{floor}|{_floors_digest(conn, chat_id, floor)}"


def floors_unchanged(conn: Connection, chat_id: str, printed: str) -> bool:
    cover, _, digest = printed.partition("|")
    return _floors_digest(conn, chat_id, int(cover)) == digest


def _floors_digest(conn: Connection, chat_id: str, floor: int) -> str:
    hashes = [str(r[0]) for r in conn.execute("SELECT hash FROM messages WHERE chat_id=? AND floor < ? ORDER BY floor",
                                              (chat_id, floor))]
    return f"{len(hashes)}:{_digest(hashes)}"


def _digest(items: list[str]) -> str:
    import hashlib  # here, not at import: loading OpenSSL costs `curator show`, which needs no digest, about 3 ms

    return hashlib.sha1(",".join(items).encode()).hexdigest()[:16]


def _summary(rows: list[dict[str, Any]], floor: int, messages: list[Message] | None) -> dict[str, Any]:
    origins: dict[str, int] = {}
    titles: list[str] = []
    ops = 0
    for row in rows:
        if row["anchor_floor"] < floor:
            continue
        origins[row["origin"]] = origins.get(row["origin"], 0) + 1
        ops += len(row["ops"])
        titles += [_title(op) for op in row["ops"] if op.get("op") in ("create_node", "compact")][:TITLES - len(titles)]
    return {"commits": len(rows), "reverted": sum(origins.values()), "ops": ops, "origins": origins,
            "titles": titles, "floors": None if messages is None else len(messages)}


def _title(op: dict[str, Any]) -> str:
    fields = op.get("fields") or {}
    return str(op.get("title") or fields.get("name") or fields.get("title") or next(iter(fields.values()), "")
               or op.get("id", ""))[:80]


def keep(conn: Connection, chat_id: str, *, floor: int, first: int, rows: list[Any], messages: list[Message] | None,
         reason: str, detail: str, at: str, below_commits: str, below_messages: str, undoes: int | None = None) -> int:
    """Put a batch in the trash (inside the caller's transaction); returns its id. `rows`: the commit log's rows
    from `first` on as they were, oldest first."""
    commits = [{"id": r["id"], "anchor_floor": r["anchor_floor"], "origin": r["origin"], "at": r["at"],
                "ops": json.loads(r["ops_json"]), "note": r["note"]} for r in rows]
    kept = None if messages is None else [_message_data(m) for m in messages]
    return int(conn.execute(
        "INSERT INTO trash (chat_id, floor, first_commit, reason, detail, at, commits_json, messages_json, "
        "summary_json, below_commits, below_messages, undoes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (chat_id, floor, first, reason, detail, at, _dumps(commits), None if kept is None else _dumps(kept),
         _dumps(_summary(commits, floor, messages)), below_commits, below_messages, undoes),
    ).fetchone()[0])


def batches(conn: Connection, chat_id: str) -> list[TrashBatch]:
    """The chat's batches, newest first (without their contents)."""
    rows = conn.execute("SELECT id, chat_id, floor, first_commit, reason, detail, at, summary_json, undoes FROM trash "
                        "WHERE chat_id=? ORDER BY id DESC", (chat_id,))
    return [_batch(r) for r in rows]


def batch(conn: Connection, chat_id: str, batch_id: int) -> TrashBatch:
    row = conn.execute("SELECT id, chat_id, floor, first_commit, reason, detail, at, summary_json, undoes FROM trash "
                       "WHERE chat_id=? AND id=?", (chat_id, batch_id)).fetchone()
    if row is None:
        raise NotFound(f"no reverted batch #{batch_id} in chat {chat_id!r}",
                       f"List them with `curator history --chat {chat_id}` (or GET /api/v1/chats/{{id}}/trash).")
    return _batch(row)


def contents(conn: Connection, chat_id: str,
             batch_id: int) -> tuple[TrashBatch, list[dict[str, Any]], list[Message] | None, str, str]:
    """A batch with what it keeps: (batch, commit rows oldest first, floors or None, and its two fingerprints)."""
    found = batch(conn, chat_id, batch_id)
    row = conn.execute("SELECT commits_json, messages_json, below_commits, below_messages FROM trash WHERE id=?",
                       (batch_id,)).fetchone()
    messages = None if row["messages_json"] is None else [_message(m) for m in json.loads(row["messages_json"])]
    return found, json.loads(row["commits_json"]), messages, row["below_commits"], row["below_messages"]


def drop(conn: Connection, batch_id: int) -> None:
    conn.execute("DELETE FROM trash WHERE id=?", (batch_id,))


def newer_below(conn: Connection, chat_id: str, found: TrashBatch) -> list[int]:
    """Batches made after `found` that reached below it (an earlier first commit or floor): undoing them first
    gives `found` its base back."""
    return [r[0] for r in conn.execute("SELECT id FROM trash WHERE chat_id=? AND id > ? AND (first_commit < ? OR "
                                       "floor < ?) ORDER BY id DESC", (chat_id, found.id, found.first_commit,
                                                                       found.floor))]


def prune(conn: Connection, chat_id: str, retention: Retention, now: datetime | None = None) -> int:
    """Drop the chat's batches beyond the retention; returns how many."""
    dropped = 0
    if retention.days > 0:
        cutoff = ((now or datetime.now(UTC)) - timedelta(days=retention.days)).isoformat(timespec="microseconds")
        dropped += conn.execute("DELETE FROM trash WHERE chat_id=? AND at < ?", (chat_id, cutoff)).rowcount
    if retention.batches > 0:
        edge = conn.execute("SELECT id FROM trash WHERE chat_id=? ORDER BY id DESC LIMIT 1 OFFSET ?",
                            (chat_id, retention.batches - 1)).fetchone()
        if edge is not None:
            dropped += conn.execute("DELETE FROM trash WHERE chat_id=? AND id < ?", (chat_id, edge[0])).rowcount
    return dropped


def purge(conn: Connection, chat_id: str, batch_ids: list[int] | None = None,
          older_than_days: float | None = None) -> int:
    """Drop batches for good: the ones named, those older than `older_than_days`, or (neither given) all of the
    chat's. Returns how many."""
    if batch_ids is not None:
        for batch_id in batch_ids:
            batch(conn, chat_id, batch_id)  # NotFound for an id that is not there
        return sum(conn.execute("DELETE FROM trash WHERE chat_id=? AND id=?", (chat_id, b)).rowcount for b in batch_ids)
    if older_than_days is not None:
        return prune(conn, chat_id, Retention(days=older_than_days, batches=0))
    return conn.execute("DELETE FROM trash WHERE chat_id=?", (chat_id,)).rowcount


def _batch(row: Row) -> TrashBatch:
    return TrashBatch(row["id"], row["chat_id"], row["floor"], row["first_commit"], row["reason"], row["detail"],
                      row["at"], json.loads(row["summary_json"]), row["undoes"])


def _message_data(m: Message) -> dict[str, Any]:
    return {"role": m.role, "name": m.name, "text": m.text, "swipe_id": m.swipe_id, "swipes": m.swipes,
            "sent_at": m.sent_at}


def _message(data: dict[str, Any]) -> Message:
    return Message(data["role"], data["name"], data["text"], data["swipe_id"], list(data["swipes"]), data["sent_at"])


def _dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
