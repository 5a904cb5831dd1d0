"""Hierarchical compression with scripted models: batching, grouping by point of view, retries, failures,
rollback, and (hypothesis) the structural invariants after any compression."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from maintenance_helpers import Scripted, chat_messages, event_ops, fold_answer

import curator
from curator.maintenance.compression import plan_batches
from curator.schemas import load_preset


@pytest.fixture
def events(memory):
    memory.create_chat("road", "default")
    memory.set_messages("road", chat_messages(45))  # floors 0-89: maintenance runs at floor 89
    memory.commit("road", event_ops(40), anchor_floor=79, origin="test")
    return memory


def live_ancestor(graph, node):
    seen = set()
    while node.archived:
        assert node.parent is not None, f"archived {node.id} has no parent"
        assert node.parent not in seen
        seen.add(node.id)
        node = graph.get(node.parent)
        assert node is not None
    return node


def test_old_events_fold_level_by_level(events):
    script = Scripted(fold_answer)
    report = events.compact("road", model=script.model)
    assert report.ok and not report.skipped
    graph = events.graph("road")
    # 40 leaves, keep the newest 6: 34 -> 11 batches of 3 (one left over); 11 summaries > 9 -> 3 more at level 2.
    assert [c["level"] for c in report.changes].count(1) == 11 and [c["level"] for c in report.changes].count(2) == 3
    assert report.usage.calls == script.calls == 14 and report.usage.input_tokens > 0
    assert len(report.commits) == 2
    levels = sorted(n.level for n in graph.nodes(type="event"))
    assert levels == [0] * 7 + [1] * 2 + [2] * 3
    newest = [n.id for n in graph.nodes(type="event", level=0)]
    assert newest == [f"ev{i:04d}" for i in range(33, 40)]
    for change in report.changes:
        summary = graph.get(change["node"])
        children = [graph.get(c) for c in change["children"]]
        assert all(c.archived and c.parent == summary.id for c in children)
        assert summary.floor_from == min(c.floor_from for c in children)
        assert summary.floor_to == max(c.floor_to for c in children)
        assert summary.importance == max(c.importance for c in children)
    for commit in events.store.commits("road")[1:]:
        assert commit.origin == "maintenance" and commit.anchor_floor == 89
    # Outside edges (character -> event) moved up to the live summaries; nothing points at an archived node.
    active = {n.id for n in graph.nodes()}
    assert all(e.source in active and e.target in active for e in graph.edges())
    assert len(graph.neighbours("c_eileen", ["involved_in"])) + len(graph.neighbours("c_rowan", ["involved_in"])) > 0


def test_rollback_below_the_compression_restores_the_exact_graph(events):
    before = events.graph("road").snapshot()
    assert events.compact("road", model=Scripted(fold_answer).model).commits
    events.rollback("road", 89)
    assert events.graph("road").snapshot() == before


def test_a_summary_over_the_limit_goes_back_to_the_model(events):
    answers = []

    def answer(prompt, schema):
        answers.append(prompt)
        if len(answers) == 1:
            return {"title": "Too long", "summary": "x" * 2000}
        return fold_answer(prompt, schema)

    script = Scripted(answer)
    events.settings = events.settings.model_copy(update={"maintenance": events.settings.maintenance.model_copy(
        update={"compression": events.settings.maintenance.compression.model_copy(update={"concurrency": 1})})})
    report = events.compact("road", model=script.model)
    assert report.ok
    assert "2000 characters; write at most 800" in script.prompts[1]
    assert report.usage.calls == 15  # one retry on top of the 14 batches
    assert all(len(events.graph("road").get(c["node"]).fields["summary"]) < 800 for c in report.changes)


def test_a_failing_model_commits_nothing_for_that_level(events):
    before = events.graph("road").snapshot()

    def broken(prompt, schema):
        raise RuntimeError("the model went away")

    report = events.compact("road", model=Scripted(broken).model)
    assert not report.ok and "the model went away" in report.error
    assert report.commits == [] and events.graph("road").snapshot() == before


def test_groups_by_point_of_view_owner(memory):
    memory.create_chat("pov", "bme")
    ops = []
    for i, owner in enumerate(["Ann"] * 10 + ["Bo"] * 5):
        ops.append({"op": "create_node", "id": f"p{i}", "type": "pov_memory", "title": f"memory {i}",
                    "fields": {"owner": owner, "belief": f"belief {i}"}, "floor_from": i, "floor_to": i,
                    "scope": {"layer": "pov", "owner": owner}})
    memory.commit("pov", ops, anchor_floor=20, origin="test")
    report = memory.compact("pov", types=["pov_memory"], model=Scripted(fold_answer).model)
    # threshold 8, keep 4, fan-in 3: Ann's 10 -> 6 old -> 2 batches; Bo's 5 stay.
    assert len(report.changes) == 2
    graph = memory.graph("pov")
    for change in report.changes:
        assert graph.get(change["node"]).scope["owner"] == "Ann"
        assert all(graph.get(c).scope["owner"] == "Ann" for c in change["children"])
    assert len(graph.nodes(type="pov_memory", level=0)) == 4 + 5


def test_nothing_to_do_and_unknown_types_are_reported(events):
    script = Scripted(fold_answer)
    assert (
        "not hierarchically compressed" in events.compact("road", types=["character_sheet"], model=script.model).skipped
    )
    events.compact("road", model=script.model)
    again = events.compact("road", model=script.model)
    assert again.skipped == "every level is within its threshold" and script.calls == 14


def test_without_a_model_it_says_so(events):
    report = events.compact("road")
    assert report.skipped and "no model" in report.skipped and report.ok


SCHEMA = load_preset("bme")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(owners=st.lists(st.sampled_from(["A", "B", None]), min_size=0, max_size=40),
       links=st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=30),
       fan_in=st.integers(2, 4), threshold=st.integers(2, 8), keep=st.integers(0, 4), depth=st.integers(1, 3))
def test_compression_invariants(tmp_path_factory, owners, links, fan_in, threshold, keep, depth):
    types = dict(SCHEMA.types)
    types["pov_memory"] = types["pov_memory"].model_copy(
        update={
            "compression": types["pov_memory"].compression.model_copy(
                update={"fan_in": fan_in, "threshold": threshold, "keep_recent_leaves": keep, "max_depth": depth}
            )
        }
    )
    schema = SCHEMA.model_copy(update={"types": types})
    with tempfile.TemporaryDirectory(prefix="curator-prop-") as folder, curator.open(folder) as memory:
        memory.create_chat("p", schema)
        ops = [{"op": "create_node", "id": "who", "type": "character", "fields": {"name": "Who"}}]
        for i, owner in enumerate(owners):
            scope = {"layer": "pov", "owner": owner} if owner else {"layer": "objective"}
            ops.append({"op": "create_node", "id": f"p{i}", "type": "pov_memory", "title": f"m{i}",
                        "fields": {"owner": owner or "world", "belief": f"b{i}"}, "floor_from": i, "floor_to": i,
                        "importance": float(i % 10), "scope": scope})
            ops.append({"op": "link", "source": "who", "target": f"p{i}", "relation": "mentions"})
        ops += [{"op": "link", "source": f"p{a}", "target": f"p{b}", "relation": "related"}
                for a, b in links if a != b and max(a, b) < len(owners)]
        memory.commit("p", ops, anchor_floor=50, origin="test")
        memory.set_messages("p", chat_messages(30))  # maintenance runs at floor 59
        before = memory.graph("p").snapshot()
        report = memory.compact("p", types=["pov_memory"], model=Scripted(fold_answer).model)
        assert report.ok
        graph = memory.graph("p")
        nodes = graph.nodes(archived=None)
        for node in nodes:
            if node.archived:
                ancestor = live_ancestor(graph, node)
                assert ancestor.floor_from <= node.floor_from and node.floor_to <= ancestor.floor_to
            assert node.level <= depth
        archived = {n.id for n in nodes if n.archived}
        internal = {r.name for r in schema.relations if r.internal}
        assert all(e.relation in internal for e in graph.edges() if {e.source, e.target} & archived)
        for group in ("A", "B", None):
            for level in range(depth):
                spec = schema.types["pov_memory"]
                same = [n for n in graph.nodes(type="pov_memory", level=level) if n.scope["owner"] == group]
                assert not plan_batches(same, spec, level), "a level was left above its threshold"
        memory.rollback("p", 51)
        assert memory.graph("p").snapshot() == before
