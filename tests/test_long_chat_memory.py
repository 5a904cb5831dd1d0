"""Long chats remember on default settings: nothing is unreachable (always-inject overflow competes in recall,
and the injection says why each node was left out), compression runs in the pipeline when a `summarize` model is
there, and the recall query is built from the recent turns (every mode and LLM stage sees them)."""

from __future__ import annotations

from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.llm.access import Models
from curator.testing.scripted_story import milestone_summarizer, story, story_extractor
from curator.llm.tokens import count_tokens
from curator.recall.engine import Recaller
from curator.recall.query import build_query, fuse_parts, split_intents
from curator.store.messages import Message


def _events(count: int, special: dict[int, str]) -> list[dict]:
    ops = [{"op": "create_node", "id": "c_mira", "type": "character_sheet", "fields": {"name": "Mira"}}]
    for i in range(count):
        text = special.get(i, f"Day {i}: the caravan rested at the inn and counted its barrels, number {i}.")
        ops.append({"op": "create_node", "id": f"ev{i:03d}", "type": "event", "title": f"Summary {i + 1}",
                    "fields": {"summary": text}, "floor_from": 2 * i + 1, "floor_to": 2 * i + 1})
    return ops


def test_an_old_event_the_budget_pushed_out_is_recalled(memory):
    memory.create_chat("long", "default")
    memory.commit("long", _events(200, {3: "Mira hid the silver compass under the chapel floor."}), 401)
    injection = memory.recall("long", "where is the silver compass?")
    assert count_tokens(injection.text) <= injection.budget_tokens
    assert "silver compass" in injection.text
    compass = next(c for c in injection.recalled if c.node.id == "ev003")
    assert compass.reason.startswith("persistent overflow (cap)")
    assert 0 < len(injection.persistent) <= 8  # the default cap of an always-inject type without its own
    assert {c.node.id for c in injection.persistent} == {f"ev{i}" for i in range(192, 200)}
    data = injection.to_dict()
    left = {row["id"]: row for row in data["left_out"]}
    assert data["left_out_count"] >= 150 and len(left) == 50  # all counted, the first 50 listed
    assert left["ev191"] == {
        "id": "ev191",
        "type": "event",
        "title": "Summary 192",
        "why": "cap",
        "block": "persistent",
    }
    assert "ev003" not in left  # it was recalled


def test_every_active_node_is_persistent_or_a_recall_candidate(memory):
    memory.create_chat("long", "default")
    memory.commit("long", _events(60, {}), 121)
    recaller = Recaller(memory.store, memory.settings, None, full_after=0)
    for budget in (200, 1500):
        opts = memory.settings.recall.model_copy(update={"budget_tokens": budget, "max_per_type": 0})
        recaller.recall("long", "barrels", options=opts)
        plan, pool = next(v for k, v in recaller._pools.items() if k[5] == budget)  # key: (..., budget, cap)
        kept = {n.id for n in plan.kept}
        active = {n.id for n in memory.graph("long").nodes()}
        assert active == kept | set(pool.nodes) and not kept & set(pool.nodes)
        assert set(plan.left.values()) == {"budget"}  # no cap: only the persistent share leaves nodes out
    injection = recaller.recall("long", "barrels", options=memory.settings.recall.model_copy(
        update={"budget_tokens": 200, "max_per_type": 0}))
    assert count_tokens(injection.text) <= 200
    assert {row["why"] for row in injection.to_dict()["left_out"]} <= {"budget"}


def test_cli_recall_shows_both_blocks_and_what_was_left_out(memory, tmp_path):
    from typer.testing import CliRunner

    from curator.cli.main import app

    memory.create_chat("long", "default")
    memory.commit("long", _events(30, {2: "Mira hid the silver compass under the chapel floor."}), 61)
    memory.close()
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"role": "assistant", "name": "Mira", "content": "I buried something long ago."}\n'
                     '{"role": "user", "name": "Wren", "content": "Where is the silver compass?"}\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["--data", str(tmp_path / "data"), "recall", "--chat", "long",
                                      "--turns", str(turns)], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "persistent block" in out and "recalled block" in out and "left out" in out
    assert "persistent overflow" in out and "cap" in out
    bad = CliRunner().invoke(app, ["--data", str(tmp_path / "data"), "recall", "--chat", "long"])
    assert bad.exit_code != 0 and "nothing to recall for" in bad.output


