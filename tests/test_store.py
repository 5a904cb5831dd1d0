from __future__ import annotations

import pytest

from curator import ChatExists, ChatNotFound, CuratorError, OpError
from curator.store.ops import CreateNode, UpdateNode


def snapshot(memory, chat_id):
    return memory.graph(chat_id).snapshot()


def test_commit_creates_nodes_edges_and_log(memory, chat):
    graph = memory.graph(chat)
    eileen = graph.get("n_eileen")
    assert eileen.title == "Eileen"  # from the type's title_field
    assert (eileen.floor_from, eileen.floor_to, eileen.level, eileen.importance) == (3, 3, 0, 5.0)
    assert graph.stats()["nodes_active"] == 4 and graph.stats()["edges"] == 3
    [record] = memory.store.commits(chat)
    assert record.anchor_floor == 3 and record.origin == "test" and len(record.ops) == 7
    assert all(op.get("id") for op in record.ops)  # generated ids are in the log, so replays are exact


@pytest.mark.parametrize(
    "op, message",
    [
        ({"op": "create_node", "type": "faction", "fields": {"name": "x"}}, "unknown type 'faction'"),
        (
            {"op": "create_node", "type": "character_sheet", "fields": {"name": "x", "mood": "sad"}},
            "unknown field(s) 'mood'",
        ),
        ({"op": "create_node", "type": "character_sheet", "fields": {"goal": "x"}}, "requires field(s): name"),
        ({"op": "create_node", "type": "character_sheet", "id": "n_rowan", "fields": {"name": "R2"}}, "already taken"),
        ({"op": "create_node", "type": "event", "fields": {"summary": "s"}}, "needs a title"),
        (
            {"op": "create_node", "type": "character_sheet", "fields": {"name": "x"}, "parent": "n_nope"},
            "parent 'n_nope'",
        ),
        (
            {"op": "create_node", "type": "character_sheet", "fields": {"name": "x"}, "floor_from": 5, "floor_to": 2},
            "runs backwards",
        ),
        ({"op": "create_node", "type": "character_sheet", "fields": {"name": 3}}, "valid string"),
        ({"op": "create_node", "type": "character_sheet", "fields": {"name": "x"}, "colour": "red"}, "colour"),
        ({"op": "update_node", "id": "n_nope", "set_fields": {"goal": "x"}}, "node 'n_nope' does not exist"),
        ({"op": "update_node", "id": "n_rowan", "set_fields": {"mood": "x"}}, "unknown field(s) 'mood'"),
        ({"op": "update_node", "id": "n_rowan", "clear_fields": ["name"]}, "cannot clear required"),
        ({"op": "link", "source": "n_rowan", "target": "n_ghost", "relation": "involved_in"}, "target node 'n_ghost'"),
        ({"op": "link", "source": "n_rowan", "target": "n_ev1", "relation": "loves"}, "unknown relation 'loves'"),
        ({"op": "link", "source": "n_rowan", "target": "n_rowan", "relation": "related"}, "itself"),
        ({"op": "unlink", "source": "n_rowan", "target": "n_bridge", "relation": "related"}, "does not exist"),
        ({"op": "explode", "id": "n_rowan"}, "does not match any of the expected tags"),
    ],
)
def test_invalid_ops_are_rejected_and_nothing_is_written(memory, chat, op, message):
    before = snapshot(memory, chat)
    good = {"op": "create_node", "type": "character_sheet", "fields": {"name": "Mira"}}
    with pytest.raises(OpError) as info:
        memory.commit(chat, [good, op], anchor_floor=5)
    assert message in str(info.value)
    assert info.value.index == 1  # the message says which op
    assert snapshot(memory, chat) == before  # the valid first op did not land either
    assert len(memory.store.commits(chat)) == 1


