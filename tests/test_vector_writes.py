"""How a sync writes to Chroma: a commit's or a rollback's changes are staged in the store and reach Chroma in one
batch (one call per collection and kind of write); searches see the staged rows meanwhile; what Chroma holds after
the flush is what a write per change would have left; a crash loses nothing (real SQLite, real Chroma, the default
local embedder)."""

from __future__ import annotations

import time

import numpy as np
from chromadb.api.models.Collection import Collection

import curator
from curator.store.messages import Message
from curator.vectors.pending import EMPTY
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


def _stored(collection, node_id: str) -> tuple[list, dict]:
    got = collection.get(ids=[node_id], include=["embeddings", "metadatas"])
    return np.asarray(got["embeddings"][0]).tolist(), got["metadatas"][0]


def _staged(memory) -> set[tuple[str, str, str]]:
    return {tuple(row) for row in memory.store.conn.execute(
        "SELECT kind, node_id, op FROM vector_pending WHERE chat_id='road'")}


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
    index.flush("road")
    return index


def _reply(memory, floor: int = 3) -> None:
    """The usual reply: a new event, and the character's floors move (nothing Chroma keeps of it changes)."""
    memory.commit("road", [
        {"op": "create_node", "id": "ev2", "type": "event", "title": "Summary 2",
         "fields": {"summary": "Mira crossed the bridge at dusk."}, "floor_from": floor, "floor_to": floor},
        {"op": "update_node", "id": "mira", "floor_to": floor}], floor, "test")


def test_a_reply_is_staged_searched_at_once_and_flushed_in_one_call_per_kind(memory, monkeypatch):
    index = _reply_chat(memory)
    nodes, sources = index._collection("road"), index._collection("road", "ms_")
    vector_before, metadata_before = _stored(nodes, "mira")
    calls = _count_writes(monkeypatch)
    _reply(memory)
    assert calls == []  # nothing written to Chroma yet
    # the character's floors moved, which Chroma does not keep: no write for it
    assert _staged(memory) == {("mc_", "ev2", "upsert"), ("ms_", "ev2", "upsert")}
    assert index.query("road", "bridge at dusk", 1)[0][0] == "ev2"  # searched from the staged rows
    assert index.status("road")["staged"] == 2 and index.status("road")["indexed"] == 3  # staged counts: searched
    assert "ev2" in dict(index.query_sources("road", "line 3 of the road", 5))
    assert index.flush("road") == 2
    assert sorted(calls) == sorted([("upsert", nodes.name), ("upsert", sources.name)])
    assert _staged(memory) == set() and index.status("road")["staged"] == 0
    vector_after, metadata_after = _stored(nodes, "mira")
    assert np.allclose(vector_after, vector_before) and metadata_after == metadata_before
    assert metadata_after == node_metadata(memory.graph("road").get("mira")) == {"type": "character_sheet",
                                                                                 "archived": False}
    assert nodes.get(ids=["ev2"], include=["documents"])["documents"] == [None]  # Chroma keeps no text
    assert index.query("road", "bridge at dusk", 1)[0][0] == "ev2"  # now from Chroma
    assert sources.get(ids=["ev2"])["ids"] == ["ev2"]


def test_a_staged_event_rolled_back_never_reaches_chroma(memory, monkeypatch):
    index = _reply_chat(memory)
    calls = _count_writes(monkeypatch)
    _reply(memory)
    memory.rollback("road", 3)  # a swipe: the event goes before its batch did
    assert _staged(memory) == set()  # and the character only moved back: nothing is left to write
    assert "ev2" not in dict(index.query("road", "bridge at dusk", 5))
    assert index.flush("road") == 0
    assert calls == []
    assert index._collection("road").get(ids=["ev2"])["ids"] == []


def test_a_rolled_back_node_is_hidden_before_chroma_forgets_it(memory):
    index = _reply_chat(memory)
    _reply(memory)
    index.flush("road")
    memory.rollback("road", 3)
    nodes = index._collection("road")
    assert nodes.get(ids=["ev2"])["ids"] == ["ev2"]  # still in Chroma, staged for deletion
    assert "ev2" not in dict(index.query("road", "bridge at dusk", 5))
    assert "ev2" not in dict(index.query_sources("road", "line 3 of the road", 5))
    assert index.query("road", "road north", 1)[0][0] == "ev1"
    index.flush("road")
    assert nodes.get(ids=["ev2"])["ids"] == []
    assert index._collection("road", "ms_").get(ids=["ev2"])["ids"] == []


