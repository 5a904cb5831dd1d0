"""The vector index's bookkeeping in the store: which profile indexed a chat (`vector_state`), the hashes of what
each node's vectors were made from (`vector_hashes`), the writes staged for Chroma (`vector_pending`), and the
vectors of single messages (`message_vectors`). Vectors go in and come out as bytes; `curator.vectors` gives them
their meaning. Functions that take `conn` run inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from curator.store.db import Connection
from curator.store.store import Store, utc_now

Hashes = dict[str, tuple[str, str]]  # node id -> (content column, meta hash)
PendingRow = tuple[str, str, str, bool, "bytes | None", "str | None"]  # kind, node id, op, in Chroma, vector, meta


# ---- vector_state / vector_hashes -------------------------------------------------------------------------
def indexed_profile(store: Store, chat_id: str | None = None) -> str | None:
    """The profile the chat (or, without one, any chat) was indexed with; None when it never was."""
    if chat_id is None:
        row = store.conn.execute("SELECT profile FROM vector_state LIMIT 1").fetchone()
    else:
        row = store.conn.execute("SELECT profile FROM vector_state WHERE chat_id=?", (chat_id,)).fetchone()
    return row[0] if row else None


def hashes(store: Store, chat_id: str) -> Hashes:
    return {node_id: (content, meta) for node_id, content, meta in store.conn.execute(
        "SELECT node_id, content_hash, meta_hash FROM vector_hashes WHERE chat_id=?", (chat_id,))}


def replace_hashes(conn: Connection, chat_id: str, removed: Iterable[str], changed: Hashes) -> None:
    """Forget the hashes of `removed` and of `changed`, then write those of `changed`."""
    conn.executemany("DELETE FROM vector_hashes WHERE chat_id=? AND node_id=?",
                     [(chat_id, i) for i in (*removed, *changed)])
    conn.executemany(_INSERT_HASH, [(chat_id, node_id, content, meta) for node_id, (content, meta) in changed.items()])


def save_state(store: Store, chat_id: str, profile: str, all_hashes: Hashes, synced: str | None = None) -> None:
    """The chat's whole state after a full sync: its profile, every node's hashes and the stamp it stands at. Under
    the chat's lock, as `replace_hashes` runs: two processes syncing a chat at once would otherwise each delete, then
    insert, the same rows (on PostgreSQL the second insert fails on the key)."""
    with store.transaction(chat_id) as conn:
        conn.execute("DELETE FROM vector_hashes WHERE chat_id=?", (chat_id,))
        conn.executemany(_INSERT_HASH, [(chat_id, node_id, content, meta)
                                        for node_id, (content, meta) in all_hashes.items()])
        conn.execute("INSERT INTO vector_state (chat_id, profile, updated_at, synced) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT(chat_id) DO UPDATE SET profile=excluded.profile, updated_at=excluded.updated_at, "
                     "synced=excluded.synced", (chat_id, profile, utc_now(), synced))


def drop_state(conn: Connection, chat_id: str) -> None:
    conn.execute("DELETE FROM vector_hashes WHERE chat_id=?", (chat_id,))
    conn.execute("DELETE FROM vector_state WHERE chat_id=?", (chat_id,))
    drop_pending(conn, chat_id)


_INSERT_HASH = "INSERT INTO vector_hashes (chat_id, node_id, content_hash, meta_hash) VALUES (?, ?, ?, ?)"


# ---- where the index stands, and its hashes by id (`vectors/hashes.py`, `VectorIndex._resume`) --------------------
NodeHashes = tuple["str | None", "str | None", str]  # a node's content, metadata and source hashes


def _split(content: str, meta: str) -> NodeHashes:
    item, _, source = content.partition("|")  # the source hash rides in the content column as "content|source"
    return item or None, meta, source


def synced_state(conn: Connection, chat_id: str) -> tuple[str, str | None] | None:
    """(profile, synced stamp) of the chat's index; None when it was never indexed."""
    row = conn.execute("SELECT profile, synced FROM vector_state WHERE chat_id=?", (chat_id,)).fetchone()
    return (row[0], row[1]) if row else None


def mark_synced(conn: Connection, chat_id: str, stamp: str | None) -> None:
    """Record the stamp the index now stands at (None: not known to be in step, e.g. after a failed embedding)."""
    conn.execute("UPDATE vector_state SET synced=? WHERE chat_id=?", (stamp, chat_id))


