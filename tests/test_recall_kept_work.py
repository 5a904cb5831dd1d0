"""What recall keeps from one query to the next to save work (BM25 term weights, rendered templates) and its
shortcuts (the best n from a heap) give what working it out again would."""

from __future__ import annotations

import importlib
import os
import random

import pytest

from curator.recall.lexical import BM25, LiveBM25
from curator.recall.scoring import best_first, fuse

WORDS = ["Mira", "Rowan", "salve", "bridge", "toll", "crowns", "river", "fish", "debt", "米拉", "桥上"]


def test_live_bm25_kept_weights_follow_every_change():
    rng = random.Random(8)
    live, docs = LiveBM25(), {}
    queries = ("Mira salve", "bridge toll crowns", "米拉 桥", "river")
    for _ in range(200):
        key = f"d{rng.randrange(40)}"
        if rng.random() < 0.25:
            live.remove(key)
            docs.pop(key, None)
        else:
            docs[key] = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 10)))
            live.set(key, docs[key])
        if not docs:
            continue
        keys = list(docs)
        whole = BM25([docs[k] for k in keys])
        for query in queries:  # asked after each change, so kept weights would show if they went stale
            got = live.top(query, 50)
            expected = {keys[i]: s for i, s in whole.top(query, 50)}
            assert {k for k, _ in got} == expected.keys()  # k is above the documents' count: every match
            assert all(abs(s - expected[k]) < 1e-9 for k, s in got)
            assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)


def test_live_bm25_ties_go_to_the_document_added_first():
    live = LiveBM25()
    for key in ("c", "a", "b"):
        live.set(key, "Mira paid the toll")
    live.set("z", "Rowan")
    assert [k for k, _ in live.top("toll", 2)] == ["c", "a"]
    assert [k for k, _ in live.top("toll", 10)] == ["c", "a", "b"]


@pytest.mark.parametrize("size", [30, 200])  # 200: numpy picks the best
@pytest.mark.parametrize("n", [0, 1, 5, 40])
def test_best_first_sorts_by_score_then_id_whatever_the_maps_order(n, size):
    rng = random.Random(n)
    ids = [f"n{i}" for i in range(size)]
    values = {i: float(rng.randrange(6)) for i in ids}  # many ties, at the cut too
    ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
    for _ in range(3):  # the same scores inserted in another order give the same ranking
        rng.shuffle(ids)
        scores = {i: values[i] for i in ids}
        assert list(best_first(scores, n)) == ranked[:n]
        assert list(best_first(scores, n, everything=True)) == ranked


def test_fuse_keeps_to_the_allowed_candidates_and_z_scores_each_channel():
    dense = {"a": 0.9, "b": 0.5, "c": 0.1, "x": 0.95}
    lexical = {"a": 3.0, "d": 1.0, "y": 9.0}
    fused = fuse(dense, lexical, {"a", "b", "c", "d", "x"}, {"a", "b", "c", "d"})
    assert set(fused) == {"a", "b", "c", "d"}  # x: not in the second collection; y: in neither
    # d has no vector match: it counts as the lowest similarity among the candidates (c's)
    d_values, l_values = [0.9, 0.5, 0.1, 0.1], [3.0, 0.0, 0.0, 1.0]

    def z(values, i):
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        return (values[i] - mean) / std

    for i, key in enumerate("abcd"):
        assert fused[key] == pytest.approx(z(d_values, i) + 0.3 * z(l_values, i))


def test_an_edited_template_is_read_again(tmp_path, monkeypatch):
    rendering = importlib.import_module("curator.prompts.render")  # the module (the package exports `render`)
    folder = tmp_path / "templates"
    folder.mkdir()
    template = folder / "greeting.md"
    template.write_text("Hello $who", encoding="utf-8")
    monkeypatch.setattr(rendering.resources, "files", lambda package: tmp_path)
    monkeypatch.setattr(rendering, "_TEMPLATES", {})
    assert rendering.render("greeting", who="Mira") == "Hello Mira"
    template.write_text("Farewell $who", encoding="utf-8")
    stat = template.stat()
    os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a later mtime, whatever the clock
    assert rendering.render("greeting", who="Mira") == "Farewell Mira"


