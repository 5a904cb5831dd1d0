"""The write half of a sync: embed the node documents and combine the sources a sync found changed, and hand them
to a sink: the staged rows of `vectors/pending.py` (a reply, a rollback: written to Chroma later, in batches), or
Chroma itself (`Direct`: a rebuild, or a sync of more changes than a batch holds)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from curator.store.graph import Node
from curator.vectors.messages import combine
from curator.vectors.pending import chroma_metadata, in_calls
from curator.vectors.search import NODES, SOURCES

# Rows given to Chroma in one upsert by a long sync (embedded `batch_size` at a time): Chroma's cost per call is
# large, 512 rows at once took 30% less CPU and 42% less wall than 64 at a time into a 30k-row collection
# (bench/README.md, "Cold start"); a sync stopped midway keeps what was written, at most this many rows behind.
WRITE_ROWS = 512

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from curator.vectors.embeddings import LazyEmbedder
    from curator.vectors.profile import EmbeddingProfile
    from curator.vectors.messages import MessageVectors

Hashes = tuple[str | None, str | None, str]  # a node's content, metadata and source hashes
Written = Callable[[str, str, dict[str, np.ndarray], list[str]], None]  # chat, kind, upserts, deletes
Embedded = tuple[tuple[Node, str], np.ndarray]  # (node, document), its vector
Combined = tuple[tuple[Node, list[int], str], np.ndarray]  # (event, floors, source), its source vector
T = TypeVar("T")


@dataclass
class SyncReport:
    """What a sync or rebuild did."""

    chat_id: str
    mode: str  # incremental | full | floors
    embedded: int = 0
    sources_embedded: int = 0  # events' source vectors written (each the mean of its messages' vectors)
    messages_embedded: int = 0  # messages embedded for them (each message once)
    sources_deferred: int = 0  # archived leaves' sources left until recall needs them
    updated_metadata: int = 0
    deleted: int = 0
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # node id -> error

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Sink(Protocol):
    """Where a sync's writes go: the staged rows (`pending.Batch`) or Chroma now (`Direct`)."""

    def upsert(self, kind: str, ids: list[str], vectors: Sequence[np.ndarray],
               metadatas: list[dict[str, Any]]) -> None: ...

    def update(self, kind: str, ids: list[str], metadatas: list[dict[str, Any]]) -> None: ...

    def delete(self, kind: str, ids: list[str]) -> None: ...


def node_metadata(node: Node) -> dict[str, Any]:
    """What Chroma keeps of a node beside its vector: what its filters ask (`VectorIndex.neighbours`). No floors,
    level or parent (the store has them): a character whose floors move with each reply, or an event folded into a
    summary, then costs the index no write at all. No document either: nothing reads it back, and it cost a quarter
    of each upsert (bench/README.md, "Sixth round")."""
    return {"type": node.type, "archived": node.archived}


class Direct:
    """A sink that writes to the chat's Chroma collections now (`collection(kind)` gives one), keeping the index's
    vector counts (`counts`, (chat, kind) -> a lower bound) and its in-memory copies (`written`,
    `vectors/mirror.py`) true."""

    def __init__(self, chat_id: str, collection: Callable[[str], Collection], counts: dict[tuple[str, str], int],
                 written: Written | None = None) -> None:
        self._chat_id, self._collection, self._counts = chat_id, collection, counts
        self._written = written or (lambda *_: None)

    def upsert(self, kind: str, ids: list[str], vectors: Sequence[np.ndarray],
               metadatas: list[dict[str, Any]]) -> None:
        self._collection(kind).upsert(ids=ids, embeddings=list(vectors), metadatas=chroma_metadata(metadatas))
        self._written(self._chat_id, kind, dict(zip(ids, vectors)), [])
        key = (self._chat_id, kind)
        self._counts[key] = max(self._counts.get(key, 0), len(ids))

    def update(self, kind: str, ids: list[str], metadatas: list[dict[str, Any]]) -> None:
        for part in in_calls(list(zip(ids, metadatas))):  # a compaction may archive thousands at once
            self._collection(kind).update(ids=[i for i, _ in part], metadatas=chroma_metadata([m for _, m in part]))

    def delete(self, kind: str, ids: list[str]) -> None:
        self._counts.pop((self._chat_id, kind), None)  # asked of Chroma again on next use
        for part in in_calls(ids):
            self._collection(kind).delete(ids=part)
            self._written(self._chat_id, kind, {}, part)


