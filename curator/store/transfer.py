"""Copy a whole store to another engine (`curator store migrate`): a SQLite data directory into PostgreSQL, or
back. Every chat with its commit log, projection, messages, swipe shelf, trash (reverted batches), usage and
extraction logs, and the jobs, row for row (commit and log ids kept), in one transaction of the target: a failure
leaves the target as it was.

Afterwards each chat is checked on both sides: row counts per table, and digests of its commit log and of its graph
projection (every column of its nodes, names and edges, in a fixed order), which must be equal.

The vector bookkeeping (`vector_state`, `vector_hashes`, `message_vectors`, `vector_pending`) is not copied: it
describes a vector
index, which the target may not share (an embedded index lives under the data directory); the target's index
re-embeds what it needs on first use (`curator vectors rebuild` does it ahead).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from curator.errors import CuratorError
from curator.store.db import Connection
from curator.store.location import redact
from curator.store.store import Store

# Parents before children is not needed (no foreign keys), but chats first keeps the copy readable in a trace.
TABLES = ("chats", "messages", "commits", "nodes", "node_names", "edges", "swipe_shelf", "trash", "llm_calls",
          "extraction_log", "jobs", "chat_bindings", "chat_forks", "recall_cards")
PER_CHAT = {"messages": "chat_id", "commits": "chat_id", "nodes": "chat_id", "node_names": "chat_id",
            "edges": "chat_id", "swipe_shelf": "chat_id", "trash": "chat_id", "llm_calls": "chat_id",
            "extraction_log": "chat_id", "jobs": "chat_id", "chat_bindings": "chat_id", "chat_forks": "chat_id",
            "recall_cards": "chat_id"}
IDENTITY = ("commits", "trash", "llm_calls", "extraction_log")  # ids the target must go on counting from
DERIVED = ("vector_state", "vector_hashes", "message_vectors", "vector_pending", "graph_changes", "message_changes",
           "lexicon")
ORDER = {"chats": "id", "messages": "chat_id, floor", "commits": "id", "nodes": "chat_id, id",
         "node_names": "chat_id, name, node_id", "edges": "chat_id, id", "swipe_shelf": "chat_id, floor, text_key",
         "trash": "id", "llm_calls": "id", "extraction_log": "id", "jobs": "id",
         "chat_bindings": "frontend, scope, file", "chat_forks": "chat_id", "recall_cards": "chat_id, floor"}
BATCH = 1000

Progress = Callable[[str, int, int], None]  # (table, rows copied, rows in all)


class TargetNotEmpty(CuratorError):
    hint = "Pass --replace to overwrite what the target holds, or migrate into an empty database or directory."


@dataclass
class MigrationReport:
    source: str
    target: str
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    chats: dict[str, dict[str, Any]] = field(default_factory=dict)  # chat -> {counts, commit_log, graph}
    replaced: int = 0  # chats the target held before (with --replace)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "rows": self.rows, "chats": self.chats,
                "replaced": self.replaced, "verified": True}


def location(store: Store) -> str:
    """Where a store is, for messages: the data directory, or the PostgreSQL URL without its password."""
    return redact(store.url) if store.url else str(store.data_dir)


def migrate_store(source: Store, target: Store, *, replace: bool = False,
                  progress: Progress | None = None) -> MigrationReport:
    report = MigrationReport(location(source), location(target))
    if report.source == report.target:
        raise CuratorError(f"source and target are the same store ({report.source})",
                           "Name another target with --to.")
    held = target.conn.execute("SELECT COUNT(*) FROM chats").fetchone()[0]
    if held and not replace:
        raise TargetNotEmpty(f"the target {report.target} already holds {held} chat(s); nothing was copied")
    report.replaced = held
    totals = {t: source.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    with target.transaction() as out:
        if held:
            for table in (*TABLES, *DERIVED):
                out.execute(f"DELETE FROM {table}")
        for table in TABLES:
            report.rows[table] = _copy(source, out, table, totals[table], progress)
        if target.engine == "postgresql":
            for table in IDENTITY:  # explicit ids do not move an identity column's sequence on
                out.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                            f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)")
    for chat_id in source.chats():
        mine, theirs = chat_digest(source, chat_id), chat_digest(target, chat_id)
        if mine != theirs:
            raise CuratorError(f"verification failed for chat {chat_id!r}: source {mine} != target {theirs}",
                               "The target holds the copy as made; report this, and keep using the source.")
        report.chats[chat_id] = mine
    return report


def _copy(source: Store, out: Connection, table: str, total: int, progress: Progress | None) -> int:
    cursor: Any = source.conn.execute(f"SELECT * FROM {table} ORDER BY {ORDER[table]}")  # DB-API: fetchmany
    columns = [d[0] for d in cursor.description]
    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    done = 0
    while rows := cursor.fetchmany(BATCH):
        out.executemany(insert, [tuple(row) for row in rows])
        done += len(rows)
        if progress:
            progress(table, done, total)
    if progress and not done:
        progress(table, 0, 0)
    return done


def chat_digest(store: Store, chat_id: str) -> dict[str, Any]:
    """Row counts of a chat's tables, and digests of its commit log and of its graph projection."""
    counts = {t: store.conn.execute(f"SELECT COUNT(*) FROM {t} WHERE {c}=?", (chat_id,)).fetchone()[0]
              for t, c in PER_CHAT.items()}
    log = _digest(store, "SELECT id, anchor_floor, origin, at, ops_json, undo_json, note FROM commits "
                         "WHERE chat_id=? ORDER BY id", chat_id)
    graph = hashlib.sha256()
    for table in ("nodes", "node_names", "edges"):
        graph.update(_digest(store, f"SELECT * FROM {table} WHERE chat_id=? ORDER BY {ORDER[table]}",
                             chat_id).encode())
    return {"counts": counts, "commit_log": log, "graph": graph.hexdigest()[:16]}


def _digest(store: Store, sql: str, chat_id: str) -> str:
    found = hashlib.sha256()
    for row in store.conn.execute(sql, (chat_id,)):
        # the same value reads back as the same JSON from both engines (ints as ints, doubles as floats)
        found.update(json.dumps(list(row), ensure_ascii=False, separators=(",", ":")).encode())
        found.update(b"\n")
    return found.hexdigest()[:16]