def _dated(i: int, day: int) -> dict:
    return {"op": "create_node", "id": f"ev{i}", "type": "event", "title": f"Summary {i}", "floor_from": i,
            "floor_to": i, "fields": {"summary": f"Mira met Rowan at the bridge, scene {i}."},
            "story_time": {"label": f"{day} May, 2023"}}


def test_the_pool_keeps_its_dates_and_folded_leaves_through_commits(memory):
    """The sorted days and each summary's folded leaves, followed commit by commit, are those of a pool built
    whole; the date bonus and the mention boost read them as a scan of every node would."""
    from curator.dates import date_windows, within
    from curator.recall.engine import Recaller
    from curator.recall.pool import build_pool
    from curator.recall.scoring import DATE_BONUS, DATE_SLACK_DAYS, MENTION_BONUS, date_bonus, mention_boost
    from curator.recall.state import ChatState

    memory.create_chat("road", "default")
    memory.commit("road", [{"op": "create_node", "id": "mira", "type": "character_sheet", "fields": {"name": "Mira"}}]
                  + [_dated(i, 1 + i % 28) for i in range(80)], 0, "test")  # more than are placed one by one
    recaller = Recaller(memory.store, memory.settings, None, full_after=0)
    rng = random.Random(2)
    for step in range(80, 120):
        roll = rng.random()
        graph = memory.graph("road")
        events = [n.id for n in graph.nodes(type="event") if n.level == 0]
        folded_leaves = [n.id for n in graph.nodes(type="event", archived=True)]
        if roll < 0.3:
            ops = [_dated(step, rng.randrange(1, 29))]
        elif roll < 0.5:
            ops = [
                {
                    "op": "update_node",
                    "id": rng.choice(events),
                    "story_time": {"label": f"{rng.randrange(1, 29)} May, 2023"},
                }
            ]
        elif roll < 0.7:
            ops = [{"op": "compact", "id": f"sum{step}", "type": "event", "title": f"Summary S{step}",
                    "fields": {"summary": "Folded."},
                    "children": rng.sample([n.id for n in graph.nodes(type="event") if n.parent is None], 3)}]
        elif roll < 0.8:  # an active event, or a leaf folded into a summary
            ops = [{"op": "delete_node", "id": rng.choice(events + folded_leaves[:3])}]
        elif roll < 0.9:
            ops = [
                {
                    "op": "link",
                    "source": "mira",
                    "target": rng.choice(
                        events + [f"sum{s}" for s in range(80, step) if memory.graph("road").get(f"sum{s}")]
                    ),
                    "relation": "involved_in",
                }
            ]
        elif step > 82:
            memory.store.rollback("road", rng.randrange(max(81, step - 5), step + 1))
            ops = []
        else:
            ops = []
        if ops:
            memory.commit("road", ops, step, "test")
        state = recaller.state("road")
        opts = memory.settings.recall
        plan, pool = recaller._pool_for("road", state, recaller._latest_floor("road"), opts)
        fresh = ChatState("road")
        fresh.refresh(memory.store)
        assert vars(pool) == vars(build_pool(fresh, plan.kept, None))
        assert pool.by_day == sorted((day, i) for i, day in pool.days.items())
        scores = {i: rng.random() for i in rng.sample(sorted(pool.documents), min(30, len(pool.documents)))}
        query = f"What happened on {rng.randrange(1, 29)} May 2023?"
        windows = date_windows(query)
        expected = dict(scores)
        for node_id, day in pool.days.items():
            if within(day, windows, DATE_SLACK_DAYS):
                expected[node_id] = expected.get(node_id, min(scores.values())) + DATE_BONUS
        assert date_bonus(scores, query, pool) == expected
        folded = {}
        for leaf, ancestor in pool.leaves.items():
            folded.setdefault(ancestor, set()).add(leaf)
        links = state.neighbours()
        targets = {"mira", *links.get("mira", ())}
        targets |= {leaf for t in set(targets) for leaf in folded.get(t, ())}
        boosted = mention_boost(scores, {"mira"}, links, pool)
        assert boosted == {**scores, **{t: scores.get(t, min(scores.values())) + MENTION_BONUS for t in targets}}
    assert pool.folded and pool.by_day  # both came up
