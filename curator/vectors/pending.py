"""Vector writes waiting for Chroma: a commit's or a rollback's changes to the index are staged in the store
(`vector_pending`, in the transaction that records their hashes) and written to Chroma in one batch once enough
have gathered, or when the index closes or a maintenance search needs Chroma whole.

Why: every embedded Chroma write costs 5-7 ms of CPU and eight fsyncs however small it is (bench/chroma_calls.py),
and a reply or its rollback made two or three of them. Staged, a reply costs a row per changed vector in the store;
a batch of FLUSH_ROWS rows is three Chroma calls per collection (delete, upsert, metadata update). An event staged
and rolled back before its batch (a swipe, a regenerate) never reaches Chroma at all.

Searches see the staged rows: the ids whose Chroma copy is stale or deleted are left out of Chroma's answer (it is
asked for that many more), and the staged vectors are scored by a dot product beside it. Nothing is lost in a
crash: the rows are in the store with the hashes that say the index holds them, and the next process reads them
back. The rows in the store are the truth; a process's memory of them is reloaded whenever the store changed
under it (`evict`), and a flush writes what it reads from the store, in a transaction holding the chat's lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from curator.store.db import Connection
from curator.store import vector_rows

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from curator.store.store import Store

T = TypeVar("T")
Indexed = Callable[[str, str], bool]  # (kind, id) -> whether Chroma held the id before the chat's staged rows

FLUSH_ROWS = 64  # staged rows of a chat that start a flush (a dot product over them costs ~10 us per search)
CALL_ROWS = 1000  # rows per Chroma call of a flush (its limit is near 5,000)
SETTLE_SECONDS = 5.0  # how long a Chroma server's searches may lag its writes, as far as a flush's own process cares
UPSERT, META, DELETE = "upsert", "meta", "delete"


@dataclass(frozen=True)
class Row:
    """One staged change of an id in one collection; the later change of the same id replaces it."""

    op: str  # upsert | meta (metadata only, the vector Chroma holds stays) | delete
    in_chroma: bool  # Chroma holds a copy of the id from before (a search must leave it out)
    vector: np.ndarray | None = None
    metadata: dict[str, Any] | None = None


class View:
    """What a search of one collection needs of the staged rows: the ids to leave out of Chroma's answer, and the
    staged vectors (normalized) with their ids."""

    def __init__(self, rows: dict[str, Row]) -> None:
        self.shadow = frozenset(i for i, r in rows.items() if r.in_chroma and r.op != META)
        live = [(i, r.vector) for i, r in rows.items() if r.op == UPSERT and r.vector is not None]
        self.ids = [i for i, _ in live]
        # Chroma's copy of a staged id is never an answer: stale, or (another process flushed the row since this
        # one read it) the same as the staged row, which is scored here
        self.hidden = self.shadow | frozenset(self.ids)
        if live:
            matrix = np.stack([v for _, v in live]).astype(np.float32)
            self.matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        else:
            self.matrix = np.zeros((0, 0), dtype=np.float32)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The k staged vectors nearest to `vector`, as (id, cosine similarity)."""
        if not self.ids:
            return []
        query = np.asarray(vector, dtype=np.float32)
        scores = self.matrix @ (query / max(float(np.linalg.norm(query)), 1e-12))
        best = np.argsort(-scores)[:k]
        return [(self.ids[i], float(scores[i])) for i in best]


EMPTY = View({})
_NO_ROWS: dict[str, dict[str, Row]] = {}  # no settling rows (one object, so a view made without them is known by it)


