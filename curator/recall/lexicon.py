"""Recall's lexicon kept with the store: the BM25 statistics of a chat's two corpora (node texts; events' source
messages) as a snapshot in the store (`curator/store/lexicon.py`), followed by what changed since.

A process's first recall of a chat reads the snapshot (a few arrays) and re-tokenizes only the documents the writes
after its stamp touched (the store's change log says which: `curator/store/changes.py`), instead of tokenizing every
node and source as `ChatState` does. When those grow past a share of the chat, the follower writes a new snapshot
(its arrays merged, nothing tokenized again); when the change log cannot say what changed (a write older than it
keeps, a schema change), or the tokenizer or the documents' text changed (`lexicon_format`), it tokenizes the chat
once and saves that.

`CorpusLexicon.top` scores exactly as `LiveBM25.top` does after a whole load of the same documents (documents in
(floor_from, id) order, the same sums in the same order, ties and the cut at k as numpy makes them), so a recall
reads the same candidates either way (tests/test_cold_recall.py)."""

from __future__ import annotations

import bisect
import hashlib
import inspect
import math
import sys
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from curator import startcache
from curator.recall import lexical
from curator.recall.lexical import _SUFFIXES, STOPWORDS, tokenize
from curator.store.graph import Node
from curator.store.lexicon import LexiconRows, read_lexicon, save_lexicon
from curator.store.recall_reads import RecallReads
from curator.vectors import documents
from curator.vectors.documents import SOURCE_SPAN, node_document, source_document

if TYPE_CHECKING:
    from curator.schemas import Schema
    from curator.store.store import Store

Stamp = tuple[tuple[int, str], int, int]  # the chat's epoch, graph and messages versions (`Store.stamp`)

LEXICON_VERSION = 1  # bump when what a document is made of changes in a way `lexicon_format` cannot see
NODES, SOURCES = "n", "s"
COMPACT_SHARE, COMPACT_MIN = 0.10, 512  # documents changed since the snapshot that make a new one
_PROBES = ("Eileen's paintings were running; she didn't pay 3 crowns!", "北京大学的学生 走了",
           "Ünïcode ＦＵＬＬ Straße",
           "studies flies carried happily hopped buses analysis", "the a an I'd we'll x y 42 1,000.5 snake_case")


@lru_cache(maxsize=1)
def lexicon_format() -> str:
    """What a snapshot's documents were made with: a saved snapshot of another format is made again. The tokenizer is
    checked on probe texts; how documents are built, by the code that builds them. Kept in the start cache while the
    files of that code are unchanged (reading the functions' source took ~8 ms of a process's first recall)."""
    files = sorted({Path(__file__), *(Path(module.__file__) for module in (lexical, documents) if module.__file__)})
    digest = startcache.key(LEXICON_VERSION, sys.version, *files)  # the probes' tokens depend on Python's Unicode
    return startcache.cached("lexicon-format", digest, lambda: _format().encode(), _checked_format)


def _checked_format(data: bytes) -> str:
    text = data.decode("ascii")
    version, _, digest = text.partition(":")
    if not (version.isdigit() and len(digest) == 16 and all(c in "0123456789abcdef" for c in digest)):
        raise ValueError("not a lexicon format")
    return text


def _format() -> str:
    parts = [repr([tokenize(p) for p in _PROBES]), repr(sorted(STOPWORDS)), repr(_SUFFIXES),
             repr((documents.SOURCE_SPAN, documents.SOURCE_CHARS))]
    for function in (node_document, source_document, documents.source_floors, document_text, _line):
        try:
            parts.append(inspect.getsource(function))
        except (OSError, TypeError):  # no source at hand (a frozen build): the version alone decides
            parts.append(function.__qualname__)
    return f"{LEXICON_VERSION}:{hashlib.blake2b(chr(31).join(parts).encode(), digest_size=8).hexdigest()}"


def document_text(node: Node, schema: Schema) -> str:
    """What BM25 reads of a node (`ChatState` indexes the same text)."""
    return f"{node.title}\n{node_document(node, schema)}"


