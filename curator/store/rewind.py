"""Taking a chat's commit log back, and forward again: a rollback to a floor, clearing it all (before a rebuild), and
the undo of either. Each runs inside the one transaction the Store opened (holding the chat's write lock), and
keeps what it takes away in the trash (`trash.py`), so nothing a rollback removes is lost.

The undo of a batch swaps the commit log's suffix from the batch's first commit: what is there now (the commits the
rollback replayed, and everything committed since, e.g. the re-extraction of an edited floor) is reverted and kept
as a new batch (reason `undo`), then the batch's commits are replayed with their own ids, in their order, on the
same base they were first applied to, so the graph ends exactly as it was before the rollback; the floors the
rollback replaced come back too. Undoing that new batch redoes the rollback, with what had been committed since.
"""

from __future__ import annotations

from typing import Any

import json

from curator.store.dbtypes import Connection, Row
from curator.errors import CuratorError, OpError
from curator.schemas import Schema
from curator.store import trash
from curator.store.projection import Applier
from curator.store.records import RollbackResult, UndoResult, dumps, parse_any, read_messages, record_of


def revert_from(conn: Connection, chat_id: str, schema: Schema, first: int) -> tuple[list[Any], Applier]:
    """Revert every commit with id >= `first`, newest first, and take them out of the log. Returns their rows
    (newest first) and an Applier holding what the restores touched."""
    suffix = conn.execute("SELECT * FROM commits WHERE chat_id=? AND id >= ? ORDER BY id DESC",
                          (chat_id, first)).fetchall()
    touched = Applier(conn, chat_id, schema, 0, "")
    for row in suffix:
        applier = Applier(conn, chat_id, schema, row["anchor_floor"], row["at"])
        applier.restore(json.loads(row["undo_json"]))
        _merge(touched, applier)
    conn.execute("DELETE FROM commits WHERE chat_id=? AND id >= ?", (chat_id, first))
    return suffix, touched


def replay(conn: Connection, chat_id: str, schema: Schema, commit: dict[str, Any], touched: Applier) -> None:
    """Apply a commit again, under its own id (a savepoint: on OpError nothing of it stays, and it is raised)."""
    conn.execute("SAVEPOINT replay")
    applier = Applier(conn, chat_id, schema, commit["anchor_floor"], commit["at"])
    try:
        applier.apply(parse_any(commit["ops"]))
    except OpError:
        conn.execute("ROLLBACK TO replay")
        conn.execute("RELEASE replay")
        _merge(touched, applier)  # what it wrote is gone again; marking it touched is harmless
        raise
    conn.execute("RELEASE replay")
    _merge(touched, applier)
    conn.execute("INSERT INTO commits (id, chat_id, anchor_floor, origin, at, ops_json, undo_json, note) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (commit["id"], chat_id, commit["anchor_floor"], commit["origin"], commit["at"],
                  dumps(commit["ops"]), dumps(applier.undo_record()), commit["note"]))


def rollback(conn: Connection, chat_id: str, schema: Schema, floor: int, *, reason: str, detail: str, keep_floors: bool,
             retention: trash.Retention, at: str) -> tuple[RollbackResult, Applier | None]:
    """Revert every commit anchored at or after `floor`; commits anchored lower that were made after the first
    reverted one are replayed on top (or dropped when they built on what was reverted). All of it goes to the
    trash as one batch, with the floors from `floor` on when `keep_floors` (the caller replaces them)."""
    result = RollbackResult(chat_id, floor)
    first = conn.execute("SELECT MIN(id) FROM commits WHERE chat_id=? AND anchor_floor >= ?",
                         (chat_id, floor)).fetchone()[0]
    if first is None:
        return result, None
    below_commits = trash.commits_below(conn, chat_id, first)
    floors = read_messages(conn, chat_id, floor) if keep_floors else None
    suffix, touched = revert_from(conn, chat_id, schema, first)
    below_floors = trash.floors_print(conn, chat_id, floor if keep_floors else None, suffix)
    result.reverted = [record_of(row) for row in suffix if row["anchor_floor"] >= floor]
    for row in reversed(suffix):
        if row["anchor_floor"] < floor:
            commit = _commit(row)
            try:
                replay(conn, chat_id, schema, commit, touched)
                result.reapplied.append(row["id"])
            except OpError:
                result.dropped.append(record_of(row))
    result.batch = trash.keep(conn, chat_id, floor=floor, first=first, rows=list(reversed(suffix)), messages=floors,
                              reason=reason, detail=detail, at=at, below_commits=below_commits,
                              below_messages=below_floors)
    trash.prune(conn, chat_id, retention)
    return result, touched


