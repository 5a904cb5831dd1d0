"""Consolidation and evolution with scripted models on the real vector index (local embedder): the gate, the
keep / merge / skip decisions, evolution, answer checks with retries, and running without an embedder."""

from __future__ import annotations

import re

import pytest
from maintenance_helpers import Scripted, chat_messages

from curator.llm.access import Models
from curator.vectors.embeddings import EmbeddingProfile

OLD = [
    {"op": "create_node", "id": "old1", "type": "event", "title": "Summary 1",
     "fields": {"summary": "Rowan gives Eileen his last healing salve at the bridge; she promises to repay him."}},
    {"op": "create_node", "id": "old2", "type": "event", "title": "Summary 2",
     "fields": {"summary": "Captain Brannoch demands a silver toll to cross the bridge."}},
    {"op": "create_node", "id": "c_eileen", "type": "character_sheet",
     "fields": {"name": "Eileen", "identity": "travelling healer"}},
    {"op": "create_node", "id": "c_rowan", "type": "character_sheet", "fields": {"name": "Rowan"}},
    {"op": "create_node", "id": "bridge", "type": "location_state",
     "fields": {"name": "Brannoch's Bridge", "controller": "Captain Brannoch"}},
]
NEW = [
    {
        "op": "create_node",
        "id": "new1",
        "type": "event",
        "title": "Summary 3",
        "fields": {
            "summary": "Rowan hands Eileen his last healing salve at the bridge, and she promises to pay him back."
        },
    },
    {
        "op": "create_node",
        "id": "new2",
        "type": "character_sheet",
        "fields": {"name": "Eileen the Healer", "goal": "repay Rowan"},
    },
    {"op": "link", "source": "c_rowan", "target": "new2", "relation": "allied_with"},
]


@pytest.fixture
def road(memory):
    memory.create_chat("road", "default")
    memory.set_messages("road", chat_messages(4))
    memory.commit("road", OLD, anchor_floor=1, origin="extract", note="seq 1")
    memory.commit("road", NEW, anchor_floor=3, origin="extract", note="seq 2")
    return memory


def decide(*decisions):
    return Scripted(lambda prompt, schema: {"decisions": list(decisions)})


def test_merge_fills_the_target_moves_edges_and_archives_the_new_node(road):
    script = decide({"node_id": "new1", "action": "skip", "reason": "same as old1"},
                    {"node_id": "new2", "action": "merge", "merge_target_id": "c_eileen"})
    report = road.consolidate("road", model=script.model)
    assert report.ok and report.usage.calls == 1 == script.calls
    assert "[old1]" in script.prompts[0] and "[c_eileen]" in script.prompts[0]
    graph = road.graph("road")
    eileen = graph.get("c_eileen")
    assert eileen.fields == {"name": "Eileen", "identity": "travelling healer", "goal": "repay Rowan"}
    assert (eileen.floor_from, eileen.floor_to) == (1, 3)
    assert graph.get("new1").archived and graph.get("new2").archived
    assert [(e.source, e.target) for e in graph.edges(relation="allied_with")] == [("c_eileen", "c_rowan")]
    [commit] = [c for c in road.store.commits("road") if c.origin == "maintenance"]
    assert commit.anchor_floor == 7 and report.commits == [commit.id]
    assert {c["action"] for c in report.changes} == {"skip", "merge"}
    # The merged target is re-embedded: its document now carries the goal.
    assert road.index.neighbours("road", "c_eileen", 1)


def test_merged_fields_replace_the_targets_text(road):
    script = decide({"node_id": "new1", "action": "merge", "merge_target_id": "old1",
                     "merged_fields": {"summary": "Rowan gives Eileen his salve twice; she swears to repay him."}},
                    {"node_id": "new2", "action": "keep"})
    road.consolidate("road", model=script.model)
    assert road.graph("road").get("old1").fields["summary"].endswith("swears to repay him.")
    assert not road.graph("road").get("new2").archived


