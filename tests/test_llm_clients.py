"""Models shared per profile and event loop (curator/llm/clients.py), against a fake OpenAI-compatible endpoint on
loopback: the steps of one run build one model and one SSL context; a changed profile, another event loop or
another thread gets its own; a model is never handed to a loop it was not built for."""

from __future__ import annotations

import asyncio
import threading

import httpcore2
import openai
import pytest

from curator.extract.chatfile import read_chat
from curator.llm import clients, tls
from curator.llm.clients import ModelCache
from curator.paths import example_file
from curator.settings import ModelProfile, Settings
from curator.store.messages import Message
from curator.testing import FakeOpenAI, completion

CHAT = example_file("lantern_road.jsonl")


@pytest.fixture
def counted(monkeypatch):
    """A fresh model cache and SSL context store, and a count of the SSL contexts that load the CA bundle."""
    cache = ModelCache()
    monkeypatch.setattr(clients, "shared_models", cache)
    monkeypatch.setattr(tls, "_ssl_contexts", {})
    made = []
    real = httpcore2.default_ssl_context

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(httpcore2, "default_ssl_context", counting)

    class CountedClient(openai.AsyncOpenAI):  # every openai client built, by the cache or not
        def __init__(self, *args, **kwargs):
            cache.openai_clients = getattr(cache, "openai_clients", 0) + 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(openai, "AsyncOpenAI", CountedClient)
    return cache, made


def _chat(memory, replies: int) -> None:
    memory.create_chat("road", "default")
    lines = []
    for i in range(replies):
        lines += [Message("user", "Rowan", f"Turn {i}: what now?"), Message("assistant", "Eileen", f"Reply {i}.")]
    memory.set_messages("road", lines)


QUIET = {"auto": False}  # scheduled maintenance (on by default) off: these tests count the extraction's requests


def _profile(fake, **extra) -> ModelProfile:
    return ModelProfile(model="fake", base_url=fake.base_url, api_key_env="CLIENTS_TEST_UNUSED", **extra)


def test_steps_of_one_run_share_one_model_and_ssl_context(memory, counted):
    cache, made = counted
    with FakeOpenAI() as fake:
        memory.settings = Settings(maintenance=QUIET, profiles={"default": _profile(fake)})
        _chat(memory, 4)
        results = memory.extract("road")
        assert [r.ok for r in results] == [True] * 4
        assert len(fake.requests) == 4
    assert cache.builds == cache.openai_clients == 1 and made == [1]
    assert [r.usage.calls for r in results] == [1, 1, 1, 1]  # each step still reports its own call


def test_ingest_with_compression_builds_one_model_for_every_job(memory, counted):
    """The summarize jobs of an ingest used to build a model (and an SSL context) each."""
    cache, made = counted
    with FakeOpenAI() as fake:
        memory.settings = Settings(maintenance=QUIET, profiles={"default": _profile(fake)})
        report = memory.ingest("road", CHAT)
        usage = memory.usage("road")["usage"]
    replies = sum(m.role == "assistant" for m in read_chat(CHAT).messages)
    assert report.failed is None and usage["extract"]["calls"] == replies
    assert usage["summarize"]["calls"] > 0  # compression jobs ran, on the same profile
    assert len(fake.requests) == usage["total"]["calls"]
    assert cache.builds == cache.openai_clients == 1 and made == [1]


def test_a_changed_profile_builds_a_new_model(memory, counted):
    cache, made = counted
    with FakeOpenAI() as fake:
        _chat(memory, 3)
        memory.settings = Settings(maintenance=QUIET, profiles={"default": _profile(fake)})
        memory.extract("road", floor=1)
        memory.settings = Settings(maintenance=QUIET, profiles={"default": _profile(fake, temperature=0.7)})
        memory.extract("road", floor=3)
        memory.settings = Settings(maintenance=QUIET, profiles={"default": _profile(fake, temperature=0.7).model_copy(
            update={"model": "other"})})
        memory.extract("road", floor=5)
        sent = [(r["model"], r.get("temperature")) for r in fake.requests]
    assert sent == [("fake", 0.2), ("fake", 0.7), ("other", 0.7)]
    assert cache.builds == cache.openai_clients == 3 and made == [1]  # three clients, one SSL context


def test_a_changed_api_key_builds_a_new_model(memory, counted, monkeypatch):
    cache, _ = counted
    with FakeOpenAI() as fake:
        _chat(memory, 2)
        memory.settings = Settings(maintenance=QUIET,
                                   profiles={"default": _profile(fake).model_copy(update={"api_key_env": "CK"})})
        monkeypatch.setenv("CK", "first")
        memory.extract("road", floor=1)
        monkeypatch.setenv("CK", "second")
        memory.extract("road", floor=3)
        keys = [h.get("authorization") or h.get("Authorization") for h in fake.headers]
    assert keys == ["Bearer first", "Bearer second"] and cache.builds == 2


def test_a_closed_loop_is_never_reused(counted):
    cache, made = counted
    profile = ModelProfile(model="m", base_url="http://127.0.0.1:9/v1", api_key_env="CLIENTS_TEST_UNUSED")

    async def get():
        model = cache.get(profile)
        assert cache.get(profile) is model  # within one loop: the same
        return model

    first, second = asyncio.run(get()), asyncio.run(get())
    assert first is not second and cache.builds == 2 and made == [1]
    assert len(cache) == 0  # both loops closed: nothing kept for them
    assert first.client.max_retries == 0  # retries are the transport's (tenacity), never the SDK's too


def test_threads_get_their_own_model(counted):
    cache, made = counted
    profile = ModelProfile(model="m", base_url="http://127.0.0.1:9/v1", api_key_env="CLIENTS_TEST_UNUSED")
    got, start = [], threading.Barrier(2)

    def job():
        async def run():
            start.wait()
            got.append(cache.get(profile))
            await asyncio.sleep(0.05)  # both loops are alive at once
        asyncio.run(run())

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and got[0] is not got[1] and cache.builds == 2 and made == [1]


def test_no_shared_model_outside_an_event_loop(counted):
    cache, _ = counted
    with pytest.raises(RuntimeError):
        cache.get(ModelProfile(model="m", base_url="http://127.0.0.1:9/v1"))


def test_every_answer_type_of_a_maintenance_job_gets_the_profiles_settings(memory, counted):
    """A job's second answer type used to get no model settings (it saw the model it had built by then as a given
    one); with the shared model both requests carry the profile's temperature and max_tokens."""
    from pydantic import BaseModel

    from curator.maintenance.common import Job

    class First(BaseModel):
        text: str

    class Second(BaseModel):
        note: str

    def responder(body):
        params = body["tools"][0]["function"]["parameters"]
        return completion(body, tool_args=dict.fromkeys(params["required"], "x"))

    cache, _ = counted
    with FakeOpenAI(responder) as fake:
        memory.settings = Settings(profiles={"default": _profile(fake, temperature=0.4, max_tokens=321)})
        memory.create_chat("road", "default")
        job = Job("test", memory.store, memory.settings, "road")

        async def both():
            return await job.ask(First, "first?"), await job.ask(Second, "second?")

        first, second = asyncio.run(both())
        sent = [(r.get("temperature"), r.get("max_tokens") or r.get("max_completion_tokens")) for r in fake.requests]
    assert (first.text, second.note) == ("x", "x")
    assert sent == [(0.4, 321), (0.4, 321)] and cache.builds == 1
    assert job.finish().usage.calls == 2
