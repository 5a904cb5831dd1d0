"""The service side of the SillyTavern extension over real loopback HTTP: a front-end chat opened (created, bound,
forked for a branch or a checkpoint, moved for a rename, never shared between characters), forgotten; events from
the front end (edits far back, swipes and swiping back, regenerate, continue, quiet and impersonate generations) with
the injection and its recall card; the extraction model a front end names, and a chat whose extraction cannot run
saying so; an allowed origin let in with CORS, every other refused."""

from __future__ import annotations

import httpx2
import pytest

import curator
from curator.testing.scripted import graph_signature, reply_text, scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy
from curator.service.server.runner import ThreadedServer
from curator.store.messages import Message
from curator.testing import FakeOpenAI

import st_harness

ST = "http://127.0.0.1:8000"  # SillyTavern's page, as the extension's requests name it
EILEEN, MIRA = "character:Eileen.png", "character:Mira.png"


def st_chat(turns: int, name: str = "Eileen", greeting: bool = True) -> list[dict]:
    """A SillyTavern chat as the extension sends it: the greeting, then `turns` exchanges (floors = mesids)."""
    messages = [{"role": "assistant", "name": name, "text": reply_text(0)}] if greeting else []
    for turn in range(turns):
        floor = len(messages)
        messages.append({"role": "user", "name": "Alex", "text": f"What happens next? ({turn})"})
        messages.append({"role": "assistant", "name": name, "text": reply_text(floor + 1)})
    return messages


@pytest.fixture
def served(tmp_path):
    calls: list[int] = []
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(calls), site=SitePolicy(allowed_origins=(ST,))))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1", timeout=60) as http:
        yield server, http, memory, calls
    memory.close()


def settle(server, memory, chat):
    st_harness.settle(server.url, memory, chat)