def clear(conn: Connection, chat_id: str, *, reason: str, detail: str, keep_floors: bool, retention: trash.Retention,
          at: str) -> tuple[int, int | None]:
    """Take the whole commit log and graph away (before a rebuild), into the trash. The undo records are not
    needed (the graph tables are emptied), so a log whose undo records are damaged can still be cleared. Returns
    (commits removed, batch id or None)."""
    rows = conn.execute("SELECT * FROM commits WHERE chat_id=? ORDER BY id", (chat_id,)).fetchall()
    batch = None
    if rows:
        floors = read_messages(conn, chat_id, 0) if keep_floors else None
        batch = trash.keep(conn, chat_id, floor=0, first=rows[0]["id"], rows=rows, messages=floors, reason=reason,
                           detail=detail, at=at, below_commits=trash.commits_below(conn, chat_id, rows[0]["id"]),
                           below_messages=trash.floors_print(conn, chat_id, 0 if keep_floors else None, rows))
        trash.prune(conn, chat_id, retention)
    conn.execute("DELETE FROM commits WHERE chat_id=?", (chat_id,))
    for table in ("nodes", "node_names", "edges"):
        conn.execute(f"DELETE FROM {table} WHERE chat_id=?", (chat_id,))
    return len(rows), batch


def undo(conn: Connection, chat_id: str, schema: Schema, batch_id: int, *, retention: trash.Retention,
         at: str) -> tuple[UndoResult, Applier, list[Any] | None]:
    """Put a trash batch back: its commits in the log and graph, its floors in the chat (see the module
    docstring). Returns the result, what was touched, and the floors to write from the batch's floor on (None:
    the batch kept no floors). Refused when its base changed since (the undo could not be exact)."""
    found, commits, floors, below_commits, below_floors = trash.contents(conn, chat_id, batch_id)
    if (trash.commits_below(conn, chat_id, found.first_commit) != below_commits
            or not trash.floors_unchanged(conn, chat_id, below_floors)):
        newer = trash.newer_below(conn, chat_id, found)
        raise CuratorError(
            f"batch #{batch_id} cannot be restored exactly: the memory it rests on (the commits before #"
            f"{found.first_commit}) or the floors it was made from changed since it was reverted",
            f"Undo batch #{newer[0]} first (it reverted memory further back), then this one." if newer else
            "What it rested on is gone (purged or rebuilt); its commits are listed by `curator history --chat "
            f"{chat_id} --batch {batch_id} --json`.")
    current = read_messages(conn, chat_id, found.floor) if floors is not None else None
    suffix, touched = revert_from(conn, chat_id, schema, found.first_commit)
    result = UndoResult(chat_id, batch_id, found.floor, displaced=[row["id"] for row in reversed(suffix)])
    result.displaced_batch = trash.keep(
        conn, chat_id, floor=found.floor, first=found.first_commit, rows=list(reversed(suffix)), messages=current,
        reason="undo", detail=f"what the undo of #{batch_id} displaced", at=at, below_commits=below_commits,
        below_messages=trash.floors_print(conn, chat_id, found.floor if floors is not None else None, suffix),
        undoes=batch_id)
    for commit in commits:
        try:
            replay(conn, chat_id, schema, commit, touched)
        except OpError as exc:
            raise CuratorError(f"batch #{batch_id} cannot be restored: its commit #{commit['id']} no longer applies "
                               f"({exc})", "Nothing was changed. The chat's schema may have changed since; "
                               "put the old schema back, undo, then change it again.") from None
        result.restored.append(commit["id"])
    trash.drop(conn, batch_id)
    trash.prune(conn, chat_id, retention)
    result.messages = None if floors is None else len(floors)
    return result, touched, floors


def _commit(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "anchor_floor": row["anchor_floor"], "origin": row["origin"], "at": row["at"],
            "ops": json.loads(row["ops_json"]), "note": row["note"]}


def _merge(into: Applier, applier: Applier) -> None:
    into.touched_nodes |= applier.touched_nodes
    into.touched_edges |= applier.touched_edges