def test_keep_with_evolution_links_and_rewrites_neighbours(road):
    script = decide({"node_id": "new1", "action": "keep",
                     "evolution": {"connect": ["old1"],
                                   "updates": [{"node_id": "old1", "field": "summary",
                                                "value": "Rowan gave Eileen his salve; the debt still stands."}]}},
                    {"node_id": "new2", "action": "keep"})
    report = road.consolidate("road", model=script.model)
    graph = road.graph("road")
    [edge] = graph.edges(relation="related")
    assert {edge.source, edge.target} == {"new1", "old1"} and edge.strength == 0.7
    assert graph.get("old1").fields["summary"] == "Rowan gave Eileen his salve; the debt still stands."
    [kept] = [c for c in report.changes if c["node"] == "new1"]
    assert kept["evolved"][0]["before"].startswith("Rowan gives Eileen his last healing salve")
    # The previous text is kept in the node's history (the commit log's undo record)...
    history = road.node_history("road", "old1")
    assert [h["origin"] for h in history] == ["extract", "maintenance"] and history[0]["before"] is None
    assert history[1]["before"]["fields"]["summary"].startswith("Rowan gives Eileen his last healing salve")
    # ...and a rollback brings it back.
    road.rollback("road", 7)
    assert graph.get("old1").fields["summary"].startswith("Rowan gives Eileen his last healing salve")


def test_an_impossible_answer_goes_back_to_the_model(road):
    answers = [
        {"decisions": [{"node_id": "new1", "action": "merge", "merge_target_id": "bridge"},
                       {"node_id": "new2", "action": "merge", "merge_target_id": "c_eileen",
                        "merged_fields": {"mood": "grim"}}]},
        {"decisions": [{"node_id": "new1", "action": "skip"}, {"node_id": "new2", "action": "keep"}]},
    ]
    script = Scripted(lambda prompt, schema: answers.pop(0))
    report = road.consolidate("road", model=script.model)
    assert report.ok and script.calls == 2
    assert "merge_target_id must be one of its neighbours" in script.prompts[1]
    assert "has no field(s) mood" in script.prompts[1]
    assert road.graph("road").get("new1").archived


def test_missing_decisions_fail_after_the_retries_and_commit_nothing(road):
    before = road.graph("road").snapshot()
    script = decide({"node_id": "new1", "action": "keep"})
    report = road.consolidate("road", model=script.model)
    assert not report.ok and script.calls == 3  # first answer + 2 retries
    assert "no decision for: new2" in script.prompts[1]
    assert road.graph("road").snapshot() == before


def test_gate_skips_a_lone_dissimilar_node_without_asking(road):
    road.commit("road", [{"op": "create_node", "id": "odd", "type": "event", "title": "Summary 4",
                          "fields": {"summary": "A storm of frogs falls on the northern glacier."}}],
                anchor_floor=5, origin="extract", note="seq 3")
    road.settings = road.settings.model_copy(update={"maintenance": road.settings.maintenance.model_copy(update={
        "consolidation": road.settings.maintenance.consolidation.model_copy(update={"threshold": 0.97})})})
    script = decide({"node_id": "odd", "action": "keep"})
    report = road.consolidate("road", model=script.model)
    assert report.skipped.startswith("gate:") and script.calls == 0
    assert report.details["gate"][0]["by"] == "vector" and report.details["gate"][0]["score"] < 0.97
    # evolve bypasses the gate
    forced = road.evolve("road", model=script.model)
    assert forced.ok and script.calls == 1 and forced.op == "evolve"


def test_the_gate_threshold_unset_is_the_embedders_own(road):
    # a lone paraphrase of an existing event: the default's e5 vectors put it over their own 0.85 (the static
    # profiles' 0.6 is their scale: their unrelated lines sit near 0.2, e5's near 0.8)
    road.commit(
        "road",
        [
            {
                "op": "create_node",
                "id": "again",
                "type": "event",
                "title": "Summary 4",
                "fields": {"summary": "Eileen owes Rowan for the salve he used on her cut by the toll bridge."},
            }
        ],
        anchor_floor=5,
        origin="extract",
        note="seq 3",
    )
    assert road.settings.maintenance.consolidation.threshold is None
    assert road.index.function.embedder.duplicate_similarity == 0.85
    script = decide({"node_id": "again", "action": "skip"})
    report = road.consolidate("road", model=script.model)
    gate = report.details["gate"][0]
    assert gate["by"] == "vector" and gate["score"] >= 0.85 and script.calls == 1


def test_latest_only_name_match_triggers_the_gate(road):
    road.commit("road", [{"op": "create_node", "id": "bridge2", "type": "location_state",
                          "title": "brannoch's  BRIDGE", "fields": {"name": "brannoch's  BRIDGE", "danger": "high"}}],
                anchor_floor=5, origin="extract", note="seq 3")
    road.settings = road.settings.model_copy(update={"maintenance": road.settings.maintenance.model_copy(update={
        "consolidation": road.settings.maintenance.consolidation.model_copy(update={"threshold": 0.999})})})
    script = decide({"node_id": "bridge2", "action": "merge", "merge_target_id": "bridge"})
    report = road.consolidate("road", model=script.model)
    assert report.details["gate"][0] == {"node": "bridge2", "score": 1.0, "by": "name",
                                         "neighbours": ["bridge"]}
    assert road.graph("road").get("bridge").fields["danger"] == "high"


