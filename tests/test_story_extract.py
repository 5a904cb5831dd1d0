"""Story time, place and point of view written by the extractor and the curator's tools: the per-type switch,
the engine's normaliser (named dates sortable, relative times after the previous segment), errors told back to
the model, per-owner knowledge, event-triggered extraction, and names matched within a type."""

from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import RetryPromptPart, ToolReturnPart

from curator.extract.output_model import output_model
from curator.extract.triggers import active_types
from curator.schemas import load_preset
from curator.store.messages import Message
from curator.store.story_time import StoryClock, StoryInputError, parse_segment, region_path
from test_extractor import Script, chat_messages, extract_next


@pytest.fixture
def live(memory):
    memory.create_chat("road", "default")
    memory.set_messages("road", chat_messages(12))
    return memory


def retries(script) -> list[str]:
    """What the model was told about its invalid answers, one per retried request."""
    told = []
    for request in script.requests[1:]:
        parts = [p for p in request[-1].parts if isinstance(p, (RetryPromptPart, ToolReturnPart))]
        told += [p.content if isinstance(p.content, str) else json.dumps(p.content, default=str) for p in parts
                 if isinstance(p, RetryPromptPart) or p.outcome == "retried"]
    return told


def test_the_story_fields_are_a_per_type_switch():
    default, bme = load_preset("default"), load_preset("bme")
    answer = output_model(default, ["character_sheet", "event"]).model_json_schema()
    items = answer["$defs"]
    story = {"story_time", "scene", "flashback", "region", "region_path", "pov", "known_by"}
    assert story <= set(items["Event"]["properties"])
    assert "story_time" not in items["CharacterSheet"]["properties"]
    assert [n for n, s in bme.types.items() if s.story] == ["event", "pov_memory"]


def test_the_clock_sorts_named_dates_and_places_relative_times_after_the_previous_segment():
    clock = StoryClock()
    first = clock.place("1893-10-04")
    later = clock.place("the morning after the fire", scene="mill")
    again = clock.place(None, scene="mill")  # the same scene continues
    flash = clock.place("the day her father died", flashback=True)
    dated = clock.place("4 October 1893")  # another scene on a known day
    keys = [parse_segment(s["segment"]) for s in (first, later, again, flash, dated)]
    assert keys[0].key == "1893-10-04.0000" and keys[1].key == "1893-10-04.0001"
    assert keys[2].key == keys[1].key and again["label"] is None
    assert keys[3].flashback and keys[3].key < keys[1].key
    assert keys[4].key == "1893-10-04.0002"
    assert clock.latest.key == "1893-10-04.0002"  # a flashback never moves "now"
    with pytest.raises(StoryInputError, match="looks like a date"):
        clock.place("1893-13-45")
    with pytest.raises(StoryInputError, match="flashback"):
        clock.place(None, flashback=True)
    with pytest.raises(StoryInputError, match="new"):
        clock.place(None, scene="unheard of")
    assert region_path("Old Mill", "The Vale > Millbrook") == "The Vale > Millbrook > Old Mill"
    with pytest.raises(StoryInputError, match="primary place"):
        region_path(None, "The Vale")


def test_the_extractor_writes_story_time_region_pov_and_knowledge(live):
    script = Script({
        "character_sheet": [{"name": "Mira"}, {"name": "Tobin"}],
        "event": [{"summary": "Mira tells Tobin the ledger is forged.", "story_time": "1893-10-04",
                   "scene": "mill", "region": "Old Mill", "region_path": "The Vale > Millbrook",
                   "known_by": ["Mira", "Tobin"]}]})
    [result] = extract_next(live, script)
    assert result.ok, result.reason
    graph = live.graph("road")
    [ev] = graph.nodes(type="event")
    assert ev.story_time["label"] == "1893-10-04" and parse_segment(ev.story_time["segment"]).key == "1893-10-04.0000"
    assert ev.scope == {"layer": "objective", "owner": None, "region": "The Vale > Millbrook > Old Mill"}
    knowers = {graph.get(e.source).title for e in graph.edges(ev.id, relation="knows")}
    assert knowers == {"Mira", "Tobin"}
    script = Script({"event": [{"summary": "Tobin thinks the miller forged it.", "story_time": "that night",
                                "pov": "tobin"}]})
    [result] = extract_next(live, script)
    assert result.ok, result.reason
    newest = max(graph.nodes(type="event"), key=lambda n: n.floor_to)
    assert newest.scope["layer"] == "pov" and newest.scope["owner"] == "Tobin"  # the node's spelling
    assert parse_segment(newest.story_time["segment"]).key == "1893-10-04.0001"  # after the previous segment


