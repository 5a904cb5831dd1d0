"""The store's database: opening it (a SQLite file under the data directory, or PostgreSQL by URL: engine.py)
safely (WAL, busy timeout, clear errors) and migrating it step by step.

Each migration runs in one transaction together with the version bump, so a failing step leaves the
database exactly as it was, and running migrations again is a no-op once the version is current. Concurrent
migrators are serialised (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock, and its DDL is transactional).
The steps are written in SQLite's DDL; `ddl_for` rewrites the few types that differ on PostgreSQL.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path

from curator.errors import MigrationFailed, StoreCorrupt, StoreError, StoreLocked, StoreTooNew
from curator.store.dbtypes import Connection, Cursor, Params, Row

__all__ = ["BUSY_TIMEOUT_MS", "DB_FILENAME", "Connection", "Cursor", "Params", "Row", "TranslatingConnection",
           "connect", "migrate"]

DB_FILENAME = "memory.db"
BUSY_TIMEOUT_MS = 5000

_V1 = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE chats (
        id TEXT PRIMARY KEY, schema_name TEXT NOT NULL, schema_json TEXT NOT NULL,
        settings_json TEXT NOT NULL DEFAULT '{}', created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    """CREATE TABLE messages (
        chat_id TEXT NOT NULL, floor INTEGER NOT NULL, role TEXT NOT NULL, name TEXT NOT NULL,
        text TEXT NOT NULL, swipe_id INTEGER NOT NULL DEFAULT 0, swipes_json TEXT, hash INTEGER NOT NULL,
        sent_at TEXT, PRIMARY KEY (chat_id, floor)) WITHOUT ROWID""",
    """CREATE TABLE commits (
        id INTEGER PRIMARY KEY AUTOINCREMENT, chat_id TEXT NOT NULL, anchor_floor INTEGER NOT NULL,
        origin TEXT NOT NULL, at TEXT NOT NULL, ops_json TEXT NOT NULL, undo_json TEXT NOT NULL,
        note TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX commits_chat_anchor ON commits (chat_id, anchor_floor)",
    "CREATE INDEX commits_chat_id ON commits (chat_id, id)",
    """CREATE TABLE nodes (
        chat_id TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, title TEXT NOT NULL,
        fields_json TEXT NOT NULL, level INTEGER NOT NULL, parent_id TEXT, floor_from INTEGER NOT NULL,
        floor_to INTEGER NOT NULL, importance REAL NOT NULL, access_count INTEGER NOT NULL DEFAULT 0,
        last_access TEXT, archived INTEGER NOT NULL DEFAULT 0, scope_layer TEXT NOT NULL DEFAULT 'objective',
        scope_owner TEXT, scope_region TEXT, story_label TEXT, story_segment TEXT,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (chat_id, id)) WITHOUT ROWID""",
    "CREATE INDEX nodes_by_type ON nodes (chat_id, type, level, archived)",
    "CREATE INDEX nodes_by_parent ON nodes (chat_id, parent_id)",
    "CREATE INDEX nodes_by_floor ON nodes (chat_id, floor_to)",
    """CREATE TABLE node_names (
        chat_id TEXT NOT NULL, name TEXT NOT NULL, node_id TEXT NOT NULL,
        PRIMARY KEY (chat_id, name, node_id)) WITHOUT ROWID""",
    "CREATE INDEX node_names_by_node ON node_names (chat_id, node_id)",
    """CREATE TABLE edges (
        chat_id TEXT NOT NULL, id TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
        relation TEXT NOT NULL, strength REAL NOT NULL, valid_from INTEGER, valid_to INTEGER,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (chat_id, id)) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX edges_by_triple ON edges (chat_id, source, target, relation)",
    "CREATE INDEX edges_by_target ON edges (chat_id, target)",
]

# Version 2: what LLM calls cost, and what each extraction step did (including the ones that failed).
_V2 = [
    """CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT, chat_id TEXT, task TEXT NOT NULL, model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
        latency_ms REAL NOT NULL DEFAULT 0, ok INTEGER NOT NULL, error TEXT, at TEXT NOT NULL)""",
    "CREATE INDEX llm_calls_by_chat ON llm_calls (chat_id, task)",
    """CREATE TABLE extraction_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT, chat_id TEXT NOT NULL, floor INTEGER NOT NULL, seq INTEGER NOT NULL,
        ok INTEGER NOT NULL, reason TEXT, commit_id INTEGER, active_types TEXT NOT NULL, calls INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, latency_ms REAL NOT NULL, at TEXT NOT NULL)""",
    "CREATE INDEX extraction_log_by_chat ON extraction_log (chat_id, floor)",
]

# Version 3: the vector index's bookkeeping (derived state: which profile, which content each vector holds), and a
# graph version per chat that every commit and rollback bumps (the key of recall caches).
_V3 = [
    """CREATE TABLE vector_state (chat_id TEXT PRIMARY KEY, profile TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    """CREATE TABLE vector_hashes (
        chat_id TEXT NOT NULL, node_id TEXT NOT NULL, content_hash TEXT NOT NULL, meta_hash TEXT NOT NULL,
        PRIMARY KEY (chat_id, node_id)) WITHOUT ROWID""",
    "ALTER TABLE chats ADD COLUMN graph_version INTEGER NOT NULL DEFAULT 0",
]

