"""The orchestrator surface (issue 34): scouts before a reply, a simulation that commits nothing, and an outer
pydantic-ai agent driving the memory through `orchestrator_toolset` (the loop docs/orchestrator.md describes),
every model a FunctionModel."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_curator_agent import Session, chat_messages

from curator.api.orchestrator import orchestrator_toolset
from curator.llm.access import Models
from curator.service.server import create_app
from curator.testing.scripted import scripted_model

DRAFT = "Eileen breaks the seal: the letter says Brannoch owes Rowan forty marks."


def test_scouts_report_what_the_reply_must_know_without_a_model_call(memory, chat):
    memory.set_messages(chat, chat_messages(3))
    memory.commit(chat, [{"op": "create_node", "id": "n_secret", "type": "event", "title": "Summary 9",
                          "fields": {"summary": "Rowan hid the healer's letter in the mill."}, "floor_from": 3},
                         {"op": "link", "source": "n_rowan", "target": "n_secret", "relation": "knows"},
                         {"op": "link", "source": "n_secret", "target": "n_ev1", "relation": "contradicts"}], 3)
    report = memory.scout(chat, "Eileen, where is the letter Rowan hid?", speaker="Eileen")
    named = {f["title"] for f in report.findings["named"]}
    assert {"Eileen", "Rowan"} <= named
    assert report.findings["continuity"][-1]["id"] == "n_secret"
    assert any(f.get("type") == "contradiction" for f in report.findings["threads"])
    assert [f["id"] for f in report.findings["epistemic"] if f["view"] == "unknown"] == ["n_secret"]
    assert "Eileen does not know this" in report.text and "What recall will show" in report.text
    assert memory.usage(chat)["usage"].get("total", {}).get("calls", 0) == 0


def test_a_simulation_shows_the_changes_and_commits_nothing(memory, chat):
    memory.set_messages(chat, chat_messages(3))
    before = (len(memory.store.commits(chat)), memory.graph(chat).snapshot())
    result = memory.simulate(chat, draft_reply=DRAFT, models=Models(extract=scripted_model()))
    extractor = result["writers"]["extractor"]
    assert result["committed"] is False and result["floor"] == 6 and extractor["ok"]
    assert [c["action"] for c in extractor["changes"]][:1] == ["create"] and extractor["changes"][0]["type"] == "event"
    assert (len(memory.store.commits(chat)), memory.graph(chat).snapshot()) == before  # nothing written
    assert memory.usage(chat)["usage"]["extract"]["calls"] == 1  # its cost, logged
    curator = Session([("create_event", {"summary": "The letter names Brannoch's debt."})], "done")
    result = memory.simulate(chat, draft_reply=DRAFT, writer="curator", models=Models(curate=curator.model))
    assert result["writers"]["curator"]["changes"][0]["fields"] == {"summary": "The letter names Brannoch's debt."}
    assert len(memory.store.commits(chat)) == before[0]
    client = TestClient(create_app(memory), base_url="http://127.0.0.1", headers={"x-curator-client": "t"})
    scouted = client.post(f"/api/v1/chats/{chat}/scouts", json={"message": "Where is Eileen?"}).json()
    assert "Eileen" in {f["title"] for f in scouted["findings"]["named"]}


def _director(steps: list) -> FunctionModel:
    """The outer agent: scouts, simulates its draft, commits it through the curator, then answers."""
    seen: dict = {}

    def answer(messages, info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                seen[part.tool_name] = part.content
        assert {t.name for t in info.function_tools} >= {"memory_scout", "memory_simulate", "memory_curate"}
        step = steps.pop(0)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        name, args = step
        if callable(args):
            args = args(seen)
        return ModelResponse(parts=[ToolCallPart(name, args)])

    return FunctionModel(answer, model_name="director")


def test_an_outer_pydantic_ai_agent_drives_the_memory(memory, chat):
    memory.set_messages(chat, chat_messages(3))
    curator = Session([("create_event", {"summary": "The letter names Brannoch's debt to Rowan."})], "done")
    steps = [("memory_scout", {"message": "Eileen, read the letter!", "speaker": "Eileen"}),
             ("memory_simulate", {"draft_reply": DRAFT}),
             ("memory_curate", lambda seen: {"draft_reply": DRAFT, "scouted": seen["memory_scout"]["summary"]}),
             DRAFT]
    agent = Agent(_director(steps), toolsets=[orchestrator_toolset(
        memory, chat, models=Models(extract=scripted_model(), curate=curator.model))])
    result = agent.run_sync("Eileen, read the letter!")
    assert result.output == DRAFT and steps == []
    commits = [c for c in memory.store.commits(chat) if c.origin == "curate"]
    assert len(commits) == 1 and commits[0].anchor_floor == 6  # one commit, at the floor the reply takes
    assert "Named in the message" in curator.prompts[0]  # the scouts' findings fed the curator in director mode
    returned = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert json.loads(json.dumps(returned[1]))["extractor"]["ok"]  # the simulation, as the agent saw it
    read_only = orchestrator_toolset(memory, chat, allow_writes=False)
    assert "memory_curate" not in read_only.tools
