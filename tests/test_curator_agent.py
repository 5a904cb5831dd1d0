"""The memory_curator agent with scripted models (pydantic-ai FunctionModel): one commit per run, cadence
exposure, the request cap, atomicity, dry runs, rollback, director mode, the extraction channels, and one run
through the OpenAI-compatible client on the wire (the CLI against a loopback endpoint)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.llm.access import Models
from curator.errors import CuratorError
from curator.store.messages import Message
from curator.testing import FakeOpenAI, completion


class Session:
    """A scripted curator: steps[i] answers request i with tool calls [(name, args)], or text; a callable step
    gets the previous tool results (name -> result) and returns one of those."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.tools: list[set[str]] = []
        self.prompts: list[str] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.tools.append({t.name for t in info.function_tools})
        self.prompts.append(str(messages[-1].parts[-1].content) if messages else "")
        results = {p.tool_name: p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)}
        step = self.steps.pop(0) if self.steps else "done"
        if callable(step):
            step = step(results)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(name, args) for name, args in step])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self, model_name="scripted")


def chat_messages(replies: int) -> list[Message]:
    messages = []
    for i in range(replies):
        messages.append(Message("user", "Rowan", f"Rowan speaks, turn {i}."))
        messages.append(Message("assistant", "Eileen", f"Eileen answers, turn {i}: Mira brings a letter."))
    return messages


@pytest.fixture
def live(memory, chat):
    memory.set_messages(chat, chat_messages(6))  # assistant replies at floors 1, 3, ..., 11
    return memory


def test_a_run_is_one_commit_anchored_at_its_floor_with_a_trace(live, chat):
    session = Session(
        [("memory_find_by_name", {"name": "Mira"})],
        [("create_character_sheet", {"name": "Mira", "identity": "courier"}),
         ("create_event", {"summary": "Mira brings Eileen a sealed letter."})],
        lambda r: [("memory_link_upsert", {"links": [
            {"source": r["create_character_sheet"]["id"], "target": r["create_event"]["id"], "relation": "involved_in"},
            {"source": "n_eileen", "target": r["create_event"]["id"], "relation": "involved_in"}]})],
        "Added Mira and the letter.")
    result = live.curate(chat, floor=5, model=session.model)
    assert result.ok, result.reason
    assert result.commit.origin == "curate" and result.commit.anchor_floor == 5 and len(result.commit.ops) == 4
    assert result.seq == 3 and set(result.active_types) == {"character_sheet", "event", "location_state"}
    assert [c.name for c in result.tool_calls] == ["memory_find_by_name", "create_character_sheet", "create_event",
                                                   "memory_link_upsert"]
    assert all(c.ok for c in result.tool_calls) and result.reply == "Added Mira and the letter."
    assert result.usage.calls == 4 and result.usage.input_tokens > 0
    data = result.to_dict()
    assert data["model_requests"] == 4 and data["tool_calls"][1]["result"]["title"] == "Mira"
    assert [r["task"] for r in data["requests"]] == ["curate"] * 4 and data["requests"][0]["input_tokens"] > 0
    mira = live.graph(chat).find_by_name("mira")[0]
    assert [n.title for _, n in live.graph(chat).neighbours(mira.id)] == ["Summary 2"]
    assert live.usage(chat)["usage"]["curate"]["calls"] == 4  # every request logged with its task
    assert "[floor 5] Eileen (assistant): Eileen answers, turn 2" in session.prompts[0]


def test_write_tools_follow_the_cadence(live, chat):
    first = Session("nothing to do")
    live.curate(chat, floor=1, model=first.model)  # step 1: location_state (every 3rd) is inactive
    assert "create_event" in first.tools[0] and not any("location_state" in t for t in first.tools[0])
    assert "memory_compact_nodes" in first.tools[0] and "memory_find_by_name" in first.tools[0]
    assert "memory_vector_search" not in first.tools[0]  # the chat has no vectors yet
    third = Session("nothing to do")
    live.curate(chat, floor=5, model=third.model)  # step 3: it is active
    assert {"create_location_state", "edit_location_state", "delete_location_state"} <= third.tools[0]
    # a model that calls an inactive type's tool is told so, and cannot write it
    sneaky = Session([("create_location_state", {"name": "Ashwood"})], "ok")
    result = live.curate(chat, floor=3, model=sneaky.model)
    assert "Unknown tool name: 'create_location_state'" in sneaky.prompts[1]
    assert result.ok and not live.graph(chat).find_by_name("Ashwood")