# Version 4: the swipe shelf (commits rolled back by a swipe, kept per reply text so swiping back restores them),
# the service's jobs (kept so a restart can resume or fail them visibly), and a messages version per chat that every
# write of its messages bumps (the key of caches built from messages, e.g. events' sources).
_V4 = [
    "ALTER TABLE chats ADD COLUMN messages_version INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE swipe_shelf (
        chat_id TEXT NOT NULL, floor INTEGER NOT NULL, text_key INTEGER NOT NULL, commits_json TEXT NOT NULL,
        at TEXT NOT NULL, PRIMARY KEY (chat_id, floor, text_key)) WITHOUT ROWID""",
    """CREATE TABLE jobs (
        id TEXT PRIMARY KEY, chat_id TEXT NOT NULL, kind TEXT NOT NULL, params_json TEXT NOT NULL,
        state TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, total INTEGER, message TEXT NOT NULL DEFAULT '',
        result_json TEXT, error TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
]

# Version 5: a shared jobs queue. Several service processes take jobs from the one table: a job is taken by one
# worker (its id) for a lease that the worker renews while it runs; a job whose lease ran out (its worker died) is
# taken again or failed visibly. `retired` and `cancel_requested` are what one process tells the others about a job.
_V5 = [
    "ALTER TABLE jobs ADD COLUMN worker TEXT",
    "ALTER TABLE jobs ADD COLUMN lease_until TEXT",
    "ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN retired INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX jobs_by_state ON jobs (state, created_at)",
]

# Version 6: message vectors move from a Chroma collection into the store (`curator/vectors/messages.py`): they are
# only read back by floor, and a reply's sync saves one Chroma write. Derived state, like `vector_hashes`.
_V6 = [
    """CREATE TABLE message_vectors (
        chat_id TEXT NOT NULL, floor INTEGER NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (chat_id, floor)) WITHOUT ROWID""",
]

# Version 7: vector writes staged for Chroma (`curator/vectors/pending.py`): a reply's or a rollback's changes to the
# index wait here, recorded with their hashes, and go to Chroma in batches. Derived state, like `vector_hashes`.
_V7 = [
    """CREATE TABLE vector_pending (
        chat_id TEXT NOT NULL, kind TEXT NOT NULL, node_id TEXT NOT NULL, op TEXT NOT NULL,
        in_chroma INTEGER NOT NULL, vector BLOB, document TEXT, metadata TEXT,
        PRIMARY KEY (chat_id, kind, node_id)) WITHOUT ROWID""",
]

