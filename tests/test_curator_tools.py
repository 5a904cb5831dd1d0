"""The curator's tools called directly on a workspace: read tools, generated write tools and KEEP/FOLD/DROP
compaction, with valid and invalid calls (every error is an answer the model can act on)."""

from __future__ import annotations

import pytest

from curator import tools
from curator.tools import Workspace, invoke, run_tools


@pytest.fixture
def ws(memory, chat):
    workspace = Workspace.open(memory.store, chat, anchor=5, seq=1, active_types=["character_sheet", "event"])
    yield workspace
    workspace.close()


def call(ws, name, /, **args):
    spec = next((t for t in run_tools(ws.schema, ws.active_types) if t.name == name), None)
    assert spec is not None, f"no tool {name} this run"
    return invoke(spec, ws, args)


def test_tools_per_cadence_step(default_schema):
    names = {t.name for t in run_tools(default_schema, ["character_sheet", "event"])}
    assert {"create_event", "edit_event", "delete_event", "create_character_sheet", "memory_link_upsert",
            "memory_compact_nodes", "memory_find_by_name", "memory_compaction_candidates"} <= names
    assert not any("location_state" in n for n in names)  # inactive this step: no write tools at all
    assert {"create_location_state", "edit_location_state", "delete_location_state"} <= \
        {t.name for t in run_tools(default_schema, ["location_state"])}
    create = next(t for t in run_tools(default_schema, ["character_sheet"]) if t.name == "create_character_sheet")
    schema = create.args.model_json_schema()
    assert schema["required"] == ["name"] and {"aliases", "goal", "inventory", "title"} <= set(schema["properties"])
    assert "Call memory_find_by_name" not in create.description and "find_by_name" in create.description


def test_read_tools(ws):
    schema = call(ws, "memory_schema")
    assert schema["types"]["event"]["writable_this_run"] and not schema["types"]["location_state"]["writable_this_run"]
    assert "contains" not in {r["name"] for r in schema["relations"]}  # engine-internal relation hidden
    listed = call(ws, "memory_list_candidates", types=["character_sheet"])
    assert listed["total"] == 2 and {n["id"] for n in listed["nodes"]} == {"n_eileen", "n_rowan"}
    assert call(ws, "memory_list_candidates", exclude_recent_floors=2)["total"] == 4  # the run is at floor 5
    assert call(ws, "memory_list_candidates", exclude_recent_floors=3)["total"] == 0  # all made at floor 3
    brief = call(ws, "memory_node_brief", node_id="n_ev1")
    assert brief["fields"]["summary"].startswith("Rowan gives") and brief["floors"] == [3, 3]
    assert brief["edges"]["degree"] == 3 and brief["edges"]["by_relation"] == {"involved_in": 2, "occurred_at": 1}
    edges = call(ws, "memory_edge_summary", node_id="n_ev1", relations=["occurred_at"])
    assert edges["neighbours"] == [{"relation": "occurred_at", "direction": "out", "id": "n_bridge",
                                    "title": "Brannoch's Bridge", "type": "location_state", "strength": 0.8}]
    near = call(ws, "memory_expand_seeds", seed_ids=["n_eileen"], hops=2)
    assert {n["id"] for n in near["nodes"]} == {"n_ev1", "n_rowan", "n_bridge"}
    assert call(ws, "memory_expand_seeds", seed_ids=["n_eileen"], hops=1)["found"] == 1
    assert call(ws, "memory_find_by_name", name="eli")["nodes"][0]["id"] == "n_eileen"  # by alias
    assert call(ws, "memory_find_by_name", name="Brann")["match"] == "partial"
    hits = call(ws, "memory_keyword_search", query="salve promise")
    assert hits["nodes"][0]["id"] == "n_ev1"
    assert [n["id"] for n in call(ws, "memory_timeline", floor_from=3, floor_to=3, types=["event"])["nodes"]] == [
        "n_ev1"
    ]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("memory_node_brief", {"node_id": "n_nobody"}, "node 'n_nobody' does not exist"),
        ("memory_list_candidates", {"types": ["dragon"]}, "unknown type 'dragon'"),
        ("memory_node_brief", {"node": "n_ev1"}, "unknown argument 'node'"),
        ("memory_vector_search", {"query": "salve"}, "no vector index"),
        ("memory_timeline", {"floor_from": 5, "floor_to": 2}, "runs backwards"),
        ("create_character_sheet", {"name": "Mira", "mood": "tense"}, "unknown argument 'mood'"),
        ("create_character_sheet", {"goal": "x"}, "missing required 'name'"),
        ("create_character_sheet", {"name": "  eileen "}, "exists already: n_eileen"),
        ("create_character_sheet", {"name": "Eli Vance", "aliases": "The Healer"}, "exists already: n_eileen"),
        (
            "edit_event",
            {"node_id": "n_eileen", "set_fields": {"summary": "x"}},
            "is a 'character_sheet', not a 'event'",
        ),
        (
            "edit_character_sheet",
            {"node_id": "n_eileen", "set_fields": {"summary": "x"}},
            "unknown field 'set_fields.summary'",
        ),
        ("edit_character_sheet", {"node_id": "n_eileen", "clear_fields": ["name"]}, "cannot clear required field"),
        ("edit_character_sheet", {"node_id": "n_eileen"}, "nothing to change"),
        ("delete_event", {"node_id": "n_rowan"}, "not a 'event'"),
        (
            "memory_link_upsert",
            {"links": [{"source": "n_eileen", "target": "n_rowan", "relation": "loves"}]},
            "links.0.relation",
        ),
        (
            "memory_link_upsert",
            {"links": [{"source": "n_eileen", "target": "n_ghost", "relation": "owes"}]},
            "'n_ghost' does not exist",
        ),
        ("memory_link_delete", {"source": "n_eileen", "target": "n_rowan", "relation": "owes"}, "does not exist"),
        ("memory_compaction_candidates", {"type": "character_sheet"}, "is not compressed"),
    ],
)
def test_invalid_calls_answer_errors_and_change_nothing(ws, memory, chat, name, args, message):
    before = ws.graph.snapshot()
    result = call(ws, name, **args)
    assert message in result["error"], result
    assert ws.graph.snapshot() == before and ws.staged == []
    assert ws.calls[-1].ok is False and ws.calls[-1].name == name