def test_without_an_embedder_it_is_skipped_and_says_so(road, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    road.settings = road.settings.model_copy(update={
        "embedding": EmbeddingProfile(provider="openai", model="text-embedding-3-small", api_key_env="NO_SUCH_KEY")})
    script = decide({"node_id": "new1", "action": "keep"})
    report = road.consolidate("road", model=script.model)
    assert report.ok and "no embedder" in report.skipped and script.calls == 0


def test_unknown_nodes_are_a_clear_error(road):
    from curator.errors import CuratorError

    with pytest.raises(CuratorError, match="no node"):
        road.consolidate("road", node_ids=["nope"], model=decide().model)


def test_scheduled_consolidation_after_an_extraction_step(memory):
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    memory.create_chat("live", "default", settings={"maintenance": {
        "auto": True, "summaries": {"enabled": False}, "consolidation": {"threshold": 0.0}}})
    memory.set_messages("live", chat_messages(2))

    def extract(messages, info):
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {
            "event": [{"summary": "Rowan gives Eileen his last healing salve at the bridge."}]})])

    script = Scripted(lambda prompt, schema: {"decisions": [
        {"node_id": re.search(r"NEW \[(\w+)\]", prompt).group(1), "action": "skip"}]})
    first, second = memory.extract("live", model=FunctionModel(extract), models=Models(maintain=script.model))
    assert first.maintenance[0].skipped  # nothing to compare with yet
    [report] = second.maintenance
    assert report.op == "consolidate" and report.ok and script.calls == 1
    [change] = report.changes
    assert change["action"] == "skip" and memory.graph("live").get(change["node"]).archived
    assert memory.store.commits("live")[-1].anchor_floor == second.floor == 3
    assert second.to_dict()["maintenance"][0]["changes"] == report.changes


def test_a_contradiction_waits_in_the_inbox_until_the_user_decides(road):
    """Issue 34: consolidation flags the conflict instead of deciding; supersede / keep both / drop are each one
    commit at the new fact's floor; a rollback of that floor takes the entry (and any decision) away."""
    script = decide({"node_id": "new1", "action": "contradicts", "merge_target_id": "old1",
                     "reason": "the salve was given on the road, not at the bridge"},
                    {"node_id": "new2", "action": "keep"})
    report = road.consolidate("road", model=script.model)
    assert [c["action"] for c in report.changes] == ["contradicts", "keep"]
    graph = road.graph("road")
    assert not graph.get("new1").archived and not graph.get("old1").archived  # nothing decided silently
    [item] = road.contradictions("road")
    assert (item["new"]["id"], item["old"]["id"]) == ("new1", "old1") and item["actions"] == [
        "supersede", "keep_both", "drop"]
    from typer.testing import CliRunner

    from curator.cli.main import app as cli

    listed = CliRunner().invoke(cli, ["--data", str(road.data_dir), "contradictions", "--chat", "road"])
    assert listed.exit_code == 0 and item["id"] in listed.output and "supersede|keep_both|drop" in listed.output
    commit = road.resolve_contradiction("road", item["id"], "supersede")
    graph = road.graph("road")
    assert graph.get("old1").archived and not graph.get("new1").archived and road.contradictions("road") == []
    assert [(e.source, e.target) for e in graph.edges(relation="updates")] == [("new1", "old1")]
    # anchored where consolidation found it (the chat's newest floor, 7), not before: undone together
    assert commit.origin == "manual" and commit.anchor_floor == 7
    assert road.fact_spans("road", "old1")[-1]["to"]["floor"] == 7  # the superseded fact keeps its span
    road.rollback("road", 8)  # a later floor: the decision stays
    assert road.graph("road").get("old1").archived
    road.rollback("road", 3)  # the new fact's floor: the fact, its inbox entry and the decision all go
    assert road.contradictions("road") == [] and not road.graph("road").get("old1").archived
    road.commit("road", NEW[:1], anchor_floor=3, origin="extract", note="seq 2")
    road.commit("road", [{"op": "link", "source": "new1", "target": "old2", "relation": "contradicts"}], 3, "extract")
    [item] = road.contradictions("road")  # the extractor may link a contradiction itself: it waits too
    road.resolve_contradiction("road", item["id"], "drop")
    assert road.graph("road").get("new1").archived and not road.graph("road").get("old2").archived
    with pytest.raises(Exception, match="no open contradiction"):
        road.resolve_contradiction("road", item["id"], "keep_both")
