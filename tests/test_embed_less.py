"""Embed less (issue 15): each message is embedded once and sources combine their messages' vectors; archived
leaves' sources wait until a recall needs them; ingest with the index open leaves nothing for the first recall
to embed but the query. The embedder is the real local one; the tests count what is asked of it."""

from __future__ import annotations

from test_ingest import CHAT, scripted

import numpy as np
import pytest

import curator
from curator.paths import example_file
from curator.store.messages import Message


@pytest.fixture
def memory(tmp_path):
    """The message-vector design of issue 15 is the `static-e5/e5-query` profile's (the default until issue 31):
    these tests open their data directory with it. The default's own costs are tested at the end."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.yaml").write_text("embedding: {provider: local, model: static-e5/e5-query}\n",
                                                   encoding="utf-8")
    with curator.open(tmp_path / "data") as mem:
        yield mem


@pytest.fixture
def default_memory(tmp_path):
    with curator.open(tmp_path / "default") as mem:
        yield mem


def counted(memory, monkeypatch) -> dict[str, list]:
    """Every text handed to the index's embedder, by kind (documents: nodes and messages; queries)."""
    embedder = memory.index.function.embedder
    asked = {"documents": [], "queries": []}
    for kind, name in (("documents", "embed_documents"), ("queries", "embed_queries")):
        original = getattr(embedder, name)

        def wrapper(texts, original=original, kind=kind):
            asked[kind].append(list(texts))
            return original(texts)

        monkeypatch.setattr(embedder, name, wrapper)
    return asked


def test_a_message_shared_by_several_events_is_embedded_once(memory, monkeypatch):
    memory.create_chat("road", "default")
    asked = counted(memory, monkeypatch)  # the index is open: every commit is followed by its sync
    memory.set_messages("road", [Message("user", "Rowan", "Where is the ledger hidden?"),
                                 Message("assistant", "Eileen", "Under the bell tower plank."),
                                 Message("user", "Rowan", "And the key?"),
                                 Message("assistant", "Eileen", "In my boot, always.")])
    memory.commit("road", [
        {"op": "create_node", "id": "e1", "type": "event", "title": "The ledger",
         "fields": {"summary": "Eileen hid the ledger."}, "floor_from": 1, "floor_to": 1},
        {"op": "create_node", "id": "e2", "type": "event", "title": "The plank",
         "fields": {"summary": "The plank is loose."}, "floor_from": 1, "floor_to": 1},
        {"op": "create_node", "id": "e3", "type": "event", "title": "The key",
         "fields": {"summary": "Eileen keeps the key."}, "floor_from": 1, "floor_to": 3},
    ], 3, "test")
    messages = [t for batch in asked["documents"] for t in batch if t.startswith(("Rowan:", "Eileen:"))]
    assert len(messages) == 4 and len(set(messages)) == 4  # floors 0-3, once each, for three sources
    assert memory.index.status("road")["sources"] == 3
    asked["documents"].clear()
    memory.commit(
        "road",
        [
            {
                "op": "create_node",
                "id": "e4",
                "type": "event",
                "title": "The boot",
                "fields": {"summary": "The boot hides things."},
                "floor_from": 3,
                "floor_to": 3,
            }
        ],
        3,
        "test",
    )
    assert asked["documents"] == [["The boot hides things."]]  # its node text only: its messages were embedded
    hits = dict(memory.index.query_sources("road", "Where is the key? In my boot.", k=4))
    assert max(hits, key=hits.get) in {"e3", "e4"}  # the sources that hold floor 3


