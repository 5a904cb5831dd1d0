"""History sync: edits, deletes and swipes roll memory back to the changed floor and rebuild it exactly."""

from __future__ import annotations

import dataclasses

import pytest

import curator
from curator.errors import CuratorError
from curator.store.messages import Message
from curator.testing.scripted import graph_signature, reply_text, scripted_chat, scripted_model
from curator.sync.history import find_dirty_floor

FLOORS = 200


def fresh_graph(tmp_path, messages, name="fresh"):
    """The graph a fresh ingest of `messages` builds with the scripted model."""
    with curator.open(tmp_path / name) as mem:
        mem.create_chat("c", "default")
        mem.sync("c", messages, extract=True, model=scripted_model())
        assert mem.sync("c", messages).due == []
        return graph_signature(mem, "c")


def swiped(message: Message, floor: int, variant: int) -> Message:
    return dataclasses.replace(message, text=reply_text(floor, variant), swipe_id=variant)


@pytest.fixture
def synced(memory):
    messages = scripted_chat(FLOORS)
    memory.create_chat("c", "default")
    report = memory.sync("c", messages, extract=True, model=scripted_model())
    assert report.dirty_floor is None and report.due == []
    assert len(memory.store.commits("c")) == FLOORS // 2
    return messages


def test_find_dirty_floor_names_the_earliest_change():
    chat = scripted_chat(10)
    hashes = [m.hash for m in chat]
    assert find_dirty_floor(chat, hashes, chat) is None
    assert find_dirty_floor(chat, hashes, chat + scripted_chat(2)) is None  # appended floors are not dirty
    edited = chat[:4] + [dataclasses.replace(chat[4], text="changed")] + chat[5:]
    assert find_dirty_floor(chat, hashes, edited).__dict__ == {"floor": 4, "reason": "edited"}
    assert find_dirty_floor(chat, hashes, chat[:7]).__dict__ == {"floor": 7, "reason": "deleted"}
    swipe = chat[:9] + [swiped(chat[9], 9, 1)]
    assert find_dirty_floor(chat, hashes, swipe).__dict__ == {"floor": 9, "reason": "swiped"}
    # a tail window from floor 6: floors 0-5 are not compared, and not wiped
    assert find_dirty_floor(chat, hashes, chat[6:], start=6) is None
    assert find_dirty_floor(chat, hashes, chat[6:8], start=6).floor == 8


@pytest.mark.parametrize("scenario", ["edit", "delete", "swipe", "edit-and-append"])
def test_sync_then_reextraction_equals_a_fresh_ingest(memory, synced, tmp_path, scenario):
    messages = list(synced)
    if scenario == "edit":
        messages[57] = dataclasses.replace(messages[57], text="Mira went to the chapel and found nothing at all.")
    elif scenario == "delete":
        del messages[120:]
    elif scenario == "swipe":
        messages[FLOORS - 1] = swiped(messages[FLOORS - 1], FLOORS - 1, 2)
    else:
        messages[100] = dataclasses.replace(messages[100], text="An edited user turn.")
        messages += scripted_chat(FLOORS + 10)[FLOORS:]
    calls: list[int] = []
    report = memory.sync("c", messages, extract=True, model=scripted_model(calls))
    expected_floor = {"edit": 57, "delete": 120, "swipe": FLOORS - 1, "edit-and-append": 100}[scenario]
    assert report.dirty_floor == expected_floor
    assert report.reverted and report.due == []
    assert min(calls, default=None) == (None if scenario == "delete" else expected_floor + (expected_floor % 2 == 0))
    assert memory.store.messages("c") == messages
    assert graph_signature(memory, "c") == fresh_graph(tmp_path, messages)


def test_a_tail_window_syncs_without_wiping_floors_it_did_not_send(memory, synced):
    before = len(memory.store.commits("c"))
    report = memory.sync("c", synced[190:], start=190)
    assert report.dirty_floor is None and len(memory.store.messages("c")) == FLOORS
    window = synced[190:195]
    window[3] = dataclasses.replace(window[3], text="Tobin went to the mill and found a key.")  # floor 193
    report = memory.sync("c", window, start=190)
    assert report.dirty_floor == 193 and len(memory.store.messages("c")) == 195
    assert len(memory.store.commits("c")) == before - 4  # floors 193, 195, 197, 199
    assert memory.store.messages("c")[:190] == synced[:190]
    with pytest.raises(CuratorError, match="tail window"):
        memory.sync("c", synced[:3], start=400)


