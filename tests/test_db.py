from __future__ import annotations

import sqlite3

import pytest

import curator
from curator.store import db
from curator.errors import MigrationFailed, StoreCorrupt, StoreLocked, StoreTooNew
from curator.store.store import Store
from curator.schemas import load_preset

# The SQLite file itself (WAL, damaged pages, its file lock); tests/test_store_engines.py covers both engines.
pytestmark = pytest.mark.engine("sqlite", reason="opens memory.db with sqlite3")


def test_database_is_wal_and_versioned(tmp_path):
    with Store(tmp_path) as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.current_version(store.conn) == db.latest_version()
    with Store(tmp_path) as store:  # reopening migrates nothing and keeps the data
        assert db.migrate(store.conn) == db.latest_version()


def test_data_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CURATOR_DATA", str(tmp_path / "env-data"))
    with curator.open() as memory:
        assert memory.data_dir == tmp_path / "env-data"
    assert (tmp_path / "env-data" / db.DB_FILENAME).exists()


def test_corrupt_file_is_reported_and_left_alone(tmp_path):
    path = tmp_path / db.DB_FILENAME
    garbage = b"this is not a database" * 100
    path.write_bytes(garbage)
    with pytest.raises(StoreCorrupt, match="damaged or not a memory-curator database") as info:
        Store(tmp_path)
    assert "backup" in info.value.hint
    assert path.read_bytes() == garbage


def test_database_from_a_newer_version_is_refused_untouched(tmp_path):
    with Store(tmp_path) as store:
        store.conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreTooNew, match="version 99"):
        Store(tmp_path)
    conn = sqlite3.connect(tmp_path / db.DB_FILENAME)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "99"


def test_locked_database_gives_a_clear_error_and_writes_nothing(tmp_path):
    with Store(tmp_path, busy_timeout_ms=50) as store:
        store.create_chat("c", load_preset("default"))
        other = sqlite3.connect(tmp_path / db.DB_FILENAME, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            with pytest.raises(StoreLocked, match="locked"):
                store.commit(
                    "c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "A"}}], 1, "test"
                )
        finally:
            other.execute("ROLLBACK")
        assert store.graph("c").stats()["nodes_active"] == 0
        store.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "A"}}], 1, "test")
        assert store.graph("c").stats()["nodes_active"] == 1


def test_a_failing_migration_changes_nothing_and_a_fixed_one_runs_once(tmp_path, monkeypatch):
    with Store(tmp_path):
        pass
    start = db.latest_version()

    def broken(conn):
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("ALTER TABLE nodes ADD COLUMN colour TEXT")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(db, "MIGRATIONS", [*db.MIGRATIONS, broken])
    with pytest.raises(MigrationFailed, match="disk on fire"):
        Store(tmp_path)
    conn = sqlite3.connect(tmp_path / db.DB_FILENAME)
    assert db.current_version(conn) == start
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name='half_done'").fetchone() is None
    assert "colour" not in [r[1] for r in conn.execute("PRAGMA table_info(nodes)")]
    conn.close()

    calls = []

    def fixed(conn):
        calls.append(1)
        conn.execute("ALTER TABLE nodes ADD COLUMN colour TEXT")

    monkeypatch.setattr(db, "MIGRATIONS", [*db.MIGRATIONS[:-1], fixed])
    with Store(tmp_path) as store:
        assert db.current_version(store.conn) == start + 1
    with Store(tmp_path):
        pass
    assert calls == [1]  # idempotent: a migrated database is not migrated again


CRASHER = r"""
import sys
import curator
memory = curator.open(sys.argv[1])
memory.create_chat("c", "default")
floor = 0
while True:
    ops = [{"op": "create_node", "type": "event", "title": f"Summary {floor}-{i}", "fields": {"summary": "x" * 200}}
           for i in range(10)]
    memory.commit("c", ops, floor, origin="test")
    floor += 1
    if floor == 20:
        print("ready", flush=True)
"""


def test_kill_during_commits_leaves_a_consistent_store(tmp_path):
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.kill()  # SIGKILL: no cleanup, possibly mid-transaction
    proc.wait()
    with curator.open(tmp_path) as memory:
        commits = memory.store.commits("c")
        graph = memory.graph("c")
        assert len(commits) >= 20
        assert graph.stats()["nodes_active"] == 10 * len(commits)  # every commit whole, none half-applied
        projected = graph.snapshot()
        memory.store.rebuild_projection("c")
        assert graph.snapshot() == projected


def test_damaged_pages_are_reported(tmp_path):
    with Store(tmp_path) as store:
        store.create_chat("c", load_preset("default"))
        store.commit("c", [{"op": "create_node", "type": "event", "title": f"S{i}", "fields": {"summary": "y" * 500}}
                           for i in range(200)], 1, "test")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = tmp_path / db.DB_FILENAME
    data = bytearray(path.read_bytes())
    data[4096 * 3: 4096 * 6] = b"\x17" * (4096 * 3)  # scribble over interior pages
    path.write_bytes(bytes(data))
    with pytest.raises((StoreCorrupt, curator.StoreError)), Store(tmp_path) as store:
        store.graph("c").snapshot()
        store.commit("c", [{"op": "create_node", "type": "event", "title": "S", "fields": {"summary": "z"}}], 2,
                     "test")
