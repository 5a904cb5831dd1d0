"""The plot planner (issue 34): off by default; once on, one `plan` call every N replies from the open threads,
goals and recent events; its beats are injected after the memory (or only shown), its cost is in `curator usage`,
and a rollback of the reply it followed takes it away."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from curator.llm.access import Models
from curator.service.server import ServiceConfig, create_app
from curator.testing.scripted import scripted_chat, scripted_model


def _planner(prompts: list[str]) -> FunctionModel:
    def answer(messages, info):
        prompt = messages[0].parts[-1].content
        prompts.append(prompt)
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"beats": [
            f"Plan {len(prompts)}: Rowan finds who left the lantern.", "Eileen asks the miller about the bridge."]})])

    return FunctionModel(answer, model_name="scripted-planner")


def test_the_planner_proposes_beats_every_n_replies_and_they_reach_the_injection(memory):
    memory.create_chat("c", "bme", settings={"planner": {"enabled": True, "every": 2}})
    memory.commit("c", [{"op": "create_node", "type": "thread", "fields": {"name": "Who left the lantern?",
                                                                           "status": "open"}}], 0)
    memory.set_messages("c", scripted_chat(12))  # six replies: plans after the 2nd, 4th and 6th
    asked: list[str] = []
    memory.extract("c", model=scripted_model(), models=Models(plan=_planner(asked)))
    assert len(asked) == 3 and "Who left the lantern?" in asked[0] and "What happened lately" in asked[0]
    assert memory.usage("c")["usage"]["plan"]["calls"] == 3  # its cost, visible
    current = memory.current_plan("c")
    assert current["floor"] == 11 and current["beats"][0].startswith("Plan 3:")
    injection = memory.recall("c", "What now?", user_floor=12)
    assert injection.plan == current["beats"] and injection.text.index("Story direction") > 0
    assert "- Plan 3: Rowan finds who left the lantern." in injection.text
    assert injection.tokens <= injection.budget_tokens
    memory.update_chat_settings("c", {"planner": {"inject": False}})  # shown only
    assert "Story direction" not in memory.recall("c", "What now?").text
    memory.rollback("c", 11)  # the reply it followed is gone: so is that plan
    assert memory.current_plan("c")["beats"][0].startswith("Plan 2:")


def test_the_planner_is_off_by_default(memory):
    memory.create_chat("d", "default")
    memory.set_messages("d", scripted_chat(12))
    asked: list[str] = []
    memory.extract("d", model=scripted_model(), models=Models(plan=_planner(asked)))
    assert asked == [] and memory.current_plan("d") is None
    report = memory.plan("d", model=_planner(asked))  # run by hand (panel: Operations, CLI: curator plan --run)
    assert report.ok and len(asked) == 1 and memory.current_plan("d")["floor"] == 11
    app = create_app(memory, ServiceConfig(models=Models(plan=_planner(asked))))
    with TestClient(app, base_url="http://127.0.0.1", headers={"x-curator-client": "t"}) as client:  # the panel's way
        job = client.post("/api/v1/chats/d/maintenance/plan", json={}).json()
        for _ in range(500):
            job = client.get(f"/api/v1/jobs/{job['id']}").json()
            if job["state"] not in ("queued", "running"):
                break
            threading.Event().wait(0.02)
        assert job["state"] == "done" and job["result"]["changes"][0]["action"] == "plan"
        shown = client.get("/api/v1/chats/d/plan").json()
        assert shown["plan"]["beats"][0].startswith("Plan 2:") and shown["settings"]["enabled"] is False