def test_update_changes_only_given_fields(memory, chat):
    memory.commit(chat, [UpdateNode(id="n_eileen", set_fields={"goal": "repay Rowan"}, importance=8)], 9)
    node = memory.graph(chat).get("n_eileen")
    assert node.fields == {"name": "Eileen", "aliases": "the healer, Eli", "identity": "travelling healer",
                           "goal": "repay Rowan"}
    assert node.importance == 8 and node.floor_to == 3  # floors change only when asked


def test_rename_through_title_field_updates_title_and_names(memory, chat):
    memory.commit(chat, [UpdateNode(id="n_rowan", set_fields={"name": "Rowan Vale"})], 4)
    graph = memory.graph(chat)
    assert graph.get("n_rowan").title == "Rowan Vale"
    assert [n.id for n in graph.find_by_name("rowan vale")] == ["n_rowan"]
    assert graph.find_by_name("Rowan") == []


def test_find_by_name_normalizes_and_uses_aliases(memory, chat):
    graph = memory.graph(chat)
    for query in ("Eileen", "  EILEEN ", "the   Healer", "eli"):
        assert [n.id for n in graph.find_by_name(query)] == ["n_eileen"], query
    assert [n.id for n in graph.find_by_name("heal", partial=True)] == ["n_eileen"]
    assert graph.find_by_name("eileen", types=["event"]) == []
    assert graph.find_by_name("100%", partial=True) == []


def test_cjk_aliases(memory):
    memory.create_chat("zh", "default")
    memory.commit("zh", [{"op": "create_node", "type": "character_sheet",
                          "fields": {"name": "艾琳", "aliases": "治癒師、小艾"}}], 1)
    assert len(memory.graph("zh").find_by_name("小艾")) == 1


def test_symmetric_relations_are_stored_once(memory, chat):
    memory.commit(chat, [{"op": "link", "source": "n_rowan", "target": "n_eileen", "relation": "allied_with"}], 4)
    memory.commit(chat, [{"op": "link", "source": "n_eileen", "target": "n_rowan", "relation": "allied_with",
                          "strength": 0.9}], 5)
    edges = memory.graph(chat).edges(relation="allied_with")
    assert len(edges) == 1 and (edges[0].source, edges[0].target, edges[0].strength) == ("n_eileen", "n_rowan", 0.9)


def test_queries(memory, chat):
    graph = memory.graph(chat)
    assert [n.id for n in graph.nodes(type="character_sheet")] == sorted(["n_eileen", "n_rowan"])
    around = {(e.relation, n.id) for e, n in graph.neighbours("n_ev1")}
    assert around == {("involved_in", "n_eileen"), ("involved_in", "n_rowan"), ("occurred_at", "n_bridge")}
    assert [n.id for _, n in graph.neighbours("n_ev1", direction="out")] == ["n_bridge"]
    memory.commit(chat, [CreateNode(id="n_ev2", type="event", title="Summary 2", fields={"summary": "later"})], 20)
    assert [n.id for n in graph.timeline(10, 30)] == ["n_ev2"]
    assert [n.id for n in graph.timeline(0, 5, types=["event"])] == ["n_ev1"]
    memory.commit(chat, [{"op": "archive_node", "id": "n_ev2"}], 21)
    stats = graph.stats()
    assert (stats["nodes_active"], stats["nodes_archived"], stats["commits"]) == (4, 1, 3)
    assert stats["by_type"]["event"] == {"active": 1, "archived": 1}
    assert graph.nodes(type="event", archived=True)[0].id == "n_ev2"


def test_delete_node_removes_edges_and_detaches_children(memory, chat):
    memory.commit(chat, [
        CreateNode(id="n_ev2", type="event", title="Summary 2", fields={"summary": "b"}),
        {"op": "compact", "id": "n_top", "type": "event", "title": "Arc 1", "fields": {"summary": "a and b"},
         "children": ["n_ev1", "n_ev2"]},
    ], 6)
    memory.commit(chat, [{"op": "delete_node", "id": "n_top"}], 7)
    graph = memory.graph(chat)
    assert graph.get("n_top") is None
    assert graph.get("n_ev1").parent is None
    assert all("n_top" not in (e.source, e.target) for e in graph.edges())


