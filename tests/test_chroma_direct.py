"""A process that has only read answers its searches through Chroma's Rust bindings (`vectors/chroma_direct.py`),
without importing chromadb's Python client (0.7 s of CPU), nor building the settings' patch models. Its answers are
the full client's; any failure of the bindings hands over to the full client for good, and the first write closes
the reader."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import curator
from curator.store.messages import Message
from curator.vectors.chroma_direct import DirectReader
from curator.vectors.search import NODES, SOURCES

PLACES = ["the bridge", "the docks", "the market", "Ashwood", "the temple", "Saltmere"]
QUERIES = ["What did Mira leave at the docks?", "Who paid the toll at the bridge?", "the lantern in Ashwood"]


def _indexed(data) -> None:
    """A chat of 80 events with their messages, embedded and written to Chroma (closing flushes what is staged)."""
    rng = np.random.default_rng(4)
    with curator.open(data) as memory:
        memory.create_chat("road", "default")
        texts = [f"{rng.choice(['Mira', 'Rowan', 'Eileen'])} left a {rng.choice(['lantern', 'salve', 'map'])} at "
                 f"{rng.choice(PLACES)} (scene {i})." for i in range(80)]
        memory.set_messages("road", [Message("assistant", "Narrator", t) for t in texts])
        memory.commit("road", [{"op": "create_node", "id": f"e{i}", "type": "event", "title": f"Scene {i}",
                                "fields": {"summary": t}, "floor_from": i, "floor_to": i}
                               for i, t in enumerate(texts)], 79, "test")
        memory.rebuild_vectors("road")


FRESH = r"""
import json, sys
import curator
with curator.open(sys.argv[1]) as memory:
    texts = [memory.recall("road", q).text for q in json.loads(sys.argv[2])]
    print(json.dumps({"chromadb": "chromadb" in sys.modules, "direct": memory.index.direct.queries, "texts": texts,
                      "patch_models": "curator.api.chat_settings" in sys.modules}))
