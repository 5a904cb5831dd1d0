"""Every row of a data directory's store as text, on either engine, to compare a store before and after something
that must not change it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from curator.store.location import store_url


class StoreDump:
    """`dump()` reads the whole store through one connection of its own (kept open: a walk calls it per request)."""

    def __init__(self, data_dir: Path):
        self.url = store_url(Path(data_dir))
        self.path = Path(data_dir) / "memory.db"
        self._conn = None

    def dump(self) -> str:
        if self.url is None:
            with sqlite3.connect(self.path) as conn:
                return "\n".join(conn.iterdump())
        if self._conn is None:
            import psycopg

            self._conn = psycopg.connect(self.url, autocommit=True)
        tables = [r[0] for r in self._conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1")]
        lines = []
        for table in tables:
            lines += sorted(f"{table} {tuple(row)!r}" for row in self._conn.execute(f"SELECT * FROM {table}"))
        return "\n".join(lines)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def dump_store(data_dir: Path) -> str:
    dumper = StoreDump(data_dir)
    try:
        return dumper.dump()
    finally:
        dumper.close()