class VectorWrites:
    """Mixed into `VectorIndex`, which gives it what is declared here."""

    function: LazyEmbedder
    messages: MessageVectors
    profile: EmbeddingProfile

    def _write(self, chat_id: str, sink: Sink, items: list[tuple[Node, str]],
               source_items: list[tuple[Node, list[int], str]], to_update: list[tuple[Node, str]],
               lines: dict[int, str], report: SyncReport, kept: dict[str, Hashes],
               progress: Callable[[int, int], None] | None,
               checkpoint: Callable[[list[str], list[str]], None] | None = None) -> None:
        """Embed `items` (node, document) as node vectors, combine `source_items` (node, floors, source) into
        source vectors, and give `sink` the metadata of `to_update` (node, document): embedded `batch_size` at a
        time, written WRITE_ROWS at a time. `checkpoint` is told, after each write, the nodes whose vector and whose
        source vector it wrote."""
        if to_update:
            sink.update(NODES, [n.id for n, _ in to_update], [node_metadata(n) for n, _ in to_update])
        size, total = self.profile.batch_size, len(items) + len(source_items)
        batches = [(start, min(start + size, total)) for start in range(0, total, size)]  # node documents first

        def embed(start: int, end: int) -> tuple[list[Embedded], list[Combined]]:
            return (self._embed(items[start:end], report, kept),
                    self._combine(chat_id, source_items[max(0, start - len(items)):max(0, end - len(items))],
                                  lines, report, kept))

        # A joined source is one more text for the embedder (no store read): the next batches can be embedded while
        # this one is written to Chroma, which would otherwise leave a core idle
        ahead = len(batches) > 1 and getattr(self.function.embedder, "joined_sources", False)
        results: Generator[tuple[list[Embedded], list[Combined]], None, None] = \
            _ahead(embed, batches) if ahead else (embed(*batch) for batch in batches)
        with contextlib.closing(results):  # stopped (Ctrl-C, an error): the thread embedding ahead is told at once
            self._write_rows(batches, results, sink, report, progress, checkpoint)
        report.updated_metadata = len(to_update)

    @staticmethod
    def _write_rows(batches: list[tuple[int, int]], results: Iterator[tuple[list[Embedded], list[Combined]]],
                    sink: Sink, report: SyncReport, progress: Callable[[int, int], None] | None,
                    checkpoint: Callable[[list[str], list[str]], None] | None) -> None:
        """Each batch's vectors given to `sink` WRITE_ROWS at a time (and the last), then `checkpoint` told."""
        total = batches[-1][1] if batches else 0
        ready: dict[str, list[tuple[Node, np.ndarray]]] = {NODES: [], SOURCES: []}  # embedded, not written yet
        for (_, end), (embedded, combined) in zip(batches, results):
            report.embedded += len(embedded)
            report.sources_embedded += len(combined)
            ready[NODES] += [(item[0], v) for item, v in embedded]
            ready[SOURCES] += [(item[0], v) for item, v in combined]
            if end == total or len(ready[NODES]) + len(ready[SOURCES]) >= WRITE_ROWS:
                written: dict[str, list[str]] = {NODES: [], SOURCES: []}
                for kind, done in ready.items():
                    if done:
                        written[kind] = [n.id for n, _ in done]
                        sink.upsert(kind, written[kind], [v for _, v in done], [node_metadata(n) for n, _ in done])
                ready = {NODES: [], SOURCES: []}
                if checkpoint is not None:
                    checkpoint(written[NODES], written[SOURCES])
            if progress:
                progress(end, total)

    def _embed(self, batch: list[tuple[Node, str]], report: SyncReport, kept: dict[str, Hashes],
               source: bool = False) -> list[Embedded]:
        """Embed a batch of node documents (or, `source`, of sources as one text each); if it fails, embed its
        items one by one so one bad node does not stop the rest. A node that failed keeps no hash, so the next sync
        tries it again."""
        if not batch:
            return []
        try:
            return list(zip(batch, self.function.embedder.embed_documents([doc for _, doc in batch])))
        except Exception:  # noqa: BLE001 - retried node by node below, each failure reported
            done: list[tuple[tuple[Node, str], np.ndarray]] = []
            for item in batch:
                try:
                    done.append((item, self.function.embedder.embed_documents([item[1]])[0]))
                except Exception as exc:  # noqa: BLE001 - reported per node
                    _failed(item[0].id, exc, report, kept, source=source)
            return done

    def _combine(self, chat_id: str, batch: list[tuple[Node, list[int], str]], lines: dict[int, str],
                 report: SyncReport,
                 kept: dict[str, Hashes]) -> list[tuple[tuple[Node, list[int], str], np.ndarray]]:
        """Source vectors of a batch of (event, floors, source): the mean of the floors' message vectors, each
        message embedded once (`vectors/messages.py`). On failure, event by event, as `_embed`."""
        if not batch:
            return []
        if getattr(self.function.embedder, "joined_sources", False):  # the source as one text (`E5Joined`): its
            # lines' starts, about 128 tokens in all (`VectorIndex._reconcile` made it)
            embedded = {node.id: vector for (node, _), vector in
                        self._embed([(node, source) for node, _, source in batch], report, kept, source=True)}
            return [(item, embedded[item[0].id]) for item in batch if item[0].id in embedded]
        try:
            vectors, fresh = self.messages.vectors(chat_id, lines, {f for _, at, _ in batch for f in at})
            report.messages_embedded += fresh
            return [(item, combine([vectors[f] for f in item[1]])) for item in batch]
        except Exception:  # noqa: BLE001 - retried event by event below, each failure reported
            done: list[tuple[tuple[Node, list[int], str], np.ndarray]] = []
            for item in batch:
                try:
                    vectors, fresh = self.messages.vectors(chat_id, lines, item[1])
                    report.messages_embedded += fresh
                    done.append((item, combine([vectors[f] for f in item[1]])))
                except Exception as exc:  # noqa: BLE001 - reported per node
                    _failed(item[0].id, exc, report, kept, source=True)
            return done


def _ahead(work: Callable[[int, int], T], batches: list[tuple[int, int]]) -> Generator[T, None, None]:
    """`work(*batch)` of each batch in order, each computed in a thread while the caller uses the one before. The
    thread is a daemon and stops at the next batch once the caller stops asking (Ctrl-C, an error): a process that
    exits does not wait for the batches it will not write."""
    results: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def run() -> None:
        for batch in batches:
            if stop.is_set():
                return
            try:
                results.put((True, work(*batch)))
            except BaseException as exc:  # noqa: BLE001 - given to the caller, who raises it
                results.put((False, exc))
                return

    threading.Thread(target=run, name="curator-embed-ahead", daemon=True).start()
    try:
        for _ in batches:
            ok, value = results.get()
            if not ok:
                raise value
            yield value
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):  # a batch waiting to be taken: its thread can go on and stop
            results.get_nowait()


def _failed(node_id: str, exc: Exception, report: SyncReport, kept: dict[str, Hashes], source: bool) -> None:
    report.failed[node_id] = f"{type(exc).__name__}: {exc}"[:300]
    content, meta, source_hash = kept[node_id]
    kept[node_id] = (content, meta, "") if source else (None, None, source_hash)
