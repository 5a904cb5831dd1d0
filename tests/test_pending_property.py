"""Staged vector writes against writing each change to Chroma at once: for any sequence of upserts, metadata
updates and deletes, with flushes anywhere in it, a search sees what the direct collection would answer, and after
the last flush Chroma holds the same ids, vectors and metadata (real SQLite store, real Chroma)."""

from __future__ import annotations

import chromadb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from curator.store.store import Store
from curator.vectors.pending import PendingWrites
from curator.vectors.writes import Direct

IDS = ["a", "b", "c", "d"]
DIM = 8

_op = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(IDS), st.integers(0, 50)),
    st.tuples(st.just("meta"), st.sampled_from(IDS), st.integers(0, 50)),
    st.tuples(st.just("delete"), st.sampled_from(IDS), st.just(0)),
    st.tuples(st.just("flush"), st.just(""), st.just(0)),
)


def _vector(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _held(collection) -> dict:
    got = collection.get(include=["embeddings", "metadatas"])
    return {
        i: (np.round(np.asarray(v), 5).tolist(), m) for i, v, m in zip(got["ids"], got["embeddings"], got["metadatas"])
    }


@settings(max_examples=60, deadline=None, derandomize=True,  # the same examples on every run: CI never flakes
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_op, min_size=1, max_size=25))
def test_staged_writes_end_as_direct_writes(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("pending")
    store = Store(path / "data")
    store.create_chat("c", store_schema())
    client = chromadb.EphemeralClient(settings=chromadb.Settings(anonymized_telemetry=False))
    name = path.name.replace("_", "-")[-40:]
    staged_col = client.create_collection(f"s-{name}", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    direct_col = client.create_collection(f"d-{name}", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    direct = Direct("c", lambda kind: direct_col, {})
    pending = PendingWrites(store)
    present: dict[str, bool] = {}  # what the direct side holds, so a metadata update is only of a held id
    indexed: set[str] = set()  # ids the index holds (in Chroma or staged), as a sync's hashes would say
    try:
        for op, node_id, seed in steps:
            if op == "flush":
                pending.flush("c", lambda kind: staged_col)
                continue
            if op == "meta" and not present.get(node_id):
                continue  # a sync updates metadata only of a node whose vector is held
            batch = pending.batch("c", lambda kind, i: i in indexed)
            if op == "upsert":
                # the same metadata keys as an update (as a node's always are): Chroma's upsert merges keys
                args = ("mc_", [node_id], [_vector(seed)], [{"n": seed, "moved": False}])
                batch.upsert(*args)
                direct.upsert(*args)
                present[node_id] = True
                indexed.add(node_id)
            elif op == "meta":
                batch.update("mc_", [node_id], [{"n": seed, "moved": True}])
                direct.update("mc_", [node_id], [{"n": seed, "moved": True}])
            else:
                batch.delete("mc_", [node_id])
                direct.delete("mc_", [node_id])
                present[node_id] = False
                indexed.discard(node_id)
            with store.transaction("c") as conn:
                batch.write(conn)
            pending.take(batch)
            _same_search(pending, staged_col, direct_col)
        assert _plain(PendingWrites(store).rows("c")) == _plain(pending.rows("c"))  # memory and store agree
        pending.flush("c", lambda kind: staged_col)
        assert _held(staged_col) == _held(direct_col)
    finally:
        store.close()


def _plain(rows: dict) -> dict:
    return {(kind, i): (r.op, r.in_chroma, None if r.vector is None else r.vector.tolist(), r.metadata)
            for kind, found in rows.items() for i, r in found.items()}


def _same_search(pending, staged_col, direct_col) -> None:
    """A search of the staged side (Chroma's answer without its stale copies, and the staged rows) ranks what the
    direct side ranks."""
    view = pending.view("c", "mc_")
    query = _vector(999)
    count = staged_col.count()
    found = []
    if count:
        result = staged_col.query(query_embeddings=[query], n_results=len(IDS) + len(view.shadow))
        found = [(i, 1 - d) for i, d in zip(result["ids"][0], result["distances"][0]) if i not in view.hidden]
    found = sorted(found + view.search(query, len(IDS)), key=lambda p: -p[1])[:len(IDS)]
    expected = []
    if direct_col.count():
        result = direct_col.query(query_embeddings=[query], n_results=len(IDS))
        expected = [(i, 1 - d) for i, d in zip(result["ids"][0], result["distances"][0])]
    def ranked(pairs):  # equal vectors tie: in id order
        return sorted((round(-score, 4), i) for i, score in pairs)

    assert [i for _, i in ranked(found)] == [i for _, i in ranked(expected)]
    assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-4)


def store_schema():
    from curator.schemas.loader import load_preset

    return load_preset("default")
