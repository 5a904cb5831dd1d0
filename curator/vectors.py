"""The vector index: derived state in Chroma, one collection per chat (queries need no filter, and one chat can
never see another's vectors). Each node's document is built from its type's embedded fields; a content hash per
node says what must be re-embedded after a commit or a rollback, and what vanished."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import chromadb
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from schemas import Schema

from .embeddings import Embedder, EmbeddingProfile, make_embedder
from .graph import Node
from .store import Store, utc_now

Progress = Callable[[int, int], None]


@register_embedding_function
class CuratorEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's handle on our embedders. Registered, so a reopened collection can rebuild it from its config
    (the profile; never a key). Chroma's own default function would download a model and is never used."""

    def __init__(self, profile: EmbeddingProfile | dict):
        self.profile = profile if isinstance(profile, EmbeddingProfile) else EmbeddingProfile(**profile)
        self._embedder: Embedder | None = None

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = make_embedder(self.profile)
        return self._embedder

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embedder.embed_documents(list(input)))

    def embed_query(self, input: Documents) -> Embeddings:
        return list(self.embedder.embed_queries(list(input)))

    @staticmethod
    def name() -> str:
        return "memory_curator"

    def get_config(self) -> dict:
        return self.profile.model_dump()

    @staticmethod
    def build_from_config(config: dict) -> CuratorEmbeddingFunction:
        return CuratorEmbeddingFunction(EmbeddingProfile(**config))

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine"]


def node_document(node: Node, schema: Schema) -> str:
    """The text embedded for a node: its embedded fields (or all fields if the type marks none), after the title
    when the title says something the fields do not (not for template titles like "Summary 12")."""
    spec = schema.type(node.type)
    names = (spec.embedded_fields or spec.field_names) if spec else tuple(node.fields)
    values = [node.fields[n].strip() for n in names if node.fields.get(n, "").strip()]
    generated = spec is not None and spec.title_template is not None
    if not generated and node.title and not any(node.title in v for v in values):
        values.insert(0, node.title)
    return "\n".join(values)


def _digest(*parts: object) -> str:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def _metadata(node: Node) -> dict:
    return {"type": node.type, "level": node.level, "archived": node.archived, "parent": node.parent or "",
            "floor_from": node.floor_from, "floor_to": node.floor_to}


