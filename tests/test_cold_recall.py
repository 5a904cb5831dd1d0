"""A process's first recalls of a chat read what each query needs from the store (`recall/cold.py`: the lexicon
snapshot and what changed since, nodes and links per candidate) instead of loading the whole chat. They must give
the injections a whole, freshly loaded state gives (`recall/state.py`), on chats with every feature recall reads:
folded leaves, story dates and scenes, points of view, regions, named entities, sources, a recent-floors horizon."""

from __future__ import annotations

import random

import pytest
from test_story_recall import tale  # noqa: F401 - the story fixture

import curator
from curator.paths import example_file
from curator.recall import lexicon as lexicon_module
from curator.recall.engine import Recaller
from curator.recall.lexical import LiveBM25
from curator.recall.lexicon import NODES, SOURCES, chat_lexicon
from curator.store.lexicon import lexicon_stamps, read_lexicon
from curator.store.messages import Message

NAMES = ["Mira", "Rowan", "Eileen", "Brannoch", "Silas"]
WORDS = ["salve", "bridge", "toll", "crowns", "river", "debt", "lantern", "fire", "ledger", "market", "米拉", "桥上"]
QUERIES = ["What does Mira owe Rowan for the salve?", "the toll at the bridge", "What happened on 3 May 2023?",
           "Eileen and the lantern by the river", "米拉 桥上", "Who is the healer?", "crowns debt ledger",
           "What happened the night of the fire?", "Where did the salve keeper go?",
           "the lantern keeper and the debt keeper"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(NAMES + WORDS) for _ in range(rng.randint(3, 9)))


def _event(rng: random.Random, i: int, floor: int) -> dict:
    op = {"op": "create_node", "id": f"e{i}", "type": "event", "title": f"Summary {i}",
          "fields": {"summary": _sentence(rng)}, "floor_from": floor, "floor_to": floor + rng.randint(0, 2)}
    roll = rng.random()
    if roll < 0.3:
        op["story_time"] = {"label": f"{rng.randint(1, 9)} May, 2023"}
    elif roll < 0.45:
        op["story_time"] = {"label": rng.choice(["the night of the fire", "the market day"])}
    return op


def _grow(memory, chat: str, rng: random.Random, steps: int, start: int = 0) -> None:
    """Commits of every kind: events (some dated, some in scenes), characters with aliases, links, updates,
    compaction into summaries, deletes, rollbacks; and the messages the events came from."""
    floor = start
    for step in range(start, start + steps):
        floor = step * 2 + 1
        memory.store.set_messages_from(chat, step * 2, [Message("user", "You", _sentence(rng)),
                                                        Message("assistant", rng.choice(NAMES), _sentence(rng))])
        graph = memory.graph(chat)
        events = [n.id for n in graph.nodes(type="event") if n.parent is None]
        roll = rng.random()
        if step < 3 or roll < 0.45:
            ops = [_event(rng, step * 10 + j, floor) for j in range(rng.randint(1, 3))]
            if step % 4 == 0:
                name = rng.choice(NAMES)
                ops.append({"op": "create_node", "id": f"c{step}", "type": "character_sheet",
                            "fields": {"name": f"{name} {step}", "aliases": f"the {rng.choice(WORDS)} keeper"}})
        elif roll < 0.6 and len(events) > 4:
            ops = [{"op": "compact", "id": f"sum{step}", "type": "event", "title": f"Summary S{step}",
                    "fields": {"summary": _sentence(rng)}, "children": rng.sample(events, 3)}]
        elif roll < 0.75 and events:
            ops = [{"op": "update_node", "id": rng.choice(events), "set_fields": {"summary": _sentence(rng)}}]
        elif roll < 0.85 and events:
            people = [n.id for n in graph.nodes(type="character_sheet")]
            ops = [{"op": "link", "source": rng.choice(people), "target": rng.choice(events),
                    "relation": "involved_in"}] if people else []
        elif roll < 0.92 and events:
            ops = [{"op": "delete_node", "id": rng.choice(events)}]
        elif step > 6:
            memory.rollback(chat, rng.randrange(max(1, floor - 6), floor))
            ops = []
        else:
            ops = []
        if ops:
            memory.commit(chat, ops, floor, "test")


def _injection(injection) -> dict:
    data = injection.to_dict()
    for key in ("usage", "reused"):
        data.pop(key, None)
    return data


