"""The extractor against a fake OpenAI-compatible endpoint on the wire (pytest-httpx2 routes): the real
openai client, our retry transport and pydantic-ai's tool calling and JSON mode."""

from __future__ import annotations

import json

import httpx  # respx (behind pytest-httpx2) speaks httpx objects; the client under test speaks httpx2
import httpx2
import pytest

from curator.extract.extractor import last_extracted_floor
from curator.llm.models import build_model, retry_after_seconds
from curator.store.messages import Message
from curator.settings import ModelProfile, Settings
from curator.testing import completion

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
KEY = "sk-test-secret-123"


@pytest.fixture
def profile(monkeypatch):
    monkeypatch.setenv("FAKE_LLM_KEY", KEY)
    return ModelProfile(model="fake-model", base_url=BASE, api_key_env="FAKE_LLM_KEY", max_attempts=3,
                        timeout=5)


@pytest.fixture
def live(memory, profile):
    memory.create_chat("road", "default")
    memory.set_messages("road", [Message("user", "Rowan", "Take my last salve."),
                                 Message("assistant", "Eileen", "I owe you, Rowan. I will remember this."),
                                 Message("user", "Rowan", "Then let's cross the bridge."),
                                 Message("assistant", "Eileen", "Brannoch wants a toll.")])
    memory.settings = Settings(profiles={"default": profile})
    return memory