def test_writes_are_staged_visible_to_reads_and_not_in_the_store(ws, memory, chat):
    assert call(ws, "memory_keyword_search", query="salve")["nodes"][0]["id"] == "n_ev1"  # index built here
    created = call(ws, "create_character_sheet", name="Mira", aliases="the courier", goal="deliver the letter")
    event = call(ws, "create_event", summary="Mira arrives with a sealed letter.", importance=7)
    assert call(ws, "memory_keyword_search", query="sealed letter")["nodes"][0]["id"] == event["id"]  # staged too
    assert event["title"] == "Summary 2"  # numbered on from the chat's events
    call(ws, "memory_link_upsert", links=[{"source": created["id"], "target": event["id"], "relation": "involved_in"}])
    edited = call(ws, "edit_character_sheet", node_id="n_eileen", set_fields={"goal": "repay Rowan"},
                  clear_fields=["identity"])
    assert edited["changed"] == ["goal", "-identity"]
    assert call(ws, "memory_find_by_name", name="The Courier")["nodes"][0]["id"] == created["id"]
    assert call(ws, "memory_node_brief", node_id="n_eileen")["fields"] == {
        "name": "Eileen", "aliases": "the healer, Eli", "goal": "repay Rowan"}
    assert call(ws, "memory_link_delete", source="n_rowan", target="n_ev1", relation="involved_in")["ok"]
    assert [e.relation for e in ws.graph.edges("n_rowan")] == []
    assert call(ws, "delete_event", node_id=event["id"])["deleted"] == event["id"]
    assert event["id"] not in {n["id"] for n in call(ws, "memory_keyword_search", query="sealed letter")["nodes"]}
    assert [op["op"] for op in ws.staged] == ["create_node", "create_node", "link", "update_node", "unlink",
                                              "delete_node"]
    assert memory.graph(chat).get(created["id"]) is None  # nothing reached the store
    record = memory.commit(chat, ws.staged, 5, origin="curate")  # the staged ops replay on the real graph
    assert memory.graph(chat).get(created["id"]).fields["goal"] == "deliver the letter"
    assert memory.graph(chat).get(event["id"]) is None and record.origin == "curate"


# ---- compaction -------------------------------------------------------------------------------------------
@pytest.fixture
def events(memory):
    """Fifteen leaf events at floors 1, 3, ... 29, linked to Eileen (outside) and each to the next (inside)."""
    memory.create_chat("long", "default")
    ops = [{"op": "create_node", "id": "n_eileen", "type": "character_sheet", "fields": {"name": "Eileen"}}]
    for i in range(15):
        ops.append({"op": "create_node", "id": f"e{i:02}", "type": "event", "title": f"Summary {i + 1}",
                    "floor_from": 2 * i + 1, "importance": 9 if i == 1 else 4,
                    "fields": {"summary": f"Step {i}: Eileen walks on and talks about the road, day {i}."}})
        ops.append({"op": "link", "source": "n_eileen", "target": f"e{i:02}", "relation": "involved_in"})
        if i:
            ops.append({"op": "link", "source": f"e{i - 1:02}", "target": f"e{i:02}", "relation": "related"})
    memory.commit("long", ops, anchor_floor=29, origin="test")
    workspace = Workspace.open(memory.store, "long", anchor=29, seq=1, active_types=["event"])
    yield workspace
    workspace.close()


def test_compaction_candidates(events):
    found = call(events, "memory_compaction_candidates", type="event", depth=0)
    # 15 leaves, the newest 6 kept out -> 9 (= threshold) -> three groups of three, in story order
    assert [g["node_ids"] for g in found["groups"]] == [["e00", "e01", "e02"], ["e03", "e04", "e05"],
                                                         ["e06", "e07", "e08"]]
    assert found["groups"][0]["fold_limits"]["max_lines"] == 5 and "9 node(s)" in found["why"]
    assert call(events, "memory_compaction_candidates", type="event", depth=1)["groups"] == []
    assert "top depth" in call(events, "memory_compaction_candidates", type="event", depth=10)["why"]


