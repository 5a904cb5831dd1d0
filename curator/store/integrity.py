"""The store's health, on SQLite: a quick integrity check before a process's first write (a damaged file takes no
writes, so nothing is built on it), and the repair `curator store check --repair` makes.

The graph tables (nodes, names, edges) are derived from the commit log, so damage there is repaired by rebuilding
indexes and replaying each chat's log; damage to the log or the messages is not repairable here (restore the data
directory from a backup, or import an export).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from curator.errors import StoreCorrupt
from curator.store.db import Connection


class _Repairable(Protocol):  # curator.store.store.Store (which imports this module)
    data_dir: Path

    @property
    def conn(self) -> Connection: ...

    def chats(self) -> list[str]: ...

    def rebuild_projection(self, chat_id: str, check: bool = True) -> int: ...

REPAIR_HINT = ("No write was made. Run `curator store check --repair` (it keeps a copy of the file first), or restore "
               "from a backup or an export (`curator --data NEW_DIR import EXPORT.json --chat ID`).")


def problems(conn: Connection, limit: int = 20) -> list[str]:
    """What SQLite's quick check finds wrong (an empty list: the file is sound)."""
    rows = [str(r[0]) for r in conn.execute(f"PRAGMA quick_check({int(limit)})").fetchall()]
    return [] if rows == ["ok"] else rows


def require_sound(conn: Connection, path: Path | str) -> None:
    """Raise StoreCorrupt (with what repairs it) when the quick check finds damage."""
    found = problems(conn, 5)
    if found:
        raise StoreCorrupt(f"database {path} failed its integrity check ({found[0]}); it takes no writes until "
                           "repaired", REPAIR_HINT)


def repair(store: _Repairable) -> dict[str, Any]:
    """Copy the file aside, rebuild the indexes and replay every chat's commit log into its graph tables, then check
    again. Returns {backup, before, after, chats}."""
    path = store.data_dir / "memory.db"
    before = problems(store.conn)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"memory.db.damaged-{stamp}")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy2(path, backup)
    store.conn.execute("REINDEX")
    chats = store.chats()
    for chat_id in chats:
        store.rebuild_projection(chat_id, check=False)
    return {"backup": str(backup), "before": before, "after": problems(store.conn), "chats": len(chats)}