def test_compact_folds_children_and_moves_outside_edges(memory, chat):
    memory.commit(chat, [
        CreateNode(id="n_ev2", type="event", title="Summary 2", fields={"summary": "toll"}, importance=9,
                   floor_from=5, floor_to=8),
        {"op": "link", "source": "n_ev1", "target": "n_ev2", "relation": "related"},
        {"op": "link", "source": "n_rowan", "target": "n_ev2", "relation": "involved_in", "strength": 0.5},
    ], 8)
    memory.commit(chat, [{"op": "compact", "id": "n_arc", "type": "event", "title": "Arc 1",
                          "fields": {"summary": "salve, promise, toll"}, "children": ["n_ev1", "n_ev2"]}], 9)
    graph = memory.graph(chat)
    arc = graph.get("n_arc")
    assert (arc.level, arc.floor_from, arc.floor_to, arc.importance) == (1, 3, 8, 9)
    assert arc.children == ["n_ev1", "n_ev2"]
    for child in ("n_ev1", "n_ev2"):
        node = graph.get(child)
        assert node.archived and node.parent == "n_arc"
    edges = {(e.source, e.relation, e.target, e.strength) for e in graph.edges()}
    assert edges == {("n_eileen", "involved_in", "n_arc", 0.8), ("n_rowan", "involved_in", "n_arc", 0.8),
                     ("n_arc", "occurred_at", "n_bridge", 0.8)}  # inside edge dropped, duplicates merged


def test_compact_rejects_mixed_or_archived_children(memory, chat):
    with pytest.raises(OpError, match="not a 'event'"):
        memory.commit(chat, [{"op": "compact", "type": "event", "title": "x", "fields": {"summary": "x"},
                              "children": ["n_ev1", "n_rowan"]}], 5)
    memory.commit(chat, [{"op": "archive_node", "id": "n_ev1"}], 5)
    with pytest.raises(OpError, match="archived"):
        memory.commit(chat, [{"op": "compact", "type": "event", "title": "x", "fields": {"summary": "x"},
                              "children": ["n_ev1"]}], 6)


def test_parent_cycles_are_refused(memory, chat):
    memory.commit(chat, [UpdateNode(id="n_rowan", parent="n_eileen")], 4)
    with pytest.raises(OpError, match="cycle"):
        memory.commit(chat, [UpdateNode(id="n_eileen", parent="n_rowan")], 5)
    memory.commit(chat, [UpdateNode(id="n_rowan", parent=None)], 6)  # an explicit None detaches
    assert memory.graph(chat).get("n_rowan").parent is None


def test_rollback_reverts_commits_at_or_after_floor(memory, chat):
    base = snapshot(memory, chat)
    memory.commit(chat, [UpdateNode(id="n_eileen", set_fields={"goal": "repay"})], 10)
    memory.commit(chat, [{"op": "delete_node", "id": "n_ev1"}], 12)
    result = memory.rollback(chat, 10)
    assert [c.anchor_floor for c in result.reverted] == [12, 10]
    assert snapshot(memory, chat) == base
    assert memory.rollback(chat, 50).reverted == []


def test_rollback_replays_later_commits_anchored_lower(memory, chat):
    memory.commit(chat, [CreateNode(id="n_late", type="character_sheet", fields={"name": "Mira"})], 30)
    memory.commit(chat, [UpdateNode(id="n_rowan", set_fields={"goal": "cross the bridge"})], 10)  # a manual fix
    memory.commit(chat, [UpdateNode(id="n_late", set_fields={"goal": "deliver"})], 11)  # builds on floor 30
    result = memory.rollback(chat, 20)
    assert [c.anchor_floor for c in result.reverted] == [30]
    assert len(result.reapplied) == 1 and [c.anchor_floor for c in result.dropped] == [11]
    graph = memory.graph(chat)
    assert graph.get("n_late") is None
    assert graph.get("n_rowan").fields["goal"] == "cross the bridge"
    assert [c.anchor_floor for c in memory.store.commits(chat)] == [3, 10]


