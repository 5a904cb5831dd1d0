"""The write half of a sync: embed the node documents and combine the sources a sync found changed, and hand them
to a sink: the staged rows of `vectors/pending.py` (a reply, a rollback: written to Chroma later, in batches), or
Chroma itself (`Direct`: a rebuild, or a sync of more changes than a batch holds)."""

from __future__ import annotations

from collections.abc import Callable

from curator.store.graph import Node
from curator.vectors.messages import combine
from curator.vectors.pending import in_calls
from curator.vectors.search import NODES, SOURCES


def node_metadata(node: Node) -> dict:
    """What Chroma keeps of a node beside its vector: what its filters ask (`VectorIndex.neighbours`). No floors,
    level or parent (the store has them): a character whose floors move with each reply, or an event folded into a
    summary, then costs the index no write at all. No document either: nothing reads it back, and it cost a quarter
    of each upsert (bench/README.md, "Sixth round")."""
    return {"type": node.type, "archived": node.archived}


class Direct:
    """A sink that writes to the chat's Chroma collections now (`collection(kind)` gives one), keeping the index's
    vector counts (`counts`, (chat, kind) -> a lower bound) and its in-memory copies (`written`,
    `vectors/mirror.py`) true."""

    def __init__(self, chat_id: str, collection: Callable[[str], object], counts: dict,
                 written: Callable | None = None):
        self._chat_id, self._collection, self._counts = chat_id, collection, counts
        self._written = written or (lambda *_: None)

    def upsert(self, kind: str, ids: list[str], vectors, metadatas: list[dict]) -> None:
        self._collection(kind).upsert(ids=ids, embeddings=vectors, metadatas=metadatas)
        self._written(self._chat_id, kind, dict(zip(ids, vectors)), [])
        key = (self._chat_id, kind)
        self._counts[key] = max(self._counts.get(key, 0), len(ids))

    def update(self, kind: str, ids: list[str], metadatas: list[dict]) -> None:
        for part in in_calls(list(zip(ids, metadatas))):  # a compaction may archive thousands at once
            self._collection(kind).update(ids=[i for i, _ in part], metadatas=[m for _, m in part])

    def delete(self, kind: str, ids: list[str]) -> None:
        self._counts.pop((self._chat_id, kind), None)  # asked of Chroma again on next use
        for part in in_calls(ids):
            self._collection(kind).delete(ids=part)
            self._written(self._chat_id, kind, {}, part)


class VectorWrites:
    """Mixed into `VectorIndex`, which gives it `function`, `messages` and `profile`."""

    def _write(self, chat_id: str, sink, items: list, source_items: list, to_update: list,
               lines: dict[int, str], report, kept: dict, progress: Callable[[int, int], None] | None) -> None:
        """Embed `items` (node, document) as node vectors, combine `source_items` (node, floors, source) into
        source vectors, and give `sink` the metadata of `to_update` (node, document), in batches."""
        if to_update:
            sink.update(NODES, [n.id for n, _ in to_update], [node_metadata(n) for n, _ in to_update])
        work = [(NODES, item) for item in items] + [(SOURCES, item) for item in source_items]
        for start in range(0, len(work), self.profile.batch_size):
            batch = work[start:start + self.profile.batch_size]
            for kind in (NODES, SOURCES):
                part = [item for where, item in batch if where == kind]
                if kind == NODES:
                    embedded = self._embed(part, report, kept)
                    report.embedded += len(embedded)
                else:
                    embedded = self._combine(chat_id, part, lines, report, kept)
                    report.sources_embedded += len(embedded)
                if embedded:
                    sink.upsert(kind, [n.id for (n, *_), _ in embedded], [v for _, v in embedded],
                                [node_metadata(n) for (n, *_), _ in embedded])
            if progress:
                progress(min(start + len(batch), len(work)), len(work))
        report.updated_metadata = len(to_update)

    def _embed(self, batch: list, report, kept: dict, source: bool = False) -> list:
        """Embed a batch of node documents (or, `source`, of sources as one text each); if it fails, embed its
        items one by one so one bad node does not stop the rest. A node that failed keeps no hash, so the next sync
        tries it again."""
        if not batch:
            return []
        try:
            return list(zip(batch, self.function.embedder.embed_documents([doc for _, doc in batch])))
        except Exception:  # noqa: BLE001 - retried node by node below, each failure reported
            done = []
            for item in batch:
                try:
                    done.append((item, self.function.embedder.embed_documents([item[1]])[0]))
                except Exception as exc:  # noqa: BLE001 - reported per node
                    _failed(item[0].id, exc, report, kept, source=source)
            return done

    def _combine(self, chat_id: str, batch: list, lines: dict[int, str], report, kept: dict) -> list:
        """Source vectors of a batch of (event, floors, source): the mean of the floors' message vectors, each
        message embedded once (`vectors/messages.py`). On failure, event by event, as `_embed`."""
        if not batch:
            return []
        if getattr(self.function.embedder, "joined_sources", False):  # the source as one text (`E5Joined`): its
            # lines' starts, about 128 tokens in all (`VectorIndex._reconcile` made it)
            return self._embed([(node, source) for node, _, source in batch], report, kept, source=True)
        try:
            vectors, fresh = self.messages.vectors(chat_id, lines, {f for _, at, _ in batch for f in at})
            report.messages_embedded += fresh
            return [(item, combine([vectors[f] for f in item[1]])) for item in batch]
        except Exception:  # noqa: BLE001 - retried event by event below, each failure reported
            done = []
            for item in batch:
                try:
                    vectors, fresh = self.messages.vectors(chat_id, lines, item[1])
                    report.messages_embedded += fresh
                    done.append((item, combine([vectors[f] for f in item[1]])))
                except Exception as exc:  # noqa: BLE001 - reported per node
                    _failed(item[0].id, exc, report, kept, source=True)
            return done


def _failed(node_id: str, exc: Exception, report, kept: dict, source: bool) -> None:
    report.failed[node_id] = f"{type(exc).__name__}: {exc}"[:300]
    content, meta, source_hash = kept[node_id]
    kept[node_id] = (content, meta, "") if source else (None, None, source_hash)