"""


def test_a_fresh_process_recalls_without_chromadb_and_injects_what_the_full_client_gives(tmp_path):
    data = tmp_path / "data"
    _indexed(data)
    run = subprocess.run([sys.executable, "-c", FRESH, str(data), json.dumps(QUERIES)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    fresh = json.loads(run.stdout)
    assert fresh["chromadb"] is False and fresh["direct"] >= len(QUERIES)  # nodes and sources, per query
    assert fresh["patch_models"] is False  # the settings' patch models: built only where a patch is applied
    with curator.open(data) as memory:
        memory.index.client  # noqa: B018 - the full client, as before the reader existed
        assert memory.index.direct is not None and not memory.index.direct.enabled
        assert [memory.recall("road", q).text for q in QUERIES] == fresh["texts"]
        assert all("left a" in text for text in fresh["texts"])


def test_the_reader_answers_as_the_full_client_does(tmp_path):
    data = tmp_path / "data"
    _indexed(data)
    rng = np.random.default_rng(9)
    with curator.open(data) as memory:
        index = memory.index
        dims = index.function.embedder.embed_queries(["x"]).shape[1]
        vectors = [rng.normal(size=dims).astype(np.float32) for _ in range(10)]
        direct = [index.direct.query(index.collection_name("road", kind), v, 15)
                  for kind in (NODES, SOURCES) for v in vectors]
        assert index.direct.queries == 20
        full = [index._chroma_query("road", kind, v, 15) for kind in (NODES, SOURCES) for v in vectors]
        assert not index.direct.enabled  # the full client closed it
    for mine, theirs in zip(direct, full):
        assert mine is not None and [i for i, _ in mine] == [i for i, _ in theirs] and len(mine) == 15
        assert np.allclose([s for _, s in mine], [s for _, s in theirs], atol=1e-6)


def test_a_failing_reader_hands_over_to_the_full_client(tmp_path, monkeypatch, caplog):
    data = tmp_path / "data"
    _indexed(data)
    with curator.open(data) as memory:
        memory.index.direct.close()
        expected = [memory.recall("road", q).text for q in QUERIES]

    def broken(self, name):
        raise TypeError("Bindings.query() takes 10 arguments")  # as another chromadb release might

    monkeypatch.setattr(DirectReader, "_collection", broken)
    with curator.open(data) as memory, caplog.at_level("DEBUG", logger="curator.vectors.chroma_direct"):
        assert [memory.recall("road", q).text for q in QUERIES] == expected
        assert not memory.index.direct.enabled and memory.index.direct.queries == 0
    assert "the full client takes over" in caplog.text


def test_the_first_write_closes_the_reader_and_its_search_sees_the_write(tmp_path):
    data = tmp_path / "data"
    _indexed(data)
    with curator.open(data) as memory:
        memory.recall("road", QUERIES[0])
        assert memory.index.direct.enabled and memory.index.direct.queries
        memory.commit("road", [{"op": "create_node", "id": "owl", "type": "event", "title": "The owl",
                                "fields": {"summary": "A white owl carried the silver compass over Saltmere."}}],
                      80, "test")
        memory.index.flush("road")
        assert not memory.index.direct.enabled
        assert "white owl" in memory.recall("road", "Who carried the silver compass?").text


@pytest.mark.parametrize("broken", ["folder", "collection"])
def test_a_missing_index_or_collection_is_the_full_clients_to_report(tmp_path, broken):
    reader = DirectReader(tmp_path / "nowhere")
    if broken == "collection":
        data = tmp_path / "data"
        _indexed(data)
        reader = DirectReader(data / "chroma")
    assert reader.query("mc_absent", np.ones(8, dtype=np.float32), 3) is None
    assert not reader.enabled and reader.query("mc_absent", np.ones(8, dtype=np.float32), 3) is None


def _unwritten(data) -> dict[str, int]:
    """Per collection, the rows in Chroma's log that its graph files do not hold yet: what a process opening the
    collection adds to the graph again before its first search (1-3.5 ms of CPU a row)."""
    with sqlite3.connect(data / "chroma" / "chroma.sqlite3") as db:
        return dict(db.execute(
            "SELECT c.name, (SELECT count(*) FROM embeddings_queue q WHERE q.topic LIKE '%' || c.id "
            "AND q.seq_id > coalesce(m.seq_id, 0)) FROM collections c "
            "JOIN segments s ON s.collection = c.id AND s.scope = 'VECTOR' "
            "LEFT JOIN max_seq_id m ON m.segment_id = s.id").fetchall())


def test_every_write_reaches_chromas_graph_files(tmp_path):
    data = tmp_path / "data"
    _indexed(data)
    assert len(_unwritten(data)) == 2 and set(_unwritten(data).values()) == {0}
    with curator.open(data) as memory:  # a live turn: a few rows
        memory.commit("road", [{"op": "create_node", "id": "e80", "type": "event", "title": "Scene 80",
                                "fields": {"summary": "Rowan left a map at the docks."}}], 80, "test")
        memory.index.sync("road")
    assert set(_unwritten(data).values()) == {0}


def test_a_collection_made_with_chromas_default_writes_its_graph_from_then_on(tmp_path):
    data = tmp_path / "data"
    _indexed(data)
    with curator.open(data) as memory:
        for kind in (NODES, SOURCES):
            memory.index._collection("road", kind).modify(configuration={"hnsw": {"sync_threshold": 1000}})
        memory.index._collections.clear()
        memory.commit("road", [{"op": "create_node", "id": "e80", "type": "event", "title": "Scene 80",
                                "fields": {"summary": "Rowan left a map at the docks."}}], 80, "test")
        memory.index.sync("road")
        assert [memory.index._collection("road", kind).configuration["hnsw"]["sync_threshold"]
                for kind in (NODES, SOURCES)] == [1, 1]
    assert set(_unwritten(data).values()) == {0}


def test_a_failed_switch_is_tried_again():
    """Switching an older collection's sync threshold is tried again after a failure, and left after the last."""
    from curator.vectors.chroma_client import _persist_each_write

    class Older:
        name, configuration, calls = "mc_x", {"hnsw": {"sync_threshold": 1000}}, 0

        def __init__(self, failures: int) -> None:
            self.failures = failures

        def modify(self, configuration):
            self.calls += 1
            if self.calls <= self.failures:
                raise RuntimeError("busy")
            self.configuration = configuration

    once = Older(failures=1)
    _persist_each_write(once)
    assert once.calls == 2 and once.configuration["hnsw"]["sync_threshold"] == 1
    never = Older(failures=10)
    _persist_each_write(never)  # a server or release without it: left as it is, no error
    assert never.calls == 3 and never.configuration["hnsw"]["sync_threshold"] == 1000
