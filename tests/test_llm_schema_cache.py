"""The OpenAI model keeps the tool schemas it transformed (curator/llm/schema_cache.py): steps with the same
tools transform them once and send the same tools an uncached model sends; other tools are transformed again."""

from __future__ import annotations

from dataclasses import replace

from pydantic_ai.models.openai import OpenAIChatModel

from curator.llm.clients import ModelCache
from curator.llm import clients
from curator.llm.schema_cache import SchemaCachingChatModel
from curator.settings import ModelProfile, Settings
from curator.store.messages import Message
from curator.testing import FakeOpenAI


def _run(memory, fake, replies: int):
    memory.settings = Settings(maintenance={"auto": False},  # (on by default) these count extraction requests
                               profiles={"default": ModelProfile(model="fake", base_url=fake.base_url,
                                                                 api_key_env="SCHEMA_CACHE_UNUSED")})
    lines = []
    for i in range(replies):
        lines += [Message("user", "Rowan", f"Turn {i}."), Message("assistant", "Eileen", f"Reply {i}.")]
    memory.create_chat("road", "default")
    memory.set_messages("road", lines)
    return memory.extract("road")


def test_same_tools_are_transformed_once_and_sent_as_before(memory, monkeypatch):
    cache = ModelCache()
    monkeypatch.setattr(clients, "shared_models", cache)
    captured = []
    real = SchemaCachingChatModel.customize_request_parameters

    def spy(self, params):
        result = real(self, params)
        captured.append((self, params, result))
        return result

    monkeypatch.setattr(SchemaCachingChatModel, "customize_request_parameters", spy)
    with FakeOpenAI() as fake:
        results = _run(memory, fake, 6)
        tools = [r["tools"] for r in fake.requests]
    assert all(r.ok for r in results) and len(captured) == 6
    model = captured[0][0]
    # the default schema's cadence: `location_state` every 3rd step, so two tool sets in six steps
    assert len({str(t) for t in tools}) == 2 and model.schema_transforms == 2
    for _, params, result in captured:  # what pydantic-ai's own transform gives, field for field
        assert result == OpenAIChatModel.customize_request_parameters(model, params)
    assert captured[0][2].output_tools[0].parameters_json_schema.get("additionalProperties") is False


def test_a_changed_definition_is_transformed_again():
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.tools import ToolDefinition

    model = SchemaCachingChatModel("m", provider=OpenAIProvider(api_key="unused"))
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    params = ModelRequestParameters(output_tools=[ToolDefinition(name="answer", parameters_json_schema=schema)])
    first = model.customize_request_parameters(params)
    assert model.customize_request_parameters(params) == first and model.schema_transforms == 1
    changed = replace(params, output_tools=[ToolDefinition(name="answer", description="new",
                                                           parameters_json_schema=schema)])
    assert model.customize_request_parameters(changed).output_tools[0].description == "new"
    wider = {**schema, "properties": {**schema["properties"], "b": {"type": "integer"}}}
    again = model.customize_request_parameters(
        replace(params, output_tools=[ToolDefinition(name="answer", parameters_json_schema=wider)]))
    assert "b" in again.output_tools[0].parameters_json_schema["properties"] and model.schema_transforms == 3
    # a hit hands out fresh lists: changing them does not change what is kept
    model.customize_request_parameters(params).output_tools.clear()
    assert model.customize_request_parameters(params) == first