def _compare(memory, chat: str, options: list[dict], index=None) -> int:
    """Recall every query with each option set on a cold recaller and a whole one; returns the injections compared."""
    compared = 0
    for opts in options:
        settings = memory.settings.recall.model_copy(update=opts)
        cold = Recaller(memory.store, memory.settings, index, full_after=None)
        whole = Recaller(memory.store, memory.settings, index, full_after=0)
        for query in QUERIES:
            a, b = cold.recall(chat, query, options=settings), whole.recall(chat, query, options=settings)
            assert cold.state(chat).kind == "cold" and whole.state(chat).kind == "whole"
            assert _injection(a) == _injection(b), (query, opts)
            compared += 1
        turns = [Message("user", "You", QUERIES[0]), Message("assistant", "Mira", QUERIES[3]),
                 Message("user", "You", "And what about the ledger and the crowns she owed?")]
        assert _injection(cold.recall(chat, "", messages=turns, options=settings)) == \
            _injection(whole.recall(chat, "", messages=turns, options=settings))
    return compared


OPTIONS = [{}, {"budget_tokens": 400, "max_per_type": 3}, {"exclude_recent_floors": 6, "max_results": 5},
           {"mode": "rag"}]


@pytest.mark.parametrize("seed", [1, 2])
def test_cold_recall_gives_the_injections_of_a_whole_state(memory, seed):
    rng = random.Random(seed)
    memory.create_chat("road", "default")
    _grow(memory, "road", rng, 40)
    assert _compare(memory, "road", OPTIONS) == len(OPTIONS) * len(QUERIES)
    # the snapshot saved by the first cold recall is followed by what changed since: new commits, new messages,
    # rollbacks; and read by another process (a new store object: the changes come from the store's own log)
    _grow(memory, "road", rng, 15, start=40)
    _compare(memory, "road", OPTIONS[:2])
    with curator.open(memory.data_dir) as other:
        _grow(other, "road", rng, 10, start=55)
    _compare(memory, "road", OPTIONS[:1])
    graph = memory.graph("road")
    assert graph.nodes(type="event", archived=True)  # folded leaves came up
    assert any(n.story_time.get("label") for n in graph.nodes(type="event"))


def test_cold_recall_on_points_of_view_and_regions(tale):  # noqa: F811 - the fixture imported above
    """The story features (who knows what, points of view, regions, story time) read the same either way."""
    for speaker in ("Bram", "Cole", None):
        for query in ("Who forged the ledger?", "What happened the night of the fire?", "Is there a market here?"):
            opts = tale.settings.recall.model_copy(update={"speaker": speaker})
            cold = Recaller(tale.store, tale.settings, None, full_after=None)
            whole = Recaller(tale.store, tale.settings, None, full_after=0)
            assert _injection(cold.recall("tale", query, options=opts)) == \
                _injection(whole.recall("tale", query, options=opts))


def test_cold_recall_with_the_vector_index_on_the_example_chat(memory):
    """The bundled example chat with its vectors: the user messages of the chat, each with the turns before it."""
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    memory.rebuild_vectors("road")
    messages = memory.store.messages("road")
    cold = Recaller(memory.store, memory.settings, memory.index, full_after=None)
    whole = Recaller(memory.store, memory.settings, memory.index, full_after=0)
    asked = [f for f, m in enumerate(messages) if m.role == "user"][::3]
    for floor in asked:
        turns = messages[max(0, floor - 2):floor + 1]
        a = cold.recall("road", "", messages=turns, user_floor=floor)
        b = whole.recall("road", "", messages=turns, user_floor=floor)
        assert a.recalled and _injection(a) == _injection(b)


def test_the_lexicon_follows_changes_and_compacts_them(memory, monkeypatch):
    """A snapshot followed by a delta scores as a fresh one; past the compaction share a new snapshot is saved
    (the delta merged in, nothing tokenized again); a changed tokenizer makes it again."""
    rng = random.Random(5)
    memory.create_chat("road", "default")
    _grow(memory, "road", rng, 20)
    schema = memory.chat("road").schema
    events = {n for n, s in schema.types.items() if s.identity == "event"}
    chat_lexicon(memory.store, "road", schema, events, memory.store.stamp("road"))
    first = lexicon_stamps(memory.store.conn, "road")
    _grow(memory, "road", rng, 5, start=20)
    monkeypatch.setattr(lexicon_module, "COMPACT_MIN", 10 ** 6)
    followed = chat_lexicon(memory.store, "road", schema, events, memory.store.stamp("road"))
    assert lexicon_stamps(memory.store.conn, "road") == first  # followed in memory, not saved
    assert followed[NODES].delta and followed[SOURCES].delta
    fresh = _whole_bm25(memory)
    for query in QUERIES:
        assert followed[NODES].top(query, 20) == fresh[0].top(query, 20)
        assert followed[SOURCES].top(query, 20) == fresh[1].top(query, 20)
    monkeypatch.setattr(lexicon_module, "COMPACT_MIN", 0)
    compacted = chat_lexicon(memory.store, "road", schema, events, memory.store.stamp("road"))
    assert not compacted[NODES].delta and lexicon_stamps(memory.store.conn, "road") != first
    saved = read_lexicon(memory.store.conn, "road", NODES)
    assert saved.stamp.endswith(f"|{memory.store.stamp('road')[1]}|{memory.store.stamp('road')[2]}")
    for query in QUERIES:
        assert compacted[NODES].top(query, 20) == fresh[0].top(query, 20)
    lexicon_module.lexicon_format.cache_clear()
    monkeypatch.setattr(lexicon_module, "LEXICON_VERSION", 99)
    rebuilt = chat_lexicon(memory.store, "road", schema, events, memory.store.stamp("road"))
    assert read_lexicon(memory.store.conn, "road", NODES).format.startswith("99:")
    assert rebuilt[NODES].top(QUERIES[0], 20) == fresh[0].top(QUERIES[0], 20)
    lexicon_module.lexicon_format.cache_clear()


