"""Nearest-neighbour queries of the embedded Chroma through its Rust bindings alone, for a process that has only
read so far.

Why: `import chromadb` costs about 0.7 s of CPU (its API models, telemetry, auth and embedding-function modules),
more than the rest of a one-shot recall at 10k nodes; the module that does Chroma's work, `chromadb_rust_bindings`,
imports in 0.04 s. A process's first searches go through it; the first write, metadata read, rebuild or a Chroma
server makes the full client (`VectorIndex.client`), which closes this reader first, so one process never keeps two
handles on the same files for long.

The calls mirror what chromadb's own `RustBindingsAPI` makes (`chromadb/api/rust.py`): `Bindings(...)`,
`get_collection(name, tenant, database)` and `query(...)`. Any error, such as another chromadb release that changed
them, a missing collection or a locked file, turns the reader off for the process and the caller asks the full client,
which gives the same answer (tests/test_chroma_direct.py compares them)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

TENANT, DATABASE = "default_tenant", "default_database"  # chromadb.config's defaults, which our clients use


def _cache_size() -> int:
    """HNSW indexes kept open, as chromadb sizes it: each keeps 4 data files and a metadata file open."""
    try:
        import resource
    except ImportError:  # Windows: chromadb asks the C runtime (512 handles by default)
        return 512 // 5
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0]) // 5


class DirectReader:
    """Queries of the embedded index in `folder` (what `chromadb.PersistentClient(path=folder)` opens)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._bindings: Any = None
        self._ids: dict[str, str] = {}  # collection name -> id
        self.enabled = True
        self.queries = 0  # answered here (tests and benches read it)

    def query(self, name: str, vector: np.ndarray, n: int) -> list[tuple[str, float]] | None:
        """The `n` nearest rows of collection `name` as (id, cosine similarity); None when this reader cannot
        answer (the caller asks the full client)."""
        if not self.enabled:
            return None
        try:
            bindings, collection_id = self._collection(name)
            found = bindings.query(collection_id, None, [np.asarray(vector, dtype=np.float32)], n, None, None,
                                   ["distances"], TENANT, DATABASE)
            ids, distances = found.ids[0], found.distances[0]
        except Exception as exc:  # noqa: BLE001 - whatever the bindings raise, the full client answers instead
            log.debug("direct Chroma read of %s failed (%s: %s); the full client takes over", name,
                      type(exc).__name__, exc)
            self.close()
            return None
        self.queries += 1
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances)]

    def _collection(self, name: str) -> tuple[Any, str]:
        with self._lock:
            if not self.enabled:
                raise RuntimeError("the direct reader is closed")
            if self._bindings is None:
                import chromadb_rust_bindings as rust

                config = rust.SqliteDBConfig(hash_type=rust.MigrationHash.MD5, migration_mode=rust.MigrationMode.Apply,
                                             url=str(self.folder / "chroma.sqlite3"))
                self._bindings = rust.Bindings(
                    allow_reset=False, sqlite_db_config=config, persist_path=str(self.folder),
                    hnsw_cache_size=_cache_size())
            bindings = self._bindings
            found = self._ids.get(name)
        if found is None:
            found = str(bindings.get_collection(name, TENANT, DATABASE).id)
            with self._lock:
                self._ids[name] = found
        return bindings, found

    def forget(self, name: str) -> None:
        """A collection dropped or made again: its id is read afresh."""
        with self._lock:
            self._ids.pop(name, None)

    def close(self) -> None:
        """Off for good in this process (the full client takes over); a query running on another thread keeps its
        handle until it returns."""
        with self._lock:
            self.enabled = False
            self._bindings = None
            self._ids.clear()
