"""The shortcut for the openai SDK's parameter walk (curator/llm/fast_params.py) gives what the SDK's own walk
gives, on real request bodies and on the cases it must hand back to the SDK."""

from __future__ import annotations

import asyncio

import pydantic
from openai import NOT_GIVEN, Omit
from openai.resources.chat.completions import completions as module
from openai.types.chat import completion_create_params as params

from curator.llm.fast_params import fast_transform, install
from curator.settings import ModelProfile, Settings
from curator.store.messages import Message
from curator.testing import FakeOpenAI

NON_STREAMING = params.CompletionCreateParamsNonStreaming


def original(data, expected=NON_STREAMING):
    walk = getattr(module.async_maybe_transform, "__wrapped__", module.async_maybe_transform)
    return asyncio.run(walk(data, expected))


def test_installed_for_this_sdk():
    assert install() is True and module.async_maybe_transform.__wrapped__ is not None


def test_same_body_as_the_sdk_on_real_requests(memory):
    with FakeOpenAI() as fake:
        memory._settings = Settings(profiles={"default": ModelProfile(model="fake", base_url=fake.base_url,
                                                                      api_key_env="FAST_PARAMS_UNUSED")})
        memory.create_chat("road", "default")
        memory.set_messages("road", [Message("user", "Rowan", "Take my salve."),
                                     Message("assistant", "Eileen", "I owe you, Rowan — 谢谢.")])
        assert memory.extract("road")[0].ok
        bodies = fake.requests
    assert bodies and all("tools" in b for b in bodies)
    for body in bodies:
        data = {**body, "n": Omit(), "user": NOT_GIVEN}  # what pydantic-ai passes for unset parameters
        fast = fast_transform(data)
        assert fast == original(data) == body
        assert fast["messages"] is not body["messages"]  # a copy, as the SDK's walk makes


def test_anything_not_plain_json_goes_to_the_sdk():
    class Part(pydantic.BaseModel):
        type: str = "text"
        text: str = "hi"

    cases = [
        {"model": "m", "messages": ({"role": "user", "content": "tuple of messages"},)},
        {"model": "m", "messages": [{"role": "user", "content": "x", "name": NOT_GIVEN}]},  # omitted, deeper down
        {"model": "m", "messages": [{"role": "user", "content": [Part()]}]},
        {"model": "m", "messages": [], "metadata": {1: "non-str key"}},
    ]
    for data in cases:
        assert fast_transform(data) is None
        # and the installed wrapper, deferring, still gives the SDK's answer
        assert asyncio.run(module.async_maybe_transform(data, NON_STREAMING)) == original(data)


def test_other_parameter_types_are_left_to_the_sdk():
    install()
    data = {"model": "m", "n": Omit(), "extra": ("a", "tuple")}
    sdk = asyncio.run(module.async_maybe_transform.__wrapped__(data, dict))
    assert asyncio.run(module.async_maybe_transform(data, dict)) == sdk
    assert fast_transform([1, 2]) is None
