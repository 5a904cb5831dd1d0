"""Recall and injection on the example graph and on small hand-made graphs."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from curator.recall.injection import persistent_nodes
from curator.paths import example_file
from curator.settings import RecallSettings, RerankProfile
from curator.llm.tokens import count_tokens

EXAMPLE = example_file("lantern_road.graph.json")


@pytest.fixture
def road(memory):
    memory.import_("road", EXAMPLE)
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    return "road"


def ids(chosen):
    return [c.node.id for c in chosen]


def test_hybrid_recall_finds_the_old_promise(memory, road):
    injection = memory.recall(road, "Eileen, you told me once you owed me for the salve. Do you remember?")
    recalled = ids(injection.recalled)
    assert "n_evt_01" in recalled  # the leaf with the promise, folded into a summary, comes back for its detail
    chosen = next(c for c in injection.recalled if c.node.id == "n_evt_01")
    assert chosen.reason.startswith("detail of")
    assert injection.tokens <= 1500 and injection.placement == {"position": "at_depth", "depth": 9999, "role": "system"}


def test_pool_excludes_archived_and_always_injected(memory, road):
    injection = memory.recall(road, "Summary of the journey, the bridge, Saltmere and the Grey Hand")
    persistent = set(ids(injection.persistent))
    recalled = ids(injection.recalled)
    assert persistent and not persistent & set(recalled)  # node-level exclusive
    graph = memory.graph(road)
    for node_id in recalled:
        node = graph.get(node_id)
        assert not node.archived or node.parent is not None  # archived only as a folded leaf, for detail


def test_persistent_caps(memory, road):
    graph = memory.graph(road)
    schema = memory.chat(road).schema
    kept, dropped = persistent_nodes(graph, schema, latest_floor=59)
    assert {n.type for n in kept} == {"event"} and all(n.parent is None for n in kept)
    assert len(kept) == 9 and not dropped  # 3 level-1 summaries and 6 recent leaves
    capped = schema.model_copy(update={"types": {**schema.types, "event": schema.types["event"].model_copy(
        update={"always_inject": schema.types["event"].always_inject.model_copy(
            update={"max_per_type": 4, "max_floor_distance": 0})})}})
    kept, dropped = persistent_nodes(graph, capped, latest_floor=59)
    assert len(kept) == 4 and len(dropped) == 5
    assert min(n.floor_to for n in kept) > max(n.floor_to for n in dropped)  # the newest K stay
    far = capped.model_copy(update={"types": {**capped.types, "event": capped.types["event"].model_copy(
        update={"always_inject": capped.types["event"].always_inject.model_copy(
            update={"max_per_type": 0, "max_floor_distance": 10})})}})
    kept, _ = persistent_nodes(graph, far, latest_floor=59)
    assert all(n.floor_to >= 50 for n in kept)


def test_budget_is_never_exceeded_and_nodes_are_never_cut(memory, road):
    for budget in (200, 600, 1500, 4000):
        injection = memory.recall(road, "the toll at the bridge and the compass", budget_tokens=budget)
        assert count_tokens(injection.text) <= budget
        for chosen in injection.persistent + injection.recalled:
            assert chosen.text in injection.text  # whole lines only
    small = memory.recall(road, "the toll at the bridge and the compass", budget_tokens=200)
    assert small.dropped_for_budget


def test_expansion_brings_linked_people_and_places(memory, tmp_path):
    schema = tmp_path / "s.yaml"
    schema.write_text(
        """
name: plain
relations: [{name: involved_in}, {name: occurred_at}]
types:
  person: {identity: entity, primary_key: [name], title_field: name,
           fields: [{name: name, required: true, embedded: true}, {name: role, embedded: true}]}
  place: {identity: latest_only, primary_key: [name], title_field: name,
          fields: [{name: name, required: true, embedded: true}]}
  event: {identity: event, bucket: episodic, fields: [{name: summary, required: true, embedded: true}]}