class Batch:
    """The changes one sync stages, merged with what is staged already: written to the store by `write` inside the
    sync's transaction, then taken into memory by `PendingWrites.take`."""

    def __init__(self, chat_id: str, current: dict[str, dict[str, Row]], indexed: Indexed) -> None:
        self.chat_id = chat_id
        self._current = current
        self._indexed = indexed  # (kind, id) -> whether Chroma held the id before this chat's staged rows
        self.changed: dict[tuple[str, str], Row | None] = {}  # None: the id's row goes (nothing left to write)

    def _old(self, kind: str, node_id: str) -> Row | None:
        key = (kind, node_id)
        return self.changed[key] if key in self.changed else self._current.get(kind, {}).get(node_id)

    def _in_chroma(self, kind: str, node_id: str) -> bool:
        old = self._old(kind, node_id)
        return old.in_chroma if old is not None else self._indexed(kind, node_id)

    def upsert(self, kind: str, ids: list[str], vectors: Sequence[np.ndarray],
               metadatas: list[dict[str, Any]]) -> None:
        for node_id, vector, metadata in zip(ids, vectors, metadatas):
            self.changed[(kind, node_id)] = Row(UPSERT, self._in_chroma(kind, node_id),
                                                np.asarray(vector, dtype=np.float32), metadata)

    def update(self, kind: str, ids: list[str], metadatas: list[dict[str, Any]]) -> None:
        for node_id, metadata in zip(ids, metadatas):
            old = self._old(kind, node_id)
            if old is not None and old.op == UPSERT:  # not in Chroma yet: the staged upsert carries the metadata
                self.changed[(kind, node_id)] = replace(old, metadata=metadata)
            elif old is None or old.op == META:
                self.changed[(kind, node_id)] = Row(META, True, metadata=metadata)

    def delete(self, kind: str, ids: list[str]) -> None:
        for node_id in ids:
            old = self._old(kind, node_id)
            # staged and never written: the two cancel out (a swipe's event never reaches Chroma)
            in_chroma = old.in_chroma if old is not None else True
            self.changed[(kind, node_id)] = Row(DELETE, True) if in_chroma else None

    def write(self, conn: Connection) -> None:
        if not self.changed:
            return
        vector_rows.stage(conn, self.chat_id, self.changed, [(kind, node_id, *_columns(row))
                                                             for (kind, node_id), row in self.changed.items()
                                                             if row is not None])


def _columns(row: Row) -> tuple[str, bool, bytes | None, str | None]:
    return (row.op, row.in_chroma, None if row.vector is None else row.vector.astype(np.float32).tobytes(),
            None if row.metadata is None else json.dumps(row.metadata))


def _row(op: str, in_chroma: bool, blob: bytes | None, metadata: str | None) -> Row:
    vector = None if blob is None else np.frombuffer(bytes(blob), dtype=np.float32).copy()
    return Row(op, bool(in_chroma), vector, None if metadata is None else json.loads(metadata))


