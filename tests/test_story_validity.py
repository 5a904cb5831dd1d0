"""Story-time validity (issue 34): a fact holds from the story time that made it until the one that changed it,
read from the commit log and the story clock; "what did Mira carry on day 5" is answered from the memory as it was
then (library, CLI, HTTP), and recall can be asked at a point in story time."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

import curator
from curator.cli.main import app as cli
from curator.errors import CuratorError
from curator.service.server import create_app
from curator.store.messages import Message

CARRIES = {1: "a coil of rope", 3: "a silver key", 6: "a storm lantern"}  # day -> what Mira picks up that day


def _story(days: int = 8) -> list[Message]:
    messages = []
    for day in range(1, days + 1):
        messages.append(Message("user", "Wren", f"What happens on day {day}?"))
        thing = CARRIES.get(day)
        messages.append(Message("assistant", "Narrator", f"Day {day}. Mira walks on"
                                + (f" and picks up {thing}." if thing else " and rests.")))
    return messages


def _extractor() -> FunctionModel:
    def answer(messages, info):
        prompt = messages[0].parts[-1].content
        day = int(prompt.split("## Newest reply", 1)[1].split("Day ", 1)[1].split(".", 1)[0])
        record = {"event": [{"ref": "e", "summary": f"Mira travels on day {day}.", "story_time": f"day {day}"}],
                  "character_sheet": [{"ref": "m", "name": "Mira",
                                       **({"inventory": CARRIES[day]} if day in CARRIES else {})}],
                  "links": [{"source": "m", "relation": "involved_in", "target": "e"}]}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, record)])

    return FunctionModel(answer)


@pytest.fixture  # per test: on the PostgreSQL run each test gets its own schema (conftest), so a module's store
# would be written on SQLite and read on an empty PostgreSQL schema
def story(tmp_path):
    data = tmp_path / "data"
    with curator.open(data) as memory:
        memory.create_chat("mira", "default", settings={"maintenance": {"auto": False}})
        memory.set_messages("mira", _story())
        results = memory.extract("mira", model=_extractor())
        assert all(r.ok for r in results) and len(results) == 8
    return data


def test_what_mira_carried_on_a_given_day(story):
    with curator.open(story) as memory:
        for day, expected in ((1, "a coil of rope"), (2, "a coil of rope"), (5, "a silver key"),
                              (7, "a storm lantern")):
            found = memory.facts_at("mira", "Mira", f"day {day}")
            assert found["nodes"][0]["fields"]["inventory"] == expected, day
            assert found["at"]["story_time"] == f"day {day}"
        mira = memory.graph("mira").find_by_name("Mira")[0]
        spans = memory.fact_spans("mira", mira.id)
        assert [(s["fields"].get("inventory"), s["from"]["story_time"], s["to"] and s["to"]["story_time"])
                for s in spans if s["fields"].get("inventory")] == [
            ("a coil of rope", "day 1", "day 3"), ("a silver key", "day 3", "day 6"),
            ("a storm lantern", "day 6", None)]
        assert memory.graph("mira").get(mira.id).fields["inventory"] == "a storm lantern"  # the store is untouched
        with pytest.raises(CuratorError, match="no story time 'the night of the fire'"):
            memory.facts_at("mira", "Mira", "the night of the fire")


def test_recall_at_a_point_in_story_time_sees_the_memory_as_it_was(story):
    with curator.open(story) as memory:
        then = memory.recall("mira", "What does Mira carry?", at="day 4")
        assert "a silver key" in then.text and "storm lantern" not in then.text and "day 6" not in then.text
        assert then.as_of["floor"] == 8 and then.to_dict()["as_of"]["story_time"] == "day 4"  # up to day 5's reply
        assert "storm lantern" in memory.recall("mira", "What does Mira carry?").text
        client = TestClient(create_app(memory), base_url="http://127.0.0.1", headers={"x-curator-client": "t"})
        answer = client.post("/api/v1/chats/mira/recall", json={"query": "What does Mira carry?", "at": "day 2"})
        assert answer.status_code == 200 and "a coil of rope" in answer.json()["text"]
        facts = client.get("/api/v1/chats/mira/facts", params={"name": "Mira", "at": "day 5"}).json()
        assert facts["nodes"][0]["fields"]["inventory"] == "a silver key"
        assert client.get("/api/v1/chats/mira/facts", params={"name": "Mira", "at": "nope"}).status_code == 400
    shown = CliRunner().invoke(cli, ["--data", str(story), "facts", "--chat", "mira", "Mira", "--at", "day 5"])
    assert shown.exit_code == 0 and "a silver key" in shown.output and "day 3" in shown.output
