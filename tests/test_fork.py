"""Forking a chat at a floor (a SillyTavern branch or checkpoint): the fork's commit log and graph equal the parent's
rolled back to the next floor, commit for commit; the parent does not move; the fork lives on its own (rollback,
sync, delete) and costs no model call for what it shares."""

from __future__ import annotations

import pytest

from curator.errors import ChatExists, ChatNotFound, CuratorError
from curator.testing.scripted import reply_text, scripted_chat, scripted_model
from curator.store.bindings import Bindings, RecallCards
from curator.store.forks import fork_of
from curator.store.messages import Message

FLOORS = 24


def _log(memory, chat_id):
    return [(c.anchor_floor, c.origin, c.ops, c.note) for c in memory.store.commits(chat_id)]


def _build(memory, chat_id):
    """A chat with extraction commits, a hand-made commit anchored late, and a low-anchored commit made after it
    that builds on it (so a rollback past the late one drops it) and one that does not (replayed)."""
    memory.create_chat(chat_id, "default")
    memory.sync(chat_id, scripted_chat(FLOORS), extract=True, model=scripted_model())
    memory.commit(chat_id, [{"op": "create_node", "id": "n_late", "type": "character_sheet",
                             "fields": {"name": "Late Person"}}], anchor_floor=20, origin="manual")
    memory.commit(chat_id, [{"op": "update_node", "id": "n_late", "set_fields": {"goal": "stay"}}], anchor_floor=4,
                  origin="manual")  # builds on n_late: dropped when n_late is reverted
    memory.commit(chat_id, [{"op": "create_node", "id": "n_early", "type": "character_sheet",
                             "fields": {"name": "Early Person"}}], anchor_floor=2, origin="manual")


@pytest.fixture
def parent(memory):
    _build(memory, "main")
    return "main"


def _rows(memory, chat_id):
    """Every node and edge of the chat, ids and times included (the graph as stored, less its chat id)."""
    graph = memory.graph(chat_id)
    return (sorted(repr(n) for n in graph.nodes(archived=None)), sorted(repr(e) for e in graph.edges()))


@pytest.mark.parametrize("floor", [-1, 0, 9, 19, 20, FLOORS - 1])
def test_a_fork_is_the_parent_rolled_back_to_the_next_floor(memory, parent, floor):
    before = (_rows(memory, parent), _log(memory, parent), memory.store.messages(parent))
    result = memory.fork(parent, "branch", floor)
    assert (_rows(memory, parent), _log(memory, parent), memory.store.messages(parent)) == before  # untouched
    assert memory.store.messages("branch") == memory.store.messages(parent)[:floor + 1]

    rolled = memory.rollback(parent, floor + 1)  # now really roll the parent back: the fork must equal it
    assert _rows(memory, "branch") == _rows(memory, parent)
    assert _log(memory, "branch") == _log(memory, parent)
    assert len(result.dropped) == len(rolled.dropped) and result.replayed == len(rolled.reapplied)
    assert result.commits == len(memory.store.commits("branch")) == result.copied + result.replayed
    assert fork_of(memory.store, "branch") == {"parent": parent, "floor": floor, "commits": result.commits,
                                                "at": fork_of(memory.store, "branch")["at"]}
    assert memory.chat("branch").schema.to_data() == memory.chat(parent).schema.to_data()


def test_the_late_commit_and_what_built_on_it_are_left_out_what_did_not_is_replayed(memory, parent):
    result = memory.fork(parent, "branch", 9)
    names = {n.title for n in memory.graph("branch").nodes()}
    assert "Early Person" in names and "Late Person" not in names
    assert len(result.dropped) == 1 and result.replayed >= 1 and result.reverted >= 1
    assert "Late Person" in {n.title for n in memory.graph(parent).nodes()}


def test_the_fork_lives_on_its_own_and_pays_only_for_new_floors(memory, parent):
    memory.fork(parent, "branch", 9)
    calls: list[int] = []
    shared = memory.store.messages(parent)[:10]
    new = [Message("user", "User", "Somewhere else?"), Message("assistant", "Narrator", reply_text(11, variant=3))]
    report = memory.sync("branch", shared + new, extract=True, model=scripted_model(calls))
    assert report.dirty_floor is None and report.reverted == [] and calls == [11]  # one call: the new reply
    memory.rollback("branch", 3)  # the fork's copied commits are its own: they roll back in the fork
    assert all(c.anchor_floor < 3 for c in memory.store.commits("branch"))
    assert len(memory.store.commits(parent)) > len(memory.store.commits("branch"))
    memory.delete_chat(parent)
    assert memory.store.messages("branch")[:3] == shared[:3] and memory.store.commits("branch")


def test_swipe_shelf_message_vectors_and_recall_cards_of_shared_floors_come_along(memory, parent):
    chat = memory.store.messages(parent)
    swiped = chat[:-1] + [Message("assistant", "Narrator", "A different ending.")]
    memory.sync(parent, swiped)  # the last reply goes on the shelf
    cards = RecallCards(memory.store)
    cards.put(parent, 5, {"query": "q5"})
    cards.put(parent, 21, {"query": "q21"})
    memory.fork(parent, "branch", FLOORS - 1)
    assert memory.history.shelf.entries("branch") == memory.history.shelf.entries(parent)
    assert cards.floors("branch") == [5, 21] and cards.get("branch", 5)["query"] == "q5"
    memory.fork(parent, "early", 10)
    assert memory.history.shelf.entries("early") == [] and cards.floors("early") == [5]


def test_refusals_change_nothing(memory, parent):
    memory.create_chat("taken", "default")
    count = len(memory.chats())
    with pytest.raises(ChatExists):
        memory.fork(parent, "taken", 3)
    with pytest.raises(ChatNotFound):
        memory.fork("nobody", "new", 3)
    for bad in (-2, "3", 1.5, True):
        with pytest.raises(CuratorError):
            memory.fork(parent, "new", bad)
    with pytest.raises(CuratorError):
        memory.fork(parent, " padded ", 3)
    assert len(memory.chats()) == count


def test_a_deleted_chat_takes_its_binding_fork_record_and_cards_along(memory, parent):
    memory.fork(parent, "branch", 5)
    Bindings(memory.store).bind("sillytavern", "character:Eileen.png", "Branch #5", "branch", "Eileen")
    RecallCards(memory.store).put("branch", 4, {"query": "x"})
    memory.delete_chat("branch")
    assert Bindings(memory.store).list() == [] and fork_of(memory.store, "branch") is None
    assert RecallCards(memory.store).floors("branch") == []