# Version 8: front-end chats bound to memory chats (`curator/store/bindings.py`: SillyTavern's character or group and
# chat file -> a chat id), where a chat was forked from (`forks.py`), and what recall injected for each reply.
_V8 = [
    """CREATE TABLE chat_bindings (
        frontend TEXT NOT NULL, scope TEXT NOT NULL, file TEXT NOT NULL, chat_id TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (frontend, scope, file)) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX chat_bindings_by_chat ON chat_bindings (chat_id)",
    """CREATE TABLE chat_forks (
        chat_id TEXT PRIMARY KEY, parent_id TEXT NOT NULL, floor INTEGER NOT NULL, commits INTEGER NOT NULL,
        at TEXT NOT NULL)""",
    """CREATE TABLE recall_cards (
        chat_id TEXT NOT NULL, floor INTEGER NOT NULL, card_json TEXT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (chat_id, floor)) WITHOUT ROWID""",
]

# Version 9: the trash of the commit log (`curator/store/trash.py`). A rollback (or a sync's, a rebuild's, an undo's)
# keeps what it took away: the commit log's rows from the first one it reverted, as they were, and the floors it
# replaced; an undo puts them back exactly. `below_*` fingerprint what the batch rests on (the commits below it, the
# floors below it), so an undo that could not be exact is refused instead.
_V9 = [
    """CREATE TABLE trash (
        id INTEGER PRIMARY KEY AUTOINCREMENT, chat_id TEXT NOT NULL, floor INTEGER NOT NULL,
        first_commit INTEGER NOT NULL, reason TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', at TEXT NOT NULL,
        commits_json TEXT NOT NULL, messages_json TEXT, summary_json TEXT NOT NULL, below_commits TEXT NOT NULL,
        below_messages TEXT, undoes INTEGER)""",
    "CREATE INDEX trash_by_chat ON trash (chat_id, id)",
]

# Version 10: what each write touched, kept in the store for a while (`curator/store/changes.py`), so derived state in
# another process follows a chat by what changed instead of reading all of it; the lexicon snapshots a process's first
# recall of a chat reads instead of tokenizing every node (`curator/store/lexicon.py`); the stamp (creation time,
# graph and messages versions) the vector index was last brought to, so an index in step is not compared node by node;
# and an index that reads the persistent block's candidates in the order it ranks them.
_V10 = [
    """CREATE TABLE graph_changes (
        chat_id TEXT NOT NULL, version INTEGER NOT NULL, kind TEXT NOT NULL, item TEXT NOT NULL,
        PRIMARY KEY (chat_id, version, kind, item)) WITHOUT ROWID""",
    """CREATE TABLE message_changes (
        chat_id TEXT NOT NULL, version INTEGER NOT NULL, floor INTEGER NOT NULL,
        PRIMARY KEY (chat_id, version)) WITHOUT ROWID""",
    """CREATE TABLE lexicon (
        chat_id TEXT NOT NULL, corpus TEXT NOT NULL, stamp TEXT NOT NULL, format TEXT NOT NULL, docs INTEGER NOT NULL,
        ids BLOB NOT NULL, floors BLOB NOT NULL, lengths BLOB NOT NULL, terms BLOB NOT NULL, offsets BLOB NOT NULL,
        slots BLOB NOT NULL, tfs BLOB NOT NULL, updated_at TEXT NOT NULL,
        PRIMARY KEY (chat_id, corpus)) WITHOUT ROWID""",
    "ALTER TABLE vector_state ADD COLUMN synced TEXT",
    # the persistent block's candidates best first (`recall_reads.top_level`): read page by page, not sorted whole
    ("CREATE INDEX nodes_by_rank ON nodes (chat_id, type, archived, parent_id, level DESC, floor_to DESC, "
     "floor_from DESC, created_at DESC, id)"),
]

# Version 11: what a process's first recall reads of a chat, read through indexes instead of every row (issue 33):
# an event's previous and next node of its type and level in story order (`recall_reads.story_neighbours`), the
# names messages are written under, the first two names assistant messages are written under (a group chat?), the
# edges of the story's relations, and the nodes with a point of view, a region or a story-time label.
_V11 = [
    "CREATE INDEX nodes_by_story ON nodes (chat_id, type, level, floor_from, floor_to, created_at, id)",
    "CREATE INDEX messages_by_name ON messages (chat_id, name, floor)",
    "CREATE INDEX messages_by_role ON messages (chat_id, role, name)",
    "CREATE INDEX edges_by_relation ON edges (chat_id, relation)",
    # covering, so that SQLite prefers it to the primary key (a chat's nodes) without statistics
    ("CREATE INDEX nodes_with_story ON nodes (chat_id, id, archived, floor_to, updated_at, scope_layer, scope_owner, "
     "scope_region, story_label, story_segment) WHERE scope_owner IS NOT NULL OR scope_region IS NOT NULL OR "
     "story_label IS NOT NULL"),
]

Migration = Callable[[Connection], None] | list[str]

# SQLite DDL -> PostgreSQL DDL: 64-bit integers (SQLite's INTEGER is), identity for AUTOINCREMENT, doubles, no
# WITHOUT ROWID, and byte-order text comparison (SQLite's BINARY collation) whatever the database's locale is.
_PG_DDL = [
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\)\s*WITHOUT ROWID"), ")"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bTEXT\b"), 'TEXT COLLATE "C"'),
]


@lru_cache(maxsize=256)
def ddl_for(dialect: str, statement: str) -> str:
    """A migration statement (written for SQLite) in the given dialect."""
    if dialect == "sqlite":
        return statement
    for pattern, replacement in _PG_DDL:
        statement = pattern.sub(replacement, statement)
    return statement

# Index i holds the steps that take the database from version i to version i + 1.
MIGRATIONS: list[Migration] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11]


def latest_version() -> int:
    return len(MIGRATIONS)


class TranslatingConnection(sqlite3.Connection):
    """A connection whose errors name the file and say what to do (StoreCorrupt, StoreLocked, ...), with the
    same dialect calls as the PostgreSQL connection (pg.PgConnection)."""

    dialect = "sqlite"
    path: Path | str = ""
    broken = False

    @property
    def where(self) -> str:
        return str(self.path)

    def execute(self, sql: str, params: Params = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        try:
            return super().execute(sql, params)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None

    def executemany(self, sql: str, params: Iterable[Params], /) -> sqlite3.Cursor:  # type: ignore[override]
        try:
            return super().executemany(sql, params)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from None

    def rollback_quietly(self) -> None:
        """End the open transaction, if SQLite has not ended it already."""
        if self.in_transaction:
            super().execute("ROLLBACK")

    def begin(self) -> None:
        """A write transaction: BEGIN IMMEDIATE takes the file's write lock now, so it serialises every writer
        (of every chat, in every process)."""
        self.execute("BEGIN IMMEDIATE")

    def lock_chat(self, chat_id: str) -> None:
        """Nothing to do: the transaction already holds the file's write lock."""

    def migration_lock(self) -> AbstractContextManager[object]:
        """Nothing to hold: each step's BEGIN IMMEDIATE already serialises migrators."""
        return nullcontext()

    def has_table(self, name: str) -> bool:
        return self.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def connect(data_dir: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS, url: str | None = None) -> Connection:
    """Open (creating if needed) the database, migrated to the latest version: PostgreSQL at `url`, else the SQLite
    file in `data_dir`. A write waits up to `busy_timeout_ms` for another writer before failing with StoreLocked."""
    if url:
        from curator.store.pg import PgConnection  # psycopg loads only for a PostgreSQL store

        server = PgConnection(url, busy_timeout_ms)
        try:
            migrate(server)
            _make_data_dir(data_dir)  # it still holds config.yaml and the embedded vector index
        except BaseException:
            server.close()
            raise
        return server
    _make_data_dir(data_dir)
    path = data_dir / DB_FILENAME
    _refuse_emptied(path)
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False,
                               factory=TranslatingConnection)
        conn.path = path
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except sqlite3.Error as exc:
        raise translate(exc, path) from None
    return conn