def open_chat(http, scope, file, messages, **extra) -> dict:
    answer = http.post("/frontends/sillytavern/open", json={"scope": scope, "file": file, "label": scope.split(":")[1],
                                                            "messages": messages, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _log(memory, chat):
    return [(c.anchor_floor, c.origin) for c in memory.store.commits(chat)]


def test_a_chat_is_created_then_bound_and_two_characters_never_share(served):
    server, http, memory, calls = served
    chat = st_chat(3)
    first = open_chat(http, EILEEN, "Eileen - 1", chat)
    assert first["action"] == "created" and first["chat"].startswith("st-Eileen-") and first["schema"] == "default"
    settle(server, memory, first["chat"])
    assert sorted(calls) == [0, 2, 4, 6]  # the greeting and three replies, once each
    again = open_chat(http, EILEEN, "Eileen - 1", chat)
    assert again["action"] == "bound" and again["chat"] == first["chat"] and again["sync"]["reverted"] == []
    other = open_chat(http, MIRA, "Eileen - 1", chat)  # the same file name under another character
    assert other["action"] == "created" and other["chat"] != first["chat"]
    # a chat carried to another character (its metadata names Eileen's memory): a fork, never Eileen's own
    carried = open_chat(http, MIRA, "carried", chat, claim={"chat": first["chat"], "file": "Eileen - 1"},
                        files=["carried"])
    assert carried["action"] == "forked" and carried["chat"] != first["chat"]
    settle(server, memory, other["chat"])
    assert len(calls) == 8  # Mira's new chat: 4 replies; the fork: none
    bindings = http.get("/frontends/sillytavern/bindings").json()["bindings"]
    assert {(b["scope"], b["file"]) for b in bindings} == {(EILEEN, "Eileen - 1"), (MIRA, "Eileen - 1"),
                                                            (MIRA, "carried")}


def test_a_branch_forks_at_the_last_shared_floor_and_the_parent_stays(served):
    server, http, memory, calls = served
    chat = st_chat(10)
    main = open_chat(http, EILEEN, "main", chat)["chat"]
    settle(server, memory, main)
    before = (graph_signature(memory, main), _log(memory, main), len(calls))
    claim = {"chat": main, "file": "main"}
    branch = open_chat(http, EILEEN, "Branch #5", chat[:6], claim=claim, files=["main", "Branch #5"])
    assert branch["action"] == "forked" and branch["fork"]["floor"] == 5 and branch["sync"]["due"] == []
    assert (graph_signature(memory, main), _log(memory, main), len(calls)) == before  # parent untouched, 0 calls
    assert _log(memory, branch["chat"]) == [c for c in _log(memory, main) if c[0] <= 5]
    # the branch goes on: only its new reply costs a call; returning to the parent costs nothing
    grown = chat[:6] + [{"role": "user", "name": "Alex", "text": "Elsewhere?"},
                        {"role": "assistant", "name": "Eileen", "text": reply_text(7, variant=2)}]
    answer = http.post(f"/chats/{branch['chat']}/events", json={"event": "message_received", "messages": grown})
    assert answer.json()["sync"]["due"] == [7]
    settle(server, memory, branch["chat"])
    back = open_chat(http, EILEEN, "main", chat, claim=claim, files=["main", "Branch #5"])
    assert back["action"] == "bound" and back["chat"] == main and back["sync"]["reverted"] == []
    assert len(calls) == before[2] + 1 and (graph_signature(memory, main), _log(memory, main)) == before[:2]
    # a checkpoint made at floor 13, opened after the parent was edited at floor 9: the fork keeps floors 0..8
    edited = [dict(m) for m in chat]
    edited[9]["text"] = "Rowan went to the mill and found nothing."
    checkpoint = open_chat(http, EILEEN, "Checkpoint #1", chat[:14], claim=claim, files=["main", "Checkpoint #1"])
    assert checkpoint["fork"]["floor"] == 13  # the parent still holds floors 0..13 as the checkpoint has them
    http.post(f"/chats/{main}/events", json={"event": "message_edited", "messages": edited})
    late = open_chat(http, EILEEN, "Checkpoint #2", chat[:14], claim=claim, files=["main", "Checkpoint #2"])
    assert late["fork"]["floor"] == 8 and late["sync"]["due"] == [10, 12]


def test_a_renamed_chat_keeps_its_memory_and_a_deleted_one_can_take_it_along(served):
    server, http, memory, calls = served
    chat = st_chat(2)
    main = open_chat(http, EILEEN, "old name", chat)["chat"]
    settle(server, memory, main)
    count = len(calls)
    moved = open_chat(http, EILEEN, "new name", chat, claim={"chat": main, "file": "old name"}, files=["new name"])
    assert moved["action"] == "renamed" and moved["chat"] == main and moved["renamed_from"] == "old name"
    assert (
        len(calls) == count and http.get("/frontends/sillytavern/bindings").json()["bindings"][0]["file"] == "new name"
    )
    renamed = http.post("/frontends/sillytavern/rename", json={"scope": EILEEN, "file": "new name",
                                                               "new_file": "third name"})
    assert renamed.json()["chat"] == main
    kept = http.post("/frontends/sillytavern/forget", json={"scope": EILEEN, "file": "third name"})
    assert kept.json() == {"chat": main, "deleted": False, "unbound": True} and memory.store.has_chat(main)
    again = open_chat(http, EILEEN, "fresh", chat)["chat"]
    gone = http.post("/frontends/sillytavern/forget", json={"scope": "character:*", "file": "fresh",
                                                            "delete_memory": True})
    assert gone.json()["deleted"] and not memory.store.has_chat(again)
    assert http.post("/frontends/sillytavern/forget", json={"scope": EILEEN, "file": "fresh"}).status_code == 404


def test_events_edit_far_back_swipe_and_back_continue_quiet_impersonate(served):
    server, http, memory, calls = served
    chat = st_chat(10)
    main = open_chat(http, EILEEN, "main", chat)["chat"]
    settle(server, memory, main)
    events = f"/chats/{main}/events"
    count = len(calls)
    # a generation: the user's message is synced, recall runs for Eileen, its card is kept at the reply's floor
    chat.append({"role": "user", "name": "Alex", "text": "Where did Eileen go?"})
    started = http.post(events, json={"event": "generation_started", "generation_type": "normal", "messages": chat,
                                      "speaker": "Eileen", "reply_floor": 22}).json()
    injection = started["injection"]
    assert injection["text"] and injection["speaker_requested"] == "Eileen" and injection["reply_floor"] == 22
    assert http.get(f"/chats/{main}/cards/22").json()["text"] == injection["text"]
    chat.append({"role": "assistant", "name": "Eileen", "text": reply_text(22)})
    http.post(events, json={"event": "message_received", "messages": chat})
    settle(server, memory, main)
    assert len(calls) == count + 1
    # quiet (a summary): nothing synced, nothing recalled; impersonate: recall for the user, no card
    quiet = http.post(events, json={"event": "generation_started", "generation_type": "quiet",
                                    "messages": chat[:3]}).json()
    assert quiet["sync"] is None and quiet["injection"] is None and len(memory.store.messages(main)) == 23
    imp = http.post(events, json={"event": "generation_started", "generation_type": "impersonate", "messages": chat,
                                  "speaker": "Alex", "reply_floor": 23}).json()
    assert imp["injection"]["speaker_requested"] == "Alex" and http.get(f"/chats/{main}/cards/23").status_code == 404
    # a swipe: the reply being replaced is left out, its memory shelved; the new one is extracted (1 call);
    # swiping back restores the first with no call
    first_reply = chat.pop()
    swipe = http.post(events, json={"event": "generation_started", "generation_type": "swipe", "messages": chat,
                                    "speaker": "Eileen", "reply_floor": 22}).json()
    assert swipe["sync"]["shelved"] > 0 and swipe["injection"]["query"] == injection["query"]  # the same turn
    chat.append({"role": "assistant", "name": "Eileen", "text": reply_text(22, variant=1), "swipe_id": 1})
    http.post(events, json={"event": "message_received", "messages": chat})
    settle(server, memory, main)
    assert len(calls) == count + 2
    chat[-1] = first_reply
    back = http.post(events, json={"event": "message_swiped", "messages": chat}).json()
    assert back["sync"]["restored"] and back["sync"]["due"] == []
    settle(server, memory, main)
    assert len(calls) == count + 2
    # continue: the reply grows, it alone is extracted again
    chat[-1] = {**chat[-1], "text": chat[-1]["text"] + " Then she rested."}
    http.post(events, json={"event": "generation_ended", "generation_type": "continue", "messages": chat})
    settle(server, memory, main)
    assert len(calls) == count + 3
    # an edit 8 floors back: rolled back from there, the replies from there extracted again
    chat[14] = {**chat[14], "text": "Tobin went to the chapel and found a candle."}
    edit = http.post(events, json={"event": "message_edited", "messages": chat}).json()
    assert edit["sync"]["dirty_floor"] == 14 and edit["sync"]["due"] == [14, 16, 18, 20, 22]
    settle(server, memory, main)
    assert len(calls) == count + 3 + 5
    with curator.open(server.server.config.app.state.service.memory.data_dir.parent / "fresh") as fresh:
        fresh.create_chat("c", "default")
        fresh.sync("c", [Message(m["role"], m["name"], m["text"]) for m in chat], extract=True,
                   model=scripted_model())
        assert graph_signature(memory, main) == graph_signature(fresh, "c")
    recent = http.get(f"/chats/{main}/events").json()["events"]
    assert recent[0]["event"] == "message_edited" and recent[0]["dirty_floor"] == 14
    assert {e["speaker"] for e in recent if e["event"] == "generation_started"} >= {"Eileen", "Alex"}


def test_the_model_a_front_end_names_extracts_and_a_chat_without_one_says_so(tmp_path, monkeypatch):
    for name in ("CURATOR_MODEL", "CURATOR_BASE_URL", "CURATOR_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CURATOR_CHAT_API_KEY", "chat-key")
    memory = curator.open(tmp_path / "data")
    broken = FakeOpenAI(lambda body: (400, {}, {"error": {"message": "no such model: wrong", "type": "invalid"}}))
    with FakeOpenAI() as fake, broken, ThreadedServer(create_app(memory)) as server, \
            httpx2.Client(base_url=server.url + "/api/v1", timeout=60) as http:
        chat = st_chat(2)
        nothing = open_chat(http, EILEEN, "main", chat)
        assert nothing["extraction"]["state"] == "no_model" and "SillyTavern" in nothing["extraction"]["hint"]
        settle_failed = st_harness.settle  # the job fails: a chat with no model stays due
        with pytest.raises(AssertionError):
            settle_failed(server.url, memory, nothing["chat"], timeout=5)
        named = open_chat(http, EILEEN, "main", chat, model={"base_url": fake.base_url, "model": "story-model"})
        assert named["extraction"]["state"] in ("ok", "retrying") and named["extraction"]["model"] == {
            "model": "story-model", "base_url": fake.base_url, "source": "chat"}
        st_harness.settle(server.url, memory, named["chat"], failed_before=1)
        assert http.get(f"/chats/{named['chat']}/status").json()["extraction"]["state"] == "ok"
        extraction = [r for r in fake.requests  # maintenance (on by default) asks the chat's model too
                      if r.get("tools") and r["tools"][0]["function"]["name"] == "record_memory"]
        assert len(extraction) == 3 and {r["model"] for r in extraction} == {"story-model"}
        assert {{k.lower(): v for k, v in h.items()}.get("authorization") for h in fake.headers} == {"Bearer chat-key"}
        assert memory.graph(named["chat"]).stats()["nodes_active"] >= 3
        # a key variable the operator did not allow is never sent anywhere
        for path, body in (("/frontends/sillytavern/open", {"scope": EILEEN, "file": "main", "messages": chat}),
                           ("/frontends/sillytavern/open", {"scope": EILEEN, "file": "new", "messages": chat}),
                           (f"/chats/{named['chat']}/settings", {})):
            stolen = http.request("POST" if "open" in path else "PUT", path, json={**body, "model": {
                "base_url": "http://evil.example/v1", "model": "m", "api_key_env": "HOME"}})
            assert stolen.status_code == 400 and "'HOME'" in stolen.json()["error"]["message"]
        assert memory.chat(named["chat"]).settings["model"]["base_url"] == fake.base_url
        assert len(memory.chats()) == 1  # the refused open of a new chat made none
        # a model that answers with an error: the chat says which floor failed and why
        wrong = open_chat(http, MIRA, "other", chat, model={"base_url": broken.base_url, "model": "wrong"})
        with pytest.raises(AssertionError):
            st_harness.settle(server.url, memory, wrong["chat"], timeout=5)
        status = http.get(f"/chats/{wrong['chat']}/status").json()["extraction"]
        assert status["state"] == "failing" and "no such model" in status["message"], status
    memory.close()


def test_the_proxy_chat_extracts_with_its_own_upstream_model(tmp_path, monkeypatch):
    for name in ("CURATOR_MODEL", "CURATOR_BASE_URL", "CURATOR_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UPSTREAM_KEY", "up-key")
    from curator.testing import completion, one_event

    def upstream(body):  # the chat model, and (asked with tools) the extraction
        return one_event(body) if body.get("tools") else completion(body, content=reply_text(1))

    memory = curator.open(tmp_path / "data")
    with FakeOpenAI(upstream) as fake, ThreadedServer(create_app(memory, ServiceConfig(
            upstream=fake.base_url, upstream_key_env="UPSTREAM_KEY"))) as server:
        answer = httpx2.post(f"{server.url}/v1/chats/px/chat/completions", timeout=60,
                             json={"model": "local-13b", "messages": [{"role": "user", "content": "Hello?"}]})
        assert answer.status_code == 200
        settle(server, memory, "px")
    extraction = [r for r in fake.requests if r.get("tools")]
    assert [r["model"] for r in extraction] == ["local-13b"] and memory.graph("px").stats()["nodes_active"] >= 1
    assert memory.chat("px").settings["model"] == {"base_url": fake.base_url, "model": "local-13b",
                                                   "api_key_env": "UPSTREAM_KEY"}
    memory.close()


def test_an_allowed_origin_may_read_and_write_every_other_is_refused(served):
    server, http, memory, _calls = served
    preflight = {"access-control-request-method": "POST",
                 "access-control-request-headers": "content-type, x-curator-client, authorization"}
    ok = http.options("/frontends/sillytavern/open", headers={"origin": ST, **preflight})
    assert ok.status_code == 204 and ok.headers["access-control-allow-origin"] == ST
    assert "x-curator-client" in ok.headers["access-control-allow-headers"] and "POST" in ok.headers[
        "access-control-allow-methods"] and "access-control-allow-credentials" not in ok.headers
    answer = http.post("/frontends/sillytavern/open", headers={"origin": ST},
                       json={"scope": EILEEN, "file": "x", "messages": st_chat(1)})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ST
    for origin in ("https://evil.example", "http://127.0.0.1:8001", "null"):
        refused = http.options("/frontends/sillytavern/open", headers={"origin": origin, **preflight})
        assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
        write = http.post("/frontends/sillytavern/open", headers={"origin": origin},
                          json={"scope": EILEEN, "file": "evil", "messages": []})
        assert write.status_code == 403
    form = http.post("/frontends/sillytavern/open", content=b"scope=x", headers={
        "origin": ST, "content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415  # even the allowed origin cannot write without JSON or the header
    assert [b["file"] for b in http.get("/frontends/sillytavern/bindings").json()["bindings"]] == ["x"]
    panel = httpx2.get(server.url + "/panel/")
    assert panel.headers["content-security-policy"] == f"frame-ancestors 'self' {ST}"
    assert "access-control-allow-origin" not in httpx2.get(server.url + "/api/v1/health").headers
