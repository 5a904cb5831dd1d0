"""The store: chats, their messages, the commit log (source of truth) and the graph projection.

`commit` is the only write path to the graph; `rollback` undoes every commit anchored at or after a floor.
All of it happens in database transactions (SQLite, or PostgreSQL by URL: location.py), so a crash or a lost
connection at any point leaves either the old or the new state, and a commit or rollback holds its chat's write
lock (both engines honour it), so two processes never interleave one chat's commits.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from curator.store import trash
from curator.store.changes import ChangeLog
from curator.store.db import BUSY_TIMEOUT_MS, Connection, Row, connect
from curator.store.location import store_url
from curator.errors import ChatExists, ChatNotFound, CuratorError
from curator.store.messages import Message
from curator.store.queries import GraphView
from curator.store.records import (  # CommitRecord, RollbackResult, UndoResult and utc_now are imported from here
    CommitRecord as CommitRecord,
    RollbackResult as RollbackResult,
    UndoResult as UndoResult,
    bump_version as _bump_version,
    dumps as _dumps,
    parse_any as _parse,
    read_messages,
    record_of as _record,
    utc_now as utc_now,
    write_messages,
)
from curator.store.trash import Retention, TrashBatch

# The write path (ops, projection, rewind) and the schema model load when a write or a chat's schema needs them:
# a command that only reads the graph (`curator chats`) builds no pydantic model.
if TYPE_CHECKING:
    from curator.schemas import Schema

MAX_FLOOR = 2**63 - 1  # floors are 64-bit integers on both engines
ORIGINS = ("extract", "curate", "maintenance", "import", "manual", "test")


@dataclass
class Chat:
    id: str
    schema: Schema
    settings: dict[str, Any]
    created_at: str
    updated_at: str


class Store:
    """All chats under one data directory (or in the PostgreSQL database `store` names). Safe to share between
    threads: each thread reads through its own connection (so a reader never sees another thread's open
    transaction), and writes are serialized."""

    def __init__(self, data_dir: str | Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS, store: str | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.url = store_url(self.data_dir, store)  # None: the SQLite file in data_dir
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._lock = threading.RLock()
        self._sound = self.url is not None  # SQLite: a quick integrity check before this process's first write
        self.conn  # noqa: B018 - open (and migrate) now, so a bad data directory fails here
        # Called with the chat id after every commit, rollback or rebuild has landed (derived state follows).
        self.on_change: list[Callable[[str], None]] = []
        # what each write touched, so derived state can follow it incrementally (the store's copy on this connection)
        self.changes = ChangeLog(lambda: self.conn)
        self.retention = Retention()  # how long the trash keeps reverted batches (Memory sets it from the settings)

    def _changed(self, chat_id: str) -> None:
        for callback in self.on_change:
            callback(chat_id)

    def graph_version(self, chat_id: str) -> int:
        """A number that changes with every commit, rollback or rebuild of the chat's graph."""
        return int(self._chat_row(chat_id, "graph_version")["graph_version"])

    @contextmanager
    def reading(self, chat_id: str) -> Iterator[None]:
        """Read the chat's row (its versions, schema, settings) once for what runs inside, in this thread: one
        recall asks for the versions at many steps, and on a database server each ask is a round trip. Never held
        across operations: another process may commit between two of them."""
        pinned = self._local.__dict__.setdefault("pinned", {})
        if chat_id in pinned:  # nested: the outer reading holds it
            yield
            return
        pinned[chat_id] = self._chat_row(chat_id, "*")
        try:
            yield
        finally:
            pinned.pop(chat_id, None)

    def _chat_row(self, chat_id: str, columns: str) -> Row:
        row: Row | None = self._local.__dict__.get("pinned", {}).get(chat_id)
        if row is None:
            row = self.conn.execute(f"SELECT {columns} FROM chats WHERE id=?", (chat_id,)).fetchone()
        if row is None:
            raise ChatNotFound(f"no chat {chat_id!r} in {self.data_dir}")
        return row

    @property
    def engine(self) -> str:
        """"sqlite" or "postgresql"."""
        return "postgresql" if self.url else "sqlite"

    @property
    def conn(self) -> Connection:
        """This thread's connection (opened on first use; reopened after the server dropped it)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.broken:
            with self._lock:
                self._connections.remove(conn)
            conn.close()
            conn = None
        if conn is None:
            conn = connect(self.data_dir, self._busy_timeout_ms, self.url)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self, chat_id: str | None = None) -> Iterator[Connection]:
        """One write transaction: everything inside lands together or not at all. With `chat_id`, it holds that
        chat's write lock from its start, across processes (SQLite: the file's write lock; PostgreSQL: an
        advisory lock), so commits and rollbacks of one chat never interleave."""
        with self._lock:
            conn = self.conn
            if not self._sound:
                from curator.store.integrity import require_sound

                require_sound(conn, conn.where)
                self._sound = True
            conn.begin()
            try:
                if chat_id is not None:
                    conn.lock_chat(chat_id)
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.rollback_quietly()
                raise

    # ---- chats --------------------------------------------------------------------------------
    def create_chat(self, chat_id: str, schema: Schema, settings: dict[str, Any] | None = None) -> Chat:
        _check_chat_id(chat_id)
        now = utc_now()
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM chats WHERE id=?", (chat_id,)).fetchone():
                raise ChatExists(f"chat {chat_id!r} already exists")
            conn.execute(
                "INSERT INTO chats (id, schema_name, schema_json, settings_json, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (chat_id, schema.name, _schema_json(schema), json.dumps(settings or {}), now, now),
            )
        return self.chat(chat_id)

    def chat(self, chat_id: str) -> Chat:
        row = self._chat_row(chat_id, "*")
        return Chat(row["id"], _schema_from_json(row["schema_json"]), json.loads(row["settings_json"]),
                    row["created_at"], row["updated_at"])

    def schema_outline(self, chat_id: str) -> tuple[str, list[str]]:
        """A chat's schema name and its node types in order, read without validating the schema (a display needs no
        more, and the schema models cost a one-shot command ~0.05 s of CPU to import)."""
        data = json.loads(self._chat_row(chat_id, "schema_json")["schema_json"])
        return str(data["name"]), list(data["types"])

    def has_chat(self, chat_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM chats WHERE id=?", (chat_id,)).fetchone() is not None

    def chats(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT id FROM chats ORDER BY id")]

    def set_settings(self, chat_id: str, settings: dict[str, Any]) -> None:
        """Replace a chat's own settings (its overrides of the data directory's)."""
        with self.transaction(chat_id) as conn:
            conn.execute("UPDATE chats SET settings_json=?, updated_at=? WHERE id=?",
                         (_dumps(settings), utc_now(), chat_id))

    def change_settings(self, chat_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Read a chat's own settings, pass them to `change` and store what it returns, in one transaction (two
        changes never lose one another). `change` raising leaves them as they were."""
        with self.transaction(chat_id) as conn:
            row = conn.execute("SELECT settings_json FROM chats WHERE id=?", (chat_id,)).fetchone()
            if row is None:
                raise ChatNotFound(f"no chat {chat_id!r}")
            settings = change(json.loads(row[0]))
            conn.execute("UPDATE chats SET settings_json=?, updated_at=? WHERE id=?",
                         (_dumps(settings), utc_now(), chat_id))
        return settings

    def set_schema(self, chat_id: str, schema: Schema) -> None:
        """Replace a chat's schema. Only allowed while the chat has no nodes, so no node breaks its type."""
        with self.transaction() as conn:
            self.chat(chat_id)
            if conn.execute("SELECT 1 FROM nodes WHERE chat_id=? LIMIT 1", (chat_id,)).fetchone():
                raise CuratorError(f"chat {chat_id!r} already has memory; its schema cannot be swapped",
                                   "Export the chat, then import it into a new chat with the new schema.")
            conn.execute("UPDATE chats SET schema_name=?, schema_json=?, updated_at=? WHERE id=?",
                         (schema.name, _schema_json(schema), utc_now(), chat_id))

    def change_schema(self, chat_id: str, schema: Schema) -> None:
        """Change the schema of a chat that has memory, when every node stays valid: each node's type is kept, and
        still has each field the node uses and no new required field the node lacks. Settings (cadence,
        always-inject, caps, compression) may change freely. Bumps the graph version (recall caches)."""
        with self.transaction() as conn:
            self.chat(chat_id)
            problems = self._schema_problems(chat_id, schema)
            if problems:
                raise CuratorError(
                    f"the schema would break {len(problems)} existing node(s): " + "; ".join(problems[:5]),
                    "Keep the types and fields your nodes use (or delete those nodes first).",
                )
            conn.execute("UPDATE chats SET schema_name=?, schema_json=?, updated_at=?, "
                         "graph_version = graph_version + 1 WHERE id=?",
                         (schema.name, _schema_json(schema), utc_now(), chat_id))

    def _schema_problems(self, chat_id: str, schema: Schema) -> list[str]:
        problems: list[str] = []
        for node_id, type_, fields_json in self.conn.execute(
                "SELECT id, type, fields_json FROM nodes WHERE chat_id=? ORDER BY id", (chat_id,)):
            spec = schema.type(type_)
            if spec is None:
                problems.append(f"{node_id} has type {type_!r}, which the schema drops")
                continue
            fields = {k for k, v in json.loads(fields_json).items() if v not in (None, "")}
            unknown = sorted(fields - set(spec.field_names))
            missing = sorted(set(spec.required_fields) - fields)
            if unknown:
                problems.append(f"{node_id} ({type_}) uses dropped field(s) {', '.join(unknown)}")
            if missing:
                problems.append(f"{node_id} ({type_}) lacks new required field(s) {', '.join(missing)}")
        return problems

    def delete_chat(self, chat_id: str) -> None:
        with self.transaction(chat_id) as conn:
            self.chat(chat_id)
            for table, column in (("chats", "id"), ("messages", "chat_id"), ("commits", "chat_id"),
                                  ("nodes", "chat_id"), ("node_names", "chat_id"), ("edges", "chat_id"),
                                  ("llm_calls", "chat_id"), ("extraction_log", "chat_id"),
                                  ("vector_state", "chat_id"), ("vector_hashes", "chat_id"),
                                  ("message_vectors", "chat_id"), ("vector_pending", "chat_id"),
                                  ("chat_bindings", "chat_id"), ("chat_forks", "chat_id"), ("recall_cards", "chat_id"),
                                  ("trash", "chat_id"), ("graph_changes", "chat_id"), ("message_changes", "chat_id"),
                                  ("lexicon", "chat_id")):
                conn.execute(f"DELETE FROM {table} WHERE {column}=?", (chat_id,))
            self.changes.evict(chat_id)

    # ---- messages -----------------------------------------------------------------------------
    def set_messages(self, chat_id: str, messages: Sequence[Message]) -> None:
        """Store the chat's messages as given (floor = position), replacing what was stored."""
        self.set_messages_from(chat_id, 0, messages)

    def set_messages_from(self, chat_id: str, floor: int, messages: Sequence[Message]) -> None:
        """Replace the floors from `floor` on with `messages` (floors below stay as stored): a sync of a long chat
        writes only what changed."""
        with self.transaction(chat_id) as conn:
            self.chat(chat_id)
            self.changes.messages_changed(chat_id, write_messages(conn, chat_id, floor, messages), floor, conn=conn)

    def stamp(self, chat_id: str) -> tuple[tuple[int, str], int, int]:
        """(epoch, graph version, messages version) in one read: what caches of the chat are keyed on. The epoch
        pairs this process's deletion count with the chat's creation time, so a chat deleted and created again by
        another process (its versions start over) never matches what was cached of the old one."""
        row = self._chat_row(chat_id, "created_at, graph_version, messages_version")
        return (self.changes.epoch(chat_id), row["created_at"]), row["graph_version"], row["messages_version"]

    def messages_version(self, chat_id: str) -> int:
        """A number that changes with every write of the chat's messages."""
        return int(self._chat_row(chat_id, "messages_version")["messages_version"])

    def messages(self, chat_id: str) -> list[Message]:
        return read_messages(self.conn, chat_id)

    # ---- the commit log -----------------------------------------------------------------------
    def commit(self, chat_id: str, ops: Iterable[Any], anchor_floor: int, origin: str,
               note: str = "", at: str | None = None) -> CommitRecord:
        """Validate and apply `ops` as one commit anchored at `anchor_floor`; all or nothing."""
        if origin not in ORIGINS:
            raise CuratorError(f"unknown commit origin {origin!r}; one of: {', '.join(ORIGINS)}")
        if anchor_floor < 0:
            raise CuratorError(f"anchor floor must be >= 0, got {anchor_floor}")
        from curator.store.ops import dump_ops
        from curator.store.projection import Applier

        parsed = _parse(list(ops))
        at = at or utc_now()
        with self.transaction(chat_id) as conn:
            schema = self.chat(chat_id).schema
            applier = Applier(conn, chat_id, schema, anchor_floor, at)
            done = dump_ops(applier.apply(parsed))
            commit_id = conn.execute(
                "INSERT INTO commits (chat_id, anchor_floor, origin, at, ops_json, undo_json, note) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (chat_id, anchor_floor, origin, at, _dumps(done), _dumps(applier.undo_record()), note),
            ).fetchone()[0]
            self.changes.graph_changed(chat_id, _bump_version(conn, chat_id), applier.touched_nodes,
                                       applier.touched_edges, conn=conn)
            record = CommitRecord(commit_id, chat_id, anchor_floor, origin, at, done, note)
        self._changed(chat_id)
        return record

    def commits(self, chat_id: str, since_floor: int | None = None) -> list[CommitRecord]:
        sql = "SELECT * FROM commits WHERE chat_id=?" + (" AND anchor_floor >= ?" if since_floor is not None else "")
        params = (chat_id,) if since_floor is None else (chat_id, since_floor)
        return [_record(r) for r in self.conn.execute(sql + " ORDER BY id", params)]

    def rollback(self, chat_id: str, floor: int, *, reason: str = "rollback", detail: str = "",
                 messages: Sequence[Message] | None = None) -> RollbackResult:
        """Revert every commit anchored at a floor >= `floor`, newest first, in one transaction.

        Commits anchored below `floor` that were made after the earliest reverted one are replayed on top,
        so the graph ends exactly as if only the commits anchored below `floor` had ever been applied. What was
        reverted is kept in the trash (`result.batch`; `undo` puts it back), with `reason` and `detail`. With
        `messages`, the chat's floors from `floor` on are replaced by them in the same transaction (a sync), and
        the old ones are kept in the batch too.
        """
        from curator.store import rewind

        check_floor(floor)
        with self.transaction(chat_id) as conn:
            schema = self.chat(chat_id).schema
            result, touched = rewind.rollback(conn, chat_id, schema, floor, reason=reason, detail=detail,
                                              keep_floors=messages is not None, retention=self.retention,
                                              at=utc_now())
            if touched is not None:
                self.changes.graph_changed(chat_id, _bump_version(conn, chat_id), touched.touched_nodes,
                                           touched.touched_edges, conn=conn)
            if messages is not None:
                self.changes.messages_changed(chat_id, write_messages(conn, chat_id, floor, messages), floor,
                                              conn=conn)
        if touched is not None:
            self._changed(chat_id)
        return result

    def undo(self, chat_id: str, batch_id: int) -> UndoResult:
        """Put a trash batch back exactly (rewind.py): its commits in the log and the graph, and the floors it
        kept in the chat. What the undo displaces (the commits made since) becomes a batch of its own."""
        if isinstance(batch_id, bool) or not isinstance(batch_id, int):
            raise CuratorError(f"batch id {batch_id!r} is not an integer")
        from curator.store import rewind

        with self.transaction(chat_id) as conn:
            schema = self.chat(chat_id).schema
            result, touched, floors = rewind.undo(conn, chat_id, schema, batch_id, retention=self.retention,
                                                  at=utc_now())
            self.changes.graph_changed(chat_id, _bump_version(conn, chat_id), touched.touched_nodes,
                                       touched.touched_edges, conn=conn)
            if floors is not None:
                self.changes.messages_changed(chat_id, write_messages(conn, chat_id, result.floor, floors),
                                              result.floor, conn=conn)
        self._changed(chat_id)
        return result

    def trash(self, chat_id: str) -> list[TrashBatch]:
        """The chat's reverted batches, newest first (`undo` restores one)."""
        self.chat(chat_id)
        return trash.batches(self.conn, chat_id)

    def trash_batch(self, chat_id: str, batch_id: int) -> tuple[TrashBatch, list[dict[str, Any]], list[Message] | None]:
        """A batch with its commits (oldest first) and the floors it keeps (None: it keeps none)."""
        self.chat(chat_id)
        found, commits, floors, _, _ = trash.contents(self.conn, chat_id, batch_id)
        return found, commits, floors

    def purge_trash(self, chat_id: str, batch_ids: list[int] | None = None,
                    older_than_days: float | None = None) -> int:
        """Drop reverted batches for good (those named, those older than a number of days, or all); returns how
        many. Nothing else removes them but the retention (`retention`)."""
        with self.transaction(chat_id) as conn:
            self.chat(chat_id)
            return trash.purge(conn, chat_id, batch_ids, older_than_days)

    def rebuild_projection(self, chat_id: str, check: bool = True) -> int:
        """Throw the graph tables away and replay the whole commit log; returns the commits replayed. `check=False`:
        also on a file whose integrity check fails (the repair, curator/store/integrity.py)."""
        from curator.store.projection import Applier

        if not check:
            self._sound = True
        with self.transaction(chat_id) as conn:
            schema = self.chat(chat_id).schema
            for table in ("nodes", "node_names", "edges"):
                conn.execute(f"DELETE FROM {table} WHERE chat_id=?", (chat_id,))
            rows = conn.execute("SELECT * FROM commits WHERE chat_id=? ORDER BY id", (chat_id,)).fetchall()
            for row in rows:
                applier = Applier(conn, chat_id, schema, row["anchor_floor"], row["at"])
                applier.apply(_parse(json.loads(row["ops_json"])))
                conn.execute("UPDATE commits SET undo_json=? WHERE id=?", (_dumps(applier.undo_record()), row["id"]))
            _bump_version(conn, chat_id)
        self._changed(chat_id)
        return len(rows)

    def clear_graph(self, chat_id: str, *, reason: str = "rebuild", detail: str = "",
                    messages: Sequence[Message] | None = None) -> int:
        """Forget the chat's whole commit log and graph (a full rebuild starts from here); returns the commits
        removed. They go to the trash (`undo` brings them back). Messages and settings stay, unless `messages` is
        given: then they replace the chat's floors in the same transaction (the old ones are kept in the batch)."""
        from curator.store import rewind

        with self.transaction(chat_id) as conn:
            self.chat(chat_id)
            removed, _batch = rewind.clear(conn, chat_id, reason=reason, detail=detail,
                                           keep_floors=messages is not None, retention=self.retention, at=utc_now())
            _bump_version(conn, chat_id)
            if messages is not None:
                self.changes.messages_changed(chat_id, write_messages(conn, chat_id, 0, messages), 0, conn=conn)
        self._changed(chat_id)
        return removed

    # ---- reads --------------------------------------------------------------------------------
    def graph(self, chat_id: str) -> GraphView:
        """Read-only queries over one chat's graph."""
        self._chat_row(chat_id, "id")  # the chat must exist (its schema is not needed: not parsed)
        return GraphView(self.conn, chat_id)


