"""What front ends really send the proxy: their copies of replies, non-chat requests, placeholder keys, the
endpoints around chat completions, an upstream that is down; and hand-written memory that survives a regenerate."""

from __future__ import annotations

import logging

import httpx2
import pytest

import curator
from curator.extract.chatfile import read_chat
from curator.testing.scripted import reply_text, scripted_model
from curator.paths import example_file
from curator.service.proxy import ProxyConfig
from curator.service.proxy_match import chat_names, request_kind, same_floor, window_start
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.store.messages import Message, floor_hash

import st_harness
from st_harness import IMPERSONATE, SUMMARIZE, Upstream, free_port


def test_a_front_ends_copy_of_a_reply_is_the_same_floor_and_an_edit_is_not():
    names = chat_names([Message("assistant", "Eileen", "hi"), Message("user", "", "Alex: hello"),
                        Message("user", "", "Alex: and then")])
    assert names == {"Eileen", "Alex"}  # name fields, and a prefix the chat uses on several floors
    stored = Message("assistant", "", "  Eileen: Rowan went to the mill.\nAlex: And then?\n")
    for copy in (Message("assistant", "Eileen", "Rowan went to the mill."),       # name field, cut, no prefix
                 Message("assistant", "", "Eileen: Rowan went to the mill."),     # content prefix kept, cut
                 Message("assistant", "", "Rowan went to the mill. Alex: And then?"),  # whitespace only
                 Message("assistant", "", "Rowan went to")):                      # a stop string cut early
        assert same_floor(stored, copy, names), copy
    for edit in (Message("assistant", "", "Rowan went to the chapel."), Message("assistant", "", ""),
                 Message("user", "", "Rowan went to the mill.")):
        assert not same_floor(stored, edit, names), edit
    user = Message("user", "", "Where now?")
    assert same_floor(user, Message("user", "Alex", "Alex: Where now?"), names)
    assert not same_floor(user, Message("user", "Alex", "Where"), names)  # a user message is never "cut"
    # only a name the chat uses is a prefix: "Chapter 3:" or "Note:" at the start of a reply is its text
    heading = Message("assistant", "", "Chapter 3: The bridge burns.")
    assert not same_floor(heading, Message("assistant", "", "Chapter 4: The bridge burns."), names)
    assert not same_floor(Message("assistant", "", "Note: the bridge is out."),
                          Message("assistant", "", "Warning: the bridge is out."), names)
    assert not same_floor(Message("assistant", "", "The bridge burns."), heading, names)


def test_the_request_kind_comes_from_the_instruction_after_the_chat_or_the_header():
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"}]
    post = {"role": "system", "content": "[Stay in character.]"}
    assert request_kind(chat + [post]) == "chat"
    assert request_kind(chat + [post, {"role": "system", "content": IMPERSONATE}]) == "impersonate"
    assert request_kind(chat + [post, {"role": "system", "content": SUMMARIZE}]) == "quiet"
    classify = "Ignore previous instructions. Classify the emotion of the last message. Output just one word."
    assert request_kind(chat + [{"role": "system", "content": classify}]) == "quiet"  # Expressions
    nudge = {"role": "system", "content": "[Continue the following message. Do not include ANY parts: b]"}
    assert request_kind(chat + [nudge, post]) == "continue"
    # an instruction before the chat's last message is history, not a marker
    assert request_kind([chat[0], {"role": "system", "content": IMPERSONATE}, *chat[1:]]) == "chat"
    assert request_kind(chat, header="quiet") == "quiet" and request_kind(chat, header="bogus") == "chat"


def test_window_start_lines_up_reformatted_floors():
    stored = [Message("user", "", "hi"), Message("assistant", "", " Eileen: hello\n"), Message("user", "", "go"),
              Message("assistant", "", "she goes")]
    sent = [Message("assistant", "Eileen", "hello"), Message("user", "Alex", "Alex: go")]
    assert window_start(stored, sent, names=chat_names(stored, sent)) == 1


