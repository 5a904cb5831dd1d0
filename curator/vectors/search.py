"""The read side of the vector index: nearest nodes, sources and neighbours of a chat, and the query vectors
(embedded once per text, the last few kept)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

    from curator.vectors.chroma_direct import DirectReader
    from curator.vectors.embeddings import LazyEmbedder
    from curator.vectors.mirror import Mirrors
    from curator.vectors.pending import PendingWrites

QUERIES_KEPT = 32
NODES, SOURCES = "mc_", "ms_"  # collection name prefixes: node documents, events' source messages
# query vectors by text, or by (SOURCES, text, source text) for a source vector derived from its text's
QueryVectors = dict[Any, np.ndarray]


class VectorSearch:
    """Mixed into `VectorIndex`, which gives it what is declared here."""

    function: LazyEmbedder
    direct: DirectReader | None
    pending: PendingWrites
    mirrors: Mirrors
    _query_cache: OrderedDict[tuple[str, ...], np.ndarray]
    _locks_guard: threading.Lock
    _search_pool: ThreadPoolExecutor | None

    if TYPE_CHECKING:
        def _collection(self, chat_id: str, kind: str = NODES) -> Collection: ...

        def _count(self, chat_id: str, kind: str) -> int: ...

        @staticmethod
        def collection_name(chat_id: str, kind: str = NODES) -> str: ...

        def _drop_handles(self, chat_id: str) -> None: ...

        def flush(self, chat_id: str) -> int: ...

    def query(self, chat_id: str, text: str, k: int = 20) -> list[tuple[str, float]]:
        """The k nodes of this chat most similar to `text`, as (node id, cosine similarity)."""
        return self._query(chat_id, NODES, text, k, None)

    def query_sources(self, chat_id: str, text: str, k: int = 20) -> list[tuple[str, float]]:
        """The k events of this chat whose source messages are most similar to `text`."""
        return self._query(chat_id, SOURCES, text, k, None)

    def query_both(self, chat_id: str, text: str, source_text: str, k: int = 20, context: bool = False,
                   source_k: int | None = None) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """`query` and `query_sources` at once (k nodes, `source_k` sources, k when None), their vectors from
        `pair_vectors`. `context`: the text is a turn before the message answered (see `query_vectors`)."""
        vectors = self.pair_vectors([(text, source_text)], context)
        return self._search_both(chat_id, text, source_text, vectors, k, source_k)

    def query_apart(self, chat_id: str, text: str, source_text: str, k: int = 20,
                    source_k: int | None = None) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """`query` with `text`'s own vector and `query_sources` with `source_text`'s, both embedded in one model
        call (one pass when the texts are the same): `rag`, which has no BM25 to count the speakers' names, searches
        the nodes with them."""
        return self._search_both(chat_id, text, source_text, self.query_vectors([text, source_text]), k, source_k)

    def _search_both(self, chat_id: str, text: str, source_text: str, vectors: QueryVectors, k: int,
                     source_k: int | None) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        """The node search of `text` and the source search of `source_text`, by their `vectors`: in turn when both
        copies are in memory (~0.4 ms each), else the source search in a thread beside the node search."""
        vector, source_vector = vectors.get(text), vectors.get(source_text)
        source_k = k if source_k is None else source_k
        if self.mirrors.ready(chat_id, NODES) and self.mirrors.ready(chat_id, SOURCES):
            return (self._query(chat_id, NODES, text, k, vector),
                    self._query(chat_id, SOURCES, source_text, source_k, source_vector))
        sources = self._searches().submit(self._query, chat_id, SOURCES, source_text, source_k, source_vector)
        return self._query(chat_id, NODES, text, k, vector), sources.result()

    def _searches(self) -> ThreadPoolExecutor:
        """Two threads for the source searches: Chroma releases the GIL while it searches, so a recall's source query
        runs beside its node query (about 1.3 ms of wall at 10k nodes; bench/README.md, "Fourth round")."""
        with self._locks_guard:
            if self._search_pool is None:
                self._search_pool = ThreadPoolExecutor(2, thread_name_prefix="curator-search")
            return self._search_pool

    def pair_vectors(self, pairs: list[tuple[str, str]], context: bool = False) -> QueryVectors:
        """The query vectors of (text, source text) pairs, the source text being the text without the speakers' names.
        An embedder that can add the names' share to the source text's vector (`named_query_vectors`) is asked for
        the source texts only, so each pair costs one model pass; one that searches the nodes without the names too
        (`nameless_node_query`) embeds the source texts alone; others embed both texts in one call."""
        if getattr(self.function.embedder, "nameless_node_query", False):  # one vector, of the source text
            asked = self.query_vectors([s for _, s in pairs], context)
            return {**asked, **{t: asked[s] for t, s in pairs if s in asked}}
        derive = None if context else getattr(self.function.embedder, "named_query_vectors", None)
        if derive is None:
            return self.query_vectors([t for pair in pairs for t in pair], context)
        vectors = self.query_vectors([source for _, source in pairs])
        named = [(t, s) for t, s in dict.fromkeys(pairs) if t != s and t.strip() and s in vectors]
        missing = [(t, s) for t, s in named if ("named", t, s) not in self._query_cache]
        if missing:
            fresh = derive(np.stack([vectors[s] for _, s in missing]), [t for t, _ in missing], [s for _, s in missing])
            for pair, vector in zip(missing, fresh):
                self._query_cache[("named", *pair)] = vector
        for text, source in named:
            vectors[text] = self._remember(("named", text, source), self._query_cache[("named", text, source)])
        self._trim_queries()
        return vectors

    def query_vectors(self, texts: list[str], context: bool = False) -> QueryVectors:
        """The query vectors of `texts`, embedded in one model call; the last few are kept (a recall that must
        score again, a swipe that asks the same). `context`: the texts are turns before the message answered,
        which weigh less in a recall: an embedder with a cheaper way for them (`embed_context_queries`) uses it."""
        texts = [t for t in dict.fromkeys(texts) if t.strip()]
        embed = getattr(self.function.embedder, "embed_context_queries", None) if context else None
        kind = "context" if embed is not None else "query"
        missing = [t for t in texts if (kind, t) not in self._query_cache]
        embed = embed or self.function.embedder.embed_queries
        fresh = dict(zip(missing, embed(missing))) if missing else {}
        found = {t: fresh[t] if t in fresh else self._query_cache[(kind, t)] for t in texts}
        for text, vector in found.items():
            self._remember((kind, text), vector)
        self._trim_queries()
        return found

    def _remember(self, key: tuple[str, ...], vector: np.ndarray) -> np.ndarray:
        """Keep a query vector; asked again counts as new, so the oldest unasked go first."""
        self._query_cache[key] = vector
        self._query_cache.move_to_end(key)
        return vector

    def _trim_queries(self) -> None:
        while len(self._query_cache) > QUERIES_KEPT:
            self._query_cache.popitem(last=False)

    def _query(self, chat_id: str, kind: str, text: str, k: int,
               vector: np.ndarray | None) -> list[tuple[str, float]]:
        """The k nearest in Chroma, or in its in-memory copy once that is loaded (`vectors/mirror.py`), beside the
        staged rows' (`vectors/pending.py`): Chroma is asked for as many more as it holds stale copies of, which
        are left out of its answer. `vector`: the query's (None: `text`'s, embedded or kept)."""
        if not text.strip():
            return []
        staged = self.pending.view(chat_id, kind)
        count = self._count(chat_id, kind)
        if count == 0 and not staged.ids:
            return []
        if vector is None:
            vector = self.query_vectors([text]).get(text)
            if vector is None:
                return []
        found = self.mirrors.search(chat_id, kind, vector, k, staged.hidden) if count else []
        if found is None:
            asked = k + len(staged.shadow)
            found = self.direct.query(self.collection_name(chat_id, kind), vector, asked) \
                if self.direct is not None else None
            if found is None:
                found = self._chroma_query(chat_id, kind, vector, asked)
            found = [(i, similarity) for i, similarity in found if i not in staged.hidden]
        if staged.ids:
            found.extend(staged.search(vector, k))
            found.sort(key=lambda pair: -pair[1])
        return found[:k]

    def _chroma_query(self, chat_id: str, kind: str, vector: np.ndarray, n: int) -> list[tuple[str, float]]:
        from chromadb.errors import NotFoundError

        collection = self._collection(chat_id, kind)
        try:
            result = collection.query(query_embeddings=[vector], n_results=n, include=["distances"])
        except NotFoundError:  # another process dropped and made the collection again (a full rebuild)
            self._drop_handles(chat_id)
            collection = self._collection(chat_id, kind)
            result = collection.query(query_embeddings=[vector], n_results=n, include=["distances"])
        return [(i, 1.0 - d) for i, d in zip(result["ids"][0], (result["distances"] or [[]])[0])]

    def neighbours(
        self, chat_id: str, node_id: str, k: int = 5, where: dict[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        """The k nodes nearest to node `node_id` (by its stored vector, so nothing is embedded), itself left
        out, as (node id, cosine similarity); `where` filters on the metadata (type, level, archived...).
        Empty when the node is not indexed. Staged writes go to Chroma first (its filters read the metadata)."""
        self.flush(chat_id)
        collection = self._collection(chat_id)
        found = collection.get(ids=[node_id], include=["embeddings"])
        if not found["ids"] or found["embeddings"] is None:
            return []
        vector: np.ndarray = np.asarray(found["embeddings"][0], dtype=np.float32)
        result = collection.query(query_embeddings=[vector], n_results=k + 1, where=where, include=["distances"])
        pairs = [(i, 1.0 - d) for i, d in zip(result["ids"][0], (result["distances"] or [[]])[0]) if i != node_id]
        return pairs[:k]
