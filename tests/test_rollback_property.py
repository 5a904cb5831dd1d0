"""Property tests of the commit log: rollback is exact, whatever ops were committed at whatever floors."""

from __future__ import annotations

import contextlib
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import curator
from curator import OpError

RELATIONS = ["related", "involved_in", "allied_with", "hostile_to"]  # two of them symmetric
WORDS = ["salve", "bridge", "toll", "debt", "lantern", "storm"]
KINDS = ["create", "create", "create", "update", "retitle", "archive", "delete", "link", "link", "unlink", "compact"]

# An op is drawn as a kind plus a few numbers, and made concrete against the graph as it is when its commit
# is made, so most commits are valid (they name nodes and edges that exist) and some are not.
abstract_op = st.tuples(st.sampled_from(KINDS), st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 10))
commit = st.tuples(st.integers(0, 30), st.lists(abstract_op, min_size=1, max_size=4))


def _concrete(kind: str, a: int, b: int, c: int, graph: dict) -> dict:
    """One concrete op; `graph` is updated with the nodes it creates so later ops of the commit can use them."""
    op = _make(kind, a, b, c, graph)
    if op["op"] == "create_node":
        graph["nodes"].append({"id": op["id"], "type": op["type"], "archived": False})
    return op


def _make(kind: str, a: int, b: int, c: int, graph: dict) -> dict:
    nodes = [n["id"] for n in graph["nodes"]]
    if c == 10:  # now and then, an op that names a node that is not there
        nodes = ["n_missing"]
    def pick(items, k):
        return items[k % len(items)]

    word = pick(WORDS, a + c)
    if kind == "create" or not nodes:
        typ = "event" if c % 2 else "character_sheet"
        return {"op": "create_node", "id": f"n{a % 40}", "type": typ, "title": f"{typ} {word}",
                "fields": {"summary": word} if typ == "event" else {"name": word}, "importance": c}
    if kind == "update":
        node = pick(graph["nodes"], a) if c != 10 else {"id": "n_missing", "type": "event"}
        field = "summary" if node["type"] == "event" else "goal"
        return {"op": "update_node", "id": node["id"], "set_fields": {field: word}}
    if kind == "retitle":
        return {"op": "update_node", "id": pick(nodes, a), "title": word, "floor_to": 40}
    if kind == "archive":
        return {"op": "archive_node", "id": pick(nodes, a), "archived": bool(c % 3)}
    if kind == "delete":
        return {"op": "delete_node", "id": pick(nodes, a)}
    if kind == "link":
        source = pick(nodes, a)
        target = pick([n for n in nodes if n != source] or nodes, b)
        return {"op": "link", "source": source, "target": target, "relation": pick(RELATIONS, c),
                "strength": (c + 1) / 11}
    if kind == "unlink":
        edges = graph["edges"]
        if edges and c % 4:
            edge = pick(edges, a)
            return {"op": "unlink", "source": edge["source"], "target": edge["target"], "relation": edge["relation"]}
        return {"op": "unlink", "source": pick(nodes, a), "target": pick(nodes, b), "relation": pick(RELATIONS, c)}
    events = [n["id"] for n in graph["nodes"] if n["type"] == "event" and not n["archived"]] or ["n_missing"]
    start = a % len(events)
    return {"op": "compact", "id": f"s{b % 40}", "type": "event", "title": "arc", "fields": {"summary": "arc"},
            "children": events[start:start + 1 + c % 3]}


@contextlib.contextmanager
def _fresh():
    """A store in a temporary folder that is removed afterwards (a long run makes thousands of them)."""
    folder = tempfile.mkdtemp(prefix="curator-prop-")
    try:
        with curator.open(folder) as memory:
            yield memory
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_temporary_stores_are_removed():
    with _fresh() as memory:
        folder = memory.data_dir
        memory.create_chat("c", "default")
        assert folder.exists()
    assert not folder.exists()


def _apply_all(memory, chat, commits, at_base=0):
    """Commit each (floor, ops); commits that are invalid at that point are skipped, as a caller would see."""
    landed = []
    for n, (floor, abstract) in enumerate(commits):
        graph = memory.graph(chat).snapshot()
        ops = [_concrete(*spec, graph) for spec in abstract]
        try:
            landed.append(memory.store.commit(chat, ops, floor, "test", at=f"2026-01-01T00:00:{at_base + n:06d}"))
        except OpError:
            pass
    return landed


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit, min_size=1, max_size=14), floor=st.integers(0, 31))
def test_rollback_equals_applying_only_commits_below_floor(commits, floor):
    with _fresh() as memory:
        memory.create_chat("live", "default")
        landed = _apply_all(memory, "live", commits)
        result = memory.rollback("live", floor)

        memory.create_chat("reference", "default")
        kept = []
        for record in landed:
            if record.anchor_floor >= floor:
                continue
            try:
                memory.store.commit("reference", record.ops, record.anchor_floor, "test", at=record.at)
                kept.append(record.id)
            except OpError:
                pass  # it built on a commit at or above the floor: it cannot exist without it

        assert memory.graph("live").snapshot() == memory.graph("reference").snapshot()
        assert [c.id for c in memory.store.commits("live")] == [r.id for r in landed if r.id in set(kept)]
        assert {c.id for c in result.reverted} == {r.id for r in landed if r.anchor_floor >= floor}
        assert all(c.anchor_floor < floor for c in memory.store.commits("live"))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit, min_size=1, max_size=14), floor=st.integers(0, 31))
