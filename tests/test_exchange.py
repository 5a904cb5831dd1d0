from __future__ import annotations

import json

import pytest

from curator import ChatExists, ImportFileError
from curator.store.exchange import MAX_IMPORT_BYTES, dumps
from curator.paths import example_file

EXAMPLE = example_file("lantern_road.graph.json")


def _strip_times(graph: dict) -> dict:
    return {"nodes": graph["nodes"], "edges": graph["edges"], "schema": graph["schema"]}


def _write(tmp_path, data, name="g.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return str(path)


def test_export_format(memory, chat):
    data = memory.export(chat)
    assert data["format"] == "memory-curator/graph" and data["version"] == 1
    assert data["chat"]["id"] == chat
    assert set(data["schema"]["types"]) == {"character_sheet", "location_state", "event", "synopsis"}
    assert data["schema"]["types"]["event"]["compression"]["fan_in"] == 3  # the full definition travels
    node = next(n for n in data["nodes"] if n["id"] == "n_eileen")
    assert set(node) >= {"id", "type", "title", "fields", "level", "parent", "children", "floor_from", "floor_to",
                         "importance", "access_count", "archived", "scope", "story_time", "created_at", "updated_at"}
    assert "embedding" not in json.dumps(data)
    assert len(data["edges"]) == 3


def test_round_trip_of_the_example_graph(memory, tmp_path):
    original = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    memory.import_("first", EXAMPLE)
    exported = memory.export("first")
    assert _strip_times(exported) == _strip_times(original)  # the hand-written file is exactly what we export
    path = _write(tmp_path, exported)
    memory.import_("second", path)
    assert _strip_times(memory.export("second")) == _strip_times(exported)


def test_round_trip_of_a_custom_schema(memory, tmp_path, chat):
    schema_file = tmp_path / "s.yaml"
    schema_file.write_text("name: fantasy\nrelations: [{name: related}]\ntypes:\n  magic_system:\n"
                           "    primary_key: [name]\n    title_field: name\n    fields: [{name: name, required: true}, "
                           "{name: cost}]\n", encoding="utf-8")
    memory.create_chat("magic", schema_file)
    memory.commit(
        "magic", [{"op": "create_node", "type": "magic_system", "fields": {"name": "Tide-song", "cost": "breath"}}], 2
    )
    path = _write(tmp_path, memory.export("magic"))
    memory.import_("magic-copy", path)
    assert memory.chat("magic-copy").schema.name == "fantasy"  # the custom type travelled with the export
    assert memory.graph("magic-copy").find_by_name("tide-song")[0].fields["cost"] == "breath"


def test_import_is_one_commit_that_rolls_back(memory):
    record = memory.import_("road", EXAMPLE)
    assert record.origin == "import" and record.anchor_floor == 59
    assert memory.graph("road").stats()["nodes_active"] == 18
    memory.rollback("road", 59)
    assert memory.graph("road").stats() == {"nodes_active": 0, "nodes_archived": 0, "edges": 0, "commits": 0,
                                            "messages": 0, "by_type": {}}


def test_bind_latest_and_bind_floor(memory):
    memory.create_chat("fresh", "default")
    memory.load_chat_file("fresh", example_file("lantern_road.jsonl"))
    record = memory.import_("fresh", EXAMPLE, mode="bind_latest")
    nodes = memory.graph("fresh").nodes(archived=None)
    assert record.anchor_floor == 59 and {(n.floor_from, n.floor_to) for n in nodes} == {(59, 59)}

    memory.import_("at-twelve", EXAMPLE, mode="bind_floor", floor=12)
    nodes = memory.graph("at-twelve").nodes(archived=None)
    assert {(n.floor_from, n.floor_to) for n in nodes} == {(12, 12)}
    with pytest.raises(ImportFileError, match="needs a floor"):
        memory.import_("x", EXAMPLE, mode="bind_floor")


def test_import_into_a_chat_that_has_those_ids_changes_nothing(memory):
    memory.import_("road", EXAMPLE)
    before = memory.graph("road").snapshot()
    with pytest.raises(ChatExists, match="already has node"):
        memory.import_("road", EXAMPLE)
    assert memory.graph("road").snapshot() == before


def _example():
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def _mutations():
    def unknown_type(d):
        d["nodes"][0]["type"] = "faction"

    def unknown_field(d):
        d["nodes"][1]["fields"]["mood"] = "grim"

    def unknown_key(d):
        d["nodes"][2]["colour"] = "red"

    def duplicate_id(d):
        d["nodes"][3]["id"] = d["nodes"][0]["id"]

    def edge_to_missing(d):
        d["edges"][0]["target"] = "n_ghost"

    def bad_relation(d):
        d["edges"][1]["relation"] = "adores"

    def missing_parent(d):
        d["nodes"][5]["parent"] = "n_nobody"

    def wrong_value(d):
        d["nodes"][0]["importance"] = 42

    def missing_required(d):
        d["nodes"][0]["fields"].pop("name")

    def bad_schema(d):
        d["schema"]["types"]["event"]["identity"] = "sometimes"

    def newer_format(d):
        d["version"] = 99

    def other_format(d):
        d["format"] = "something/else"

    return [
        (unknown_type, "unknown type 'faction'"), (unknown_field, "unknown field(s) mood"),
        (unknown_key, "colour"), (duplicate_id, "duplicate id"), (edge_to_missing, "missing node 'n_ghost'"),
        (bad_relation, "unknown relation 'adores'"), (missing_parent, "parent 'n_nobody'"),
        (wrong_value, "importance"), (missing_required, "requires field(s): name"),
        (bad_schema, "type 'event', field 'identity'"), (newer_format, "not supported"),
        (other_format, "not a memory-curator/graph file"),
    ]


@pytest.mark.parametrize("mutate, message", _mutations(), ids=lambda v: getattr(v, "__name__", ""))
def test_bad_imports_are_refused_whole(memory, tmp_path, mutate, message):
    memory.create_chat("road", "default")
    data = _example()
    mutate(data)
    with pytest.raises(ImportFileError) as info:
        memory.import_("road", _write(tmp_path, data))
    assert message in str(info.value)
    assert memory.graph("road").stats()["nodes_active"] == 0 and memory.store.commits("road") == []
    with pytest.raises(ImportFileError):
        memory.import_("brand-new", _write(tmp_path, data))
    assert "brand-new" not in memory.chats()  # a failed import does not leave an empty chat behind


def test_errors_name_the_line_of_the_node(memory, tmp_path):
    data = _example()
    data["nodes"][4]["fields"]["mood"] = "grim"
    path = _write(tmp_path, data)
    with pytest.raises(ImportFileError) as info:
        memory.import_("road", path)
    node_id = data["nodes"][4]["id"]
    with open(path, encoding="utf-8") as file:
        line = next(i for i, text in enumerate(file, 1) if f'"id": "{node_id}"' in text)
    assert f"node '{node_id}' (line {line})" in str(info.value)


@pytest.mark.parametrize("content, message", [
    (b'{"format": "memory-curator/graph",\n "version": 1,\n "nodes": [}', "line 3, column"),
    (b'{"format": "memory-curator/graph"}\n\xff\xfe', "line 2: not UTF-8"),
    (b"[1, 2]", "not a memory-curator/graph file"),
])
def test_malformed_files(memory, tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ImportFileError, match=message):
        memory.import_("road", path)
    assert memory.chats() == []


def test_oversized_imports_are_refused(memory, tmp_path):
    path = tmp_path / "big.json"
    path.write_text(dumps(_example()), encoding="utf-8")
    with pytest.raises(ImportFileError, match="over the import limit"):
        memory.import_("road", path, max_bytes=1000)
    assert MAX_IMPORT_BYTES >= 10 * 1024 * 1024


def test_long_parent_chains_and_loops(memory, tmp_path):
    data = _example()
    template = next(n for n in data["nodes"] if n["type"] == "event" and n["level"] == 0)
    chain = []
    for i in range(3000):  # deeper than Python's recursion limit
        node = {**template, "id": f"c{i}", "parent": f"c{i + 1}" if i < 2999 else None, "children": []}
        chain.append(node)
    data["nodes"] = chain[::-1][:1] + chain[:-1]  # children listed before parents, too
    data["edges"] = []
    memory.import_("chain", _write(tmp_path, data))
    assert memory.graph("chain").get("c0").parent == "c1"
    data["nodes"][0]["parent"] = "c0"  # c2999 -> c0 -> c1 -> ... -> c2999
    with pytest.raises(ImportFileError, match="loops back"):
        memory.import_("loop", _write(tmp_path, data, "loop.json"))
    assert "loop" not in memory.chats()
