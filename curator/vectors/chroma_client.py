"""Chroma's side of the vector index: the client (embedded, on disk under the data directory, or a server), a
chat's collections by name, and how they are made."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from curator.errors import CuratorError
from curator.vectors.search import NODES

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

    from curator.vectors.embeddings import LazyEmbedder
    from curator.vectors.profile import EmbeddingProfile

log = logging.getLogger(__name__)

# Chroma writes its graph index to disk once this many rows were written since it last did (1,000 by default);
# the rows after that are in its log only, and every process that opens the collection adds them to the graph
# again before its first search: 1.1-3.7 ms of CPU a row (0.32 CPU-s for 100 rows at 10k nodes, 1.5 for 400), a
# one-shot recall's largest cost. Its writes are incremental (the changed rows), so writing at every upsert costs
# no measurable time, in a live chat's small upserts or a rebuild's large ones (bench/README.md, issue 33).
SYNC_THRESHOLD = 1


def connect(folder: Path, url: str | None) -> ClientAPI:
    """Chroma's client: the server at `url`, else the embedded index in `folder`; a clear error when neither opens."""
    import chromadb
    import chromadb.config

    settings = chromadb.config.Settings(anonymized_telemetry=False)
    if url:
        parsed = urlparse(url)
        try:
            return chromadb.HttpClient(host=parsed.hostname or "127.0.0.1", port=parsed.port or 8000,
                                       ssl=parsed.scheme == "https", settings=settings)
        except Exception as exc:  # noqa: BLE001 - chromadb raises ValueError, httpx errors, ... for one cause
            raise CuratorError(f"cannot reach the Chroma server at {url} ({type(exc).__name__}: {exc})",
                               "Start the Chroma server, or remove `vectors_url` from config.yaml to use the "
                               "embedded index.") from None
    try:
        return chromadb.PersistentClient(path=str(folder), settings=settings)
    except Exception as exc:  # noqa: BLE001 - chromadb's InternalError, OSError, ... for one cause
        raise CuratorError(f"cannot open the embedded vector index in {folder} ({type(exc).__name__}: "
                           f"{' '.join(str(exc).split())[:200]})",
                           "The data directory must be writable (the index writes beside memory.db); copy it "
                           "somewhere writable and pass --data, or set `vectors_url` to a Chroma server."
                           ) from None


def collection_name(chat_id: str, kind: str = NODES) -> str:
    # Chroma names allow only [a-zA-Z0-9._-]; chat ids may be anything (Chinese, spaces...).
    return kind + hashlib.blake2b(chat_id.encode(), digest_size=10).hexdigest()


def open_collection(client: ClientAPI, chat_id: str, kind: str, profile: EmbeddingProfile,
                    function: LazyEmbedder) -> Collection:
    """The chat's collection of `kind`, made when missing, and saving its graph at every upsert."""
    from curator.vectors.chroma_function import CuratorEmbeddingFunction

    found = client.get_or_create_collection(
        collection_name(chat_id, kind), embedding_function=cast(Any, CuratorEmbeddingFunction(profile, function)),
        metadata={"chat_id": chat_id, "profile": profile.key},
        configuration=cast(Any, {"hnsw": {"sync_threshold": SYNC_THRESHOLD}}))
    _persist_each_write(found)
    return found


def _persist_each_write(collection: Collection, attempts: int = 3) -> None:
    """An older collection (made with Chroma's default) writes its graph at every upsert from now on; the next
    process to open it writes the rows its log still holds. Tried again after a failure (CI once saw a collection
    left unswitched while the suite ran on both cores; the cause was not found), then left as it is."""
    for attempt in range(attempts):
        try:
            hnsw = (collection.configuration or {}).get("hnsw") or {}
            if hnsw.get("sync_threshold", SYNC_THRESHOLD) != SYNC_THRESHOLD:
                collection.modify(configuration=cast(Any, {"hnsw": {"sync_threshold": SYNC_THRESHOLD}}))
            return
        except Exception as exc:  # noqa: BLE001 - a server or release without it: the collection works as before
            if attempt == attempts - 1:
                log.debug("Chroma's sync threshold of %s left as it is: %s", collection.name, exc)
            else:
                time.sleep(0.05 * (attempt + 1))
