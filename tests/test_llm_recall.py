"""The `llm` recall mode on the example graph with scripted models: the catalogue, drilling into a summary's
children, id validation, the event minimum, the round cap and the fallback to hybrid recall."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.paths import example_file
from curator.recall.engine import Recaller

QUERY = "Eileen, you told me once you owed me for the salve. Do you remember?"


@pytest.fixture
def road(memory):
    memory.import_("road", example_file("lantern_road.graph.json"))
    memory.load_chat_file("road", example_file("lantern_road.jsonl"))
    return "road"


class Picker:
    """Answers request i with steps[i] (a RecallStep as a dict); keeps the prompts it saw."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.prompts: list[str] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.prompts.append(str(messages[-1].parts[-1].content))
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, step)])


def recall(memory, road, model, **options):
    recaller = Recaller(memory.store, memory.settings, None, model=FunctionModel(model))  # no vectors needed
    opts = memory.settings.recall.model_copy(update=options)
    return recaller.recall(road, QUERY, mode="llm", options=opts)


def ids(injection):
    return [c.node.id for c in injection.recalled]


def test_drill_into_a_summary_then_finalize(memory, road):
    picker = Picker({"action": "drill", "expand": [{"seed_id": "n_evt_l1_1"}]},
                    {"action": "finalize", "ids": ["n_evt_01", "n_eileen", "n_bogus", "n_evt_l1_1"]})
    injection = recall(memory, road, picker, budget_tokens=4000)
    catalogue = picker.prompts[0]
    assert "n_eileen [character_sheet" in catalogue and "n_evt_01 " not in catalogue  # folded leaves hidden
    assert "n_evt_l1_1 [event, level 1, floors 0-11, 3 children] (always injected; drill only)" in catalogue
    assert "n_evt_01 [event, level 0, floors 0-3]" in picker.prompts[1]  # the drill showed its children
    chosen = ids(injection)
    assert chosen[:2] == ["n_evt_01", "n_eileen"]  # the bogus id and the always-injected one are left out
    assert "n_bogus" not in chosen and "n_evt_l1_1" not in chosen
    events = [c for c in injection.recalled if c.node.type == "event"]
    assert len(events) == 2 and events[1].reason.endswith("added: recall keeps at least 2 events")
    assert injection.mode == "llm" and injection.usage.calls == 2
    assert "owe" in injection.text or "salve" in injection.text


def test_the_round_cap_forces_an_end(memory, road):
    picker = Picker({"action": "drill", "ids": ["n_mira", "n_evt_02"], "expand": [{"seed_id": "n_evt_l1_1"}]})
    injection = recall(memory, road, picker)
    assert injection.usage.calls == 4  # three drill rounds, then its last answer is taken as final
    assert "No drill rounds left: finalize now." in picker.prompts[3]
    assert ids(injection)[:2] == ["n_mira", "n_evt_02"]


def test_unknown_seeds_are_reported_back(memory, road):
    picker = Picker({"action": "drill", "expand": [{"seed_id": "n_nowhere"}]},
                    {"action": "finalize", "ids": ["n_mira"]})
    recall(memory, road, picker)
    assert "unknown seed(s) ignored: n_nowhere" in picker.prompts[1]


def test_falls_back_to_hybrid_on_failure_or_no_valid_pick(memory, road):
    plain = Recaller(memory.store, memory.settings, None).recall(road, QUERY, mode="hybrid")

    def broken(messages, info):
        raise RuntimeError("no model today")

    failed = recall(memory, road, broken)
    assert ids(failed) == ids(plain) and failed.recalled  # never everything: the deterministic choice
    assert all("hybrid fallback (RuntimeError: no model today)" in c.reason for c in failed.recalled)
    assert failed.usage.failed_calls == 1
    data = failed.to_dict()  # the JSON says what ran and why
    assert data["mode"] == "hybrid" and data["fallback"] == {"from": "llm", "reason": "RuntimeError: no model today"}
    assert plain.to_dict()["fallback"] is None
    empty = recall(memory, road, Picker({"action": "finalize", "ids": ["n_bogus"]}))
    assert ids(empty) == ids(plain) and "hybrid fallback (no valid id chosen)" in empty.recalled[0].reason
    garbage = recall(memory, road, Picker({"action": "panic"}))  # invalid answers, retried once, then fallback
    assert ids(garbage) == ids(plain) and garbage.usage.calls == 2