def test_vector_search_is_offered_once_the_chat_has_vectors(live, chat):
    live.rebuild_vectors(chat)
    session = Session([("memory_vector_search", {"query": "healer"})], "done")
    result = live.curate(chat, floor=1, model=session.model)
    assert "memory_vector_search" in session.tools[0]
    assert result.tool_calls[0].ok and result.tool_calls[0].result["nodes"][0]["id"] == "n_eileen"


def test_the_cap_stops_a_run_and_commits_nothing(live, chat):
    before = live.graph(chat).snapshot()
    looping = Session(*([[("create_event", {"summary": "again"})]] * 30))
    result = live.curate(chat, floor=3, model=looping.model, max_requests=4)
    assert not result.ok and "cap of 4 model requests" in result.reason
    assert result.usage.calls == 4 and len(result.staged_ops) == 4  # staged, then thrown away
    assert live.graph(chat).snapshot() == before and live.store.commits(chat)[-1].origin == "test"


def test_an_error_mid_run_leaves_the_graph_untouched(live, chat):
    def broken(results):
        raise RuntimeError("model went away")

    before = live.graph(chat).snapshot()
    session = Session([("create_event", {"summary": "half done"}),
                       ("edit_character_sheet", {"node_id": "n_eileen", "set_fields": {"goal": "x"}})], broken)
    result = live.curate(chat, floor=3, model=session.model)
    assert not result.ok and "model went away" in result.reason and "nothing was committed" in result.reason
    assert [c.name for c in result.tool_calls] == ["create_event", "edit_character_sheet"]
    assert live.graph(chat).snapshot() == before and len(live.store.commits(chat)) == 1


def test_failing_tool_calls_are_answered_and_the_run_goes_on(live, chat):
    session = Session([("create_character_sheet", {"name": "Eileen"})],
                      lambda r: [("edit_character_sheet", {"node_id": "n_eileen", "set_fields": {"goal": "repay"}})]
                      if "exists already" in r["create_character_sheet"]["error"] else "gave up")
    result = live.curate(chat, floor=3, model=session.model)
    assert result.ok and [c.ok for c in result.tool_calls] == [False, True]
    assert "edit_character_sheet" in result.tool_calls[0].result["hint"]
    assert live.graph(chat).get("n_eileen").fields["goal"] == "repay"
    assert len(live.graph(chat).find_by_name("Eileen")) == 1  # no duplicate


def test_dry_run_returns_the_ops_and_commits_nothing(live, chat):
    before = live.graph(chat).snapshot()
    session = Session([("create_event", {"summary": "Mira arrives."})], "done")
    result = live.curate(chat, floor=3, model=session.model, dry_run=True)
    assert result.ok and result.dry_run and result.commit is None
    assert [op["op"] for op in result.staged_ops] == ["create_node"]
    assert result.staged_ops[0]["fields"] == {"summary": "Mira arrives."}
    assert live.graph(chat).snapshot() == before


def test_rollback_reverts_a_curator_commit(live, chat):
    before = live.graph(chat).snapshot()
    session = Session([("create_event", {"summary": "Mira arrives."}),
                       ("edit_character_sheet", {"node_id": "n_eileen", "set_fields": {"goal": "read the letter"}})],
                      "done")
    result = live.curate(chat, floor=7, model=session.model)
    assert result.ok and live.graph(chat).get("n_eileen").fields["goal"] == "read the letter"
    rolled = live.rollback(chat, 7)
    assert [c.id for c in rolled.reverted] == [result.commit.id]
    assert live.graph(chat).snapshot() == before


def test_compaction_depth_by_depth_in_one_run(memory):
    memory.create_chat("long", "default")
    memory.set_messages("long", chat_messages(40))
    memory.commit("long", [{"op": "create_node", "id": f"e{i:02}", "type": "event", "title": f"Summary {i + 1}",
                            "floor_from": 2 * i + 1, "fields": {"summary": f"Day {i}: the road goes on."}}
                           for i in range(33)], anchor_floor=65, origin="test")

    def fold_all(depth):
        def step(results):
            found = results["memory_compaction_candidates"]
            assert found["depth"] == depth
            return [("memory_compact_nodes", {"type": "event", "groups": [
                {"decision": "FOLD", "node_ids": g["node_ids"], "summary": f"Days {g['node_ids'][0]}+"}
                for g in found["groups"]]})]
        return step

    session = Session([("memory_compaction_candidates", {"type": "event", "depth": 0})], fold_all(0),
                      [("memory_compaction_candidates", {"type": "event", "depth": 1})], fold_all(1),
                      [("memory_compaction_candidates", {"type": "event", "depth": 2})], "compacted")
    result = memory.curate("long", floor=79, model=session.model)
    assert result.ok, result.reason
    graph = memory.graph("long")
    levels = sorted((n.level, n.archived) for n in graph.nodes(type="event", archived=None))
    # 33 leaves - 6 recent = 27 -> nine level-1 summaries -> three level-2 summaries
    assert levels.count((0, True)) == 27 and levels.count((0, False)) == 6
    assert levels.count((1, True)) == 9 and levels.count((2, False)) == 3
    assert result.tool_calls[-1].result["groups"] == [] and len(memory.store.commits("long")) == 2