def test_an_edited_message_is_embedded_again_and_only_it(memory, monkeypatch):
    memory.create_chat("road", "default")
    asked = counted(memory, monkeypatch)
    talk = [Message("user", "Rowan", "What did the toll cost?"), Message("assistant", "Eileen", "Three crowns.")]
    memory.set_messages("road", talk)
    memory.commit("road", [{"op": "create_node", "id": "e1", "type": "event", "title": "Toll",
                            "fields": {"summary": "They paid the toll."}, "floor_from": 1, "floor_to": 1}], 1, "test")
    asked["documents"].clear()
    memory.store.set_messages_from("road", 1, [Message("assistant", "Eileen", "Four crowns, and a song.")])
    report = memory.index.sync("road")
    assert asked["documents"] == [["Eileen: Four crowns, and a song."]]
    assert (report.messages_embedded, report.sources_embedded, report.embedded) == (1, 1, 0)


def test_archived_leaves_sources_wait_until_recall_needs_them(memory):
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    report = memory.rebuild_vectors("road")
    leaves = [n.id for n in memory.graph("road").nodes(type="event", archived=True) if n.level == 0]
    assert report.sources_deferred == len(leaves) > 0 and memory.index.unsourced("road", leaves) == leaves
    injection = memory.recall("road", "Eileen, you told me once you owed me for the salve. Do you remember?")
    assert "n_evt_01" in [c.node.id for c in injection.recalled]  # the folded leaf's source was embedded for it
    assert "n_evt_01" not in memory.index.unsourced("road", leaves)
    assert memory.rebuild_vectors("road").sources_embedded == 0  # kept: a later sync does not drop them


def test_after_ingest_with_the_index_open_the_first_recall_embeds_only_the_query(memory, monkeypatch):
    asked = counted(memory, monkeypatch)  # opens the index, as `curator ingest` and the service do
    report = memory.ingest("road", CHAT, model=scripted(), limit=4)
    assert report.to_dict()["steps_done"] == 4 and asked["documents"]  # each step's commit embedded its nodes
    asked["documents"].clear()
    asked["queries"].clear()
    injection = memory.recall("road", "What happened at the bridge?")
    assert injection.persistent  # (a chat this small is injected whole)
    assert asked["documents"] == [] and len(asked["queries"]) == 1  # one model call, for the query only


def test_a_message_vector_rewritten_by_another_process_is_not_taken_for_ours(memory):
    memory.create_chat("road", "default")
    index = memory.index
    memory.set_messages("road", [Message("user", "Rowan", "Where is the ledger?"),
                                 Message("assistant", "Eileen", "Under the plank.")])
    memory.commit("road", [{"op": "create_node", "id": "e1", "type": "event", "title": "Ledger",
                            "fields": {"summary": "The ledger is hidden."}, "floor_from": 1, "floor_to": 1}], 1, "test")
    lines = index.message_lines("road")
    # another process stored another text's vector under floor 1 (its message was edited there)
    dims = len(index.function.embedder.embed_documents(["any"])[0])
    with memory.store.transaction() as conn:
        conn.execute("UPDATE message_vectors SET hash='not ours', vector=? WHERE chat_id='road' AND floor=1",
                     (np.eye(dims, dtype=np.float16)[-1].tobytes(),))
    index.messages._vectors.clear()  # this process's cache no longer holds it
    vectors, fresh = index.messages.vectors("road", lines, [0, 1])
    assert fresh == 1 and float(vectors[1][-1]) != 1.0  # embedded again from our text, not the stranger's vector


def test_a_query_asked_again_beside_new_ones_is_kept_while_the_cache_turns_over(memory):
    # a recall's parts: the reply before it is asked again next turn, next to texts never seen; the cache used to
    # evict it while adding the new ones and then fail to find it (KeyError)
    from curator.vectors.search import QUERIES_KEPT

    index = memory.index
    index.query_vectors(["the reply before"])
    index.query_vectors([f"question {i}" for i in range(QUERIES_KEPT - 1)])
    asked = index.query_vectors(["the reply before", "a new question", "another new one"])
    assert set(asked) == {"the reply before", "a new question", "another new one"}
    assert len(index._query_cache) == QUERIES_KEPT and ("query", "the reply before") in index._query_cache