class Waits(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def run(memory, profile, sleep=None, floor=1):
    model = build_model(profile, sleep=Waits() if sleep is None else sleep)
    return memory.extract("road", floor=floor, model=model)[0]


def body(request) -> dict:
    return json.loads(request.content)


def answer(request, args):
    return httpx.Response(200, json=completion(body(request), tool_args=args))


GOOD = {"event": [{"summary": "Rowan gives Eileen his salve; she promises to repay him.", "ref": "gift"}],
        "character_sheet": [{"name": "Eileen", "goal": "repay Rowan"}],
        "links": [{"source": "Eileen", "relation": "involved_in", "target": "gift"}]}


def test_tool_call_round_trip(httpx2_mock, live, profile):
    route = httpx2_mock.post(URL).mock(side_effect=lambda r: answer(r, GOOD))
    result = run(live, profile)
    assert result.ok, result.reason
    assert route.call_count == 1
    request = route.calls[0].request
    assert request.headers["authorization"] == f"Bearer {KEY}"
    sent = body(request)
    assert sent["model"] == "fake-model" and sent["tools"][0]["function"]["name"] == "record_memory"
    assert set(sent["tools"][0]["function"]["parameters"]["properties"]) == {"character_sheet", "event", "links"}
    assert sent["temperature"] == 0.2 and 2048 in (sent.get("max_tokens"), sent.get("max_completion_tokens"))
    graph = live.graph("road")
    assert [n.title for n in graph.nodes(type="event")] == ["Summary 1"]
    assert graph.find_by_name("eileen")[0].fields["goal"] == "repay Rowan"
    usage = live.usage("road")["usage"]["extract"]
    assert usage["calls"] == 1 and usage["input_tokens"] == completion(sent)["usage"]["prompt_tokens"]
    stored = json.dumps(live.usage("road")) + json.dumps([dict(r) for r in live.store.conn.execute(
        "SELECT * FROM llm_calls")])
    if live.store.engine == "sqlite":
        stored += (live.data_dir / "memory.db").read_bytes().decode("latin-1")
    assert KEY not in stored  # the key is never written down


def test_429_with_retry_after_is_honoured(httpx2_mock, live, profile):
    route = httpx2_mock.post(URL).mock(side_effect=[
        httpx.Response(429, headers={"retry-after": "7"}, json={"error": {"message": "slow down"}}),
        httpx.Response(429, headers={"retry-after-ms": "1500"}, json={"error": {"message": "slow down"}}),
        lambda r: answer(r, GOOD),
    ])
    waits = Waits()
    result = run(live, profile, sleep=waits)
    assert result.ok and route.call_count == 3
    assert waits == [7.0, 1.5]
    assert result.usage.calls == 1  # one model call; the retries happened below it, in one layer


def test_server_errors_retry_then_fail_cleanly(httpx2_mock, live, profile):
    route = httpx2_mock.post(URL).mock(return_value=httpx.Response(500, json={"error": {"message": "boom"}}))
    waits = Waits()
    result = run(live, profile, sleep=waits)
    assert not result.ok and route.call_count == 3  # max_attempts, and no SDK retries on top
    assert "500" in result.reason and len(waits) == 2
    assert live.store.commits("road") == [] and last_extracted_floor(live.store, "road") == -1
    assert live.usage("road")["failed_steps"][0]["floor"] == 1


def test_500_once_then_success(httpx2_mock, live, profile):
    route = httpx2_mock.post(URL).mock(side_effect=[httpx.Response(503), lambda r: answer(r, GOOD)])
    assert run(live, profile).ok and route.call_count == 2


def test_timeouts_are_retried_then_reported(httpx2_mock, live, profile):
    route = httpx2_mock.post(URL).mock(side_effect=httpx2.ReadTimeout("read timed out"))
    result = run(live, profile)
    assert not result.ok and route.call_count == 3
    assert "timed out" in result.reason.lower() or "timeout" in result.reason.lower()
    assert live.store.commits("road") == []


def test_malformed_response_body(httpx2_mock, live, profile):
    httpx2_mock.post(URL).mock(return_value=httpx.Response(200, content=b"<html>not json"))
    result = run(live, profile)
    assert not result.ok and result.reason and live.store.commits("road") == []


def test_malformed_tool_arguments_are_sent_back(httpx2_mock, live, profile):
    def broken(request):
        data = completion(body(request), tool_args={})
        data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"event": [{"summary": '
        return httpx.Response(200, json=data)

    route = httpx2_mock.post(URL).mock(side_effect=[broken, lambda r: answer(r, GOOD)])
    assert run(live, profile).ok and route.call_count == 2
    retry = json.dumps(body(route.calls[1].request)["messages"][-1])
    assert "json" in retry.lower() or "invalid" in retry.lower()


def test_unknown_field_in_a_tool_call_is_an_error_the_model_sees(httpx2_mock, live, profile):
    bad = {"event": [{"summary": "x", "mood": "grim"}]}
    route = httpx2_mock.post(URL).mock(side_effect=[lambda r: answer(r, bad), lambda r: answer(r, GOOD)])
    result = run(live, profile)
    assert result.ok and route.call_count == 2
    told = json.dumps(body(route.calls[1].request)["messages"][-1])
    assert "mood" in told and "Extra inputs are not permitted" in told
    [event] = live.graph("road").nodes(type="event")
    assert "mood" not in event.fields


def test_json_mode_for_servers_without_tool_calling(httpx2_mock, live, profile):
    json_profile = profile.model_copy(update={"output_mode": "json"})
    live.settings = Settings(profiles={"default": json_profile})

    def reply(request):
        sent = body(request)
        assert "tools" not in sent or not sent["tools"]
        return httpx.Response(200, json=completion(sent, content=json.dumps(GOOD)))

    route = httpx2_mock.post(URL).mock(side_effect=reply)
    result = run(live, json_profile)
    assert result.ok and route.call_count == 1
    prompt = json.dumps(body(route.calls[0].request)["messages"])
    assert "character_sheet" in prompt  # the schema travels in the prompt instead
    assert live.graph("road").find_by_name("Eileen")


def test_retry_after_parsing():
    assert retry_after_seconds(httpx2.Headers({"retry-after": "3"})) == 3
    assert retry_after_seconds(httpx2.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after_seconds(httpx2.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0
    assert retry_after_seconds(httpx2.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx2.Headers({})) is None


def test_missing_api_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    from curator import CuratorError
    with pytest.raises(CuratorError, match=r"\$NOPE_KEY is not set"):
        build_model(ModelProfile(model="m", api_key_env="NOPE_KEY"))


def test_rate_limiter_spaces_requests():
    import asyncio

    from curator.llm.models import RateLimiter

    clock = [100.0]
    waits = []

    async def sleep(seconds):
        waits.append(round(seconds, 6))
        clock[0] += seconds

    async def burst():
        limiter = RateLimiter(rpm=120, clock=lambda: clock[0], sleep=sleep)
        for _ in range(4):
            await limiter.wait()
        clock[0] += 10  # a pause longer than the interval: no wait after it
        await limiter.wait()
        unlimited = RateLimiter(rpm=0, clock=lambda: clock[0], sleep=sleep)
        await unlimited.wait()

    asyncio.run(burst())
    assert waits == [0.5, 0.5, 0.5]