def test_compression_runs_in_the_pipeline_with_a_summarize_model(memory):
    messages, facts = story(80, seed=3)
    memory.create_chat("story", "default")
    calls: list[str] = []
    memory.sync("story", messages, extract=True, model=story_extractor(),
                models=Models(summarize=milestone_summarizer(calls)))
    graph = memory.graph("story")
    archived = graph.nodes(type="event", archived=True)
    summaries = [n for n in graph.nodes(type="event") if n.level >= 1]
    assert calls and archived and summaries
    assert all(len(graph.nodes(type="event", level=level)) <= 9 for level in range(4))  # within the threshold
    maintenance = [c for c in memory.store.commits("story") if c.origin == "maintenance"]
    assert maintenance and all(c.note.startswith("compress event") for c in maintenance)
    usage = memory.usage("story")["usage"]
    assert usage["summarize"]["calls"] == len(calls)  # logged under its task
    folded = [(f, n) for n in summaries if n.level == 1 for f in facts if n.floor_from <= f.floor <= n.floor_to]
    assert folded and all(f.answer in n.fields["summary"] for f, n in folded)  # milestones survive the fold
    first = min(c.anchor_floor for c in maintenance)
    memory.rollback("story", first)  # anchored and undoable like every commit
    assert not [c for c in memory.store.commits("story") if c.origin == "maintenance"]
    assert not memory.graph("story").nodes(type="event", archived=True)


def test_without_a_summarize_model_nothing_is_compressed_and_the_block_is_capped(memory):
    messages, _ = story(60, seed=3)
    memory.create_chat("story", "default")
    memory.sync("story", messages, extract=True, model=story_extractor())
    assert not memory.graph("story").nodes(type="event", archived=True)
    assert len(memory.graph("story").nodes(type="event")) == 30
    assert not [c for c in memory.store.commits("story") if c.origin == "maintenance"]
    injection = memory.recall("story", "What happens next?")
    assert sum(c.node.type == "event" for c in injection.persistent) <= 8


def test_the_query_is_built_from_the_recent_turns():
    turns = [Message("user", "Wren", "Good morning."), Message("assistant", "Mira", "Mira shows the copper key."),
             Message("user", "Wren", "What did she say about it?")]
    rq = build_query("", turns)
    assert rq.text == "What did she say about it?"
    # a message with no subject of its own leans on the turns before it (its weight times VAGUE_SHARE)
    assert [(p.group, round(p.weight, 2)) for p in rq.parts] == [("user", 0.21), ("assistant", 0.2),
                                                                  ("previous_user", 0.1)]
    specific = build_query("", [*turns[:2], Message("user", "Wren", "Does the copper key open the crypt?")])
    assert [(p.group, p.weight) for p in specific.parts] == [("user", 0.7), ("assistant", 0.2), ("previous_user", 0.1)]
    assert rq.parts[1].text == "Mira shows the copper key."
    assert rq.turns.splitlines() == ["Wren (user): Good morning.", "Mira (assistant): Mira shows the copper key.",
                                     "Wren (user): What did she say about it?"]
    assert [p.group for p in build_query("", turns, assistant=0.0).parts] == ["user"]  # weight 0: left out
    alone = build_query("Where is the key?", None)
    assert [p.text for p in alone.parts] == ["Where is the key?"] and alone.single
    assert split_intents("Where did Mira hide the copper key? And what did Rowan promise the ferryman?") == [
        "Where did Mira hide the copper key?", "And what did Rowan promise the ferryman?"]
    assert split_intents("Where is the key?") == []
    fused = fuse_parts(build_query("Where did Mira hide the key? What did Rowan promise the ferryman?").parts,
                       lambda text: {"key": 2.0, "oath": 0.0} if "key" in text and "promise" not in text
                       else {"oath": 2.0, "key": 0.0} if "promise" in text and "key" not in text
                       else {"key": 1.0, "oath": 1.0})
    assert fused == {"key": 2.0, "oath": 2.0}  # each intent keeps its best hit