def test_director_mode_curates_a_drafted_reply(live, chat):
    session = Session([("create_event", {"summary": "Eileen opens the letter."})], "done")
    result = live.curate(chat, draft_reply="Eileen breaks the seal and reads.", model=session.model)
    assert result.ok and result.floor == 12 and result.seq == 7  # the draft takes the next floor
    assert "[floor 12] draft (assistant): Eileen breaks the seal and reads." in session.prompts[0]
    assert result.commit.anchor_floor == 12
    with pytest.raises(CuratorError, match="not an assistant reply"):
        live.curate(chat, floor=2, model=session.model)


def test_channels_curator_and_both(memory, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps({"role": m.role, "name": m.name, "content": m.text})
                              for m in chat_messages(3)), encoding="utf-8")
    import asyncio

    from curator.extract.ingest import ingest

    def extractor(messages, info):
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"event": [{"summary": "extracted"}]})])

    def curator(messages, info):
        prompt = str(messages[0].parts[-1].content)
        if "created event" in prompt:  # channel both: it sees what the extractor wrote at this floor
            return ModelResponse(parts=[TextPart("the extractor covered it")])
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("create_event", {"summary": "curated"})])
        return ModelResponse(parts=[TextPart("done")])

    for chat_id, channel in (("solo", "curator"), ("pair", "both")):
        memory.create_chat(chat_id, "default", settings={"extraction": {"channel": channel}})
        report = asyncio.run(ingest(memory.store, chat_id, path, memory.settings, model=FunctionModel(extractor),
                                    models=Models(curate=FunctionModel(curator))))
        assert report.failed is None and len(report.curated) == 3
        assert report.to_dict()["steps_done"] == 3 and report.to_dict()["curated"] == 3
        origins = [c.origin for c in memory.store.commits(chat_id)]
        summaries = sorted(n.fields["summary"] for n in memory.graph(chat_id).nodes(type="event"))
        if channel == "curator":
            assert origins == ["curate"] * 3 and summaries == ["curated"] * 3
        else:
            assert origins == ["extract", "curate"] * 3 and summaries == ["extracted"] * 3
        again = asyncio.run(ingest(memory.store, chat_id, path, memory.settings, model=FunctionModel(extractor),
                                   models=Models(curate=FunctionModel(curator))))
        assert again.steps_due == 0  # the channel's own pointer: nothing left to do


def test_cli_curate_on_the_wire(tmp_path, memory):
    """The real OpenAI client against a loopback endpoint: tool definitions go out, tool calls come back."""
    memory.create_chat("road", "default")
    memory.set_messages("road", chat_messages(2))
    memory.close()
    seen: list[dict] = []

    def responder(body):
        seen.append(body)
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            args = {"summary": "Mira brings a letter."}
            return _tool_call(body, "create_event", args)
        return completion(body, content="Recorded the letter.")

    with FakeOpenAI(responder) as fake:
        env = {**os.environ, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake.base_url, "CURATOR_API_KEY": "k"}
        exe = Path(sys.executable).with_name("curator")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "curator"]
        proc = subprocess.run(cmd + ["--data", str(tmp_path / "data"), "curate", "--chat", "road", "--json"],
                              capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["floor"] == 3 and data["model_requests"] == 2 and data["commit"] == 1
    assert data["tool_calls"][0]["tool"] == "create_event" and data["tool_calls"][0]["result"]["title"] == "Summary 1"
    names = {t["function"]["name"] for t in seen[0]["tools"]}
    assert {"create_event", "memory_compact_nodes", "memory_find_by_name"} <= names
    assert "create_location_state" not in names
    create = next(t for t in seen[0]["tools"] if t["function"]["name"] == "create_event")["function"]
    assert create["parameters"]["required"] == ["summary"]
    assert data["usage"]["input_tokens"] == sum(completion(b)["usage"]["prompt_tokens"] for b in seen)


def _tool_call(body: dict, name: str, args: dict) -> dict:
    answer = completion(body, content=None)
    answer["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]
    answer["choices"][0]["finish_reason"] = "tool_calls"
    return answer