@pytest.mark.parametrize("bad, message", [
    ({"story_time": "1893-13-45"}, "looks like a date"),
    ({"pov": "Nobody Known"}, "names no known node"),
    ({"known_by": ["Ghost"]}, "known_by[0]"),
    ({"flashback": True}, "flashback is true"),
])
def test_what_the_engine_cannot_use_goes_back_to_the_model(live, bad, message):
    script = Script({"event": [{"summary": "Something.", **bad}]}, {"event": [{"summary": "Something."}]})
    [result] = extract_next(live, script)
    assert result.ok
    [told] = retries(script)
    assert message in told


def test_a_thread_and_a_character_of_the_same_name_are_two_nodes(memory):
    memory.create_chat("bme", "bme")
    memory.set_messages("bme", chat_messages(2))
    grey = {"character": [{"ref": "c", "name": "The Grey Hand", "state": "hiding"}],
            "thread": [{"ref": "t", "name": "The Grey Hand", "status": "open"}],
            "event": [{"ref": "e", "summary": "The Grey Hand strikes."}]}
    script = Script({**grey, "links": [{"source": "The Grey Hand", "relation": "involved_in", "target": "e"}]},
                    {**grey, "links": [{"source": "c", "relation": "involved_in", "target": "e"},
                                       {"source": "e", "relation": "advances", "target": "t"}]})
    due = memory.extract("bme", floor=1, model=script.model)
    assert due[0].ok, due[0].reason
    [told] = retries(script)
    assert "names both a character and a thread" in told
    graph = memory.graph("bme")
    assert [n.title for n in graph.nodes(type="character")] == ["The Grey Hand"]
    assert [n.fields["status"] for n in graph.nodes(type="thread")] == ["open"]


def test_a_reused_ref_is_an_error_the_model_sees(live):
    script = Script({"event": [{"ref": "x", "summary": "One."}, {"ref": "x", "summary": "Two."}]},
                    {"event": [{"summary": "One."}]})
    [result] = extract_next(live, script)
    assert result.ok and "ref of another item" in retries(script)[0]


def test_a_type_off_its_cadence_is_extracted_when_the_reply_names_it(live):
    schema = live.store.chat("road").schema
    graph = live.graph("road")
    assert "location_state" not in active_types(schema, graph, 1, "They talk quietly.")
    assert "location_state" in active_types(schema, graph, 1, "At dusk they arrived at the gate.")  # keyword
    live.commit("road", [{"op": "create_node", "type": "location_state", "fields": {"name": "Brannoch's Bridge"}}],
                0, "test")
    assert "location_state" in active_types(schema, graph, 1, "Smoke rises over brannoch's bridge.")  # known name
    assert "location_state" not in active_types(schema, graph, 1, "Smoke rises over the bridges of Brannoch.")
    live.set_messages("road", [Message("user", "R", "Go."), Message("assistant", "N", "They entered the mill.")])
    script = Script(lambda tool: {"event": [{"summary": "They entered the mill."}],
                                  **({"location_state": [{"name": "The mill", "danger": "low"}]}
                                     if "location_state" in tool["properties"] else {})})
    [result] = extract_next(live, script)
    assert result.ok and "location_state" in result.active_types
    assert [n.title for n in live.graph("road").nodes(type="location_state")][-1] == "The mill"


