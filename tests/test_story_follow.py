"""Recall's story data follows the chat commit by commit (the nodes and edges each commit touched) and equals a
whole rebuild after every kind of change; a commit does not make it reread the graph."""

from __future__ import annotations

from test_story_recall import ev, tale  # noqa: F401 - `tale` is a fixture

from curator.recall import story
from curator.store.queries import GraphView


def test_story_data_follows_commits_like_a_whole_rebuild(tale, monkeypatch):  # noqa: F811
    memory = tale
    changes = memory.store.changes
    story.story_data(memory.graph("tale"), memory.store.graph_version("tale"), changes)  # the first: loaded whole
    steps = [
        [ev("e_new", "A stranger arrives at the mill.", 11, scope={"region": "Vale > Millbrook > Mill"},
            story_time={"label": "the morning after the fire"})],  # the current region moves
        [{"op": "link", "source": "c_cole", "target": "e_new", "relation": "knows"}],
        [{"op": "unlink", "source": "c_bram", "target": "e_secret", "relation": "knows"}],
        [{"op": "update_node", "id": "e_far", "scope": {"layer": "pov", "owner": "Alba"}},
         {"op": "link", "source": "e_far", "target": "e_market", "relation": "contradicts"}],
        [{"op": "archive_node", "id": "e_new"}],  # the region goes back to the market
        [{"op": "delete_node", "id": "p_cole"}],  # its contradicts edge goes with it
    ]
    for floor, ops in enumerate(steps, start=11):
        memory.commit("tale", ops, floor, "test")
        version = memory.store.graph_version("tale")
        with monkeypatch.context() as patch:
            patch.setattr(GraphView, "nodes", lambda *a, **k: (_ for _ in ()).throw(AssertionError("reread")))
            followed = story.story_data(memory.graph("tale"), version, changes)
        whole = story._follow(memory.graph("tale"), version, None)
        assert followed == whole, ops
    assert whole.current_region == "Vale > Millbrook > Market" and "p_cole" not in whole.owners
    assert whole.mistaken == {"e_far"} and whole.restricted == {"e_secret", "e_new"}


def test_two_commits_between_recalls_update_the_pool_instead_of_rebuilding_it(memory, monkeypatch):
    from curator.recall import engine

    memory.create_chat("road", "default")
    memory.commit("road", [ev(f"e{i}", f"Mira found lantern number {i}.", i) for i in range(6)], 5, "test")
    memory.recall("road", "the lantern")

    def whole_pool(*args, **kwargs):
        raise AssertionError("the pool was built whole again")

    monkeypatch.setattr(engine, "build_pool", whole_pool)
    memory.commit("road", [ev("e9", "Mira lost the lantern in the river.", 9)], 9, "test")
    memory.commit("road", [{"op": "link", "source": "e9", "target": "e5", "relation": "involved_in"}], 9, "test")
    injection = memory.recall("road", "lantern in the river")
    assert "e9" in [c.node.id for c in (*injection.persistent, *injection.recalled)]