EMPTY_GRACE_S = 5.0  # a file SQLite just created is 0 bytes for an instant, until its first pragma writes


def _refuse_emptied(path: Path) -> None:
    """A 0-byte memory.db (and no write-ahead log holding data) is a store whose data is gone (a crash, a full disk,
    a bad copy), not an empty store: opening it would migrate it into "no chats yet" and hide the loss."""
    try:
        info = path.stat()
    except OSError:
        return  # not there yet: a new store
    wal = path.with_name(path.name + "-wal")
    if info.st_size or (wal.exists() and wal.stat().st_size) or time.time() - info.st_mtime < EMPTY_GRACE_S:
        return
    raise StoreCorrupt(f"database {path} is empty (0 bytes): the store's data is gone, nothing was opened",
                       "Restore the file from a backup, or import an export into a new data directory (`curator "
                       "--data NEW_DIR import EXPORT.json --chat ID`); delete the empty file to start afresh.")


def _make_data_dir(data_dir: Path) -> None:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from None


def store_exists(data_dir: Path, url: str | None = None) -> bool:
    """Whether a memory store is already there (creates nothing, migrates nothing)."""
    if not url:
        return (data_dir / DB_FILENAME).is_file()
    from curator.store.pg import PgConnection

    conn = PgConnection(url, BUSY_TIMEOUT_MS)
    try:
        return conn.has_table("meta")
    finally:
        conn.close()