def test_an_edited_node_is_searched_by_its_new_vector_only(memory):
    index = _reply_chat(memory)
    memory.commit("road", [{"op": "update_node", "id": "ev1", "set_fields": {"summary": "Mira sold a lantern."}}], 1,
                  "test")
    found = index.query("road", "Mira sold a lantern", 5)
    assert [i for i, _ in found].count("ev1") == 1  # Chroma's stale copy is left out
    assert found[0][0] == "ev1"


def test_staged_writes_survive_a_crash_and_the_next_process_flushes_them(memory, tmp_path):
    index = _reply_chat(memory)
    _reply(memory)
    assert _staged(memory)
    # another process opens the same data directory while this one never flushed (as if it had died)
    with curator.open(memory.store.data_dir) as other:
        assert other.index.query("road", "bridge at dusk", 1)[0][0] == "ev2"
        assert other.index.sync("road").embedded == 0  # the hashes and the staged rows agree: nothing to redo
    assert _staged(memory) == set()  # its close wrote them to Chroma
    assert index._collection("road").get(ids=["ev2"])["ids"] == ["ev2"]
    assert index.flush("road") == 0  # this process's memory of them is stale; the store says there are none


def test_a_row_another_process_flushed_is_answered_once(memory):
    index = _reply_chat(memory)
    _reply(memory)
    with curator.open(memory.store.data_dir) as other:
        assert other.index.query("road", "bridge at dusk", 1)[0][0] == "ev2"  # it has read the staged rows
        assert other.index.pending.count("road") == 2
        index.flush("road")  # this process writes them to Chroma; the other's memory still holds them
        found = [i for i, _ in other.index.query("road", "bridge at dusk", 5)]
        assert found[0] == "ev2" and found.count("ev2") == 1


def test_enough_staged_rows_are_flushed_by_the_sync_that_reaches_the_limit(memory, monkeypatch):
    index = _reply_chat(memory)
    monkeypatch.setattr("curator.vectors.index.FLUSH_ROWS", 5)
    memory.store.set_messages_from("road", 6, [Message("assistant", "Mira", f"line {f}") for f in range(6, 12)])
    for floor in (6, 8):
        memory.commit("road", [{"op": "create_node", "id": f"ev{floor}", "type": "event", "title": f"S{floor}",
                                "fields": {"summary": f"Mira rested at stone {floor}."}, "floor_from": floor,
                                "floor_to": floor}], floor, "test")
    assert len(_staged(memory)) == 4  # two events and their sources
    memory.commit("road", [{"op": "create_node", "id": "ev10", "type": "event", "title": "S10",
                            "fields": {"summary": "Mira rested at stone 10."}, "floor_from": 10, "floor_to": 10}],
                  10, "test")
    assert _staged(memory) == set()
    assert set(index._collection("road").get(ids=["ev6", "ev8", "ev10"])["ids"]) == {"ev6", "ev8", "ev10"}


def test_a_failed_flush_keeps_its_rows_for_the_next(memory, monkeypatch):
    index = _reply_chat(memory)
    _reply(memory)
    original = Collection.upsert

    def down(self, *args, **kwargs):
        raise RuntimeError("Chroma is down")

    monkeypatch.setattr(Collection, "upsert", down)
    try:
        index.flush("road")
    except RuntimeError:
        pass
    else:
        raise AssertionError("the flush should have failed")
    assert len(_staged(memory)) == 2
    assert index.query("road", "bridge at dusk", 1)[0][0] == "ev2"
    monkeypatch.setattr(Collection, "upsert", original)
    assert index.flush("road") == 2
    assert index._collection("road").get(ids=["ev2"])["ids"] == ["ev2"]


