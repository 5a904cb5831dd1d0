"""The write half of a sync: embed the node documents and combine the sources a sync found changed, and write them
to Chroma in as few calls as the changes allow. Each Chroma write costs about 7 ms of CPU however small it is (its
threads hand the batch over several times), so a commit's changes to one collection go in one call: a node whose
metadata alone changed rides along in the node collection's upsert, with the vector Chroma already holds for it,
when there is an upsert anyway (the common reply: a new event and a character whose floors moved)."""

from __future__ import annotations

from collections.abc import Callable

from curator.store.graph import Node
from curator.vectors.messages import combine
from curator.vectors.search import NODES, SOURCES

# At most this many metadata-only changes ride along in an upsert: each is read back and re-inserted in the HNSW
# graph, cheaper than a second write for a few nodes, dearer than a metadata update for a compaction's hundreds.
RIDE_ALONG_MAX = 32


def node_metadata(node: Node) -> dict:
    return {"type": node.type, "level": node.level, "archived": node.archived, "parent": node.parent or "",
            "floor_from": node.floor_from, "floor_to": node.floor_to}


class VectorWrites:
    """Mixed into `VectorIndex`, which gives it `function`, `messages`, `profile` and `_counts`."""

    def _write(self, chat_id: str, collection, sources, items: list, source_items: list, to_update: list,
               lines: dict[int, str], report, kept: dict, progress: Callable[[int, int], None] | None) -> None:
        """Embed `items` (node, document) into `collection`, combine `source_items` (node, floors, source) into
        `sources`, and write the metadata of `to_update` (node, document): in the first node upsert when small
        enough, else by a metadata update."""
        riders = self._riders(collection, to_update) if items and 0 < len(to_update) <= RIDE_ALONG_MAX else []
        updates = [n for n, _ in to_update if n.id not in {r[0][0].id for r in riders}]
        if updates:
            collection.update(ids=[n.id for n in updates], metadatas=[node_metadata(n) for n in updates])
        work = [(collection, item) for item in items] + [(sources, item) for item in source_items]
        for start in range(0, len(work), self.profile.batch_size):
            batch = work[start:start + self.profile.batch_size]
            for target in (collection, sources):
                part = [item for where, item in batch if where is target]
                if target is collection:
                    embedded = self._embed(part, report, kept)
                    report.embedded += len(embedded)
                else:
                    embedded = self._combine(chat_id, part, lines, report, kept)
                    report.sources_embedded += len(embedded)
                if target is collection and embedded and riders:
                    embedded, riders = embedded + riders, []
                if embedded:
                    target.upsert(ids=[n.id for (n, *_), _ in embedded], embeddings=[v for _, v in embedded],
                                  documents=[item[-1] for item, _ in embedded],
                                  metadatas=[node_metadata(n) for (n, *_), _ in embedded])
                    key = (chat_id, NODES if target is collection else SOURCES)
                    self._counts[key] = max(self._counts.get(key, 0), len(embedded))
            if progress:
                progress(min(start + len(batch), len(work)), len(work))
        if riders:  # every embedding of the batch failed: no upsert to ride in
            collection.update(ids=[n.id for (n, _), _ in riders], metadatas=[node_metadata(n) for (n, _), _ in riders])
        report.updated_metadata = len(to_update)

    @staticmethod
    def _riders(collection, to_update: list) -> list:
        """(item, stored vector) of the metadata-only changes whose vector Chroma holds (one read, ~0.4 ms)."""
        got = collection.get(ids=[n.id for n, _ in to_update], include=["embeddings"])
        stored = dict(zip(got["ids"], got["embeddings"]))
        return [((n, document), stored[n.id]) for n, document in to_update if n.id in stored]

    def _embed(self, batch: list, report, kept: dict) -> list:
        """Embed a batch of node documents; if it fails, embed its items one by one so one bad node does not stop
        the rest. A node that failed keeps no hash, so the next sync tries it again."""
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
                    _failed(item[0].id, exc, report, kept, source=False)
            return done

    def _combine(self, chat_id: str, batch: list, lines: dict[int, str], report, kept: dict) -> list:
        """Source vectors of a batch of (event, floors, source): the mean of the floors' message vectors, each
        message embedded once (`vectors/messages.py`). On failure, event by event, as `_embed`."""
        if not batch:
            return []
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