def test_rollback_then_reapplying_gives_the_original_graph(commits, floor):
    commits = sorted(commits, key=lambda c: c[0])  # a live chat anchors its commits in floor order
    with _fresh() as memory:
        memory.create_chat("live", "default")
        _apply_all(memory, "live", commits)
        original = memory.graph("live").snapshot()
        result = memory.rollback("live", floor)
        assert not result.dropped and not result.reapplied
        for record in reversed(result.reverted):  # oldest first
            memory.store.commit("live", record.ops, record.anchor_floor, record.origin, at=record.at)
        assert memory.graph("live").snapshot() == original


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit, min_size=1, max_size=14))
def test_projection_equals_a_replay_of_the_log(commits):
    with _fresh() as memory:
        memory.create_chat("live", "default")
        _apply_all(memory, "live", commits)
        projected = memory.graph("live").snapshot()
        memory.store.rebuild_projection("live")
        assert memory.graph("live").snapshot() == projected


def _reference(memory, landed, floor):
    memory.create_chat("reference", "default")
    for record in landed:
        if record.anchor_floor < floor:
            try:
                memory.store.commit("reference", record.ops, record.anchor_floor, "test", at=record.at)
            except OpError:
                pass
    return memory.graph("reference").snapshot()


def test_long_random_histories():
    """Longer histories than hypothesis draws: 300 commits, mostly in floor order with some manual edits
    anchored lower, checked at several floors."""
    import random

    for seed in range(3):
        rng = random.Random(seed)
        commits = []
        for n in range(300):
            floor = n // 2 if rng.random() > 0.1 else rng.randrange(0, n // 2 + 1)
            ops = [(rng.choice(KINDS), rng.randrange(1000), rng.randrange(1000), rng.randrange(11))
                   for _ in range(rng.randrange(1, 6))]
            commits.append((floor, ops))
        for floor in (0, 37, 120, 149):
            with _fresh() as memory:
                memory.create_chat("live", "default")
                landed = _apply_all(memory, "live", commits)
                assert len(landed) > 100 and memory.graph("live").stats()["edges"] > 5
                memory.rollback("live", floor)
                assert memory.graph("live").snapshot() == _reference(memory, landed, floor)


# ---- undo: every rollback can be undone exactly (the trash of the commit log, curator/store/trash.py) ----------

FLOORS = 32


def _chat_messages(tag: str = "") -> list:
    from curator.store.messages import Message

    return [Message("user" if f % 2 == 0 else "assistant", "" if f % 2 == 0 else "Eileen", f"floor {f}{tag}",
                    swipe_id=f % 3, swipes=[f"floor {f}{tag}", "other"] if f % 3 else [], sent_at=f"t{f}")
            for f in range(FLOORS)]


def _state(memory, chat):
    messages = memory.store.messages(chat)
    return (memory.graph(chat).snapshot(), messages, [(m.swipes, m.sent_at) for m in messages],
            [c.id for c in memory.store.commits(chat)])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit, min_size=1, max_size=14), floor=st.integers(0, 31), how=st.sampled_from(
    ["rollback", "sync edit", "sync cut", "ingest-like"]), later=st.lists(commit, max_size=4))
def test_undo_after_any_rollback_gives_back_the_graph_and_the_messages(commits, floor, how, later):
    """Whatever was committed at whatever floors, a rollback (plain, or a sync that edits or cuts the chat there),
    followed by commits made since (the re-extraction of the edited floors), is undone exactly: graph, messages
    (swipes and times too) and commit ids as before the rollback. Undoing the undo gives back the state it
    displaced."""
    with _fresh() as memory:
        memory.create_chat("live", "default")
        memory.set_messages("live", _chat_messages())
        _apply_all(memory, "live", commits)
        before = _state(memory, "live")
        if how == "rollback":
            batch = memory.rollback("live", floor).batch
        else:
            edited = _chat_messages(" (edited)")[floor:] if how == "sync edit" else []
            batch = memory.sync("live", _chat_messages()[:floor] + edited).batch
        if batch is None:  # nothing anchored at or after the floor: nothing was reverted, nothing to undo
            assert memory.graph("live").snapshot() == before[0]
            return
        _apply_all(memory, "live", [(max(f, floor), ops) for f, ops in later], at_base=100)
        after = _state(memory, "live")
        undone = memory.undo("live", batch)
        assert _state(memory, "live") == before
        assert memory.undo("live", undone.displaced_batch).restored == undone.displaced
        assert _state(memory, "live") == after


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commits=st.lists(commit, min_size=2, max_size=14), floors=st.tuples(st.integers(0, 31), st.integers(0, 31)))
def test_two_rollbacks_are_undone_newest_first_or_refused(commits, floors):
    """A second rollback that reaches below the first takes the first's base away: undoing the first is refused
    (it could not be exact) and names the batch to undo first; newest first gives back the original."""
    commits = sorted(commits, key=lambda c: c[0])
    with _fresh() as memory:
        memory.create_chat("live", "default")
        memory.set_messages("live", _chat_messages())
        _apply_all(memory, "live", commits)
        before = _state(memory, "live")
        first = memory.rollback("live", max(floors)).batch
        second = memory.rollback("live", min(floors)).batch
        if first is not None and second is not None:
            try:
                memory.undo("live", first)
            except curator.CuratorError as exc:
                assert f"#{second}" in exc.hint
            else:  # the second reverted nothing below the first's base: the first came back on its own
                redo = memory.undo("live", memory.trash("live")[0].id)  # redo it: the undo is kept as a batch
                first = redo.displaced_batch  # and it is that batch that now holds the first rollback's commits
        for batch in (second, first):
            if batch is not None:
                memory.undo("live", batch)
        assert _state(memory, "live") == before
