"""A scratch copy of one chat's graph: its graph tables in a private in-memory SQLite database, where writes are
applied (checked by the same code as a commit) without touching the store. The memory_curator agent stages its
run there (`tools/workspace.py`), and simulated extractions too; the store changes only when a run commits its ops.
`rewind` turns a copy into the memory as it was at an earlier floor (recall at a point in story time)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from curator.schemas import Schema

from curator.errors import OpError
from curator.store.db import Connection, DB_FILENAME, TranslatingConnection, migrate
from curator.store.ops import AnyOp, dump_ops, parse_ops
from curator.store.projection import Applier
from curator.store.store import Store, utc_now

GRAPH_TABLES = ("nodes", "node_names", "edges")


def copy_graph(store: Store, chat_id: str) -> Connection:
    """A fresh in-memory database holding the chat's graph tables (one statement per table)."""
    conn = sqlite3.connect("file::memory:", uri=True, isolation_level=None, check_same_thread=False,
                           factory=TranslatingConnection)
    conn.path = ":memory: (curator workspace)"  # named in error messages
    conn.row_factory = sqlite3.Row
    if store.engine != "sqlite":
        _copy_from_server(conn, store, chat_id)
        return conn
    ddl = store.conn.execute(
        f"SELECT type, sql FROM sqlite_master WHERE tbl_name IN ({', '.join('?' * len(GRAPH_TABLES))}) "
        "AND sql IS NOT NULL", GRAPH_TABLES).fetchall()
    for kind, sql in ddl:
        if kind == "table":
            conn.execute(sql)
    _attach(conn, store)
    try:
        conn.execute("BEGIN")
        for table in GRAPH_TABLES:
            conn.execute(f"INSERT INTO main.{table} SELECT * FROM source.{table} WHERE chat_id=?", (chat_id,))
        conn.execute("COMMIT")
    finally:
        conn.execute("DETACH DATABASE source")
    for kind, sql in ddl:  # indexes after the copy: building them once is cheaper than growing them row by row
        if kind == "index":
            conn.execute(sql)
    return conn


def apply_ops(conn: Connection, chat_id: str, schema: Schema, anchor: int,
              ops: list[AnyOp]) -> list[dict[str, Any]]:
    """Apply parsed ops to the copy, all or nothing (the copy is as it was when one fails); the ops as applied,
    with ids filled in."""
    conn.execute("SAVEPOINT stage")
    try:
        done = dump_ops(Applier(conn, chat_id, schema, anchor, utc_now()).apply(ops))
    except BaseException:
        conn.execute("ROLLBACK TO stage")
        conn.execute("RELEASE stage")
        raise
    conn.execute("RELEASE stage")
    return done


def rewind(conn: Connection, store: Store, chat_id: str, schema: Schema, floor: int) -> int:
    """Turn a copy (of the chat's graph now) into the graph a rollback to `floor` would leave: the commits
    anchored at `floor` or later reverted, those anchored before it that came after them replayed. Nothing of the
    store changes. Returns how many commits were reverted."""
    first = store.conn.execute("SELECT MIN(id) FROM commits WHERE chat_id=? AND anchor_floor >= ?",
                               (chat_id, floor)).fetchone()[0]
    if first is None:
        return 0
    suffix = store.conn.execute("SELECT id, anchor_floor, at, ops_json, undo_json FROM commits WHERE chat_id=? AND "
                                "id >= ? ORDER BY id DESC", (chat_id, first)).fetchall()
    conn.execute("BEGIN")
    try:
        for row in suffix:
            Applier(conn, chat_id, schema, row[1], row[2]).restore(json.loads(row[4]))
        for row in reversed(suffix):
            if row[1] < floor:
                conn.execute("SAVEPOINT replay")
                try:
                    Applier(conn, chat_id, schema, row[1], row[2]).apply(parse_ops(json.loads(row[3])))
                    conn.execute("RELEASE replay")
                except OpError:  # as the store's own rollback does: a commit that no longer applies is left out
                    conn.execute("ROLLBACK TO replay")
                    conn.execute("RELEASE replay")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return sum(1 for row in suffix if row[1] >= floor)


def _copy_from_server(conn: Connection, store: Store, chat_id: str) -> None:
    """The copy of a chat whose store is on a database server: the store's tables (its own migrations, run on the
    in-memory database), then the chat's graph rows read over the store's connection."""
    migrate(conn)
    conn.execute("BEGIN")
    for table in GRAPH_TABLES:
        rows = store.conn.execute(f"SELECT * FROM {table} WHERE chat_id=?", (chat_id,)).fetchall()
        if rows:
            columns = list(rows[0].keys())
            conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                             [tuple(r) for r in rows])
    conn.execute("COMMIT")


def _attach(conn: Connection, store: Store) -> None:
    # Read-only URI attach: the copy can never write to the real store.
    path = (store.data_dir / DB_FILENAME).resolve()
    conn.execute("ATTACH DATABASE ? AS source", (f"file:{path.as_posix()}?mode=ro",))
