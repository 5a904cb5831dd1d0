"""The built-in extractor with scripted models (pydantic-ai FunctionModel): identity policies, cadence,
retries and failure."""

from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import (
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.extract.extractor import due_floors, last_extracted_floor
from curator.store.messages import Message
from curator.settings import ExtractionSettings, Settings
from curator.llm.usage import usage_totals


def chat_messages(replies: int) -> list[Message]:
    messages = []
    for i in range(replies):
        messages.append(Message("user", "Rowan", f"Rowan speaks, turn {i}."))
        messages.append(Message("assistant", "Eileen", f"Eileen answers, turn {i}."))
    return messages


class Script:
    """A scripted model: answers[i] is the tool-call arguments of request i (a callable gets the tool schema)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list = []
        self.tools: list[dict] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        tool = info.output_tools[0]
        self.tools.append(tool.parameters_json_schema)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        args = answer(tool.parameters_json_schema) if callable(answer) else answer
        return ModelResponse(parts=[ToolCallPart(tool.name, args)])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self, model_name="scripted")


@pytest.fixture
def live(memory):
    memory.create_chat("road", "default")
    memory.set_messages("road", chat_messages(12))
    return memory


def extract_next(memory, script, count=1):
    """Extract the next `count` due replies, one call each."""
    due = due_floors(memory.store, "road", memory.settings)[:count]
    return [memory.extract("road", floor=f, model=script.model)[0] for f, _ in due]


def event(summary, **extra):
    return {"event": [{"summary": summary, **extra}]}


def test_one_commit_per_extraction_anchored_at_the_reply(live):
    script = Script(event("Rowan hands Eileen his salve.") | {
        "character_sheet": [{"name": "Eileen", "aliases": "the healer", "goal": "repay Rowan"}],
        "links": [{"source": "Eileen", "relation": "involved_in", "target": "e1"}]})
    script.answers[0]["event"][0]["ref"] = "e1"
    [result] = extract_next(live, script)
    assert result.ok and result.floor == 1 and result.seq == 1
    assert result.commit.anchor_floor == 1 and result.commit.origin == "extract"
    graph = live.graph("road")
    [summary] = graph.nodes(type="event")
    assert summary.title == "Summary 1" and summary.floor_from == summary.floor_to == 1
    [(edge, other)] = graph.neighbours(summary.id)
    assert edge.relation == "involved_in" and other.title == "Eileen" and edge.valid_from == 1
    assert result.usage.calls == 1 and result.usage.input_tokens > 0
    assert last_extracted_floor(live.store, "road") == 1


def test_events_are_numbered_per_chat_and_reuse_numbers_after_rollback(live):
    script = Script(lambda schema: event("something happens"))
    extract_next(live, script, 3)
    assert [n.title for n in live.graph("road").nodes(type="event")] == ["Summary 1", "Summary 2", "Summary 3"]
    live.rollback("road", 5)  # floor 5 is the third reply
    extract_next(live, script, 1)
    assert [n.title for n in live.graph("road").nodes(type="event")] == ["Summary 1", "Summary 2", "Summary 3"]


def test_entities_upsert_by_name_or_alias_and_change_only_given_fields(live):
    script = Script(
        event("a") | {"character_sheet": [{"name": "Silas Marrow", "identity": "salt merchant", "goal": "sell salt"}]},
        event("b") | {"character_sheet": [{"name": "silas  MARROW", "aliases": "the Grey Hand"}]},
        event("c") | {"character_sheet": [{"name": "The Grey Hand", "goal": "seize the bridge"}]},
    )
    extract_next(live, script, 3)
    [silas] = live.graph("road").nodes(type="character_sheet")
    assert silas.title == "Silas Marrow"  # matched by alias, the name is kept
    assert silas.fields == {"name": "Silas Marrow", "identity": "salt merchant", "goal": "seize the bridge",
                            "aliases": "the Grey Hand"}
    assert (silas.floor_from, silas.floor_to) == (1, 5)
    commits = live.store.commits("road")
    second_update = next(op for op in commits[1].ops if op["op"] == "update_node")
    assert second_update["set_fields"] == {"aliases": "the Grey Hand"}  # nothing else was touched


def test_same_entity_twice_in_one_answer_is_one_node(live):
    script = Script(event("a") | {"character_sheet": [{"name": "Mira", "goal": "deliver"},
                                                      {"name": "mira", "aliases": "Courier Mira"}]})
    extract_next(live, script)
    [mira] = live.graph("road").nodes(type="character_sheet")
    assert mira.fields == {"name": "Mira", "goal": "deliver", "aliases": "Courier Mira"}


def test_latest_only_replaces_the_state(live):
    places = {3: {"name": "Brannoch's Bridge", "controller": "Brannoch", "danger": "toll guards"},
              6: {"name": "brannoch's bridge", "danger": "burning"}}

    def answer(schema):
        props = schema["properties"]
        if "location_state" not in props:
            return event("travel")
        seq = len(script.requests)
        return event("bridge") | {"location_state": [places[seq]]}

    script = Script(answer)
    extract_next(live, script, 6)
    [bridge] = live.graph("road").nodes(type="location_state")
    assert bridge.fields == {"name": "Brannoch's Bridge", "danger": "burning"}  # controller cleared


def test_cadence_exposes_only_active_types(live):
    script = Script(lambda schema: event("x"))
    extract_next(live, script, 6)
    exposed = [sorted(set(s["properties"]) - {"links"}) for s in script.tools]
    assert exposed == [["character_sheet", "event"]] * 2 + [["character_sheet", "event", "location_state"]] + \
        [["character_sheet", "event"]] * 2 + [["character_sheet", "event", "location_state"]]
    prompts = [_user_prompt(r) for r in script.requests]
    assert "### location_state" not in prompts[0] and "### location_state" in prompts[2]
    assert "latest state" in prompts[2]  # the type's rules reach the model only when it is active
    systems = {_system_prompt(r) for r in script.requests}
    assert len(systems) == 1  # byte-stable system prompt across steps (prompt caching)
    assert all("Eileen answers" not in s for s in systems)


def test_chat_extract_every_batches_replies(live):
    live.store.conn.execute("UPDATE chats SET settings_json=? WHERE id='road'",
                            (json.dumps({"extraction": {"extract_every": 2, "context_turns": 1}}),))
    assert [f for f, _ in due_floors(live.store, "road", live.settings)] == [3, 7, 11, 15, 19, 23]
    script = Script(lambda schema: event("x"))
    [result] = extract_next(live, script)
    assert result.floor == 3 and result.seq == 2
    prompt = _user_prompt(script.requests[0])
    focus = prompt.split("## Newest reply")[1]
    assert "turn 0" in focus and "turn 1" in focus  # both replies since the last step are in focus
    [node] = live.graph("road").nodes(type="event")
    assert (node.floor_from, node.floor_to) == (1, 3)


def test_context_turns(live):
    live.store.conn.execute("UPDATE chats SET settings_json=? WHERE id='road'",
                            (json.dumps({"extraction": {"context_turns": 1}}),))
    script = Script(lambda schema: event("x"))
    extract_next(live, script, 4)
    prompt = _user_prompt(script.requests[3])  # reply at floor 7
    context = prompt.split("## Recent turns (context)")[1].split("## Newest reply")[0]
    assert "[floor 4]" in context and "[floor 6]" in context and "[floor 3]" not in context


def test_invalid_answers_go_back_to_the_model(live):
    script = Script(
        event("x") | {"character_sheet": [{"name": "Eileen", "mood": "tired"}]},  # unknown field
        event("x") | {"links": [{"source": "Nobody", "relation": "involved_in", "target": "Eileen"}]},
        event("x") | {"character_sheet": [{"name": "Eileen"}],
                      "links": [{"source": "Eileen", "relation": "loves", "target": "Eileen"}]},
        event("x") | {"character_sheet": [{"name": "Eileen", "traits": "quiet"}]},
    )
    live.store.conn.execute("UPDATE chats SET settings_json=? WHERE id='road'",
                            (json.dumps({"extraction": {"output_retries": 3}}),))
    [result] = extract_next(live, script)
    assert result.ok and result.usage.calls == 4
    retries = [_retry_text(r) for r in script.requests[1:]]
    assert "mood" in retries[0]
    assert "'Nobody' names no known node" in retries[1]
    assert "loves" in retries[2] or "relation" in retries[2]
    [eileen] = live.graph("road").nodes(type="character_sheet")
    assert eileen.fields == {"name": "Eileen", "traits": "quiet"}


def test_a_step_that_stays_invalid_commits_nothing(live):
    script = Script(event("x") | {"character_sheet": [{"name": "Eileen", "mood": "tired"}]})
    before = live.graph("road").snapshot()
    [result] = live.extract("road", model=script.model)
    assert not result.ok
    assert "Exceeded maximum output retries" in result.reason and "character_sheet.0.mood" in result.reason
    assert result.commit is None and live.graph("road").snapshot() == before
    assert last_extracted_floor(live.store, "road") == -1  # the pointer did not move
    assert due_floors(live.store, "road", live.settings)[0] == (1, 1)
    data = live.usage("road")
    assert data["failed_steps"][0]["floor"] == 1 and data["failed_steps"][0]["reason"]
    assert data["usage"]["total"]["calls"] == 3  # the first try and two retries, all counted


def test_model_errors_are_recorded_and_commit_nothing(live):
    def broken(messages, info):
        raise RuntimeError("upstream exploded")

    [result] = live.extract("road", model=FunctionModel(broken))
    assert not result.ok and "upstream exploded" in result.reason
    assert usage_totals(live.store, "road")["extract"]["failed_calls"] == 1
    assert live.store.commits("road") == []


def test_language_setting_reaches_the_system_prompt(live):
    script = Script(lambda schema: event("x"))
    extract_next(live, script)
    assert "use the language the chat is written in" in _system_prompt(script.requests[0])
    live.settings = Settings(extraction=ExtractionSettings(language="Japanese"))
    extract_next(live, script)
    assert "write in Japanese" in _system_prompt(script.requests[1])


def test_extracting_a_floor_twice_is_refused(live):
    script = Script(lambda schema: event("x"))
    extract_next(live, script)
    from curator import CuratorError
    with pytest.raises(CuratorError, match="already extracted"):
        live.extract("road", floor=1, model=script.model)
    with pytest.raises(CuratorError, match="not an assistant reply"):
        live.extract("road", floor=2, model=script.model)


def _parts(request_messages, kind):
    return [p for m in request_messages for p in getattr(m, "parts", []) if isinstance(p, kind)]


def _user_prompt(request_messages) -> str:
    return _parts(request_messages, UserPromptPart)[0].content


def _system_prompt(request_messages) -> str:
    return _parts(request_messages, SystemPromptPart)[0].content


def _retry_text(request_messages) -> str:
    """What the model was told about its invalid answer (a retry prompt or a 'retried' tool return)."""
    parts = _parts(request_messages, (RetryPromptPart, ToolReturnPart))
    assert parts, "no retry message was sent back to the model"
    part = parts[-1]
    if isinstance(part, ToolReturnPart):
        assert part.outcome == "retried"
    return json.dumps(part.content, default=str) if not isinstance(part.content, str) else part.content