def test_the_curators_write_tools_carry_the_same_story_fields(memory, chat):
    from curator.tools import Workspace, invoke, run_tools

    ws = Workspace.open(memory.store, chat, anchor=5, seq=1, active_types=["character_sheet", "event"])
    try:
        def call(name, **args):
            spec = next(t for t in run_tools(ws.schema, ws.active_types) if t.name == name)
            return invoke(spec, ws, args)

        done = call("create_event", summary="Eileen confides in Rowan.", story_time="1893-10-04", scene="camp",
                    region="Camp", region_path="The Vale", known_by=["Eileen", "n_rowan"])
        assert done["ok"], done
        node = ws.graph.get(done["id"])
        assert node.scope["region"] == "The Vale > Camp" and node.story_time["segment"].startswith("1893-10-04.0000")
        assert {e.source for e in ws.graph.edges(node.id, relation="knows")} == {"n_eileen", "n_rowan"}
        edited = call("edit_event", node_id=done["id"], pov="the healer")  # Eileen, by alias
        assert edited["ok"] and ws.graph.get(done["id"]).scope == {"layer": "pov", "owner": "Eileen",
                                                                   "region": "The Vale > Camp"}
        assert "looks like a date" in call("create_event", summary="x", story_time="2023-02-30")["error"]
        assert "known_by" in call("create_event", summary="x", known_by=["Nobody"])["error"]
    finally:
        ws.close()


def test_events_of_many_regions_still_fold_into_one_timeline(memory):
    from curator.maintenance.compression import plan_batches

    memory.create_chat("walk", "default")
    ops = [
        {
            "op": "create_node",
            "id": f"e{i}",
            "type": "event",
            "title": f"Summary {i}",
            "fields": {"summary": f"s{i}"},
            "floor_from": i,
            "floor_to": i,
            "scope": {"region": f"Vale > Place {i}"},
        }
        for i in range(12)
    ]
    ops.append({"op": "create_node", "id": "p0", "type": "event", "title": "Summary p", "fields": {"summary": "p"},
                "floor_from": 12, "floor_to": 12,
                "scope": {"layer": "pov", "owner": "Ann", "region": "Vale > Place 0"}})
    memory.commit("walk", ops, 12, "test")
    graph = memory.graph("walk")
    spec = memory.chat("walk").schema.types["event"]
    batches = plan_batches(graph.nodes(type="event"), spec, 0)
    assert [[n.id for n in b] for b in batches] == [["e0", "e1", "e2"], ["e3", "e4", "e5"]]  # 12 > 9, keep 6
    memory.commit("walk", [{"op": "compact", "id": "s1", "type": "event", "title": "Summary A",
                            "fields": {"summary": "a"}, "children": ["e0", "e1", "e2"]}], 12, "test")
    assert memory.graph("walk").get("s1").scope == {"layer": "objective", "owner": None, "region": None}


def test_the_clock_reads_the_segments_of_every_node_archived_ones_too(memory):
    """`GraphView.story_segments` (what each step's clock reads, without whole nodes) gives what the nodes hold,
    archived ones included, in floor order."""
    memory.create_chat("walk", "default")
    ops = [
        {
            "op": "create_node",
            "id": f"e{i}",
            "type": "event",
            "title": f"Summary {i}",
            "fields": {"summary": f"s{i}"},
            "floor_from": 9 - i,
            "floor_to": 9 - i,
            **({"story_time": {"label": f"day {i}", "segment": f"1893-10-0{i + 1}.0000|scene {i}"}} if i != 2 else {}),
        }
        for i in range(5)
    ]
    memory.commit("walk", ops, 9, "test")
    memory.commit("walk", [{"op": "archive_node", "id": "e1"}], 9, "test")
    graph = memory.graph("walk")
    whole = [(n.story_time.get("label"), n.story_time.get("segment")) for n in graph.nodes(archived=None)]
    assert graph.story_segments() == [pair for pair in whole if pair[1] is not None]
    assert [label for label, _ in graph.story_segments()] == ["day 4", "day 3", "day 1", "day 0"]
    clock = StoryClock(graph.story_segments())
    assert parse_segment(clock.place("day 1")["segment"]).key == "1893-10-02.0000"  # an archived node's day