def test_a_swipe_back_restores_memory_from_the_shelf_with_no_model_call(memory, synced):
    last = FLOORS - 1
    original = graph_signature(memory, "c")
    other = synced[:last] + [swiped(synced[last], last, 1)]
    calls: list[int] = []
    first = memory.sync("c", other, extract=True, model=scripted_model(calls))
    assert first.reason == "swiped" and first.shelved == 1 and calls == [last]
    swiped_graph = graph_signature(memory, "c")
    assert swiped_graph != original
    back = memory.sync("c", synced, extract=True, model=scripted_model(calls))
    assert back.restored and back.due == [] and calls == [last]  # no new model call
    assert graph_signature(memory, "c") == original
    # and forth again: the other swipe was shelved on the way back
    again = memory.sync("c", other, extract=True, model=scripted_model(calls))
    assert again.restored and calls == [last]
    assert graph_signature(memory, "c") == swiped_graph


def test_a_regenerate_seen_as_a_shorter_chat_keeps_the_reply_on_the_shelf(memory, synced):
    """Through the proxy a regenerate first looks like the reply was deleted (the request ends at the user
    turn); the reply's memory is shelved all the same."""
    last = FLOORS - 1
    report = memory.sync("c", synced[:last])
    assert report.reason == "deleted" and report.shelved == 1
    calls: list[int] = []
    back = memory.sync("c", synced, extract=True, model=scripted_model(calls))
    assert back.restored and calls == []


def test_an_edit_below_drops_the_shelf(memory, synced):
    last = FLOORS - 1
    memory.sync("c", synced[:last] + [swiped(synced[last], last, 1)])
    assert [e[0] for e in memory.history.shelf.entries("c")] == [last]
    edited = list(synced)
    edited[10] = dataclasses.replace(edited[10], text="changed")
    memory.sync("c", edited)
    assert memory.history.shelf.entries("c") == []


def test_damaged_hashes_force_a_loud_full_rebuild(memory, synced, tmp_path, caplog):
    with memory.store.transaction() as conn:
        conn.execute("UPDATE messages SET hash = hash + 1 WHERE chat_id='c' AND floor=33")
    calls: list[int] = []
    with caplog.at_level("WARNING", logger="curator.sync"):
        report = memory.sync("c", synced, extract=True, model=scripted_model(calls))
    assert report.rebuilt and "floor 33" in report.rebuild_reason and "rebuilding" in caplog.text
    assert len(calls) == FLOORS // 2
    assert graph_signature(memory, "c") == fresh_graph(tmp_path, synced)


def test_a_damaged_commit_log_forces_a_full_rebuild(memory, synced):
    with memory.store.transaction() as conn:
        conn.execute("UPDATE commits SET undo_json='not json' WHERE chat_id='c' AND anchor_floor=171")
    edited = list(synced)
    edited[150] = dataclasses.replace(edited[150], text="changed")
    report = memory.sync("c", edited)
    assert report.rebuilt and "cannot be rolled back" in report.rebuild_reason
    assert memory.store.commits("c") == [] and report.due[0] == 1


def test_rebuild_clears_and_reextracts_every_floor(memory, synced, tmp_path):
    before = graph_signature(memory, "c")
    calls: list[int] = []
    result = memory.rebuild("c", model=scripted_model(calls))
    assert result["commits_removed"] == FLOORS // 2 and result["steps_done"] == FLOORS // 2
    assert result["usage"]["calls"] == FLOORS // 2 and len(calls) == FLOORS // 2
    assert graph_signature(memory, "c") == before


def test_sync_drops_recall_results_cached_for_rolled_back_floors(memory, synced):
    first = memory.recall("c", "Where did Eileen go?", user_floor=198)
    assert memory.recall("c", "Where did Eileen go?", user_floor=198).reused
    assert len(memory._core._recaller._results) == 1
    memory.sync("c", synced[:150])
    assert len(memory._core._recaller._results) == 0
    again = memory.recall("c", "Where did Eileen go?", user_floor=148)
    assert not again.reused and again.graph_version != first.graph_version
    # vectors follow: nothing indexed for nodes that are gone (once the staged writes reach Chroma)
    memory.index.flush("c")
    ids = set(memory.index._collection("c").get()["ids"])
    assert ids == {n.id for n in memory.graph("c").nodes(archived=None)}