def translate(exc: sqlite3.Error, path: Path | str) -> StoreError:
    """Turn a sqlite3 error into one of ours with a message that names the file."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreLocked(f"database {path} is locked ({text})")
    if isinstance(exc, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text):
        return StoreCorrupt(f"database {path} is damaged or not a memory-curator database ({text})")
    if "readonly" in text or "read-only" in text or "unable to open database file" in text:
        return StoreError(f"database {path}: {text}",
                          "SQLite must be able to write in the data directory (memory.db and its -wal and -shm files "
                          "beside it): give write access, or copy the directory somewhere writable and pass --data.")
    return StoreError(f"database {path}: {text}")


def current_version(conn: Connection | sqlite3.Connection) -> int:
    if not has_table(conn, "meta"):
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if not row:
        return 0
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        version = -1
    if version < 0:
        raise StoreCorrupt(f"database {getattr(conn, 'where', '')} has schema_version {row[0]!r}, which is not a "
                           "version", "Restore the data directory from a backup, or use another --data.")
    return version


def has_table(conn: Connection | sqlite3.Connection, name: str) -> bool:
    """Whether the table exists (a plain sqlite3 connection, as tools and tests open, works too)."""
    if isinstance(conn, sqlite3.Connection) and not isinstance(conn, TranslatingConnection):
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None
    return bool(conn.has_table(name))


def migrate(conn: Connection) -> int:
    """Apply every pending migration, each atomically with its version bump. Returns the final version."""
    if current_version(conn) == latest_version():
        return latest_version()  # the usual case: no lock to take
    with conn.migration_lock():
        return _migrate(conn)


def _migrate(conn: Connection) -> int:
    version = current_version(conn)
    if version > latest_version():
        raise StoreTooNew(f"database {conn.where} is at version {version}; this package knows up to "
                          f"{latest_version()}", "Upgrade memory-curator to open it.")
    while version < latest_version():
        step = MIGRATIONS[version]
        conn.begin()
        try:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            if current_version(conn) != version:
                _rollback(conn)
                version = current_version(conn)
                continue
            if callable(step):
                step(conn)
            else:
                for statement in step:
                    conn.execute(ddl_for(conn.dialect, statement))
            conn.execute(
                ddl_for(conn.dialect, "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            )
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(version + 1),),
            )
            conn.execute("COMMIT")
        except StoreError:
            _rollback(conn)
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of a step must leave the database untouched
            _rollback(conn)
            raise MigrationFailed(f"migration to version {version + 1} failed: {exc}") from None
        version += 1
    return version


def _rollback(conn: Connection) -> None:
    conn.rollback_quietly()