def test_an_archived_character_is_written_even_when_the_event_fails_to_embed(memory, monkeypatch):
    index = _reply_chat(memory)
    nodes = index._collection("road")
    assert "mira" in dict(index.neighbours("road", "ev1", 5, where={"archived": False}))

    def broken(texts):
        raise RuntimeError("the embedder is down")

    monkeypatch.setattr(index.function.embedder, "embed_documents", broken)
    _reply(memory)
    memory.commit("road", [{"op": "archive_node", "id": "mira"}], 3, "test")
    assert ("mc_", "mira", "meta") in _staged(memory)  # what consolidation's filter reads changed: written
    index.flush("road")
    assert _stored(nodes, "mira")[1] == {"type": "character_sheet", "archived": True}
    assert "mira" not in dict(index.neighbours("road", "ev1", 5, where={"archived": False}))
    assert nodes.get(ids=["ev2"])["ids"] == []
    monkeypatch.undo()
    assert index.sync("road").embedded == 1  # the failed event is tried again


def test_a_character_over_the_whole_chat_asks_for_no_messages(memory, monkeypatch):
    index = _reply_chat(memory)
    memory.store.set_messages_from(
        "road", 6, [Message("assistant", "Mira", f"line {f} of the road") for f in range(6, 40)]
    )
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
    assert _staged(memory) == {("mc_", "ev39", "upsert"), ("ms_", "ev39", "upsert")}  # mira's move: no write
    index.flush("road")
    assert index._collection("road", "ms_").get(ids=["ev39"])["ids"] == ["ev39"]


def test_rows_gathered_past_a_batch_are_flushed_in_calls_chroma_accepts(memory, monkeypatch):
    """While Chroma fails, syncs go on staging; the flush that follows writes them in calls of CALL_ROWS (Chroma
    refuses a call of more than about 5,000)."""
    index = _reply_chat(memory)
    monkeypatch.setattr("curator.vectors.index.FLUSH_ROWS", 100)
    monkeypatch.setattr("curator.vectors.pending.CALL_ROWS", 2)
    memory.store.set_messages_from("road", 6, [Message("assistant", "Mira", f"line {f}") for f in range(6, 12)])
    for floor in (6, 8, 10):
        memory.commit("road", [{"op": "create_node", "id": f"ev{floor}", "type": "event", "title": f"S{floor}",
                                "fields": {"summary": f"Mira rested at stone {floor}."}, "floor_from": floor,
                                "floor_to": floor}], floor, "test")
    calls = _count_writes(monkeypatch)
    assert index.flush("road") == 6
    nodes, sources = index._collection("road"), index._collection("road", "ms_")
    assert sorted(calls) == sorted([("upsert", nodes.name)] * 2 + [("upsert", sources.name)] * 2)
    for collection in (nodes, sources):
        assert set(collection.get(ids=["ev6", "ev8", "ev10"])["ids"]) == {"ev6", "ev8", "ev10"}


def test_an_index_from_when_chroma_kept_six_keys_is_taken_without_a_write(memory, monkeypatch):
    """Its metadata hashes are of six keys (type, level, archived, parent, floors); Chroma holds the right type and
    archived, so the next process rewrites the hashes only, and updates a node whose archived changed since."""
    from curator.vectors.index import _digest, _six_key_meta_digest

    index = _reply_chat(memory)
    graph = memory.graph("road")
    with memory.store.transaction() as conn:
        conn.executemany("UPDATE vector_hashes SET meta_hash=? WHERE chat_id='road' AND node_id=?",
                         [(_six_key_meta_digest(graph.get(i)), i) for i in ("mira", "ev1")])
        conn.execute("UPDATE nodes SET archived=1 WHERE chat_id='road' AND id='ev1'")  # as another writer did
        conn.execute("UPDATE vector_state SET synced=NULL WHERE chat_id='road'")  # such an index had no stamp
    calls = _count_writes(monkeypatch)
    with curator.open(memory.store.data_dir) as other:
        report = other.index.sync("road")
        assert report.embedded == 0 and report.updated_metadata == 1  # ev1 only: its archived changed
        other.index.flush("road")
    assert calls == [("update", index._collection("road").name)]
    assert _stored(index._collection("road"), "ev1")[1]["archived"] is True
    hashes = dict(memory.store.conn.execute("SELECT node_id, meta_hash FROM vector_hashes WHERE chat_id='road'"))
    assert hashes["mira"] == _digest(*node_metadata(graph.get("mira")).values())