def test_projection_can_be_rebuilt_from_the_log(memory, chat):
    memory.commit(chat, [UpdateNode(id="n_eileen", set_fields={"goal": "repay"}),
                         {"op": "archive_node", "id": "n_rowan"}], 6)
    before = snapshot(memory, chat)
    memory.store.conn.execute("DELETE FROM nodes")  # simulate a damaged projection
    assert memory.store.rebuild_projection(chat) == 2
    assert snapshot(memory, chat) == before
    assert [n.id for n in memory.graph(chat).find_by_name("eli")] == ["n_eileen"]


def test_chats_are_isolated(memory, chat):
    memory.create_chat("other", "default")
    memory.commit("other", [CreateNode(id="n_eileen", type="character_sheet", fields={"name": "Other Eileen"})], 1)
    assert memory.graph(chat).get("n_eileen").title == "Eileen"
    memory.rollback("other", 0)
    assert memory.graph(chat).get("n_eileen") is not None
    assert memory.graph("other").find_by_name("eileen") == []


def test_chat_errors(memory, chat):
    with pytest.raises(ChatExists):
        memory.create_chat(chat)
    with pytest.raises(ChatNotFound):
        memory.commit("nope", [], 0)
    with pytest.raises(CuratorError, match="invalid chat id"):
        memory.create_chat(" padded ")
    with pytest.raises(CuratorError, match="origin"):
        memory.commit(chat, [], 0, origin="magic")
    with pytest.raises(CuratorError, match="schema cannot be swapped"):
        memory.store.set_schema(chat, memory.chat(chat).schema)
    memory.create_chat("中文聊天")  # non-ASCII chat ids are fine
    assert "中文聊天" in memory.chats()


def _family(memory):
    memory.create_chat("fam", "default")
    ops = [{"op": "create_node", "id": "root", "type": "event", "title": "Summary 0", "fields": {"summary": "all"},
            "floor_from": 0, "floor_to": 9}]
    for node_id, floor in (("kid_b", 5), ("kid_a", 5), ("kid_c", 1), ("kid_d", 7)):  # floors out of id order
        ops.append({"op": "create_node", "id": node_id, "type": "event", "title": f"Summary {node_id}",
                    "fields": {"summary": node_id}, "floor_from": floor, "floor_to": floor, "parent": "root"})
    ops += [{"op": "create_node", "id": f"other{i}", "type": "event", "title": f"Summary o{i}",
             "fields": {"summary": f"o{i}"}, "floor_from": i, "floor_to": i} for i in range(30)]
    memory.commit("fam", ops, 9, "test")


def test_children_come_in_floor_then_id_order(memory):
    _family(memory)
    graph = memory.graph("fam")
    assert graph.get("root").children == ["kid_c", "kid_a", "kid_b", "kid_d"]
    assert graph.get("kid_a").children == [] and graph.get("kid_a").parent == "root"
    memory.commit("fam", [{"op": "update_node", "id": "kid_d", "floor_from": 0}], 9, "test")
    assert memory.graph("fam").get("root").children == ["kid_d", "kid_c", "kid_a", "kid_b"]


@pytest.mark.engine("sqlite", reason="SQLite's planner scanned the chat for the children's ORDER BY; PostgreSQL "
                                     "plans by statistics")
def test_reading_a_node_never_scans_the_chat(memory):
    _family(memory)
    graph = memory.graph("fam")
    statements = []
    conn = graph.conn

    class Recording:
        def execute(self, sql, params=()):
            statements.append((sql, params))
            return conn.execute(sql, params)

    graph.conn = Recording()
    assert graph.get("root").children
    assert len(statements) == 2  # the node; its children (by the parent index) with their floors by key
    for sql, params in statements:
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "PRIMARY KEY (chat_id=? AND id=?)" in plan or "nodes_by_parent" in plan, plan
