"""The persistent plan read from the recall state's ranked nodes (kept in step commit by commit) is the plan a
whole sort of every always-inject node gives: the same block, the same nodes left out, for the same reasons, in the
same order."""

from __future__ import annotations

import random

from test_incremental import _drive

from curator.recall.injection import (
    MAX_MISSES,
    MIN_LINE_TOKENS,
    PERSISTENT_SHARE,
    _rendered,
    block_overhead,
    rank_persistent,
)
from curator.recall.persistent import plan_persistent
from curator.recall.state import ChatState
from curator.schemas import load_schema


def _schema():
    """The default schema with three kinds of persistent caps: events by their own cap (the newest 5) within 25
    floors, characters by the default cap (the highest first), places of the latest-only kind by distance alone."""
    schema = load_schema("default")

    def inject(name, **caps):
        spec = schema.types[name]
        return spec.model_copy(update={"always_inject": spec.always_inject.model_copy(update={"enabled": True,
                                                                                             **caps})})

    return schema.model_copy(update={"types": {**schema.types,
                                               "event": inject("event", max_per_type=5, max_floor_distance=25),
                                               "character_sheet": inject("character_sheet", max_per_type=0),
                                               "location_state": inject("location_state", max_floor_distance=20)}})


def _whole_plan(state: ChatState, schema, latest: int, budget: int, default_cap: int):
    """The plan as it was worked out before the state kept ranked nodes: every node of each type, sorted."""
    kept, left, candidates = [], {}, []
    for name, spec in schema.types.items():
        caps = spec.always_inject
        if not caps.enabled:
            continue
        cap = caps.max_per_type or default_cap
        nodes = sorted((n for n in state.nodes.values() if n.type == name and not n.archived and n.parent is None),
                       key=lambda n: (n.floor_from, n.id))
        nodes.sort(key=(lambda n: (n.floor_to, n.floor_from, n.created_at)) if caps.max_per_type
                   else (lambda n: (n.level, n.floor_to, n.floor_from, n.created_at)), reverse=True)
        for index, node in enumerate(nodes):
            if caps.max_floor_distance and node.floor_to < latest - caps.max_floor_distance + 1:
                left[node.id] = "distance"
            elif cap and spec.identity != "latest_only" and index >= cap:
                left[node.id] = "cap"
            else:
                candidates.append(node)
    overhead = block_overhead()
    used, limit, misses = 2 * overhead, int(budget * PERSISTENT_SHARE), 0
    for node in rank_persistent(candidates):
        if limit - used < MIN_LINE_TOKENS or misses >= MAX_MISSES:
            left[node.id] = "budget"
            continue
        tokens = _rendered(node, schema)[1]
        if used + tokens > limit:
            left[node.id] = "budget"
            misses += 1
            continue
        used, misses = used + tokens, 0
        kept.append(node)
    return kept, left


def test_the_plan_follows_commits_as_a_whole_sort_would(memory):
    schema = _schema()
    memory.create_chat("road", schema)
    live = ChatState("road")
    rng = random.Random(4)
    seen = {"distance": 0, "cap": 0, "budget": 0}

    def check():
        live.refresh(memory.store)
        for budget, default_cap in ((300, 3), (1500, 0), (4000, 8)):
            latest = (live.latest_floor or 0) + rng.randrange(0, 30)  # further on: more nodes too far
            plan = plan_persistent(live.typed(), schema, latest, budget, default_cap)
            kept, left = _whole_plan(live, schema, latest, budget, default_cap)
            assert [n.id for n in plan.kept] == [n.id for n in kept]
            assert list(plan.left.items()) == list(left.items())  # the same reasons, in the same order
            assert len(plan.left) == len(left)
            assert all(plan.left.get(n.id) is None for n in kept)
            for why in left.values():
                seen[why] += 1

    # ties: nodes of one commit share their floors and creation time, so their ids decide
    memory.commit("road", [{"op": "create_node", "id": f"pl{i}", "type": "location_state", "floor_from": i // 3,
                            "floor_to": i // 3, "fields": {"name": f"Place {i}"}} for i in (5, 1, 4, 0, 3, 2)] +
                  [{"op": "create_node", "id": f"ch{i}", "type": "character_sheet", "fields": {"name": f"Who {i}"}}
                   for i in (3, 1, 2)], 2, "test")
    _drive(memory, 45, seed=7, check=check)
    assert live.loads == 1  # followed commit by commit, never loaded whole again
    assert all(seen.values()), seen  # every reason came up


def test_a_count_read_apart_from_its_pages_never_makes_the_plan_negative_or_doubles_a_node(memory):
    """A cold state reads a type's count and its pages in separate statements; another process's commit between them
    (seen on PostgreSQL with two service processes: `len()` of the left-out map was negative, a 500) may make the
    count smaller than the nodes read, or shift a page so that a node comes twice."""
    schema = _schema()
    memory.create_chat("road", schema)
    memory.commit("road", [{"op": "create_node", "id": f"ch{i}", "type": "character_sheet",
                            "fields": {"name": f"Who {i}"}} for i in range(4)], 2, "test")
    live = ChatState("road")
    live.refresh(memory.store)
    whole = live.typed()

    class Shifted:  # the state's own typed view, its count one behind and its first node read twice
        state = whole.state

        def ranked(self, type_):
            count, nodes = whole.ranked(type_)
            nodes = list(nodes)
            return max(0, count - 1), iter(nodes[:1] + nodes)

    plan = plan_persistent(Shifted(), schema, 10, 4000, 0)
    assert sorted(n.id for n in plan.kept) == [f"ch{i}" for i in range(4)]  # each once
    assert len(plan.left) == 0