def _line(name: str, text: str) -> str:
    return f"{name}: {text}" if name else text


def stamp_text(stamp: Stamp) -> str:
    (_, created_at), graph_version, messages_version = stamp
    return f"{created_at}|{graph_version}|{messages_version}"


def _parse_stamp(text: str) -> tuple[str, int, int]:
    created_at, graph_version, messages_version = text.rsplit("|", 2)
    return created_at, int(graph_version), int(messages_version)


class CorpusLexicon:
    """One corpus: the snapshot's documents, less those changed since (`dead`), plus their current versions
    (`delta`: id -> (floor_from, term counts))."""

    k1, b = 1.2, 0.75

    def __init__(self, rows: LexiconRows) -> None:
        self.rows = rows
        self._terms = {t: i for i, t in enumerate(rows.terms)}
        self._slots: dict[str, int] | None = None  # id -> slot, made when a document changes
        self.dead: np.ndarray | None = None
        self.dead_count = 0
        self.dead_length = 0
        self.delta: dict[str, tuple[int, Counter[str]]] = {}
        self._delta_terms: dict[str, dict[str, int]] = {}
        self._delta_order: list[str] | None = None
        self._place: dict[str, int] = {}

    @property
    def size(self) -> int:
        return len(self.rows.ids) - self.dead_count + len(self.delta)

    @property
    def total(self) -> int:
        return int(self.rows.lengths.sum()) - self.dead_length + sum(sum(c.values()) for _, c in self.delta.values())

    def __contains__(self, doc_id: object) -> bool:
        if not isinstance(doc_id, str):  # a Container: asked about any object
            return False
        if doc_id in self.delta:
            return True
        slot = self._slot_map().get(doc_id)
        return slot is not None and not (self.dead is not None and self.dead[slot])

    def _slot_map(self) -> dict[str, int]:
        if self._slots is None:
            self._slots = {doc_id: slot for slot, doc_id in enumerate(self.rows.ids)}
        return self._slots

    def replace(self, doc_id: str, doc: tuple[int, Counter[str]] | None) -> None:
        """The document's current version (None: it is gone, or has no text)."""
        slot = self._slot_map().get(doc_id)
        if slot is not None and not (self.dead is not None and self.dead[slot]):
            if self.dead is None:
                self.dead = np.zeros(len(self.rows.ids), dtype=bool)
            self.dead[slot] = True
            self.dead_count += 1
            self.dead_length += int(self.rows.lengths[slot])
        old = self.delta.pop(doc_id, None)
        if old is not None:
            for term in old[1]:
                holders = self._delta_terms[term]
                del holders[doc_id]
                if not holders:
                    del self._delta_terms[term]
        if doc is not None:
            self.delta[doc_id] = doc
            for term, tf in doc[1].items():
                self._delta_terms.setdefault(term, {})[doc_id] = tf
        self._delta_order = None

    # ---- scoring ------------------------------------------------------------------------------
    def _term(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(indices, tfs) of the live documents holding `term`: a snapshot slot is its own index, the delta's j-th
        document (in key order) is len(ids) + j."""
        rows = self.rows
        at = self._terms.get(term)
        if at is None:
            slots, tfs = np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            slots = rows.slots[rows.offsets[at]:rows.offsets[at + 1]].astype(np.int64)
            tfs = rows.tfs[rows.offsets[at]:rows.offsets[at + 1]].astype(np.int64)
            if self.dead is not None:
                keep = ~self.dead[slots]
                slots, tfs = slots[keep], tfs[keep]
        holders = self._delta_terms.get(term)
        if holders:
            place = self._delta_place()
            extra = sorted((place[d], tf) for d, tf in holders.items())
            slots = np.concatenate([slots, [len(rows.ids) + j for j, _ in extra]]).astype(np.int64)
            tfs = np.concatenate([tfs, [tf for _, tf in extra]]).astype(np.int64)
        return slots, tfs

    def _delta_place(self) -> dict[str, int]:
        """The delta's documents by key order: doc id -> j (its index is len(ids) + j)."""
        if self._delta_order is None:
            self._delta_order = sorted(self.delta, key=lambda d: (self.delta[d][0], d))
            self._place = {d: j for j, d in enumerate(self._delta_order)}
        return self._place

    def _doc_key(self, index: int) -> tuple[int, str]:
        base = len(self.rows.ids)
        if index < base:
            return int(self.rows.floors[index]), self.rows.ids[index]
        order = self._delta_order
        assert order is not None  # a delta index is asked about after `_delta_place` ordered the delta
        doc = order[index - base]
        return self.delta[doc][0], doc

    def _lengths(self, indices: np.ndarray) -> np.ndarray:
        base = len(self.rows.ids)
        out = np.empty(len(indices), dtype=np.float64)
        snap = indices < base
        out[snap] = self.rows.lengths[indices[snap]]
        if not snap.all():
            order = self._delta_order
            assert order is not None  # as in `_doc_key`
            out[~snap] = [sum(self.delta[order[i - base]][1].values()) for i in indices[~snap].tolist()]
        return out

    def _key(self, index: int) -> str:
        base = len(self.rows.ids)
        if index < base:
            return self.rows.ids[index]
        assert self._delta_order is not None  # as in `_doc_key`
        return self._delta_order[index - base]

    def top(self, query: str, k: int) -> list[tuple[str, float]]:
        """The k best documents as (id, score), best first: what `LiveBM25.top` gives after a whole load."""
        size = self.size
        found_terms: list[tuple[np.ndarray, np.ndarray]] = []
        for term in set(tokenize(query)):
            indices, tfs = self._term(term)
            if len(indices):
                found_terms.append((indices, tfs))
        if not found_terms or not size:
            return []
        avg = self.total / size or 1.0
        slots: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for indices, tfs in found_terms:
            tfs = tfs.astype(np.float64)
            idf = math.log(1 + (size - len(indices) + 0.5) / (len(indices) + 0.5))
            norm = tfs + self.k1 * (1 - self.b + self.b * self._lengths(indices) / avg)
            slots.append(indices)
            weights.append(idf * tfs * (self.k1 + 1) / norm)
        base = len(self.rows.ids)
        vector = np.bincount(np.concatenate(slots), weights=np.concatenate(weights), minlength=base + len(self.delta))
        found = self._in_order(np.flatnonzero(vector))
        values = vector[found]
        if len(found) > k:  # as `LiveBM25.top`: the same array, so numpy makes the same cut among ties
            keep = np.sort(np.argpartition(-values, k - 1)[:k])
            found, values = found[keep], values[keep]
        order = np.argsort(-values, kind="stable")
        return [(self._key(i), score) for i, score in zip(found[order].tolist(), values[order].tolist())]

    def _in_order(self, found: np.ndarray) -> np.ndarray:
        """The scored documents in (floor_from, id) order, the order a whole load gives them: the snapshot's are in
        it already; the delta's go in among them."""
        base = len(self.rows.ids)
        cut = int(np.searchsorted(found, base))
        if cut == len(found):
            return found
        ordered = found[:cut].tolist()
        at = 0
        for index in found[cut:].tolist():  # the delta's indices ascend in key order too
            at = bisect.bisect_left(ordered, self._doc_key(index), lo=at, key=self._doc_key)
            ordered.insert(at, index)
            at += 1
        return np.array(ordered, dtype=np.int64)

    # ---- a new snapshot -----------------------------------------------------------------------
    def merged(self, stamp: str, format_: str) -> LexiconRows:
        """The snapshot with the delta written in: the live documents in key order, their postings remapped."""
        rows = self.rows
        base = len(rows.ids)
        alive = np.flatnonzero(~self.dead) if self.dead is not None else np.arange(base)
        docs = [(int(rows.floors[s]), rows.ids[s], int(s)) for s in alive.tolist()]
        docs += [(floor, doc_id, -1) for doc_id, (floor, _) in self.delta.items()]
        docs.sort(key=lambda d: (d[0], d[1]))
        new_slot = np.full(base, -1, dtype=np.int64)
        delta_slot: dict[str, int] = {}
        for slot, (_, doc_id, old) in enumerate(docs):
            if old >= 0:
                new_slot[old] = slot
            else:
                delta_slot[doc_id] = slot
        terms = list(rows.terms)
        index = dict(self._terms)
        term_of = np.repeat(np.arange(len(rows.terms), dtype=np.int64), np.diff(rows.offsets))
        moved = new_slot[rows.slots]
        keep = moved >= 0
        extra_terms: list[int] = []
        extra_slots: list[int] = []
        extra_tfs: list[int] = []
        for term, holders in self._delta_terms.items():
            if term not in index:
                index[term] = len(terms)
                terms.append(term)
            for doc_id, tf in holders.items():
                extra_terms.append(index[term])
                extra_slots.append(delta_slot[doc_id])
                extra_tfs.append(tf)
        all_terms = np.concatenate([term_of[keep], np.array(extra_terms, dtype=np.int64)])
        all_slots = np.concatenate([moved[keep], np.array(extra_slots, dtype=np.int64)])
        all_tfs = np.concatenate([rows.tfs[keep].astype(np.int64), np.array(extra_tfs, dtype=np.int64)])
        lengths = np.array([int(rows.lengths[old]) if old >= 0 else sum(self.delta[doc_id][1].values())
                            for _, doc_id, old in docs], dtype=np.int64)
        return _pack(stamp, format_, [d[1] for d in docs], [d[0] for d in docs], lengths, terms, all_terms,
                     all_slots, all_tfs)


def build_rows(stamp: str, format_: str, docs: list[tuple[str, int, Counter[str]]]) -> LexiconRows:
    """A snapshot of documents given in key order as (id, floor_from, term counts)."""
    index: dict[str, int] = {}
    terms: list[str] = []
    term_of: list[int] = []
    slots: list[int] = []
    tfs: list[int] = []
    for slot, (_, _, counts) in enumerate(docs):
        for term, tf in counts.items():
            at = index.get(term)
            if at is None:
                at = index[term] = len(terms)
                terms.append(term)
            term_of.append(at)
            slots.append(slot)
            tfs.append(tf)
    lengths = np.array([sum(c.values()) for _, _, c in docs], dtype=np.int64)
    return _pack(stamp, format_, [d[0] for d in docs], [d[1] for d in docs], lengths, terms,
                 np.array(term_of, dtype=np.int64), np.array(slots, dtype=np.int64), np.array(tfs, dtype=np.int64))


def _pack(stamp: str, format_: str, ids: list[str], floors: list[int], lengths: np.ndarray, terms: list[str],
          term_of: np.ndarray, slots: np.ndarray, tfs: np.ndarray) -> LexiconRows:
    counts = np.bincount(term_of, minlength=len(terms)) if len(terms) else np.zeros(0, np.int64)
    used = np.flatnonzero(counts)  # a term no document holds any more is left out
    remap = np.full(len(terms), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    term_of = remap[term_of]
    order = np.lexsort((slots, term_of))  # by term, then by slot
    offsets = np.concatenate([[0], np.cumsum(counts[used])]).astype(np.int64)
    return LexiconRows(stamp, format_, list(ids), np.asarray(floors, dtype=np.int64), lengths,
                       [terms[i] for i in used.tolist()], offsets, slots[order].astype(np.int32),
                       tfs[order].astype(np.int32))


# ---- following a chat ---------------------------------------------------------------------------
def chat_lexicon(store: Store, chat_id: str, schema: Schema, event_types: set[str],
                 stamp: Stamp) -> dict[str, CorpusLexicon]:
    """Both corpora of the chat at `stamp` (its current one): from the snapshots and what changed since, or made
    afresh (and saved). A delta past COMPACT_SHARE of a corpus is written into a new snapshot."""
    reads = RecallReads(store.conn, chat_id)
    current = stamp_text(stamp)
    created_at = stamp[0][1]
    format_ = lexicon_format()
    out: dict[str, CorpusLexicon] = {}
    stale: list[str] = []
    for corpus in (NODES, SOURCES):
        rows = read_lexicon(store.conn, chat_id, corpus)
        touched = None
        if rows is not None and rows.format == format_:
            touched = _touched(store, chat_id, reads, rows.stamp, created_at, stamp, corpus)
        if rows is None or touched is None:  # no snapshot, or of another format: touched is None
            stale.append(corpus)
            continue
        lexicon = out[corpus] = CorpusLexicon(rows)
        if touched:
            _follow(lexicon, corpus, touched, reads, schema, event_types)
            if len(lexicon.delta) + lexicon.dead_count > max(COMPACT_MIN, COMPACT_SHARE * lexicon.size):
                lexicon = out[corpus] = CorpusLexicon(lexicon.merged(current, format_))
                _save(store, chat_id, corpus, lexicon.rows)
    if stale:
        for corpus, rows in _build(reads, schema, event_types, current, format_, stale).items():
            out[corpus] = CorpusLexicon(rows)
            _save(store, chat_id, corpus, rows)
    return out


def _touched(store: Store, chat_id: str, reads: RecallReads, saved: str, created_at: str, stamp: Stamp,
             corpus: str) -> set[str] | None:
    """The documents of `corpus` that writes after `saved` may have changed; None when that cannot be said."""
    at, graph_version, messages_version = _parse_stamp(saved)
    _, now_graph, now_messages = stamp
    if at != created_at or graph_version > now_graph or messages_version > now_messages:
        return None
    ids: set[str] = set()
    if graph_version != now_graph:
        change = store.changes.graph_since(chat_id, graph_version, now_graph)
        if change is None:
            return None
        ids |= change.nodes
    if corpus == SOURCES and messages_version != now_messages:
        floor = store.changes.messages_since(chat_id, messages_version, now_messages)
        if floor is None:
            return None
        if floor is not False:
            ids.update(reads.reaching(floor))
    return ids


def _follow(lexicon: CorpusLexicon, corpus: str, ids: set[str], reads: RecallReads, schema: Schema,
            event_types: set[str]) -> None:
    nodes = reads.nodes(ids)
    lines = reads.lines(_source_floors(nodes.values())) if corpus == SOURCES else {}
    for doc_id in ids:
        node = nodes.get(doc_id)
        lexicon.replace(doc_id, None if node is None else _document(node, corpus, schema, event_types, lines))


def _document(node: Node, corpus: str, schema: Schema, event_types: set[str],
              lines: dict[int, str]) -> tuple[int, Counter[str]] | None:
    if corpus == NODES:
        return node.floor_from, Counter(tokenize(document_text(node, schema)))
    source = source_document(node, lines, event_types)
    return (node.floor_from, Counter(tokenize(source))) if source else None


def _source_floors(nodes: Iterable[Node]) -> set[int]:
    return {f for n in nodes if n.floor_to - n.floor_from + 1 <= SOURCE_SPAN
            for f in range(max(0, n.floor_from - 1), n.floor_to + 1)}


def _build(reads: RecallReads, schema: Schema, event_types: set[str], stamp: str, format_: str,
           corpora: list[str]) -> dict[str, LexiconRows]:
    """Every document of the corpora tokenized (a chat whose snapshot is missing or stale: once)."""
    nodes = reads.graph.nodes(archived=None)  # (floor_from, id): the key order
    lines = reads.lines() if SOURCES in corpora else {}
    out: dict[str, LexiconRows] = {}
    for corpus in corpora:
        docs = [(n.id, *doc) for n in nodes if (doc := _document(n, corpus, schema, event_types, lines)) is not None]
        out[corpus] = build_rows(stamp, format_, docs)
    return out


def _save(store: Store, chat_id: str, corpus: str, rows: LexiconRows) -> None:
    with store.transaction() as conn:
        save_lexicon(conn, chat_id, corpus, rows)
