"""The OpenAI-compatible proxy, driven by the `openai` client, in front of a fake upstream model on loopback."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import openai
import pytest

import curator
import st_harness
from curator.service.proxy import inject
from curator.testing.scripted import reply_text, scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer

CLIENT = {"x-curator-client": "test"}  # state-changing requests need it (or a JSON body)


class Upstream:
    """A chat model on loopback that answers turn N (the count of user messages) with the scripted reply of floor
    2N-1, streamed or not; `variant` changes the answer (a regenerate gives another reply)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.variant = 0
        self.fail = False
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.requests.append(body)
                upstream.headers.append({k.lower(): v for k, v in self.headers.items()})
                if upstream.fail:
                    return self._send(500, "application/json", json.dumps({"error": {"message": "upstream down"}}))
                turns = sum(m["role"] == "user" for m in body["messages"])
                text = reply_text(2 * turns - 1, upstream.variant)
                if not body.get("stream"):
                    answer = {"id": "up-1", "object": "chat.completion", "created": 1, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}],
                              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                    return self._send(200, "application/json", json.dumps(answer))
                pieces = [text[i:i + 7] for i in range(0, len(text), 7)]
                events = "".join(
                    "data: " + json.dumps({"id": "up-2", "object": "chat.completion.chunk", "created": 1,
                                           "model": body["model"],
                                           "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
                    + "\n\n" for p in pieces) + "data: [DONE]\n\n"
                return self._send(200, "text/event-stream", events)

            def _send(self, status, kind, data):
                raw = data.encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def proxy(tmp_path):
    upstream = Upstream()
    calls: list[int] = []
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(calls), upstream=upstream.url))
    with ThreadedServer(app) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="client-key", max_retries=0)
        yield client, upstream, memory, server, calls
    upstream.server.shutdown()
    memory.close()


def settle(server, chat="c"):
    """Wait until the chat's background work is done: the reply stored (just after its response), its extraction
    queued and run, nothing due. Waiting for the jobs alone could return before the newest reply's job was queued,
    and its commit then landed during the next request (a regenerate's reuse saw the memory change: CI)."""
    st_harness.settle(server.url, server.server.config.app.state.service.memory, chat)


def converse(client, server, turns, chat="c", stream_last=False):
    messages = [{"role": "system", "content": "You are the narrator."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"What happens next? (turn {turn})"})
        if stream_last and turn == turns - 1:
            stream = client.chat.completions.create(model="story", messages=messages, stream=True, user=chat)
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        else:
            text = (
                client.chat.completions.create(model="story", messages=messages, user=chat).choices[0].message.content
            )
        messages.append({"role": "assistant", "content": text})
        settle(server, chat)
    return messages


def test_the_proxy_remembers_and_injects(proxy):
    client, upstream, memory, server, calls = proxy
    messages = converse(client, server, 6)
    assert messages[2]["content"] == reply_text(1)  # the answer comes back unchanged
    assert [c.anchor_floor for c in memory.store.commits("c")] == [1, 3, 5, 7, 9, 11]
    assert sorted(calls) == [1, 3, 5, 7, 9, 11]
    # the last request carried the memory: a system message after the system prompt, naming who acted before
    last = upstream.requests[-1]["messages"]
    assert last[0] == {"role": "system", "content": "You are the narrator."}
    assert last[1]["role"] == "system" and "Eileen" in last[1]["content"] and "lantern" in last[1]["content"]
    assert len(last) == len(messages) - 1 + 1  # every client message, plus the memory
    assert memory.store.messages("c")[1].text == reply_text(1)


def test_streaming_answers_pass_through_and_are_remembered(proxy):
    client, upstream, memory, server, _calls = proxy
    messages = converse(client, server, 3, stream_last=True)
    assert messages[-1]["content"] == reply_text(5)
    assert upstream.requests[-1]["stream"] is True
    assert memory.store.messages("c")[-1].text == reply_text(5)
    assert [c.anchor_floor for c in memory.store.commits("c")] == [1, 3, 5]


def test_a_regenerate_through_the_proxy_swaps_memory_and_a_swipe_back_restores_it(proxy):
    client, upstream, memory, server, calls = proxy
    messages = converse(client, server, 3)
    first = memory.graph("c").snapshot()
    upstream.variant = 1  # regenerate the last reply: the request ends at the user turn
    answer = client.chat.completions.with_raw_response.create(model="story", messages=messages[:-1], user="c")
    again = answer.parse().choices[0].message.content
    assert again == reply_text(5, 1)
    # the turn's recall is reused, although the first reply's extraction had committed (and was rolled back)
    assert answer.headers["x-curator-recall"] == "reused"
    settle(server)
    assert memory.store.messages("c")[-1].text == again and calls.count(5) == 2
    assert memory.graph("c").snapshot() != first
    # the user swipes back to the first reply and writes on: its memory comes back with no model call
    upstream.variant = 0
    client.chat.completions.create(model="story", messages=messages + [{"role": "user", "content": "On."}], user="c")
    settle(server)
    assert calls.count(5) == 2
    assert memory.store.messages("c")[5].text == reply_text(5)