def test_the_floor_hash_leaves_the_swipe_index_out_and_old_hashes_are_accepted(memory):
    a, b = Message("assistant", "N", "text", swipe_id=0), Message("assistant", "N", "text", swipe_id=3)
    assert a.hash == b.hash and b.legacy_hash != b.hash
    chat = [Message("user", "U", "hi"), b]
    memory.create_chat("c", "default")
    memory.sync("c", chat)
    with memory.store.transaction() as conn:  # as a database written before the change holds it
        conn.execute(
            "UPDATE messages SET hash=? WHERE chat_id='c' AND floor=1", (floor_hash("assistant", "N", "text", 3),)
        )
    report = memory.sync("c", [Message("user", "U", "hi"), Message("assistant", "N", "text")])  # swipe id unseen
    assert not report.rebuilt and report.dirty_floor is None


_memories: dict = {}  # service URL -> its memory, for settle()


@pytest.fixture
def service(tmp_path):
    upstream = Upstream()
    calls: list[int] = []
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")  # fast embedder
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(calls), upstream=upstream.url))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
        _memories[server.url] = memory
        yield http, upstream, memory, server, calls, app
    upstream.close()
    memory.close()


def settle(http, chat):
    memory = _memories[str(http.base_url).rstrip("/")]
    st_harness.settle(str(http.base_url), memory, chat)


def ask(http, chat, messages, headers=None, **extra):
    return http.post(f"/v1/chats/{chat}/chat/completions", json={"model": "m", "messages": messages, **extra},
                     headers=headers)


def test_models_embeddings_and_completions_pass_through_and_the_placeholder_key_is_dropped(service, monkeypatch):
    http, upstream, _memory, _server, _calls, app = service
    for path in ("/v1/models", "/v1/chats/any/models"):
        listed = http.get(path, headers={"Authorization": "Bearer undefined"})
        assert listed.status_code == 200 and listed.json()["data"][0]["id"] == "story-model"
    assert http.post("/v1/embeddings", json={"input": "x", "model": "e"}).status_code == 200
    assert http.post("/v1/chats/any/completions", json={"prompt": "x", "model": "m"}).status_code == 200
    upstream.queue.append(["Hello."])
    assert ask(http, "k", [{"role": "user", "content": "Hi"}],
               ).status_code == 200 and upstream.headers[-1].get("authorization") is None
    http.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": "Bearer undefined"})
    assert "authorization" not in upstream.headers[-1]  # SillyTavern's "no key" placeholder is not forwarded
    http.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": "Bearer sk-real"})
    assert upstream.headers[-1]["authorization"] == "Bearer sk-real"  # a real client key is
    monkeypatch.setenv("UP_KEY", "configured")
    app.state.proxy.key_env = "UP_KEY"
    http.post("/v1/embeddings", json={"input": "x"}, headers={"Authorization": "Bearer undefined"})
    assert upstream.headers[-1]["authorization"] == "Bearer configured"


def test_an_upstream_that_is_down_or_slow_is_a_502_or_504_naming_it(service, caplog):
    http, upstream, memory, _server, _calls, app = service
    dead = f"http://127.0.0.1:{free_port()}/v1"
    app.state.proxy = ProxyConfig(dead)
    with caplog.at_level(logging.WARNING):
        for stream in (False, True):
            down = ask(http, "d", [{"role": "user", "content": "Hi"}], stream=stream)
            assert down.status_code == 502, down.text
            error = down.json()["error"]
            assert dead in error["message"] and "could not be reached" in error["message"] and error["hint"]
        assert http.get("/v1/models").status_code == 502
    assert not [r for r in caplog.records if r.exc_info]  # an expected failure: one line, no traceback
    app.state.proxy = ProxyConfig(upstream.url, timeout=0.3)
    upstream.delay = 1.0
    slow = ask(http, "d", [{"role": "user", "content": "Hi"}])
    assert slow.status_code == 504 and "did not answer in time" in slow.json()["error"]["message"]
    assert [m.text for m in memory.store.messages("d")] == ["Hi"]  # no reply floor from a failed call


