"""The vector index: real Chroma (embedded, and a `chroma run` server on loopback) with the local embedders."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import chromadb
import pytest

from curator.vectors.embeddings import EmbeddingProfile, make_embedder
from curator.vectors.index import VectorIndex, node_document

FACTS = {
    "n_debt": (
        "event",
        "Summary 1",
        {"summary": "Rowan gave Eileen his last healing salve; she swore to repay the debt."},
    ),
    "n_toll": (
        "event",
        "Summary 2",
        {"summary": "Captain Brannoch demanded a toll of three silver crowns at the bridge."},
    ),
    "n_fish": ("event", "Summary 3", {"summary": "Mira caught two silver fish in the river at dawn."}),
    "n_mira": ("character_sheet", None, {"name": "Mira", "identity": "a young courier"}),
}


def seed(memory, chat="road"):
    memory.create_chat(chat, "default")
    memory.commit(chat, [{"op": "create_node", "id": i, "type": t, "title": title, "fields": f, "floor_from": n * 2 + 1,
                          "floor_to": n * 2 + 1} for n, (i, (t, title, f)) in enumerate(FACTS.items())], 7)
    return chat


@pytest.fixture
def index(memory):
    return VectorIndex(memory.store, EmbeddingProfile())


def test_documents_come_from_embedded_fields(memory):
    seed(memory)
    schema = memory.chat("road").schema
    graph = memory.graph("road")
    assert node_document(graph.get("n_debt"), schema) == FACTS["n_debt"][2]["summary"]  # no "Summary 1" noise
    assert node_document(graph.get("n_mira"), schema) == "Mira\na young courier"


def test_sync_is_incremental_and_follows_commits_and_rollbacks(memory, index):
    seed(memory)
    first = index.sync("road")
    assert (first.mode, first.embedded, first.deleted) == ("incremental", 4, 0)
    assert index.sync("road").unchanged == 4 and index.sync("road").embedded == 0
    memory.commit("road", [{"op": "update_node", "id": "n_fish", "set_fields": {"summary": "Mira lost the fish."}},
                           {"op": "archive_node", "id": "n_toll"}], 9)
    report = index.sync("road")
    assert (report.embedded, report.updated_metadata, report.unchanged) == (1, 1, 2)
    memory.rollback("road", 7)
    report = index.sync("road")
    assert report.deleted == 4 and index.status("road")["indexed"] == 0
    assert index.query("road", "salve debt") == []


def test_query_ranks_by_meaning(memory, index):
    seed(memory)
    index.sync("road")
    hits = index.query("road", "What does Eileen owe Rowan?", k=2)
    assert hits[0][0] == "n_debt" and 0 < hits[0][1] <= 1
    assert index.query("road", "toll at the bridge", k=1)[0][0] == "n_toll"


def test_chats_never_see_each_other(memory, index):
    seed(memory, "road")
    memory.create_chat("other", "default")
    memory.commit("other", [{"op": "create_node", "id": "n_x", "type": "event", "title": "S",
                             "fields": {"summary": "Rowan gave Eileen his last healing salve."}}], 1)
    index.sync("road")
    index.sync("other")
    assert {i for i, _ in index.query("other", "healing salve debt", k=10)} == {"n_x"}
    assert "n_x" not in {i for i, _ in index.query("road", "healing salve debt", k=10)}


def test_floor_range_and_full_rebuilds(memory, index):
    seed(memory)
    index.sync("road")
    assert index.sync("road", floors=(2, 4)).embedded == 1  # n_toll spans floor 3
    full = index.sync("road", full=True)
    assert (full.mode, full.embedded) == ("full", 4)


def test_a_profile_change_makes_the_next_sync_full(memory):
    seed(memory)
    VectorIndex(memory.store, EmbeddingProfile()).sync("road")
    other = VectorIndex(memory.store, EmbeddingProfile(model="use-m3"))
    assert other.status("road")["stale_profile"] is True
    report = other.sync("road")
    assert (report.mode, report.embedded) == ("full", 4)
    assert other.query("road", "silver fish river", k=1)[0][0] == "n_fish"


def test_failures_are_per_node(memory, index, monkeypatch):
    seed(memory)
    embedder = index.function.embedder
    real = embedder.embed_documents

    def flaky(texts):
        if any("toll" in t for t in texts):
            raise RuntimeError("the embedder choked")
        return real(texts)

    monkeypatch.setattr(embedder, "embed_documents", flaky)
    report = index.sync("road")
    assert report.embedded == 3 and list(report.failed) == ["n_toll"] and "choked" in report.failed["n_toll"]
    monkeypatch.setattr(embedder, "embed_documents", real)
    assert index.sync("road").embedded == 1  # the failed node is retried next time


def test_a_reopened_collection_rebuilds_our_embedding_function(memory, index):
    seed(memory)
    index.sync("road")
    client = chromadb.PersistentClient(path=str(memory.data_dir / "chroma"),
                                       settings=chromadb.Settings(anonymized_telemetry=False))
    collection = client.get_collection(VectorIndex.collection_name("road"))
    result = collection.query(query_texts=["healing salve debt"], n_results=1)  # embedded by our function
    assert result["ids"][0] == ["n_debt"]


def test_local_embedders_are_normalized_and_multilingual():
    for model in ("e5-small-q4", "use-m3"):
        embedder = make_embedder(EmbeddingProfile(model=model))
        docs = embedder.embed_documents(["艾琳欠羅文一個人情", "The bridge toll is three silver crowns"])
        query = embedder.embed_queries(["Eileen owes Rowan a favour"])
        assert docs.dtype.name == "float32" and abs(float((docs[0] ** 2).sum()) - 1) < 1e-3
        assert (docs @ query.T)[0, 0] > (docs @ query.T)[1, 0], model  # the Chinese debt beats the toll


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_chroma_server_over_loopback(memory, tmp_path):
    exe = shutil.which("chroma") or str(__import__("pathlib").Path(__import__("sys").executable).with_name("chroma"))
    port = _free_port()
    server = subprocess.Popen([exe, "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        seed(memory)
        index = VectorIndex(memory.store, EmbeddingProfile(), url=f"http://127.0.0.1:{port}")
        assert index.sync("road").embedded == 4
        assert index.query("road", "healing salve debt", k=1)[0][0] == "n_debt"
        memory.rollback("road", 7)
        assert index.sync("road").deleted == 4
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize(("write_rows", "batches", "kept"), [(4, 4, 16), (8, 3, 8)])
def test_a_sync_stopped_midway_is_taken_up_where_it_stopped(memory, monkeypatch, write_rows, batches, kept):
    """Ctrl-C (or a crash) during a long build: what was written to Chroma is saved write by write (WRITE_ROWS
    embedded rows at a time), so the next sync embeds only the rest, and ends where an uninterrupted one does."""
    from curator.store.messages import Message
    from curator.vectors import writes

    monkeypatch.setattr(writes, "WRITE_ROWS", write_rows)

    for chat in ("long", "clean"):
        memory.create_chat(chat, "default")
        memory.set_messages(chat, [Message("assistant", "Mira", f"Mira counted {n} silver fish at the dock.")
                                   for n in range(24)])
        memory.commit(chat, [{"op": "create_node", "id": f"e{n}", "type": "event", "title": f"Summary {n}",
                              "fields": {"summary": f"Mira counted {n} silver fish."}, "floor_from": n, "floor_to": n}
                             for n in range(24)], 23)
    first = VectorIndex(memory.store, EmbeddingProfile(batch_size=4))
    seen: list[int] = []

    def stop_after_four_batches(done: int, total: int) -> None:
        seen.append(done)
        if len(seen) == batches:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        first.sync("long", full=True, progress=stop_after_four_batches)
    second = VectorIndex(memory.store, EmbeddingProfile(batch_size=4))  # as the next process would
    report = second.sync("long")
    assert report.embedded + report.sources_embedded == 48 - kept  # 24 nodes and 24 sources; what was written kept
    assert second.sync("long").embedded == 0 and second.status("long")["indexed"] == 24
    second.sync("clean")  # the same chat, built in one go
    assert second._state("long") == second._state("clean")
    assert second.query("long", "counted 21 silver fish", k=1)[0][0] == "e21"