def _whole_bm25(memory) -> tuple[LiveBM25, LiveBM25]:
    from curator.recall.state import ChatState

    state = ChatState("road")
    state.refresh(memory.store)
    return state.bm25, state.source_bm25


def test_the_whole_state_is_loaded_in_the_background_after_a_few_recalls(memory):
    rng = random.Random(3)
    memory.create_chat("road", "default")
    _grow(memory, "road", rng, 12)
    recaller = Recaller(memory.store, memory.settings, None, full_after=3)
    seen = []
    for _ in range(3):
        recaller.recall("road", QUERIES[0])
        seen.append(recaller.state("road").kind)
    recaller.wait_loaded()
    assert seen[:2] == ["cold", "cold"] and recaller.state("road").kind == "whole"
    assert _injection(recaller.recall("road", QUERIES[1])) == \
        _injection(Recaller(memory.store, memory.settings, None, full_after=None).recall("road", QUERIES[1]))


@pytest.mark.parametrize("seed", [3, 4])
def test_the_cold_pool_answers_as_the_whole_pool_for_every_node(memory, seed):
    """Every map of the pool, asked about every node: recallable, folded and under whom, documents, scenes, the
    dated nodes, each summary's folded leaves; with and without a horizon (leaves past it are left out)."""
    from curator.recall.cold import ColdState
    from curator.recall.persistent import plan_persistent
    from curator.recall.pool import build_pool
    from curator.recall.state import ChatState

    rng = random.Random(seed)
    memory.create_chat("road", "default")
    _grow(memory, "road", rng, 60)
    for summary in [n.id for n in memory.graph("road").nodes(type="event") if n.level == 1][:4]:
        memory.commit("road", [{"op": "compact", "id": f"top{summary}", "type": "event", "title": f"Top {summary}",
                                "fields": {"summary": "Folded again."}, "children": [summary]}], 130, "test")
    whole, cold = ChatState("road"), ColdState("road")
    whole.refresh(memory.store)
    cold.refresh(memory.store)
    ids = [n.id for n in memory.graph("road").nodes(archived=None)]
    seen = set()
    assert any(n.level >= 2 for n in memory.graph("road").nodes(archived=None))
    for horizon, cap in ((None, 8), (None, 1), (60, 8), (60, 1), (20, 2)):  # a small cap: summaries not injected
        plan = plan_persistent(whole.typed(), whole.schema, 130, 1500, cap)
        assert [n.id for n in plan_persistent(cold.typed(), cold.schema, 130, 1500, cap).kept] == \
            [n.id for n in plan.kept]
        a, b = build_pool(whole, plan.kept, horizon), cold.build_pool(plan.kept, horizon)
        for node_id in ids:
            assert (node_id in a.nodes, a.leaves.get(node_id), node_id in a.leaf_nodes) == \
                (node_id in b.nodes, b.leaves.get(node_id), node_id in b.leaf_nodes), (node_id, horizon)
            assert (a.documents.get(node_id), a.scenes.get(node_id), a.folded.get(node_id, ())) == \
                (b.documents.get(node_id), b.scenes.get(node_id), b.folded.get(node_id, ())), (node_id, horizon)
            assert (whole.context().get(node_id), whole.neighbours().get(node_id)) == \
                (cold.context().get(node_id), cold.neighbours().get(node_id))
        assert a.by_day == b.by_day and bool(a.leaves) == bool(b.leaves)
        seen.update(k for k in ("folded", "by_day", "scenes") if getattr(a, k))
        seen.update({"injected top"} if any(t in a.injected for t in a.leaves.values()) else set())
        seen.update({"recalled top"} if any(t in a.nodes for t in a.leaves.values()) else set())
    assert seen == {"folded", "by_day", "scenes", "injected top", "recalled top"}
