"""Recall's lexicon snapshots as the store keeps them: per chat and corpus (node texts, events' sources), the BM25
statistics of every document at one stamp of the chat, as arrays (`curator/recall/lexicon.py` makes and reads them).
Derived state, like the vector index's tables: dropped with the chat, made again when missing or stale."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from curator.store.dbtypes import Connection
from curator.store.store import utc_now


@dataclass
class LexiconRows:
    """One corpus at one stamp: the documents in order (ids, first floors, lengths) and, term by term, which
    documents hold the term and how often (`slots` and `tfs` from `offsets[i]` to `offsets[i + 1]` for term i)."""

    stamp: str
    format: str
    ids: list[str]
    floors: np.ndarray  # int64, per document
    lengths: np.ndarray  # int64, per document
    terms: list[str]
    offsets: np.ndarray  # int64, len(terms) + 1
    slots: np.ndarray  # int32
    tfs: np.ndarray  # int32


def read_lexicon(conn: Connection, chat_id: str, corpus: str) -> LexiconRows | None:
    row = conn.execute("SELECT stamp, format, ids, floors, lengths, terms, offsets, slots, tfs FROM lexicon "
                       "WHERE chat_id=? AND corpus=?", (chat_id, corpus)).fetchone()
    if row is None:
        return None
    stamp, format_, ids, floors, lengths, terms, offsets, slots, tfs = row
    return LexiconRows(stamp, format_, json.loads(bytes(ids)), _ints(floors, np.int64), _ints(lengths, np.int64),
                       json.loads(bytes(terms)), _ints(offsets, np.int64), _ints(slots, np.int32),
                       _ints(tfs, np.int32))


def lexicon_stamps(conn: Connection, chat_id: str) -> dict[str, tuple[str, str]]:
    """corpus -> (stamp, format) of the chat's snapshots, without their arrays."""
    return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT corpus, stamp, format FROM lexicon WHERE chat_id=?",
                                                     (chat_id,))}


def write_lexicon(conn: Connection, chat_id: str, corpus: str, rows: LexiconRows) -> None:
    conn.execute(
        "INSERT INTO lexicon (chat_id, corpus, stamp, format, docs, ids, floors, lengths, terms, offsets, slots, tfs, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chat_id, corpus) DO UPDATE SET "
        "stamp=excluded.stamp, format=excluded.format, docs=excluded.docs, ids=excluded.ids, floors=excluded.floors, "
        "lengths=excluded.lengths, terms=excluded.terms, offsets=excluded.offsets, slots=excluded.slots, "
        "tfs=excluded.tfs, updated_at=excluded.updated_at",
        (chat_id, corpus, rows.stamp, rows.format, len(rows.ids), _json(rows.ids),
         rows.floors.astype("<i8").tobytes(), rows.lengths.astype("<i8").tobytes(), _json(rows.terms),
         rows.offsets.astype("<i8").tobytes(), rows.slots.astype("<i4").tobytes(), rows.tfs.astype("<i4").tobytes(),
         utc_now()))


def save_lexicon(conn: Connection, chat_id: str, corpus: str, rows: LexiconRows) -> bool:
    """Write the snapshot unless the store holds a newer one of the same format (another process saved while this
    one built); in a transaction of the caller's. Stamps read "created_at|graph version|messages version"."""
    saved = conn.execute("SELECT stamp, format FROM lexicon WHERE chat_id=? AND corpus=?", (chat_id, corpus)).fetchone()
    if saved is not None and saved[1] == rows.format:
        (theirs, *their_versions), (ours, *our_versions) = (_stamp(saved[0]), _stamp(rows.stamp))
        if theirs == ours and their_versions > our_versions:
            return False
    write_lexicon(conn, chat_id, corpus, rows)
    return True


def _stamp(text: str) -> tuple[str, int, int]:
    created_at, graph_version, messages_version = text.rsplit("|", 2)
    return created_at, int(graph_version), int(messages_version)


def drop_lexicon(conn: Connection, chat_id: str) -> None:
    conn.execute("DELETE FROM lexicon WHERE chat_id=?", (chat_id,))


def _json(items: list[str]) -> bytes:
    return json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()


def _ints(blob: bytes | memoryview, dtype: type[np.int64] | type[np.int32]) -> np.ndarray:
    kind = "<i8" if dtype == np.int64 else "<i4"
    return np.frombuffer(bytes(blob), dtype=kind).astype(dtype, copy=False)