def check_floor(floor: object) -> None:
    """A floor to roll back to: an integer (not a bool, not text) from 0 to MAX_FLOOR."""
    if isinstance(floor, bool) or not isinstance(floor, int):
        raise CuratorError(f"cannot roll back to floor {floor!r}: a floor is a whole number",
                           "Give the floor as an integer, e.g. 7 (not true, not \"7\").")
    if floor > MAX_FLOOR:
        raise CuratorError(f"cannot roll back to floor {floor}: floors go up to {MAX_FLOOR}")
    if floor < 0:
        raise CuratorError(f"cannot roll back to floor {floor}: floors start at 0",
                           "Floor 0 reverts every commit of the chat; a later floor keeps what came before it.")


def _schema_json(schema: Schema) -> str:
    return json.dumps(schema.to_data(), ensure_ascii=False, sort_keys=True)


@lru_cache(maxsize=64)
def _schema_from_json(text: str) -> Schema:
    # Parsing a schema is the costliest part of a small commit; the stored JSON text is a perfect cache key.
    from curator.schemas import schema_from_data

    return schema_from_data(json.loads(text), "stored chat schema")


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def _check_chat_id(chat_id: str) -> None:
    """A new chat's id must be addressable everywhere: in a URL path (no "/", which a path cannot carry even
    encoded; not "." or ".."), and as itself (no "%XX" sequence, which a client that forgets to encode would send as
    another id; no U+FFFD, which every invalid %-sequence decodes to)."""
    if not chat_id or len(chat_id) > 200 or any(ord(c) < 32 for c in chat_id) or chat_id != chat_id.strip():
        raise CuratorError(f"invalid chat id {chat_id!r}: use 1-200 printable characters without outer spaces")
    if "/" in chat_id or chat_id in (".", "..") or "\ufffd" in chat_id or _PERCENT.search(chat_id):
        raise CuratorError(f"invalid chat id {chat_id!r}: it could not be addressed in a URL",
                           "Leave out \"/\", \"%\" followed by two hex digits and U+FFFD (what a broken %-sequence "
                           "decodes to), and do not use \".\" or \"..\" alone.")
