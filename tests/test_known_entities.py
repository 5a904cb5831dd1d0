"""The extractor's known names are the `max_known_entities` entities seen last, read as such
(`GraphView.latest_of_types`): the same list, in the same order, as reading every entity and sorting."""

from __future__ import annotations

from curator.extract.extractor import _known_entities


def _reference(graph, schema, limit: int) -> str:
    """What the extractor computed before: every active entity, whole, sorted by floor_to (newest first)."""
    rows = []
    for name, spec in schema.types.items():
        if spec.identity == "event":
            continue
        for node in graph.nodes(type=name):
            aliases = ", ".join(v for f in spec.alias_fields if (v := node.fields.get(f)))
            rows.append((node.floor_to, f"- {node.title} [{name}]" + (f" (aliases: {aliases})" if aliases else "")))
    rows.sort(key=lambda r: r[0], reverse=True)
    return "\n".join(text for _, text in rows[:limit]) or "(none yet)"


def test_known_entities_match_reading_every_entity(memory):
    memory.create_chat("road", "default")
    ops = []
    for i in range(12):  # ties on floor_to across types and within a type; floor_from and ids out of order
        ops.append({"op": "create_node", "id": f"c{11 - i}", "type": "character_sheet",
                    "fields": {"name": f"Char {i}", **({"aliases": f"C{i}, the {i}th"} if i % 3 == 0 else {})},
                    "floor_from": i % 4, "floor_to": 10 + i // 3})
        ops.append({"op": "create_node", "id": f"l{i}", "type": "location_state", "fields": {"name": f"Place {i}"},
                    "floor_from": 5 - i % 5, "floor_to": 10 + i // 4})
    ops.append(
        {
            "op": "create_node",
            "id": "e0",
            "type": "event",
            "title": "Summary 1",
            "fields": {"summary": "not an entity"},
            "floor_from": 30,
            "floor_to": 30,
        }
    )
    memory.commit("road", ops, 30, "test")
    memory.commit("road", [{"op": "archive_node", "id": "c0"}, {"op": "archive_node", "id": "l11"}], 30, "test")
    graph, schema = memory.graph("road"), memory.chat("road").schema
    for limit in (0, 1, 5, 7, 13, 22, 200):
        assert _known_entities(memory.store, "road", schema, limit) == _reference(graph, schema, limit), limit
    text = _known_entities(memory.store, "road", schema, 200)
    assert "Char 0" not in text or "(aliases: C0" in text
    assert "not an entity" not in text and "Place 11" not in text  # no events, no archived nodes


def test_no_entities_yet(memory):
    memory.create_chat("road", "default")
    assert _known_entities(memory.store, "road", memory.chat("road").schema, 200) == "(none yet)"