def hashes_of(conn: Connection, chat_id: str, ids: list[str]) -> dict[str, NodeHashes]:
    found: dict[str, NodeHashes] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for node_id, content, meta in conn.execute(
                f"SELECT node_id, content_hash, meta_hash FROM vector_hashes WHERE chat_id=? AND node_id IN "
                f"({', '.join('?' * len(chunk))})", (chat_id, *chunk)):
            found[node_id] = _split(content, meta)
    return found


def all_hashes(conn: Connection, chat_id: str) -> dict[str, NodeHashes]:
    return {node_id: _split(content, meta) for node_id, content, meta in conn.execute(
        "SELECT node_id, content_hash, meta_hash FROM vector_hashes WHERE chat_id=?", (chat_id,))}


def count_hashes(conn: Connection, chat_id: str) -> int:
    count: int = conn.execute("SELECT COUNT(*) FROM vector_hashes WHERE chat_id=?", (chat_id,)).fetchone()[0]
    return count


def has_vectors(conn: Connection, chat_id: str, sources: bool) -> bool:
    """Whether the index holds any node vector (or, `sources`, any source vector) of the chat, in Chroma or staged."""
    pattern = "%|" if sources else "|%"  # "content|source": an empty part is an empty side of the bar
    return conn.execute("SELECT 1 FROM vector_hashes WHERE chat_id=? AND content_hash NOT LIKE ? LIMIT 1",
                        (chat_id, pattern)).fetchone() is not None


# ---- vector_pending ---------------------------------------------------------------------------------------
def pending(conn: Connection, chat_id: str) -> list[PendingRow]:
    return [(kind, node_id, op, bool(in_chroma), None if blob is None else bytes(blob), metadata)
            for kind, node_id, op, in_chroma, blob, metadata in conn.execute(
                "SELECT kind, node_id, op, in_chroma, vector, metadata FROM vector_pending WHERE chat_id=?",
                (chat_id,))]


def pending_count(store: Store, chat_id: str) -> int:
    return int(store.conn.execute("SELECT COUNT(*) FROM vector_pending WHERE chat_id=?", (chat_id,)).fetchone()[0])


def stage(conn: Connection, chat_id: str, cleared: Iterable[tuple[str, str]],
          rows: Sequence[PendingRow]) -> None:
    """Clear the staged rows of `cleared` (kind, node id) and stage `rows`."""
    conn.executemany("DELETE FROM vector_pending WHERE chat_id=? AND kind=? AND node_id=?",
                     [(chat_id, kind, node_id) for kind, node_id in cleared])
    # `document` (migration 7) stays NULL: Chroma gets no documents
    conn.executemany("INSERT INTO vector_pending (chat_id, kind, node_id, op, in_chroma, vector, metadata) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)",
                     [(chat_id, kind, node_id, op, int(in_chroma), blob, metadata)
                      for kind, node_id, op, in_chroma, blob, metadata in rows])


def drop_pending(conn: Connection, chat_id: str) -> None:
    conn.execute("DELETE FROM vector_pending WHERE chat_id=?", (chat_id,))


# ---- message_vectors --------------------------------------------------------------------------------------
def message_hashes(store: Store, chat_id: str) -> dict[int, str]:
    return dict(store.conn.execute("SELECT floor, hash FROM message_vectors WHERE chat_id=?", (chat_id,)).fetchall())


def message_vectors(store: Store, chat_id: str, floors: Sequence[int]) -> list[tuple[int, str, bytes]]:
    """(floor, hash, vector bytes) of the floors that have one."""
    found: list[tuple[int, str, bytes]] = []
    for start in range(0, len(floors), 500):
        chunk = floors[start:start + 500]
        marks = ",".join("?" * len(chunk))
        found.extend(
            (floor, digest, bytes(blob))
            for floor, digest, blob in store.conn.execute(
                f"SELECT floor, hash, vector FROM message_vectors WHERE chat_id=? AND floor IN ({marks})",
                (chat_id, *chunk),
            )
        )
    return found


def save_message_vectors(store: Store, chat_id: str, rows: Sequence[tuple[int, str, bytes]]) -> None:
    with store.transaction() as conn:
        conn.executemany("INSERT INTO message_vectors (chat_id, floor, hash, vector) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT(chat_id, floor) DO UPDATE SET hash=excluded.hash, vector=excluded.vector",
                         [(chat_id, *row) for row in rows])


def drop_message_vectors(store: Store, chat_id: str) -> None:
    with store.transaction() as conn:
        conn.execute("DELETE FROM message_vectors WHERE chat_id=?", (chat_id,))