def test_a_sync_too_big_to_stage_writes_in_calls_chroma_accepts(memory, monkeypatch):
    index = _reply_chat(memory)
    monkeypatch.setattr("curator.vectors.index.FLUSH_ROWS", 2)  # so this sync's changes go straight to Chroma
    monkeypatch.setattr("curator.vectors.pending.CALL_ROWS", 1)
    calls = _count_writes(monkeypatch)
    memory.commit("road", [{"op": "archive_node", "id": "mira"}, {"op": "archive_node", "id": "ev1"}], 5, "test")
    nodes = index._collection("road")
    assert calls == [("update", nodes.name)] * 2
    assert [m["archived"] for m in nodes.get(ids=["mira", "ev1"], include=["metadatas"])["metadatas"]] == [True, True]


def test_a_flush_stays_searchable_while_a_chroma_server_indexes_it(memory, monkeypatch):
    """A Chroma server answers queries from an index that takes in a write a moment after it returns (1 query in
    40 missed a row just upserted, on 2 busy cores). Its lag is played here by hiding the rows of the last upsert
    from queries: the process that flushed keeps scoring them itself (`settle`, on for a server) until they settle."""
    index = _reply_chat(memory)
    lagging: set[str] = set()
    original_upsert, original_query = Collection.upsert, Collection.query

    def upsert(self, *args, ids, **kwargs):
        lagging.update(ids)
        return original_upsert(self, *args, ids=ids, **kwargs)

    def query(self, *args, **kwargs):
        result = original_query(self, *args, **kwargs)
        kept = [n for n, i in enumerate(result["ids"][0]) if i not in lagging]
        return {**result, "ids": [[result["ids"][0][n] for n in kept]],
                "distances": [[result["distances"][0][n] for n in kept]]}

    monkeypatch.setattr(Collection, "upsert", upsert)
    monkeypatch.setattr(Collection, "query", query)
    for settle in (False, True):
        index.pending._settle = settle
        _reply(memory)
        index.flush("road")
        found = [i for i, _ in index.query("road", "bridge at dusk", 5)]
        assert ("ev2" in found) is settle  # without settling rows the lagging server's answer misses it
        assert ("ev2" in dict(index.query_sources("road", "line 3 of the road", 5))) is settle
        if not settle:
            memory.rollback("road", 3)
            index.flush("road")
            lagging.clear()
    lagging.clear()  # the server has indexed the flush: its copy and the settling row are one answer
    assert [i for i, _ in index.query("road", "bridge at dusk", 5)].count("ev2") == 1
    later = time.monotonic() + 10
    monkeypatch.setattr("curator.vectors.pending.time.monotonic", lambda: later)
    assert index.pending.view("road", "mc_") is EMPTY  # settled: Chroma alone answers
    assert [i for i, _ in index.query("road", "bridge at dusk", 5)].count("ev2") == 1


def test_batches_embedded_ahead_come_in_order_and_stop_with_the_caller():
    """A long sync embeds the next batches in a thread while it writes one (`_ahead`): the results come in the
    batches' order, an error in the thread reaches the caller, and a caller that stops (Ctrl-C) stops the thread
    within a batch or two instead of letting it embed everything."""
    import threading

    import pytest

    from curator.vectors.writes import _ahead

    batches = [(i, i + 4) for i in range(0, 400, 4)]
    done: list[int] = []

    def work(start: int, end: int) -> list[int]:
        time.sleep(0.002)
        done.append(start)
        return list(range(start, end))

    assert [x for part in _ahead(work, batches) for x in part] == list(range(400))
    done.clear()
    results = _ahead(work, batches)
    assert next(results) == [0, 1, 2, 3]
    results.close()
    time.sleep(0.2)
    assert len(done) <= 3 and not any(t.name == "curator-embed-ahead" for t in threading.enumerate())

    def failing(start: int, end: int) -> list[int]:
        if start == 8:
            raise ValueError("the embedder failed")
        return [start]

    with pytest.raises(ValueError, match="the embedder failed"):
        list(_ahead(failing, batches))
