"""Cohere chat through pydantic-ai's Cohere model, on the wire (respx: the Cohere SDK speaks httpx)."""

from __future__ import annotations

import json

import httpx
import respx

from curator.llm.models import build_model
from curator.store.messages import Message
from curator.settings import ModelProfile, Settings


def test_cohere_tool_call_round_trip(memory, monkeypatch):
    monkeypatch.setenv("CO_TEST_KEY", "co-secret")
    profile = ModelProfile(provider="cohere", model="command-r", api_key_env="CO_TEST_KEY")
    memory.create_chat("road", "default")
    memory.set_messages("road", [Message("user", "Rowan", "Here, take the salve."),
                                 Message("assistant", "Eileen", "I owe you for this.")])
    memory.settings = Settings(profiles={"default": profile})
    args = {"event": [{"summary": "Rowan gives Eileen a salve; she owes him."}]}
    reply = {
        "id": "r1",
        "finish_reason": "TOOL_CALL",
        "message": {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "record_memory", "arguments": json.dumps(args)}}
            ],
        },
        "usage": {
            "billed_units": {"input_tokens": 120, "output_tokens": 30},
            "tokens": {"input_tokens": 130, "output_tokens": 30},
        },
    }
    with respx.mock(assert_all_called=True) as router:
        route = router.post("https://api.cohere.com/v2/chat").mock(return_value=httpx.Response(200, json=reply))
        [result] = memory.extract("road", model=build_model(profile))
    assert result.ok, result.reason
    sent = json.loads(route.calls[0].request.content)
    assert sent["model"] == "command-r" and sent["tools"][0]["function"]["name"] == "record_memory"
    assert route.calls[0].request.headers["authorization"] == "Bearer co-secret"
    assert [n.title for n in memory.graph("road").nodes(type="event")] == ["Summary 1"]
    assert result.usage.input_tokens > 0
