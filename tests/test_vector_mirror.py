"""The in-memory copies of a chat's collections (`curator/vectors/mirror.py`): searched exactly, loaded in the
background once a collection is searched often, kept in step with this process's writes (staged, flushed, direct,
deleted), dropped when another process wrote; real Chroma and the default embedder where a chat is involved."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

import curator
from curator.store.messages import Message
from curator.vectors.mirror import MIRROR_AFTER, Copy, Mirrors
from curator.vectors.search import NODES, SOURCES


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_copy_answers_the_exact_nearest_leaving_out_hidden_and_removed_ids():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(3000, 48)).astype(np.float32)  # past one product's part: the search goes in parts
    ids = [f"n{i}" for i in range(len(vectors))]
    copy = Copy(ids, vectors * 3)  # kept normalized whatever came in
    copy.remove(["n5", "n6"])
    copy.put(["n6", "new"], rng.normal(size=(2, 48)))  # n6 comes back with another vector; "new" is appended
    query = rng.normal(size=48).astype(np.float32)
    hidden = frozenset({"n7", "n8", "absent"})
    found = copy.search(query, 25, hidden)

    truth = dict(zip(ids, _unit(vectors)))
    truth.update(zip(["n6", "new"], _unit(copy.matrix[[copy.row_of["n6"], copy.row_of["new"]]])))
    del truth["n5"]
    scores = {i: float(v @ query / np.linalg.norm(query)) for i, v in truth.items() if i not in hidden}
    expected = sorted(scores, key=lambda i: -scores[i])[:25]
    assert [i for i, _ in found] == expected
    assert all(abs(s - scores[i]) < 1e-5 for i, s in found)
    assert len(copy.search(query, 10_000, frozenset())) == len(truth)  # k past the rows: every live row, once
    assert copy.search(query, 0, frozenset()) == []


def test_a_big_copy_is_searched_in_a_projection_first_and_finds_nearly_all_the_exact_nearest(monkeypatch):
    """Past PROJECTED_ROWS rows the first pass reads the rows' main directions about their mean (a quarter of the
    dimensions here); what it keeps is scored again exactly. On vectors that share a common part and fall in topics,
    as embeddings do, it finds nearly every one of the exact nearest, with their exact similarities; hidden and
    removed ids stay out."""
    rng = np.random.default_rng(5)
    topics = rng.normal(size=(40, 64))
    vectors = (3.0 + topics[rng.integers(0, 40, 6000)] + 0.8 * rng.normal(size=(6000, 64))).astype(np.float32)
    ids = [f"n{i}" for i in range(len(vectors))]
    copy = Copy(ids, vectors)
    copy.remove(["n1", "n2"])
    used: list[int] = []
    real = Copy._search_projected
    monkeypatch.setattr(Copy, "_search_projected", lambda self, *a: used.append(1) or real(self, *a))
    truth = _unit(vectors)
    overlaps = []
    for n in range(20):
        query = (3.0 + topics[n] + 0.8 * rng.normal(size=64)).astype(np.float32)
        hidden = frozenset({f"n{n}", "n7"})
        found = copy.search(query, 50, hidden)
        scores = truth @ (query / np.linalg.norm(query))
        scores[[1, 2, 7, n]] = -np.inf
        expected = {f"n{i}" for i in np.argsort(-scores)[:50]}
        assert len(found) == 50 and not {"n1", "n2", "n7", f"n{n}"} & {i for i, _ in found}
        assert all(abs(s - scores[int(i[1:])]) < 1e-5 for i, s in found)  # exact similarities, best first
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        overlaps.append(len(expected & {i for i, _ in found}) / 50)
    assert len(used) == 20 and min(overlaps) >= 0.9 and sum(overlaps) / 20 >= 0.97, overlaps


class _FakeChroma:
    """fetch / listing for `Mirrors` over a dict, with a gate a test can hold a load at."""

    def __init__(self, rows: dict[str, np.ndarray]):
        self.rows, self.gate, self.reads, self.fail = rows, threading.Event(), 0, False
        self.gate.set()

    def fetch(self, chat, kind, ids):
        self.gate.wait(10)
        self.reads += 1
        if self.fail:
            raise RuntimeError("chroma is down")
        found = [i for i in ids if i in self.rows]
        return found, np.stack([self.rows[i] for i in found]) if found else np.zeros((0, 4))

    def listing(self, chat, kind):
        return list(self.rows)


def _ask(mirrors: Mirrors, times: int, chat: str = "c", kind: str = NODES, k: int = 3):
    found = None
    for _ in range(times):
        found = mirrors.search(chat, kind, np.ones(4, dtype=np.float32), k, frozenset())
    return found


def test_a_copy_loads_after_enough_searches_and_keeps_the_writes_made_while_it_loaded():
    chroma = _FakeChroma({"a": np.array([1, 0, 0, 0.0]), "b": np.array([0, 1, 0, 0.0])})
    mirrors = Mirrors(chroma.fetch, chroma.listing, after=3)
    chroma.gate.clear()  # the load will wait here
    assert _ask(mirrors, 3) is None  # Chroma answers until the copy is in: the third search started the load
    mirrors.written("c", NODES, {"z": np.array([1, 1, 1, 1.0])}, ["a"])  # written while it loads
    chroma.gate.set()
    mirrors.wait()
    assert mirrors.ready("c", NODES) and not mirrors.ready("c", SOURCES)
    assert [i for i, _ in _ask(mirrors, 1)] == ["z", "b"]  # "a" deleted, "z" added, after what was read
    assert mirrors.loads[-1]["rows"] == 2


def test_a_copy_forgotten_while_it_loads_is_thrown_away():
    chroma = _FakeChroma({"a": np.array([1, 0, 0, 0.0])})
    mirrors = Mirrors(chroma.fetch, chroma.listing, after=1)
    chroma.gate.clear()
    _ask(mirrors, 1)
    mirrors.evict("c")  # another process wrote: what the load reads may be stale
    chroma.gate.set()
    mirrors.wait()
    assert not mirrors.ready("c", NODES)


def test_a_failed_load_is_logged_and_tried_again_later(caplog):
    chroma = _FakeChroma({"a": np.array([1, 0, 0, 0.0])})
    chroma.fail = True
    mirrors = Mirrors(chroma.fetch, chroma.listing, after=2)
    with caplog.at_level(logging.WARNING, logger="curator.vectors.mirror"):
        _ask(mirrors, 2)
        mirrors.wait()
    assert not mirrors.ready("c", NODES) and "chroma is down" in caplog.text
    chroma.fail = False
    _ask(mirrors, 1)
    mirrors.wait()
    assert not mirrors.ready("c", NODES)  # not at once: after as many searches again
    _ask(mirrors, 1)
    mirrors.wait()
    assert mirrors.ready("c", NODES)


def test_copies_stay_within_their_budget():
    chroma = _FakeChroma({f"n{i}": np.eye(4)[i % 4] for i in range(10)})  # 200 bytes a copy (floats and int8)
    mirrors = Mirrors(chroma.fetch, chroma.listing, budget=400, after=1)
    for chat in ("one", "two"):
        _ask(mirrors, 1, chat)
        mirrors.wait()
    _ask(mirrors, 1, "one")  # "one" searched last: "two" is the least recent
    _ask(mirrors, 1, "three")
    mirrors.wait()
    assert mirrors.ready("one", NODES) and mirrors.ready("three", NODES) and not mirrors.ready("two", NODES)
    small = Mirrors(chroma.fetch, chroma.listing, budget=180, after=1)  # room for the floats, not the codes too
    _ask(small, 5)
    small.wait()
    assert not small.ready("c", NODES) and chroma.reads == 3  # too big for its budget: never read


# ---- with a chat: real Chroma, the default embedder --------------------------------------------------------------

def _chat(memory, events: int = 30):
    memory.create_chat("road", "default")
    index = memory.index  # open: each commit is synced
    lines = [f"Mira counted {i} lanterns on the road to stone {i}" for i in range(events)]
    memory.store.set_messages("road", [Message("assistant", "Mira", line) for line in lines])
    memory.commit("road", [{"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i}",
                            "fields": {"summary": f"Mira found {i} lanterns at stone {i}."}, "floor_from": i,
                            "floor_to": i} for i in range(events)], events - 1, "test")
    index.flush("road")
    return index


def _chroma(index, kind: str, text: str, k: int) -> list[tuple[str, float]]:
    """The exact answer over the vectors Chroma holds (the index flushed first), bypassing the copy. Not Chroma's
    own query: its approximate index once left out the row a flush had just added while the CI machine was loaded
    (the copy, which is exact, had it first)."""
    index.flush("road")
    vector = np.asarray(index.query_vectors([text])[text], dtype=np.float64)
    held = index._collection("road", kind).get(include=["embeddings"])
    rows = np.asarray(held["embeddings"], dtype=np.float64)
    scores = rows @ vector / (np.linalg.norm(rows, axis=1) * np.linalg.norm(vector))  # Chroma's space is cosine
    ranked = sorted(zip(held["ids"], scores.tolist()), key=lambda item: (-item[1], item[0]))
    return ranked[:k]


def _copied(index) -> None:
    for _ in range(MIRROR_AFTER):
        index.query("road", "lanterns", 5)
        index.query_sources("road", "lanterns", 5)
    index.mirrors.wait()
    assert index.mirrors.ready("road", NODES) and index.mirrors.ready("road", SOURCES)


def _same(found, expected) -> None:
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(found, expected))


@pytest.mark.parametrize("text", ["Mira found 7 lanterns", "stone 12", "the road"])
def test_a_chat_searched_often_is_answered_from_its_copy_as_chroma_answers(memory, text):
    index = _chat(memory)
    _copied(index)
    _same(index.query("road", text, 8), _chroma(index, NODES, text, 8))
    _same(index.query_sources("road", text, 8), _chroma(index, SOURCES, text, 8))
    assert index.mirrors.loads and index.mirrors.loads[-1]["rows"] == 30


def test_the_copy_follows_staged_flushed_direct_and_deleted_writes(memory, monkeypatch):
    index = _chat(memory)
    _copied(index)
    text = "a silver compass under the bridge"
    memory.commit("road", [{"op": "create_node", "id": "compass", "type": "event", "title": "Compass",
                            "fields": {"summary": "Mira found a silver compass under the bridge."},
                            "floor_from": 29, "floor_to": 29},
                           {"op": "update_node", "id": "ev3", "set_fields": {"summary": "Mira sold a silver compass."}},
                           {"op": "delete_node", "id": "ev4"}], 29, "test")
    assert index.pending.count("road")  # staged: searched beside the copy, each id once
    found = index.query("road", text, 40)
    assert found[0][0] == "compass" and "ev4" not in dict(found) and len(found) == len(dict(found))
    assert index.flush("road")
    assert index.mirrors.ready("road", NODES)  # kept through the flush, with what it wrote
    _same(index.query("road", text, 10), _chroma(index, NODES, text, 10))
    assert "ev4" not in dict(index.query("road", "Mira found 4 lanterns at stone 4.", 40))

    monkeypatch.setattr("curator.vectors.index.FLUSH_ROWS", 2)  # more changes than a batch: written to Chroma at once
    memory.commit("road", [{"op": "update_node", "id": f"ev{i}", "set_fields": {"summary": f"Mira lost {i} maps."}}
                           for i in range(10, 16)], 29, "test")
    assert not index.pending.count("road")
    _same(index.query("road", "Mira lost 12 maps", 10), _chroma(index, NODES, "Mira lost 12 maps", 10))


def test_another_process_writing_drops_the_copy_and_recall_sees_its_change(memory):
    index = _chat(memory)
    _copied(index)
    with curator.open(memory.store.data_dir) as other:
        other.commit("road", [{"op": "update_node", "id": "ev9",
                               "set_fields": {"summary": "Mira buried a golden harp by the well."}}], 29, "test")
        other.index.flush("road")
    injection = memory.recall("road", "Where is the golden harp buried?")
    assert not index.mirrors.ready("road", NODES)  # its sync could not follow the change log: dropped
    assert injection.recalled[0].node.id == "ev9"
    _same(index.query("road", "golden harp", 5), _chroma(index, NODES, "golden harp", 5))