def _chat_with_a_key(memory):
    memory.create_chat("k", "default")
    memory.commit("k", [
        {"op": "create_node", "id": "c_mira", "type": "character_sheet", "fields": {"name": "Mira"}},
        {"op": "create_node", "id": "e_key", "type": "event", "title": "Summary 1", "floor_from": 1, "floor_to": 1,
         "fields": {"summary": "Mira said the copper key opens the flooded crypt below the abbey."}},
        *[{"op": "create_node", "id": f"e{i}", "type": "event", "title": f"Summary {i + 2}", "floor_from": 3 + 2 * i,
           "floor_to": 3 + 2 * i, "fields": {"summary": f"The caravan crossed field {i} and sang."}}
          for i in range(20)],
        {"op": "link", "source": "c_mira", "target": "e_key", "relation": "involved_in"},
    ], 41)
    return [Message("user", "Wren", "Look at this."), Message("assistant", "Mira", "Mira holds up the copper key."),
            Message("user", "Wren", "What did she say it opens?")]


def test_recall_reads_the_turns_in_every_mode(memory):
    turns = _chat_with_a_key(memory)
    opts = memory.settings.recall.model_copy(update={"max_per_type": 2})
    with_turns = memory.recall("k", messages=turns, max_per_type=2)
    assert "e_key" in {c.node.id for c in with_turns.recalled}
    only_the_last = memory.recall("k", messages=turns, max_per_type=2, turn_weights=(1.0, 0.0, 0.0))
    assert only_the_last.text == memory.recall("k", "What did she say it opens?", max_per_type=2).text
    rag = memory.recall("k", messages=turns, mode="rag", max_per_type=2, max_results=3)
    assert "e_key" in {c.node.id for c in rag.recalled}

    prompts: list[str] = []

    def picker(messages, info: AgentInfo) -> ModelResponse:
        prompt = str(messages[0].parts[-1].content)
        prompts.append(prompt)
        args = {"ids": ["e_key"]} if "ids" in info.output_tools[0].parameters_json_schema["properties"] and \
            "action" not in info.output_tools[0].parameters_json_schema["properties"] else \
            {"action": "finalize", "ids": ["e_key"]}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    recaller = Recaller(memory.store, memory.settings, memory.index, model=FunctionModel(picker))
    llm = recaller.recall("k", "", mode="llm", options=opts, messages=turns)
    assert [c.node.id for c in llm.recalled][:1] == ["e_key"]
    assert "Mira (assistant): Mira holds up the copper key." in prompts[-1]  # real turns, not one line
    reranked = recaller.recall("k", "", options=opts.model_copy(update={"llm_rerank": True}), messages=turns)
    assert "Mira (assistant): Mira holds up the copper key." in prompts[-1] and reranked.recalled


def test_the_service_recall_takes_the_turns(tmp_path):
    import httpx2

    import curator
    from curator.service.server import ServiceConfig, create_app
    from curator.service.server.runner import ThreadedServer

    memory = curator.open(tmp_path / "data")
    turns = _chat_with_a_key(memory)
    wire = [{"role": m.role, "name": m.name, "text": m.text} for m in turns]
    with ThreadedServer(create_app(memory, ServiceConfig())) as server, \
            httpx2.Client(base_url=server.url + "/api/v1", timeout=60,
                          headers={"x-curator-client": "test"}) as client:
        answer = client.post("/chats/k/recall", json={"turns": wire}).json()
        assert answer["query"] == "What did she say it opens?"
        assert "e_key" in {row["id"] for row in answer["blocks"]["recalled"]}
        assert {"left_out", "left_out_count"} <= set(answer)
        empty = client.post("/chats/k/recall", json={"query": " "})
        assert empty.status_code == 400 and "nothing to recall for" in empty.json()["error"]["message"]
    memory.close()
