"""Derived state follows a commit by what it touched: the store's change log, recall's per-chat state (live BM25,
documents, sources, neighbour maps, story chains) and the vector index's sync. Each incremental result is checked
against a state built from scratch over the same chat."""

from __future__ import annotations

import random

import pytest

from curator.errors import CuratorError
from curator.recall.engine import Recaller
from curator.recall.persistent import plan_persistent
from curator.recall.lexical import BM25, LiveBM25
from curator.recall.pool import build_pool
from curator.recall.state import ChatState
from curator.store.messages import Message
from curator.store.queries import CHILDREN_SQL, GraphView
from curator.store.store import Store
from curator.vectors.index import VectorIndex

WORDS = ["Mira", "Rowan", "salve", "bridge", "toll", "crowns", "river", "fish", "debt", "lantern", "map", "storm",
         "米拉", "桥上", "银币"]


def _text(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_live_bm25_scores_as_bm25_through_adds_replaces_and_removes():
    rng = random.Random(3)
    live, docs = LiveBM25(), {}
    for _ in range(300):
        key = f"d{rng.randrange(60)}"
        if rng.random() < 0.2:
            live.remove(key)
            docs.pop(key, None)
        else:
            docs[key] = _text(rng, rng.randrange(1, 12))
            live.set(key, docs[key])
    keys = list(docs)
    whole = BM25([docs[k] for k in keys])
    assert len(live) == len(keys)
    for query in ("Mira salve", "bridge toll crowns", "米拉 桥", "storm"):
        expected = {keys[i]: s for i, s in whole.top(query, 500)}
        got = dict(live.top(query, 500))
        assert got.keys() == expected.keys()
        assert all(abs(got[k] - expected[k]) < 1e-9 for k in got)
        best = [round(s, 9) for _, s in live.top(query, 5)]
        assert best == sorted((round(v, 9) for v in expected.values()), reverse=True)[:5]


def _random_ops(rng: random.Random, existing: list[str], step: int) -> list[dict]:
    ops = []
    kind = rng.random()
    events = [i for i in existing if i.startswith("ev")]
    people = [i for i in existing if i.startswith("ch")]
    if kind < 0.35 or len(events) < 4:
        node = f"ev{step}"
        ops.append({"op": "create_node", "id": node, "type": "event", "title": f"Summary {step}",
                    "fields": {"summary": _text(rng)}, "floor_from": step, "floor_to": step})
        if people:
            ops.append({"op": "link", "source": rng.choice(people), "target": node, "relation": "involved_in"})
    elif kind < 0.5:
        node = f"ch{step}"
        ops.append({"op": "create_node", "id": node, "type": "character_sheet",
                    "fields": {"name": f"{rng.choice(WORDS)} {step}", "identity": _text(rng)}})
    elif kind < 0.65:
        ops.append({"op": "update_node", "id": rng.choice(events), "set_fields": {"summary": _text(rng)}})
    elif kind < 0.72:
        ops.append({"op": "archive_node", "id": rng.choice(events)})
    elif kind < 0.8 and people:
        ops.append({"op": "link", "source": rng.choice(people), "target": rng.choice(events),
                    "relation": "involved_in"})
    elif kind < 0.86:
        ops.append({"op": "delete_node", "id": rng.choice(existing)})
    else:
        children = rng.sample(events, 3)
        ops.append({"op": "compact", "id": f"sum{step}", "type": "event", "fields": {"summary": _text(rng)},
                    "children": children})
    return ops


def _picture(state: ChatState) -> dict:
    context = state.context()
    return {
        "nodes": {i: n.to_dict() for i, n in state.nodes.items()},
        "documents": dict(state.documents),
        "sources": dict(state.sources),
        "lines": dict(state.lines),
        "speakers": dict(state.speakers),
        "latest": (state.latest_floor, state.last_speaker),
        "adjacent": {i: dict(c) for i, c in state.adjacent.items()},
        "context": {i: sorted(context.get(i, ())) for i in state.nodes},
        "bm25": [sorted(state.bm25.top(q, 1000)) for q in ("Mira salve", "bridge 米拉", "river fish storm")],
        "source_bm25": [sorted(state.source_bm25.top(q, 1000)) for q in ("Mira salve", "bridge 米拉")],
        "names": {name: sorted(ids) for name, ids in state.names.items()},
    }


def _drive(memory, steps: int, seed: int, check) -> None:
    """Random commits, rollbacks and message writes on chat "road"; `check()` after each."""
    rng = random.Random(seed)
    store = memory.store
    store.set_messages("road", [Message("user" if f % 2 else "assistant", rng.choice(["Mira", "Rowan", ""]),
                                        _text(rng)) for f in range(10)])
    for step in range(10, 10 + steps):
        roll = rng.random()
        if roll < 0.12 and step > 14:
            store.rollback("road", rng.randrange(step - 4, step))
        elif roll < 0.3:
            floor = rng.randrange(max(0, step - 5), step + 1)
            store.set_messages_from("road", floor, [Message("assistant", rng.choice(["Mira", "Rowan"]), _text(rng))
                                                    for _ in range(step + 1 - floor)])
        else:
            existing = [n.id for n in memory.graph("road").nodes(archived=None)]
            try:
                memory.commit("road", _random_ops(rng, existing, step), step, "test")
            except CuratorError:  # a random op may be refused (e.g. compacting an archived node)
                pass
        check()


def test_the_newest_floor_and_speaker_follow_rewrites_and_deletions(memory):
    """A rewrite of the last floors reads only those; the newest floor and named reply are worked out from
    what is left when the rewrite has none (deleted floors, unnamed or user messages)."""
    memory.create_chat("road", "default")
    store, live = memory.store, ChatState("road")
    named = [Message("assistant", "Mira" if f < 70 else "Rowan", _text(random.Random(f))) for f in range(100)]
    store.set_messages("road", named[:10] + [Message("user", "", "hello")] * 80 + named[90:])
    rewrites = [(95, []), (91, [Message("user", "", "again")]), (90, []), (20, [Message("assistant", "", "x")]),
                (3, []), (0, []), (0, named[:2]), (1, [])]
    for floor, messages in rewrites:
        store.set_messages_from("road", floor, messages)
        live.refresh(store)
        rows = store.conn.execute(
            "SELECT floor, role, name FROM messages WHERE chat_id='road' ORDER BY floor"
        ).fetchall()
        named_replies = [name for _, role, name in rows if role == "assistant" and name]
        assert live.latest_floor == (rows[-1][0] if rows else None)
        assert live.last_speaker == (named_replies[-1] if named_replies else None)
        assert sorted(live.lines) == [f for f, _, _ in rows]
    assert live.loads == 1


def test_recall_state_follows_commits_rollbacks_and_messages_as_a_fresh_load(memory):
    memory.create_chat("road", "default")
    live = ChatState("road")
    live.refresh(memory.store)

    def check():
        live.refresh(memory.store)
        fresh = ChatState("road")
        fresh.refresh(memory.store)
        assert _picture(live) == _picture(fresh)

    _drive(memory, 70, seed=11, check=check)
    assert live.loads == 1 and live.updates >= 60  # every step followed incrementally, never reloaded


def test_recall_state_follows_a_write_it_did_not_see_from_the_stores_change_log(memory, tmp_path):
    memory.create_chat("road", "default")
    memory.commit("road", [{"op": "create_node", "id": "ev1", "type": "event", "title": "Summary 1",
                            "fields": {"summary": "Mira crossed the bridge."}}], 1, "test")
    state = ChatState("road")
    state.refresh(memory.store)

    def elsewhere(summary: str) -> None:
        other = Store(memory.store.data_dir)  # another process, as far as this one's change log knows
        try:
            other.commit("road", [{"op": "update_node", "id": "ev1", "set_fields": {"summary": summary}}], 2, "test")
        finally:
            other.close()

    elsewhere("Mira paid the toll.")
    assert state.refresh(memory.store) and (state.loads, state.updates) == (1, 1)  # read from the store's log
    assert state.documents["ev1"] == "Mira paid the toll."
    elsewhere("Mira lost the toll money.")
    with memory.store.transaction() as conn:  # what the store no longer keeps (trimmed): a whole load
        conn.execute("DELETE FROM graph_changes WHERE chat_id='road'")
    assert state.refresh(memory.store) and state.loads == 2
    assert state.documents["ev1"] == "Mira lost the toll money."


def test_vector_sync_after_a_commit_reads_only_what_it_touched(memory, monkeypatch):
    memory.create_chat("road", "default")
    index = memory.index  # open: every commit is followed by a sync
    memory.store.set_messages("road", [Message("assistant", "Mira", f"line {f}") for f in range(6)])
    memory.commit("road", [{"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i}",
                            "fields": {"summary": f"Mira found lantern number {i}."}, "floor_from": i, "floor_to": i}
                           for i in range(5)], 5, "test")
    assert index.status("road")["indexed"] == 5

    def whole_graph(*args, **kwargs):
        raise AssertionError("the sync after a commit read the whole graph")

    monkeypatch.setattr(GraphView, "nodes", whole_graph)
    memory.commit("road", [{"op": "update_node", "id": "ev2", "set_fields": {"summary": "Mira lost the lantern."}}],
                  5, "test")
    report = index.sync("road")  # already followed by the commit's own sync
    assert (report.embedded, report.unchanged) == (0, 5)
    memory.store.set_messages_from("road", 4, [Message("assistant", "Rowan", "a new line at floor four")])
    report = index.sync("road")
    assert report.sources_embedded == 1 and report.embedded == 0  # only ev4 (floors 3-4) reaches floor 4
    monkeypatch.undo()
    fresh = VectorIndex(memory.store, index.profile)
    assert fresh.sync("road").unchanged == 5 and fresh.sync("road").embedded == 0  # the saved hashes are right
    assert index.query("road", "lost lantern", 1)[0][0] == "ev2"


def test_vector_sync_follows_random_changes_like_a_full_compare(memory):
    memory.create_chat("road", "default")
    index = memory.index

    def check():
        pass

    _drive(memory, 40, seed=5, check=check)
    index.sync("road")
    _, followed, _ = index._known["road"]
    resumed = VectorIndex(memory.store, index.profile)
    report = resumed.sync("road")  # takes the index up at the stamp the store holds: nothing else read
    assert report.embedded == 0 and report.sources_embedded == 0 and report.deleted == 0
    assert resumed._known["road"][1] == followed
    fresh = VectorIndex(memory.store, index.profile)
    fresh._resume = lambda *args: False
    report = fresh.sync("road")  # compares every node with the saved hashes
    assert report.embedded == 0 and report.sources_embedded == 0 and report.deleted == 0
    assert fresh._known["road"][1] == followed
    assert index._collection("road").count() == sum(1 for c, _, _ in followed.values() if c)


def test_mentions_are_looked_up_in_the_state_which_matches_the_stores_names(memory, monkeypatch):
    """Recall answers "which entities does the query name" from its state (no statement; the store's
    `node_names` took a quarter of a millisecond at 10k nodes), and the state's names follow the store's."""
    memory.create_chat("road", "default")
    recaller = Recaller(memory.store, memory.settings, memory.index, full_after=0)

    def check():
        state = recaller.state("road")
        table: dict[str, set[str]] = {}
        for name, node_id in memory.store.conn.execute("SELECT name, node_id FROM node_names WHERE chat_id=?",
                                                       ("road",)):
            if state.nodes[node_id].type not in state.event_types:
                table.setdefault(name, set()).add(node_id)
        assert state.names == table

    _drive(memory, 40, seed=11, check=check)
    state = recaller.state("road")
    name = next(n for n, ids in state.names.items() if any(not state.nodes[i].archived for i in ids))
    with memory.store.reading("road"):  # as a recall reads: the chat's versions once
        sent = _count_statements(memory.store.conn, monkeypatch)
        found = recaller._mentioned("road", f"Where did {name} go?")
    assert sent == [] and found and found <= state.names[name]


@pytest.mark.engine("sqlite", reason="SQLite's planner, without statistics, chose the primary key here")
def test_children_are_looked_up_by_the_parent_index(memory):
    memory.create_chat("road", "default")
    plan = " ".join(row[-1] for row in memory.store.conn.execute(
        "EXPLAIN QUERY PLAN " + CHILDREN_SQL.format("?, ?"), ("road", "a", "b", "road")))
    # not the whole chat walked by its primary key, as the read with an ORDER BY was (3-5 ms at 30k nodes)
    assert "COVERING INDEX nodes_by_parent" in plan and "PRIMARY KEY (chat_id=?)" not in plan


def test_recall_after_commits_matches_a_fresh_recaller(memory, monkeypatch):
    memory.create_chat("road", "default")
    recaller = Recaller(memory.store, memory.settings, memory.index, full_after=0)
    whole = []
    monkeypatch.setattr(recaller, "_pool", lambda *a, build=recaller._pool: whole.append(1) or build(*a))
    queries = ["What did Mira owe Rowan?", "the toll at the bridge", "米拉 银币"]

    def check():
        state = recaller.state("road")
        latest = recaller._latest_floor("road")
        opts = memory.settings.recall
        plan, pool = recaller._pool_for("road", state, latest, opts)
        fresh = ChatState("road")
        fresh.refresh(memory.store)
        fresh_plan = plan_persistent(fresh.typed(), fresh.schema, latest, opts.budget_tokens, opts.max_per_type)
        assert vars(pool) == vars(build_pool(fresh, fresh_plan.kept, None))  # the pool followed the commit exactly
        assert plan.kept == fresh_plan.kept and plan.left == fresh_plan.left
        for query in queries:
            ours = recaller.recall("road", query)
            theirs = Recaller(memory.store, memory.settings, memory.index).recall("road", query)
            assert [c.node.id for c in ours.recalled] == [c.node.id for c in theirs.recalled]
            assert ours.text == theirs.text

    _drive(memory, 40, seed=2, check=check)
    assert recaller.state("road").loads == 1
    assert len(whole) == 1  # built once, then followed commit by commit


@pytest.mark.parametrize("known", [0, 2])
def test_change_log_says_none_across_a_gap(memory, known):
    log = memory.store.changes
    log.graph_changed("c", 1, {"a"})
    log.graph_changed("c", 2, {"b"})
    log.graph_changed("c", 4, {"d"})  # version 3 was written elsewhere
    assert log.graph_since("c", 0, 2).nodes == {"a", "b"}
    assert log.graph_since("c", known, 4) is None
    assert log.graph_since("c", 3, 4).nodes == {"d"}  # a reader that saw version 3 itself can follow


def test_embedded_source_is_the_start_of_each_message_near_128_tokens():
    from curator.vectors.documents import EMBEDDED_SOURCE_WEIGHT, embedded_source

    short = "Rowan: where is the toll?\nEileen: at the bridge."
    assert embedded_source(short) == short  # nothing to cut
    long = "Rowan: " + "word " * 300 + "\nEileen: " + "answer " * 300 + "\nMira: 米拉" + "在桥上" * 100
    cut = embedded_source(long)
    lines = cut.split("\n")
    assert [line.split(":")[0] for line in lines] == ["Rowan", "Eileen", "Mira"]  # every message keeps its start
    weight = sum(4 if "\u4e00" <= c <= "\u9fff" else 1 for c in cut.replace("\n", ""))
    assert EMBEDDED_SOURCE_WEIGHT - 10 <= weight <= EMBEDDED_SOURCE_WEIGHT
    assert len(embedded_source("x" * 100 + "\n" + "y" * 2000).split("\n")[1]) == EMBEDDED_SOURCE_WEIGHT - 100



def _count_statements(conn, monkeypatch) -> list[str]:
    """Every statement sent through the store's connection from now on (each one is a round trip on a server)."""
    sent: list[str] = []
    execute, executemany = conn.execute, conn.executemany
    monkeypatch.setattr(conn, "execute", lambda sql, params=(): sent.append(sql) or execute(sql, params))
    monkeypatch.setattr(conn, "executemany", lambda sql, params: sent.append(sql) or executemany(sql, params))
    return sent


def test_a_warm_recall_sends_few_statements_and_recalls_the_same(memory, monkeypatch):
    """The chat's row is read once per recall and the expansion reads all its seeds' edges at once (issue 16: on
    PostgreSQL a warm recall sent 34 statements, each a round trip)."""
    memory.create_chat("road", "default")
    _drive(memory, 30, seed=5, check=lambda: None)
    recaller = Recaller(memory.store, memory.settings, memory.index, full_after=0)
    queries = ["What did Mira owe Rowan?", "the toll at the bridge", "米拉 银币"]
    cold = [recaller.recall("road", query) for query in queries]  # loads the state, syncs the index
    sent = _count_statements(memory.store.conn, monkeypatch)
    warm = [recaller.recall("road", query) for query in queries]
    # the chat's row, the mentions, the seeds' edges, then the access counts (BEGIN, one UPDATE for all, COMMIT)
    assert len(sent) <= 6 * len(queries), sent
    assert [w.text for w in warm] == [c.text for c in cold]
    assert [[(c.node.id, c.reason) for c in w.recalled] for w in warm] == \
        [[(c.node.id, c.reason) for c in i.recalled] for i in cold]


def test_the_pool_is_updated_in_place_unless_another_recall_may_hold_it(memory):
    memory.create_chat("road", "default")
    memory.store.set_messages("road", [Message("assistant", "Mira", f"line {f}") for f in range(5)])
    recaller = Recaller(memory.store, memory.settings, memory.index, full_after=0)

    def event(node_id: str, floor: int) -> None:
        memory.commit("road", [{"op": "create_node", "id": node_id, "type": "event", "title": node_id,
                                "fields": {"summary": f"Mira found the {node_id} by the river."},
                                "floor_from": floor, "floor_to": floor}], floor, "test")

    def last_pool():
        return next(pool for (chat, _), (_, pool, _) in recaller._last_pool.items() if chat == "road")

    event("lantern", 1)
    recaller.recall("road", "lantern")
    first = last_pool()
    before = (dict(first.nodes), dict(first.documents))
    event("harp", 2)
    recaller._in_flight["road"] += 1  # another recall is under way: it may be reading the pool
    recaller.recall("road", "harp")
    recaller._in_flight["road"] -= 1
    second = last_pool()
    assert second is not first and (dict(first.nodes), dict(first.documents)) == before and "harp" in second.documents
    event("compass", 3)
    injection = recaller.recall("road", "compass")
    third = last_pool()
    assert third is second and "compass" in third.documents  # alone: brought up to date in place
    # no key of an older version still names it
    assert [key[2] for key, (_, pool) in recaller._pools.items() if pool is third] == [memory.store.stamp("road")[1]]
    fresh = Recaller(memory.store, memory.settings, memory.index).recall("road", "compass")
    assert [c.node.id for c in injection.recalled] == [c.node.id for c in fresh.recalled]



def test_a_new_process_takes_the_index_up_at_its_stamp_and_syncs_what_changed_since(memory, monkeypatch):
    """The store keeps the stamp the index was brought to and what each write touched: a process that starts
    after writes it did not see (a CLI command without the index) embeds only those, reading no whole graph."""
    memory.create_chat("road", "default")
    index = memory.index
    memory.store.set_messages("road", [Message("assistant", "Mira", f"line {f}") for f in range(6)])
    memory.commit("road", [{"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i}",
                            "fields": {"summary": f"Mira found lantern number {i}."}, "floor_from": i, "floor_to": i}
                           for i in range(5)], 5, "test")
    other = Store(memory.store.data_dir)  # another process, with no index open
    try:
        other.commit("road", [{"op": "update_node", "id": "ev2", "set_fields": {"summary": "Mira lost the lantern."}}],
                     5, "test")
        other.set_messages_from("road", 4, [Message("assistant", "Rowan", "a new line at floor four")])
    finally:
        other.close()

    def whole_graph(*args, **kwargs):
        raise AssertionError("the sync read the whole graph")

    monkeypatch.setattr(GraphView, "nodes", whole_graph)
    fresh = VectorIndex(memory.store, index.profile)
    report = fresh.sync("road")
    # ev2; ev4 keeps its text, not its source
    assert (report.embedded, report.sources_embedded, report.unchanged) == (1, 1, 4)
    assert fresh.sync("road").unchanged == 5
    monkeypatch.undo()
    assert fresh.query("road", "lost lantern", 1)[0][0] == "ev2"
    fresh.close()
    with memory.store.transaction() as conn:  # a stamp the change log no longer reaches: every node compared
        conn.execute("DELETE FROM graph_changes WHERE chat_id='road'")
        conn.execute("UPDATE vector_state SET synced=? WHERE chat_id='road'",
                     (f"{memory.store.stamp('road')[0][1]}|1|1",))
    again = VectorIndex(memory.store, index.profile)
    report = again.sync("road")
    assert report.mode == "incremental" and report.embedded == 0 and report.unchanged == 5


def test_a_rollback_and_an_undo_are_followed_from_the_stores_change_log(memory):
    """Every write that changes the graph or the messages leaves its changes in the store: another process's
    recall state follows a rollback (with the floors a sync replaced) and an undo without a whole load."""
    memory.create_chat("road", "default")
    memory.store.set_messages("road", [Message("assistant", "Mira", f"line {f}") for f in range(6)])
    for floor in range(1, 5):
        memory.commit("road", [{"op": "create_node", "id": f"ev{floor}", "type": "event", "title": f"S{floor}",
                                "fields": {"summary": f"Mira found lantern {floor}."}, "floor_from": floor,
                                "floor_to": floor}], floor, "test")
    state = ChatState("road")
    state.refresh(memory.store)
    other = Store(memory.store.data_dir)  # another process, as far as this one's change log knows
    try:
        result = other.rollback("road", 3, messages=[Message("assistant", "Rowan", "a new line three")])
        assert state.refresh(memory.store) and state.loads == 1 and "ev3" not in state.nodes
        assert state.lines[3] == "Rowan: a new line three"
        other.undo("road", result.batch)
    finally:
        other.close()
    assert state.refresh(memory.store) and state.loads == 1 and "ev3" in state.nodes
    fresh = ChatState("road")
    fresh.refresh(memory.store)
    assert _picture(state) == _picture(fresh)