def test_impersonate_quiet_and_several_choices_store_no_floor(service):
    http, upstream, memory, _server, calls, _app = service
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    upstream.queue.append([reply_text(1)])
    chat.append({"role": "assistant", "content": ask(http, "q", chat).json()["choices"][0]["message"]["content"]})
    settle(http, "q")
    for control in (IMPERSONATE, SUMMARIZE):
        upstream.queue.append(["not a chat message"])
        assert ask(http, "q", chat + [{"role": "system", "content": control}]).status_code == 200
    upstream.queue.append(["by header"])
    http.post(
        "/v1/chats/q/chat/completions", headers={"X-Curator-Kind": "quiet"}, json={"model": "m", "messages": chat}
    )
    settle(http, "q")
    assert [m.text for m in memory.store.messages("q")] == ["Hi", reply_text(1)] and calls == [1]
    chat.append({"role": "user", "content": "More"})
    upstream.queue.append([reply_text(3), reply_text(3, 1)])
    both = ask(http, "q", chat, n=2).json()["choices"]
    assert len(both) == 2
    settle(http, "q")
    assert len(memory.store.messages("q")) == 3 and calls == [1]  # nothing kept until the user picks
    chat += [{"role": "assistant", "content": both[1]["message"]["content"]}, {"role": "user", "content": "Yes"}]
    upstream.queue.append([reply_text(5)])
    ask(http, "q", chat)
    settle(http, "q")
    assert memory.store.messages("q")[3].text == reply_text(3, 1) and sorted(calls) == [1, 3, 5]


def test_a_fact_written_by_hand_survives_a_regenerate_and_a_swipe(service):
    http, upstream, memory, _server, calls, _app = service
    chat = [{"role": "user", "content": "Hi"}]
    upstream.queue.append([reply_text(1)])
    chat.append({"role": "assistant", "content": ask(http, "m", chat).json()["choices"][0]["message"]["content"]})
    settle(http, "m")
    made = http.post("/api/v1/chats/m/nodes", json={"type": "character_sheet", "fields": {"name": "Saela"}})
    assert made.status_code in (200, 201) and made.json()["anchor_floor"] == 0  # the user message, not the reply
    upstream.queue.append([reply_text(1, 1)])
    ask(http, "m", chat[:-1])  # regenerate: the old reply and its memory go on the shelf
    settle(http, "m")
    assert memory.graph("m").find_by_name("Saela") and calls == [1, 1]
    upstream.queue.append([reply_text(3)])
    ask(http, "m", chat + [{"role": "user", "content": "On"}])  # swipe back to the first reply and write on
    settle(http, "m")
    assert memory.graph("m").find_by_name("Saela") and sorted(calls) == [1, 1, 3]
    # an edit of the user message it is anchored at rolls it back like the memory around it: an ordinary edit (no
    # 409), reported in the answer's headers and restored by one call
    upstream.queue.append([reply_text(1)])
    edited = ask(http, "m", [{"role": "user", "content": "Hello instead"}])
    assert edited.status_code == 200 and "from floor 0 (edited)" in edited.headers["x-curator-reverted"]
    settle(http, "m")
    assert not memory.graph("m").find_by_name("Saela")
    batch = int(edited.headers["x-curator-reverted-batch"])
    assert http.post("/api/v1/chats/m/undo", json={"batch": batch, "extract": False}).status_code == 200
    assert memory.graph("m").find_by_name("Saela") and memory.store.messages("m")[0].text == "Hi"


def test_a_chat_ingested_from_a_sillytavern_file_continues_through_the_proxy_without_a_rollback(service):
    """The file's swipe ids and names are nothing the proxy sees; SillyTavern sends the chat without them."""
    http, upstream, memory, _server, calls, _app = service
    messages = read_chat(example_file("lantern_road.jsonl")).messages
    memory.create_chat("road", "default")
    assert memory.sync("road", messages, extract=True, model=scripted_model()).due == []  # ingested
    assert any(m.swipe_id for m in messages)
    commits = [c.id for c in memory.store.commits("road")]
    sent = [{"role": m.role, "content": m.text} for m in messages] + [{"role": "user", "content": "Onwards."}]
    upstream.queue.append(["Eileen went to the bridge and found a lantern."])
    assert ask(http, "road", sent).status_code == 200
    settle(http, "road")
    assert [c.id for c in memory.store.commits("road")][:len(commits)] == commits  # nothing rolled back
    stored = memory.store.messages("road")
    assert len(stored) == len(messages) + 2 and stored[-1].text.startswith("Eileen went"), [
        m.text[:30] for m in stored[-3:]
    ]
    assert calls == [len(messages) + 1], http.get("/api/v1/jobs", params={"chat": "road"}).json()  # the new reply only
