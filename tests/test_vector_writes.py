"""How a sync writes to Chroma: one write per collection a commit changed, and what Chroma holds afterwards is what
a write per change would have left (real SQLite, real Chroma, the default local embedder)."""

from __future__ import annotations

import numpy as np
from chromadb.api.models.Collection import Collection

from curator.store.messages import Message
from curator.vectors import writes
from curator.vectors.writes import node_metadata


def _count_writes(monkeypatch) -> list[tuple[str, str]]:
    """(method, collection name) of every Chroma write from here on."""
    calls = []
    for method in ("upsert", "update", "delete", "add"):
        original = getattr(Collection, method)

        def counted(self, *args, _original=original, _method=method, **kwargs):
            calls.append((_method, self.name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Collection, method, counted)
    return calls


def _stored(collection, node_id: str) -> tuple[list, str, dict]:
    got = collection.get(ids=[node_id], include=["embeddings", "documents", "metadatas"])
    return np.asarray(got["embeddings"][0]).tolist(), got["documents"][0], got["metadatas"][0]


def _reply_chat(memory):
    """A chat with the index open: a character and an event, each from its floors' messages."""
    memory.create_chat("road", "default")
    index = memory.index
    memory.store.set_messages("road", [Message("user" if f % 2 == 0 else "assistant", "Mira", f"line {f} of the road")
                                       for f in range(6)])
    memory.commit("road", [
        {"op": "create_node", "id": "mira", "type": "character_sheet", "title": "Mira",
         "fields": {"name": "Mira", "identity": "a courier"}, "floor_from": 1, "floor_to": 1},
        {"op": "create_node", "id": "ev1", "type": "event", "title": "Summary 1",
         "fields": {"summary": "Mira took the road north."}, "floor_from": 1, "floor_to": 1}], 1, "test")
    return index


def test_a_reply_writes_each_changed_collection_once_and_keeps_the_moved_nodes_vector(memory, monkeypatch):
    index = _reply_chat(memory)
    nodes = index._collection("road")
    vector_before, document_before, _ = _stored(nodes, "mira")
    calls = _count_writes(monkeypatch)
    # the usual reply: a new event, and the character's floors move (metadata only: its document is unchanged)
    memory.commit("road", [
        {"op": "create_node", "id": "ev2", "type": "event", "title": "Summary 2",
         "fields": {"summary": "Mira crossed the bridge at dusk."}, "floor_from": 3, "floor_to": 3},
        {"op": "update_node", "id": "mira", "floor_to": 3}], 3, "test")
    node_writes = [c for c in calls if c[1] == nodes.name]
    assert node_writes == [("upsert", nodes.name)]  # the metadata change rode along in the event's upsert
    assert len(calls) == len(set(calls))  # no collection written twice
    vector_after, document_after, metadata_after = _stored(nodes, "mira")
    assert np.allclose(vector_after, vector_before) and document_after == document_before
    assert metadata_after == node_metadata(memory.graph("road").get("mira"))
    assert metadata_after["floor_to"] == 3
    assert index.query("road", "bridge at dusk", 1)[0][0] == "ev2"


def test_many_metadata_changes_are_one_metadata_update_beside_the_upsert(memory, monkeypatch):
    index = _reply_chat(memory)
    memory.commit("road", [{"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i}",
                            "fields": {"summary": f"Mira counted lantern {i}."}, "floor_from": 2, "floor_to": 2}
                           for i in range(10, 10 + writes.RIDE_ALONG_MAX)], 2, "test")
    nodes = index._collection("road")
    vectors_before = {i: _stored(nodes, i)[0] for i in ("mira", "ev10")}
    calls = _count_writes(monkeypatch)
    moved = ["mira"] + [f"ev{i}" for i in range(10, 10 + writes.RIDE_ALONG_MAX)]
    memory.commit("road", [{"op": "create_node", "id": "ev2", "type": "event", "title": "Summary 2",
                            "fields": {"summary": "Mira crossed the bridge."}, "floor_from": 3, "floor_to": 3}]
                  + [{"op": "update_node", "id": i, "floor_to": 4} for i in moved], 4, "test")
    assert [c[0] for c in calls if c[1] == nodes.name] == ["update", "upsert"]  # too many to read back and ride
    graph = memory.graph("road")
    for node_id in moved:
        assert _stored(nodes, node_id)[2] == node_metadata(graph.get(node_id))
    for node_id, vector in vectors_before.items():
        assert np.allclose(_stored(nodes, node_id)[0], vector)


def test_a_rider_survives_a_failed_embedding(memory, monkeypatch):
    index = _reply_chat(memory)
    nodes = index._collection("road")

    def broken(texts):
        raise RuntimeError("the embedder is down")

    monkeypatch.setattr(index.function.embedder, "embed_documents", broken)
    memory.commit("road", [
        {"op": "create_node", "id": "ev2", "type": "event", "title": "Summary 2",
         "fields": {"summary": "Mira crossed the bridge at dusk."}, "floor_from": 3, "floor_to": 3},
        {"op": "update_node", "id": "mira", "floor_to": 3}], 3, "test")
    assert _stored(nodes, "mira")[2]["floor_to"] == 3  # written by a metadata update when no upsert came
    assert nodes.get(ids=["ev2"])["ids"] == []
    monkeypatch.undo()
    assert index.sync("road").embedded == 1  # the failed event is tried again


def test_a_character_over_the_whole_chat_asks_for_no_messages(memory, monkeypatch):
    index = _reply_chat(memory)
    memory.store.set_messages_from("road", 6, [Message("assistant", "Mira", f"line {f} of the road") for f in range(6, 40)])
    index.sync("road")
    asked = []
    original = type(index).message_lines

    def recording(self, chat_id, floors=None):
        asked.append(floors)
        return original(self, chat_id, floors)

    monkeypatch.setattr(type(index), "message_lines", recording)
    memory.commit("road", [  # the character now spans floors 1-39; the new event's source is floors 38-39
        {"op": "create_node", "id": "ev39", "type": "event", "title": "Summary 39",
         "fields": {"summary": "Mira reached the sea."}, "floor_from": 39, "floor_to": 39},
        {"op": "update_node", "id": "mira", "floor_to": 39}], 39, "test")
    assert asked == [{38, 39}]
    nodes, sources = index._collection("road"), index._collection("road", "ms_")
    assert _stored(nodes, "mira")[2]["floor_to"] == 39
    assert sources.get(ids=["ev39"])["ids"] == ["ev39"]
