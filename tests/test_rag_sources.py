"""`rag` scores each event by its own text and by its source messages, with the speakers' names kept for the node
search and left out of the source search (issue 31: LoCoMo dev R@10 on raw turns 0.598 -> 0.717)."""

from __future__ import annotations

import pytest

from curator.recall import engine
from curator.recall.scoring import fuse_vectors
from curator.store.messages import Message


def test_fuse_vectors_fills_what_a_search_did_not_return():
    nodes = {"a": 0.8, "b": 0.7, "p": 0.75}
    sources = {"a": 0.6, "c": 0.9}
    fused = fuse_vectors(nodes, sources, has_source={"a", "b", "c"}, source_weight=1.5)
    assert fused == pytest.approx({
        "a": 0.8 + 1.5 * 0.6,
        "b": 0.7 + 1.5 * 0.6,  # has sources the search did not return: its lowest
        "c": 0.7 + 1.5 * 0.9,  # not returned by the node search: its lowest
        "p": 0.75 + 1.5 * 0.75,  # no sources at all (a person): the sources' mean, neither help nor harm
    })
    assert fuse_vectors({}, {}, set()) == {}


def _event(node_id: str, summary: str, floor_from: int, floor_to: int) -> dict:
    return {"op": "create_node", "id": node_id, "type": "event", "title": node_id, "fields": {"summary": summary},
            "floor_from": floor_from, "floor_to": floor_to}


def test_rag_finds_an_event_by_what_its_messages_said(memory, monkeypatch):
    said = {2: ("Mira", "I will sell you my silver compass for three crowns."),
            3: ("Smith", "Done. Three crowns it is, and the compass is mine."),
            5: ("Rowan", "A quiet inn, this one.")}
    memory.create_chat("c", "default")
    memory.set_messages("c", [Message("assistant", *said[f]) if f in said else Message("user", "U", f"line {f}")
                              for f in range(100)])
    fillers = [_event(f"e_walk{f}", f"The party walked on through the grey woods, day {f}.", f, f)
               for f in range(60, 100, 2)]  # the recent events the persistent block holds
    memory.commit("c", [_event("e_deal", "They struck a bargain at the inn.", 2, 3),
                        _event("e_wall", "A silver compass hung on the wall of the inn.", 5, 5), *fillers],
                  anchor_floor=99)
    memory.rebuild_vectors("c")
    question = "Who sold the silver compass, and for how much?"
    found = [c.node.id for c in memory.recall("c", question, mode="rag", max_results=3).recalled]
    assert found[0] == "e_deal", found
    # by the node texts alone, the event whose text names the compass comes first
    monkeypatch.setattr(engine, "fuse_vectors", lambda nodes, sources, has_source, weight=None: nodes)
    alone = [c.node.id for c in memory.recall("c", question, mode="rag", max_results=3).recalled]
    assert alone[0] == "e_wall", alone