def test_a_recall_asks_e5_for_the_message_answered_only(memory, monkeypatch):
    # the default embeds documents with static vectors and asks its queries of e5; the turns before the message
    # answered (the long ones, weighing 0.2 and 0.1) get the static vectors, so a recall pays e5 for one message
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    embedder = memory.index.function.embedder
    asked = {"e5": [], "static": []}
    for kind, name in (("e5", "embed_queries"), ("static", "embed_context_queries")):
        original = getattr(embedder, name)
        monkeypatch.setattr(embedder, name, lambda texts, original=original, kind=kind: (
            asked[kind].extend(texts), original(texts))[1])
    turns = [Message("user", "Rowan", "We crossed the bridge at dusk and paid Brannoch three silver crowns."),
             Message("assistant", "Eileen", "Eileen counts what is left in the purse and frowns at the grey gloves "
                     "someone dropped on the road. \"They were here before us,\" she says."),
             Message("user", "Rowan", "Who is the Grey Hand?")]
    injection = memory.recall("road", messages=turns)
    assert injection.recalled
    assert asked["e5"] == ["Who is the Grey Hand?"]  # (it names no speaker: no second text without the names)
    assert {turns[0].text, turns[1].text} <= set(asked["static"])


def test_a_message_naming_a_speaker_costs_one_e5_pass_and_its_node_vector_keeps_the_name(memory, monkeypatch):
    # sources are searched with the message without the speakers' names; the default asks e5 for that text only
    # and gives the nodes' search the names back through the static vectors (one model pass for both vectors)
    import numpy as np

    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    embedder = memory.index.function.embedder
    asked: list[str] = []
    original = embedder.embed_queries
    monkeypatch.setattr(embedder, "embed_queries", lambda texts: (asked.extend(texts), original(texts))[1])
    question = "Did Eileen pay Brannoch at the bridge?"
    assert memory.recall("road", question).recalled
    assert len(asked) == 1 and "Eileen" not in asked[0] and "Brannoch" in asked[0]
    stripped = asked[0]
    vectors = memory.index.pair_vectors([(question, stripped)])
    assert len(asked) == 1  # kept: asking again embeds nothing
    whole = original([question])[0]  # what e5 itself makes of the message with the name
    named, bare = vectors[question], vectors[stripped]
    assert not np.allclose(named, bare)
    assert float(named @ whole) > float(bare @ whole)


def test_message_vectors_live_in_the_store_and_a_reply_costs_two_chroma_writes(memory, monkeypatch):
    # a reply's sync stages its event for the node and source collections, written in one batch each; its
    # message's vector goes to the store (a Chroma write costs ~5 ms however small), and is read back after a
    # restart instead of embedded again
    import chromadb.api.models.Collection as collection_module

    memory.create_chat("road", "default")
    assert memory.index is not None  # open: every commit is followed by its sync
    memory.set_messages("road", [Message("user", "Rowan", "Where is the ledger?"),
                                 Message("assistant", "Eileen", "Under the plank.")])
    memory.commit("road", [{"op": "create_node", "id": "e1", "type": "event", "title": "Ledger",
                            "fields": {"summary": "The ledger is hidden."}, "floor_from": 1, "floor_to": 1}], 1, "test")
    writes = []
    for name in ("upsert", "update", "delete", "add"):
        original = getattr(collection_module.Collection, name)
        monkeypatch.setattr(collection_module.Collection, name, lambda self, *a, _o=original, _n=name, **k: (
            writes.append((_n, self.name[:3])), _o(self, *a, **k))[1])
    memory.store.set_messages_from("road", 2, [Message("user", "Rowan", "And the key?"),
                                               Message("assistant", "Eileen", "In my boot.")])
    memory.commit("road", [{"op": "create_node", "id": "e2", "type": "event", "title": "Key",
                            "fields": {"summary": "Eileen keeps the key in her boot."}, "floor_from": 3,
                            "floor_to": 3}], 3, "test")
    assert writes == []  # staged (vectors/pending.py)
    memory.index.flush("road")
    assert sorted(writes) == [("upsert", "mc_"), ("upsert", "ms_")]
    stored = dict(memory.store.conn.execute("SELECT floor, hash FROM message_vectors WHERE chat_id='road'").fetchall())
    assert set(stored) >= {0, 1, 2, 3}
    embedder = memory.index.function.embedder
    source = memory.index._collection("road", "ms_").get(ids=["e2"], include=["embeddings"])["embeddings"][0]
    expected = embedder.embed_documents(["Rowan: And the key?", "Eileen: In my boot."]).mean(axis=0)
    assert float(np.dot(source, expected / np.linalg.norm(expected))) > 0.999  # the mean of its two messages
    path = memory.store.data_dir
    memory.close()
    import curator

    again = curator.open(path)
    again.index.messages.embedded = 0
    vectors, fresh = again.index.messages.vectors("road", again.index.message_lines("road"), [0, 1, 2, 3])
    assert fresh == 0 and again.index.messages.embedded == 0 and len(vectors) == 4
    again.close()