@dataclass
class SyncReport:
    """What a sync or rebuild did."""

    chat_id: str
    mode: str  # incremental | full | floors
    embedded: int = 0
    updated_metadata: int = 0
    deleted: int = 0
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # node id -> error

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class VectorIndex:
    """Chroma collections for the chats of one store: embedded (on disk under the data directory) by default,
    or a Chroma server when `url` is given."""

    def __init__(self, store: Store, profile: EmbeddingProfile, url: str | None = None):
        self.store, self.profile = store, profile
        self.function = CuratorEmbeddingFunction(profile)
        self._sync_lock = threading.RLock()
        settings = chromadb.Settings(anonymized_telemetry=False)
        if url:
            parsed = urlparse(url)
            self.client = chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                              ssl=parsed.scheme == "https", settings=settings)
        else:
            self.client = chromadb.PersistentClient(path=str(Path(store.data_dir) / "chroma"), settings=settings)

    @staticmethod
    def collection_name(chat_id: str) -> str:
        # Chroma names allow only [a-zA-Z0-9._-]; chat ids may be anything (Chinese, spaces...).
        return "mc_" + hashlib.blake2b(chat_id.encode(), digest_size=10).hexdigest()

    def _collection(self, chat_id: str):
        return self.client.get_or_create_collection(
            self.collection_name(chat_id), embedding_function=self.function,
            metadata={"chat_id": chat_id, "profile": self.profile.key})

    def _state(self, chat_id: str) -> tuple[str | None, dict[str, tuple[str, str]]]:
        row = self.store.conn.execute("SELECT profile FROM vector_state WHERE chat_id=?", (chat_id,)).fetchone()
        hashes = {r[0]: (r[1], r[2]) for r in self.store.conn.execute(
            "SELECT node_id, content_hash, meta_hash FROM vector_hashes WHERE chat_id=?", (chat_id,))}
        return (row[0] if row else None), hashes

    def sync(self, chat_id: str, full: bool = False, floors: tuple[int, int] | None = None,
             progress: Progress | None = None) -> SyncReport:
        """Bring the chat's collection in line with its graph: embed what is new or changed, update metadata
        that changed, delete what vanished. `full` re-embeds everything; `floors` re-embeds the nodes whose
        floor range meets [a, b]. A profile change turns any sync into a full one. Failures are per node."""
        with self._sync_lock:  # one at a time: the HTTP service syncs from request and job threads
            return self._sync(chat_id, full, floors, progress)

    def _sync(self, chat_id: str, full: bool, floors: tuple[int, int] | None, progress: Progress | None) -> SyncReport:
        chat = self.store.chat(chat_id)
        profile_key, hashes = self._state(chat_id)
        if profile_key is not None and profile_key != self.profile.key:
            full = True
        mode = "full" if full else "floors" if floors else "incremental"
        report = SyncReport(chat_id, mode)
        if full:
            self.drop(chat_id)
            hashes = {}
        collection = self._collection(chat_id)
        nodes = self.store.graph(chat_id).nodes(archived=None)
        to_embed, to_update, kept = [], [], {}
        for node in nodes:
            document = node_document(node, chat.schema)
            content, meta = _digest(self.profile.key, document), _digest(*_metadata(node).values())
            old = hashes.get(node.id)
            forced = floors is not None and node.floor_from <= floors[1] and node.floor_to >= floors[0]
            if old is None or old[0] != content or forced:
                to_embed.append((node, document, content, meta))
            elif old[1] != meta:
                to_update.append((node, content, meta))
            else:
                report.unchanged += 1
                kept[node.id] = old
        vanished = sorted(set(hashes) - {n.id for n in nodes})
        if vanished:
            collection.delete(ids=vanished)
            report.deleted = len(vanished)
        if to_update:
            collection.update(ids=[n.id for n, _, _ in to_update], metadatas=[_metadata(n) for n, _, _ in to_update])
            report.updated_metadata = len(to_update)
            kept.update({n.id: (c, m) for n, c, m in to_update})
        done = 0
        for start in range(0, len(to_embed), self.profile.batch_size):
            batch = to_embed[start:start + self.profile.batch_size]
            embedded = self._embed(batch, report)
            if embedded:
                collection.upsert(ids=[item[0].id for item, _ in embedded], embeddings=[v for _, v in embedded],
                                  documents=[item[1] for item, _ in embedded],
                                  metadatas=[_metadata(item[0]) for item, _ in embedded])
            for (node, _document, content, meta), _vector in embedded:
                kept[node.id] = (content, meta)
            report.embedded += len(embedded)
            done += len(batch)
            if progress:
                progress(done, len(to_embed))
        self._save_state(chat_id, kept)
        return report

    def _embed(self, batch: list, report: SyncReport) -> list:
        """Embed a batch; if it fails, embed its nodes one by one so one bad node does not stop the rest."""
        try:
            vectors = self.function.embedder.embed_documents([doc for _, doc, _, _ in batch])
            return list(zip(batch, vectors))
        except Exception:  # noqa: BLE001 - retried node by node below, each failure reported
            done = []
            for item in batch:
                try:
                    done.append((item, self.function.embedder.embed_documents([item[1]])[0]))
                except Exception as exc:  # noqa: BLE001 - reported per node
                    report.failed[item[0].id] = f"{type(exc).__name__}: {exc}"[:300]
            return done

    def _save_state(self, chat_id: str, hashes: dict[str, tuple[str, str]]) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM vector_hashes WHERE chat_id=?", (chat_id,))
            conn.executemany("INSERT INTO vector_hashes (chat_id, node_id, content_hash, meta_hash) VALUES (?, ?, ?, ?)",
                             [(chat_id, node_id, c, m) for node_id, (c, m) in hashes.items()])
            conn.execute("INSERT INTO vector_state (chat_id, profile, updated_at) VALUES (?, ?, ?) "
                         "ON CONFLICT(chat_id) DO UPDATE SET profile=excluded.profile, updated_at=excluded.updated_at",
                         (chat_id, self.profile.key, utc_now()))

    def drop(self, chat_id: str) -> None:
        """Forget the chat's vectors (the collection and the hashes)."""
        names = {c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()}
        if self.collection_name(chat_id) in names:
            self.client.delete_collection(self.collection_name(chat_id))
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM vector_hashes WHERE chat_id=?", (chat_id,))
            conn.execute("DELETE FROM vector_state WHERE chat_id=?", (chat_id,))

    def query(self, chat_id: str, text: str, k: int = 20) -> list[tuple[str, float]]:
        """The k nodes of this chat most similar to `text`, as (node id, cosine similarity)."""
        collection = self._collection(chat_id)
        count = collection.count()
        if count == 0 or not text.strip():
            return []
        vector = self.function.embedder.embed_queries([text])[0]
        result = collection.query(query_embeddings=[vector], n_results=min(k, count), include=["distances"])
        return [(i, 1.0 - d) for i, d in zip(result["ids"][0], result["distances"][0])]

    def status(self, chat_id: str) -> dict:
        profile_key, hashes = self._state(chat_id)
        total = len(self.store.graph(chat_id).nodes(archived=None))
        return {"chat": chat_id, "profile": profile_key, "current_profile": self.profile.key,
                "indexed": len(hashes), "nodes": total, "stale_profile": profile_key not in (None, self.profile.key)}