def test_fold_keep_drop(events, memory):
    result = call(events, "memory_compact_nodes", type="event", groups=[
        {"decision": "FOLD", "node_ids": ["e00", "e01", "e02"], "summary": "Days 0-2: Eileen walks the road."},
        {"decision": "KEEP", "node_ids": ["e03"]},
        {"decision": "DROP", "node_ids": ["e04", "e05"]},
    ])
    assert result["ok"], result
    graph = events.graph
    summary = graph.get(result["groups"][0]["summary_id"])
    assert summary.level == 1 and summary.title == "Summary 16" and summary.importance == 9
    assert (summary.floor_from, summary.floor_to) == (1, 5) and summary.children == ["e00", "e01", "e02"]
    assert all(graph.get(c).archived and graph.get(c).parent == summary.id for c in summary.children)
    relations = {(e.source, e.relation, e.target) for e in graph.edges(summary.id)}
    assert relations == {("n_eileen", "involved_in", summary.id), (summary.id, "related", "e03")}  # inside ones gone
    assert not graph.edges("e00")
    kept = graph.get("e03")
    assert kept.level == 1 and not kept.archived and kept.fields["summary"].startswith("Step 3")
    assert graph.get("e04").archived and graph.get("e04").parent is None
    again = call(events, "memory_compaction_candidates", type="event", depth=0)
    assert again["groups"] == []  # e03 is not offered again; three leaves are left before the recent six
    assert memory.graph("long").get(summary.id) is None  # staged only


@pytest.mark.parametrize(("groups", "message"), [
    ([{"decision": "FOLD", "node_ids": ["e00", "e01"]}], "FOLD needs a summary"),
    ([{"decision": "FOLD", "node_ids": ["e00"], "summary": "x"}], "at least 2 nodes"),
    ([{"decision": "FOLD", "node_ids": ["e00", "e01"], "summary": "x" * 2000}], "at most 5 lines and 200 characters"),
    ([{"decision": "FOLD", "node_ids": ["e00", "e01"], "summary": "\n".join("line" for _ in range(6))}],
     "6 lines"),
    ([{"decision": "KEEP", "node_ids": ["e00"], "summary": "x"}], "KEEP takes no summary"),
    ([{"decision": "DROP", "node_ids": ["e00"]}, {"decision": "KEEP", "node_ids": ["e00"]}], "more than one group"),
    ([{"decision": "DROP", "node_ids": ["n_eileen"]}], "not a 'event'"),
    ([{"decision": "MERGE", "node_ids": ["e00"]}], "groups.0.decision"),
    ([], "groups is empty"),
])
def test_compaction_errors_change_nothing(events, groups, message):
    before = events.graph.snapshot()
    result = call(events, "memory_compact_nodes", type="event", groups=groups)
    assert message in result["error"], result
    assert events.graph.snapshot() == before and events.staged == []


def test_a_bad_group_stops_the_whole_call(events):
    result = call(events, "memory_compact_nodes", type="event", groups=[
        {"decision": "FOLD", "node_ids": ["e00", "e01"], "summary": "fine"},
        {"decision": "DROP", "node_ids": ["e99"]}])
    assert "e99" in result["error"] and events.staged == [] and not events.graph.get("e00").archived


def test_deeper_summaries_are_shorter(events):
    call(events, "memory_compact_nodes", type="event", groups=[
        {"decision": "FOLD", "node_ids": [f"e{i:02}" for i in range(j, j + 3)], "summary": f"Part {j}."}
        for j in (0, 3, 6)])
    level1 = [g["node_ids"] for g in call(events, "memory_compaction_candidates", type="event", depth=1)["groups"]]
    assert level1 == []  # three level-1 summaries are below the threshold of nine
    ids = tools.compact.roots(events, "event", 1)
    result = call(events, "memory_compact_nodes", type="event", groups=[
        {"decision": "FOLD", "node_ids": ids, "summary": "1\n2\n3\n4\n5"}])
    assert "at most 4 lines" in result["error"]  # depth 2: max(4, ceil(3/3)) lines
    assert call(events, "memory_compact_nodes", type="event", groups=[
        {"decision": "FOLD", "node_ids": ids, "summary": "The road, days 0-8."}])["groups"][0]["level"] == 2


def test_vector_search_over_the_chat_index(memory, chat):
    memory.rebuild_vectors(chat)
    workspace = Workspace.open(memory.store, chat, anchor=5, seq=1, active_types=["event"], index=memory.index)
    try:
        call(workspace, "memory_compact_nodes", type="event", groups=[{"decision": "DROP", "node_ids": ["n_ev1"]}])
        hits = call(workspace, "memory_vector_search", query="the healer who travels", k=3)["nodes"]
        assert hits[0]["id"] == "n_eileen" and "n_ev1" not in {h["id"] for h in hits}  # archived in this run
        assert call(workspace, "memory_vector_search", query="healer", types=["location_state"])["nodes"][0]["type"] \
            == "location_state"
    finally:
        workspace.close()