def test_the_default_asks_e5_one_text_per_part_and_embeds_each_source_once_as_one_text(default_memory, monkeypatch):
    # e5-joined: node texts and sources are e5's; a recall embeds the message answered without the speakers' names
    # once, for both searches (the turns before it are e5's too: one vector space); a source is its messages'
    # starts joined, embedded once per event and again only when one of its messages changes
    memory = default_memory
    memory.create_chat("road", "default")
    asked = counted(memory, monkeypatch)
    memory.set_messages("road", [Message("user", "Rowan", "Where is the ledger hidden?"),
                                 Message("assistant", "Eileen", "Under the bell tower plank."),
                                 Message("user", "Rowan", "And the key?"),
                                 Message("assistant", "Eileen", "In my boot, always.")])
    memory.commit("road", [
        {"op": "create_node", "id": "e1", "type": "event", "title": "The ledger",
         "fields": {"summary": "Eileen hid the ledger."}, "floor_from": 1, "floor_to": 1},
        {"op": "create_node", "id": "e3", "type": "event", "title": "The key",
         "fields": {"summary": "Eileen keeps the key."}, "floor_from": 3, "floor_to": 3},
    ], 3, "test")
    texts = [t for batch in asked["documents"] for t in batch]
    assert sorted(texts) == sorted(["Eileen hid the ledger.", "Eileen keeps the key.",
                                    "Rowan: Where is the ledger hidden?\nEileen: Under the bell tower plank.",
                                    "Rowan: And the key?\nEileen: In my boot, always."])
    assert memory.index.status("road")["sources"] == 2
    asked["documents"].clear()
    memory.store.set_messages_from("road", 3, [Message("assistant", "Eileen", "In my left boot.")])
    memory.index.sync("road")
    assert asked["documents"] == [["Rowan: And the key?\nEileen: In my left boot."]]  # e3's source alone
    hits = dict(memory.index.query_sources("road", "Where is the key? In my boot.", k=2))
    assert max(hits, key=hits.get) == "e3"
    asked["queries"].clear()
    turns = [Message("user", "Rowan", "We crossed the bridge at dusk."),
             Message("assistant", "Eileen", "Eileen counts what is left in the purse."),
             Message("user", "Rowan", "Where did Eileen hide the ledger?")]
    injection = memory.recall("road", messages=turns)
    assert "e1" in {c.node.id for c in (*injection.persistent, *injection.recalled)}
    flat = [t for batch in asked["queries"] for t in batch]
    assert "Where did hide the ledger?" in flat and not any("Where did Eileen" in t for t in flat)
    assert len(flat) == len(set(flat)) == 3  # each part once: the message answered (without the names), two turns