def test_chat_id_from_path_header_or_user_and_errors(proxy):
    client, upstream, memory, server, _calls = proxy
    body = [{"role": "user", "content": "Hello"}]
    by_path = openai.OpenAI(base_url=server.url + "/v1/chats/by-path", api_key="k", max_retries=0)
    by_path.chat.completions.create(model="m", messages=body)
    client.chat.completions.create(model="m", messages=body, extra_headers={"X-Curator-Chat": "by-header"})
    client.chat.completions.create(model="m", messages=body, user="by-user")
    for chat in ("by-path", "by-header", "by-user"):
        settle(server, chat)
        assert memory.store.messages(chat)[1].text == reply_text(1)
    with pytest.raises(openai.BadRequestError, match="no chat id"):
        client.chat.completions.create(model="m", messages=body)
    upstream.fail = True
    with pytest.raises(openai.InternalServerError, match="upstream down"):
        client.chat.completions.create(model="m", messages=body + [{"role": "assistant", "content": "x"},
                                                                   {"role": "user", "content": "y"}], user="by-user")


def test_inject_places_memory_at_depth_after_the_system_prompt():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    at_top = inject(messages, "MEM", {"position": "at_depth", "depth": 9999, "role": "system"})
    assert [m["content"] for m in at_top] == ["S", "MEM", "a", "b", "c"]
    deep1 = inject(messages, "MEM", {"position": "at_depth", "depth": 1, "role": "user"})
    assert deep1[3] == {"role": "user", "content": "MEM"}
    merged = inject(messages, "MEM", {"position": "system", "role": "system"})
    assert merged[0]["content"] == "S\n\nMEM" and len(merged) == 4
    assert inject(messages, "", {"depth": 1}) is messages


def test_behind_a_token_the_client_key_is_the_token_and_the_upstream_key_comes_from_the_environment(tmp_path,
                                                                                                    monkeypatch):
    upstream = Upstream()
    seen: list[str] = []
    monkeypatch.setenv("UPSTREAM_KEY", "up-secret")
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(), upstream=upstream.url, token="tok",
                                           upstream_key_env="UPSTREAM_KEY"))
    with ThreadedServer(app) as server:
        wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], user="c")
        right = openai.OpenAI(base_url=server.url + "/v1", api_key="tok", max_retries=0)
        answer = right.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], user="c")
        assert answer.choices[0].message.content == reply_text(1)
        seen.extend(upstream.headers)
    assert seen[-1].get("authorization") == "Bearer up-secret"  # never the service token
    upstream.server.shutdown()
    memory.close()


def test_a_request_that_drops_the_oldest_messages_is_a_tail_of_the_chat(proxy):
    """Front ends cut the oldest messages once the context is full: that is no edit, and nothing is rolled back."""
    client, _upstream, memory, server, _calls = proxy
    messages = converse(client, server, 5)
    commits = len(memory.store.commits("c"))
    trimmed = [messages[0], *messages[5:]] + [{"role": "user", "content": "And then? (turn 5)"}]
    client.chat.completions.create(model="story", messages=trimmed, user="c")
    settle(server)
    stored = memory.store.messages("c")
    assert len(stored) == 12 and stored[0].text == "What happens next? (turn 0)"
    assert [c.anchor_floor for c in memory.store.commits("c")] == [1, 3, 5, 7, 9, 11]
    assert len(memory.store.commits("c")) == commits + 1


def test_window_start_finds_the_tail_even_when_its_first_message_was_edited():
    from curator.store.messages import Message
    from curator.service.proxy import window_start
    from curator.testing.scripted import scripted_chat

    chat = scripted_chat(20)
    assert window_start(chat, chat) == 0
    assert window_start(chat, chat[8:]) == 8
    edited = [Message("user", "User", "edited"), *chat[9:]]
    assert window_start(chat, edited) == 8
    assert window_start(chat, [Message("user", "User", "unknown")]) == 0
    assert window_start([], chat) == 0


def test_a_chat_the_proxy_creates_is_logged_and_shown_and_every_request_has_a_log_line(tmp_path, caplog):
    """A request naming a chat id the service does not have creates it (a typo would be a new chat): the log says
    "created chat X" and the panel's overview names the proxy as its maker; `serve`'s request log (on unless
    --quiet) has a line per request with the proxy's chat and the memory it injected."""
    upstream = Upstream()
    with curator.open(tmp_path / "data") as memory:
        app = create_app(memory, ServiceConfig(model=scripted_model([]), upstream=upstream.url, request_log=True))
        with caplog.at_level(logging.INFO, logger="curator"), ThreadedServer(app) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
            converse(client, server, 2, chat="new-one")
            created = [r.getMessage() for r in caplog.records if "created chat" in r.getMessage()]
            assert created == ["proxy: created chat new-one (a request named a chat id this service did not have; "
                               "schema default)"]  # once, not per request
            overview = httpx2.get(server.url + "/api/v1/chats/new-one/overview", headers=CLIENT).json()
            assert overview["chat"]["created_by"] == "proxy" and overview["chat"]["created_at"]
            lines = [r.getMessage() for r in caplog.records if r.name == "curator.requests"]
            proxied = [line for line in lines if line.startswith("POST /v1/chat/completions 200 ")]
            assert len(proxied) == 2 and all(" chat=new-one" in line and " ms" in line for line in proxied)
            assert any(line.startswith("GET /api/v1/chats/new-one/overview 200 ") for line in lines)
    upstream.server.shutdown()