""",
        encoding="utf-8",
    )
    memory.create_chat("plain", schema)
    memory.commit("plain", [
        {"op": "create_node", "id": "p_mira", "type": "person", "fields": {"name": "Mira", "role": "courier"}},
        {"op": "create_node", "id": "l_dock", "type": "place", "fields": {"name": "Salt Docks"}},
        {"op": "create_node", "id": "e_knife", "type": "event", "title": "knife",
         "fields": {"summary": "A smuggler stabbed Rowan with a poisoned knife."}},
        {"op": "create_node", "id": "e_fish", "type": "event", "title": "fish",
         "fields": {"summary": "They ate grilled fish for supper."}},
        {"op": "link", "source": "p_mira", "target": "e_knife", "relation": "involved_in"},
        {"op": "link", "source": "e_knife", "target": "l_dock", "relation": "occurred_at"},
    ], 3)
    injection = memory.recall("plain", "who was stabbed with the poisoned knife?", max_results=1)
    assert ids(injection.recalled)[0] == "e_knife"
    reasons = {c.node.id: c.reason for c in injection.recalled}
    assert reasons.get("p_mira") == "involved_in link to knife" and reasons.get("l_dock") == "occurred_at link to knife"
    flat = memory.recall("plain", "who was stabbed with the poisoned knife?", max_results=1, expand=False)
    assert ids(flat.recalled) == ["e_knife"]


def test_reuse_on_the_same_floor_costs_nothing(memory, road, monkeypatch):
    query = "Will Brannoch give the compass back?"
    first = memory.recall(road, query, user_floor=59)  # the imported memory is anchored at floor 59
    calls = []
    embedder = memory.index.function.embedder
    monkeypatch.setattr(embedder, "embed_queries", lambda texts: calls.append(texts))
    again = memory.recall(road, query, user_floor=59)
    assert again.reused and not calls and again.text == first.text
    # the reply to floor 59 is extracted (a commit anchored at 60): a regenerate of that reply still reuses it
    memory.commit(road, [{"op": "update_node", "id": "n_mira", "set_fields": {"goal": "sail away"}}], 60)
    assert memory.recall(road, query, user_floor=59).reused and not calls
    memory.rollback(road, 60)  # ... and so does the regenerate's rollback of that extraction
    assert memory.recall(road, query, user_floor=59).reused and not calls
    memory.commit(road, [{"op": "update_node", "id": "n_mira", "set_fields": {"goal": "stay"}}], 59)
    monkeypatch.undo()
    assert not memory.recall(road, query, user_floor=59).reused  # the memory up to the turn changed: recall again


def test_recall_counts_access_outside_the_commit_log(memory, road):
    commits = len(memory.store.commits(road))
    injection = memory.recall(road, "Silas Marrow the Grey Hand")
    node = memory.graph(road).get(injection.recalled[0].node.id)
    assert node.access_count == 1 and node.last_access
    assert len(memory.store.commits(road)) == commits


def test_access_counts_are_written_together_and_before_the_graph_is_read(memory, road, monkeypatch):
    from curator.recall import engine

    def stored(node_id: str) -> int:  # the store itself, not `Memory.graph` (which writes them first)
        return memory.store.graph(road).get(node_id).access_count

    first = memory.recall(road, "Silas Marrow the Grey Hand").recalled[0].node.id
    assert stored(first) == 0  # kept in memory
    for _ in range(engine.TOUCH_RECALLS - 2):
        memory.recall(road, "Silas Marrow the Grey Hand")
    assert stored(first) == 0
    memory.recall(road, "Silas Marrow the Grey Hand")  # the TOUCH_RECALLS-th: one transaction for all
    assert stored(first) == engine.TOUCH_RECALLS
    memory.recall(road, "Silas Marrow the Grey Hand")
    calls = []

    def disk_full(*args):
        calls.append(args)
        raise OSError("disk full")

    monkeypatch.setattr(memory.store, "transaction", disk_full)
    with pytest.raises(OSError, match="disk full"):
        memory.graph(road)
    monkeypatch.undo()
    assert calls and memory.graph(road).get(first).access_count == engine.TOUCH_RECALLS + 1  # kept, then written


def test_exclude_recent_floors(memory, road):
    injection = memory.recall(road, "Eileen Rowan Mira Brannoch", exclude_recent_floors=30)
    graph = memory.graph(road)
    assert all(graph.get(i).floor_to <= 29 for i in ids(injection.recalled))


def test_rag_mode_with_a_reranker_and_its_fallback(memory, road):
    url = "http://rerank.test/rerank"
    profile = RerankProfile(provider="http", url=url, api_key_env="NO_SUCH_KEY")
    with respx.mock(assert_all_called=True) as router:
        def reverse(request):
            texts = json.loads(request.content)["texts"]
            return httpx.Response(200, json=[{"index": i, "score": i / 10} for i in range(len(texts))])

        router.post(url).mock(side_effect=reverse)
        reranked = memory.recall(road, "the bridge toll", mode="rag", rerank=profile, max_results=5)
    assert reranked.mode == "rag"
    assert all(c.reason.endswith("reranked") or c.reason.startswith("detail of") for c in reranked.recalled)
    with respx.mock() as router:
        router.post(url).mock(return_value=httpx.Response(500))
        fallback = memory.recall(road, "the bridge toll", mode="rag", rerank=profile, max_results=5)
    plain = memory.recall(road, "the bridge toll", mode="rag", max_results=5)
    assert ids(reranked.recalled) != ids(plain.recalled)  # the reranker's (reversed) order was taken
    assert ids(fallback.recalled) == ids(plain.recalled)  # any rerank failure keeps the vector order
    assert all(c.reason.endswith("vector match") or c.reason.startswith("detail of") for c in fallback.recalled)


def test_injection_structure_and_buckets(memory, road):
    data = memory.recall(road, "Who controls the bridge now?").to_dict()
    assert set(data["blocks"]) == {"persistent", "recalled"}
    assert data["tokens"]["tokenizer"].startswith("cl100k_base")
    assert "## What happened" in data["text"] and "[Memory: always kept]" in data["text"]
    row = data["blocks"]["recalled"][0]
    assert {"id", "type", "title", "score", "reason", "tokens", "text", "floors"} <= set(row)


def test_world_info_export(memory, road):
    book = memory.world_info(road)
    entries = list(book["entries"].values())
    assert len(entries) == 18
    constant = [e for e in entries if e["constant"]]
    assert constant and all(e["extensions"]["memory_curator"]["type"] == "event" for e in constant)
    silas = next(e for e in entries if e["comment"].startswith("character_sheet: Silas Marrow"))
    assert "the Grey Hand" in silas["key"] and not silas["constant"]


def test_settings_validate_recall_options():
    with pytest.raises(ValueError):
        RecallSettings(budget_tokens=10)


def test_llm_rerank_stage_and_its_fallback(memory, road):
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from curator.recall.engine import Recaller

    def picks(ids):
        def answer(messages, info):
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"ids": ids})])
        return FunctionModel(answer)

    opts = memory.settings.recall.model_copy(update={"llm_rerank": True})
    recaller = Recaller(memory.store, memory.settings, memory.index, model=picks(["n_mira", "n_bogus", "n_bridge"]))
    injection = recaller.recall(road, "Mira and the bridge", options=opts)
    assert ids(injection.recalled) == ["n_mira", "n_bridge"]  # the unknown id is dropped
    assert injection.usage.calls == 1 and "picked by the model" in injection.recalled[0].reason

    def broken(messages, info):
        raise RuntimeError("no model today")

    failing = Recaller(memory.store, memory.settings, memory.index, model=FunctionModel(broken))
    fallback = failing.recall(road, "Mira and the bridge", options=opts)
    plain = Recaller(memory.store, memory.settings, memory.index).recall(
        road, "Mira and the bridge", options=opts.model_copy(update={"llm_rerank": False, "expand": False,
                                                                     "max_results": 30}))
    assert ids(fallback.recalled) == ids(plain.recalled)[:len(fallback.recalled)] and fallback.recalled
    assert fallback.usage.failed_calls == 1  # the failed call is still counted