class PendingWrites:
    """The staged rows of the chats of one store, as this process last read or wrote them."""

    def __init__(self, store: Store, settle: bool = False) -> None:
        self.store = store
        self._rows: dict[str, dict[str, dict[str, Row]]] = {}  # chat -> collection kind -> id -> row
        self._views: dict[
            tuple[str, str], tuple[dict[str, dict[str, Row]], dict[str, dict[str, Row]], View]
        ] = {}  # (chat, kind) -> (the rows and settling rows it was made of, view)
        # A Chroma server answers a query from its index, which takes in a write a moment after the write returns
        # (1 query in 40 missed a row upserted just before, on 2 busy cores): with `settle`, the rows of a flush stay
        # in this process's views for SETTLE_SECONDS, as rows Chroma holds, so a search right after the flush sees
        # them whether the server has indexed them or not. The embedded client indexes as it writes.
        self._settle = settle
        self._settling: dict[str, tuple[float, dict[str, dict[str, Row]]]] = {}  # chat -> (until, kind -> id -> row)

    def rows(self, chat_id: str) -> dict[str, dict[str, Row]]:
        found = self._rows.get(chat_id)
        if found is None:
            found = self._rows[chat_id] = self.read(self.store.conn, chat_id)
        return found

    @staticmethod
    def read(conn: Connection, chat_id: str) -> dict[str, dict[str, Row]]:
        rows: dict[str, dict[str, Row]] = {}
        for kind, node_id, op, in_chroma, blob, metadata in vector_rows.pending(conn, chat_id):
            rows.setdefault(kind, {})[node_id] = _row(op, in_chroma, blob, metadata)
        return rows

    def count(self, chat_id: str) -> int:
        return sum(len(r) for r in self.rows(chat_id).values())

    def view(self, chat_id: str, kind: str) -> View:
        """Kept with the map it was made from: a sync in another thread replaces the map (never changes it), so a
        view made from the old one is never taken for the new."""
        rows, settling = self.rows(chat_id), self._settled(chat_id)
        made = self._views.get((chat_id, kind))
        if made is not None and made[0] is rows and made[1] is settling:
            return made[2]
        merged = {**settling.get(kind, {}), **rows.get(kind, {})}  # a staged row is newer than a settling one
        found = View(merged) if merged else EMPTY
        self._views[(chat_id, kind)] = (rows, settling, found)
        return found

    def _settled(self, chat_id: str) -> dict[str, dict[str, Row]]:
        found = self._settling.get(chat_id)
        if found is None:
            return _NO_ROWS
        if time.monotonic() > found[0]:
            self._settling.pop(chat_id, None)
            return _NO_ROWS
        return found[1]

    def batch(self, chat_id: str, indexed: Indexed) -> Batch:
        return Batch(chat_id, self.rows(chat_id), indexed)

    def take(self, batch: Batch) -> None:
        """The batch landed in the store: the same rows in memory (a new map, so a search never sees half)."""
        if not batch.changed:
            return
        rows = {kind: dict(found) for kind, found in self.rows(batch.chat_id).items()}
        for (kind, node_id), row in batch.changed.items():
            if row is None:
                rows.get(kind, {}).pop(node_id, None)
            else:
                rows.setdefault(kind, {})[node_id] = row
        self._rows[batch.chat_id] = rows

    def flush(self, chat_id: str, collection: Callable[[str], Collection],
              written: Callable[[str, str, dict[str, np.ndarray], list[str]], None] | None = None) -> int:
        """Write the chat's staged rows to Chroma (`collection(kind)` gives the collection) and clear them: read in a
        transaction that holds the chat's lock, so another process can neither stage nor flush beside it. If Chroma
        fails, the transaction rolls back and the rows stay for the next try (every write here is idempotent).
        `written(chat, kind, upserts, deletes)` hears what reached Chroma (`vectors/mirror.py`)."""
        with self.store.transaction(chat_id) as conn:
            rows = self.read(conn, chat_id)
            for kind, found in rows.items():
                _write(collection(kind), found)
            vector_rows.drop_pending(conn, chat_id)
        for kind, found in rows.items():  # before the rows stop hiding these ids
            if written is not None:
                written(
                    chat_id,
                    kind,
                    {i: r.vector for i, r in found.items() if r.op == UPSERT and r.vector is not None},
                    [i for i, r in found.items() if r.op == DELETE],
                )
        self._rows[chat_id] = {}
        if self._settle:
            settled = {kind: {i: replace(r, in_chroma=True) for i, r in found.items() if r.op != META}
                       for kind, found in rows.items()}
            self._settling[chat_id] = (time.monotonic() + SETTLE_SECONDS, settled)
        return sum(len(r) for r in rows.values())

    def chats(self) -> list[str]:
        """The chats this process knows to have staged rows."""
        return [c for c, rows in self._rows.items() if any(rows.values())]

    def evict(self, chat_id: str) -> None:
        """Read the chat's rows from the store again on next use (another process may have staged or flushed; a
        settling row may be stale then too: Chroma is asked instead)."""
        self._rows.pop(chat_id, None)
        self._settling.pop(chat_id, None)


def in_calls(items: list[T]) -> list[list[T]]:
    """`items` in parts of at most CALL_ROWS, a Chroma call each (Chroma refuses a call of more than about 5,000)."""
    return [items[start:start + CALL_ROWS] for start in range(0, len(items), CALL_ROWS)]


def _write(collection: Collection, rows: dict[str, Row]) -> None:
    """One collection's rows: deletes, then upserts, then metadata updates (each id has one row), `in_calls` (rows
    gather past FLUSH_ROWS while Chroma fails)."""
    for part in in_calls([i for i, r in rows.items() if r.op == DELETE]):
        collection.delete(ids=part)
    for rows_part in in_calls([(i, r) for i, r in rows.items() if r.op == UPSERT]):
        collection.upsert(ids=[i for i, _ in rows_part], embeddings=np.stack([_vector(r) for _, r in rows_part]),
                          metadatas=chroma_metadata([r.metadata for _, r in rows_part]))
    for rows_part in in_calls([(i, r) for i, r in rows.items() if r.op == META]):
        collection.update(ids=[i for i, _ in rows_part], metadatas=chroma_metadata([r.metadata for _, r in rows_part]))


def _vector(row: Row) -> np.ndarray:
    if row.vector is None:
        raise ValueError("a staged upsert without its vector")
    return row.vector


def chroma_metadata(rows: Sequence[dict[str, Any] | None]) -> Any:
    """Metadata rows as Chroma takes them (its types allow only scalar values: ours are type and archived)."""
    return [row or {} for row in rows]
