"""Seeded data directories for the panel's tests: a scripted 20-floor chat (extracted, so the overview has
extractions and the graph real nodes) and a 2,000-node chat for the graph view's load test."""

from __future__ import annotations

import random

import curator
from curator.testing.scripted import scripted_chat, scripted_model

BIG_ACTIVE = 2000  # active nodes of the big chat (20 more are archived)
ARCHIVED = 20


def seed_story(memory: curator.Memory, chat_id: str = "story") -> None:
    memory.create_chat(chat_id, "default")
    memory.sync(chat_id, scripted_chat(20), extract=True, model=scripted_model())


def seed_big(memory: curator.Memory, chat_id: str = "big", nodes: int = BIG_ACTIVE + ARCHIVED) -> None:
    """`nodes` nodes (60% events, 30% characters, 10% places), each event linked to two characters and a place,
    a few archived: one commit, no extraction."""
    rng = random.Random(8)
    memory.create_chat(chat_id, "default")
    people = [f"n_p{i}" for i in range(nodes * 3 // 10)]
    places = [f"n_l{i}" for i in range(nodes // 10)]
    events = [f"n_e{i}" for i in range(nodes - len(people) - len(places))]
    ops: list[dict] = []
    ops += [{"op": "create_node", "id": p, "type": "character_sheet", "fields": {"name": f"Person {i}"},
             "importance": rng.uniform(1, 9)} for i, p in enumerate(people)]
    ops += [{"op": "create_node", "id": p, "type": "location_state", "fields": {"name": f"Place {i}"}}
            for i, p in enumerate(places)]
    ops += [{"op": "create_node", "id": e, "type": "event", "title": f"Event {i}",
             "fields": {"summary": f"Something happened, number {i}."}} for i, e in enumerate(events)]
    for i, e in enumerate(events):
        # events of a stretch of the story share their cast and places: clusters, as in a real chat
        block = i // 40
        cast = rng.sample(people[block * 12 % len(people):][:20] or people, 2)
        ops += [{"op": "link", "source": p, "target": e, "relation": "involved_in"} for p in cast]
        ops.append({"op": "link", "source": e, "target": places[(block + rng.randint(0, 1)) % len(places)],
                    "relation": "occurred_at"})
    ops += [{"op": "archive_node", "id": e, "archived": True} for e in events[:ARCHIVED]]
    memory.commit(chat_id, ops, anchor_floor=0, origin="test", note="seeded for the panel tests")
