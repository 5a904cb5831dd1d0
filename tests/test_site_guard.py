"""Safe on loopback: what a web page in the user's browser, a rebound DNS name or a careless front end could do to
a service on 127.0.0.1 with no token, and what it now gets instead. Real uvicorn, real SQLite; the upstream model
is the fake one of test_proxy."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import httpx2
import pytest
from typer.testing import CliRunner

import curator
from curator.cli.main import app as cli_app
from curator.errors import CuratorError
from curator.testing.scripted import scripted_model
from curator.service.proxy_guard import encode_chat_id, header_chat_id
from curator.service.server import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy, lone_surrogate
from curator.service.server.runner import ThreadedServer
from curator.service.server.security import check_bind, is_loopback

from store_dump import dump_store
from test_proxy import Upstream, converse, settle  # noqa: F401 - the fake upstream model and a conversation

IDS = ["小明的聊天", "ゆきの部屋", "🐉 dragon chat", "محادثة سرية", "שיחה"]  # Chinese, Japanese, emoji, Arabic, Hebrew


def dump(memory) -> str:
    """Every row of the store, to compare before and after a refused request."""
    return dump_store(memory.data_dir)


def quiet_dump(server, memory, chat: str) -> str:
    """The store once it is still: the proxy remembers a reply after answering it, so the last turn's extraction
    job may not exist yet when `settle` first looks (seen on a loaded machine)."""
    last = None
    for _ in range(100):
        settle(server, chat)
        now = dump(memory)
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    raise AssertionError("the store did not settle")


@pytest.fixture
def served(tmp_path):
    upstream = Upstream()
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(), upstream=upstream.url))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
        http.post("/api/v1/chats", json={"id": "c"}).raise_for_status()
        http.post("/api/v1/chats/c/nodes", json={"type": "character_sheet", "fields": {"name": "Eileen"}})
        yield server, http, memory, upstream
    upstream.server.shutdown()
    memory.close()


def test_a_cross_site_form_or_text_post_changes_nothing(served):
    server, http, memory, _upstream = served
    before = dump(memory)
    form = {"content-type": "application/x-www-form-urlencoded"}
    for path in ("/api/v1/chats/c/rebuild", "/api/v1/chats/c/extract", "/api/v1/jobs/x/cancel"):
        answer = http.post(path, content=b"a=1", headers=form)
        assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_media_type"
    assert http.delete("/api/v1/chats/c").status_code == 415  # no body, no header: a form could not do it either
    text = {"content-type": "text/plain"}
    body = json.dumps({"model": "m", "user": "c", "messages": [{"role": "user", "content": "hi"}]})
    answer = http.post("/v1/chat/completions", content=body, headers=text)
    assert answer.status_code == 415 and "application/json" in answer.json()["error"]["message"]
    # the proxy takes JSON only: a custom header is not enough there
    assert http.post("/v1/chat/completions", content=body, headers={**text, "x-curator-client": "x"}).status_code == 415
    assert dump(memory) == before
    # the same body-less calls with the header the panel sends (or a JSON body) go through
    assert http.post("/api/v1/chats/c/extract", headers={"x-curator-client": "panel"}).status_code == 202
    assert http.post("/api/v1/chats/c/extract", json={}).status_code == 202


def test_a_foreign_origin_is_refused_and_the_own_origin_is_not(served):
    server, http, memory, _upstream = served
    before = dump(memory)
    for origin in ("https://evil.example", "null", "http://localhost:1"):
        answer = http.post("/api/v1/chats/c/rebuild", json={}, headers={"origin": origin})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden_origin"
    assert http.get("/api/v1/chats/c/export", headers={"origin": "https://evil.example"}).status_code == 403
    assert dump(memory) == before
    assert http.get("/api/v1/chats/c", headers={"origin": server.url}).status_code == 200


def test_an_origin_on_the_allow_list_is_accepted(tmp_path):
    memory = curator.open(tmp_path / "data")
    policy = SitePolicy(allowed_origins=("http://localhost:8000",))
    with ThreadedServer(create_app(memory, ServiceConfig(site=policy))) as server, \
            httpx2.Client(base_url=server.url) as http:
        for chat, origin, status in (("a", "http://localhost:8000", 201), ("b", "http://localhost:8001", 403)):
            assert http.post("/api/v1/chats", json={"id": chat}, headers={"origin": origin}).status_code == status
    assert memory.chats() == ["a"]
    memory.close()


def test_a_rebound_host_name_gets_421_everywhere(served):
    server, http, memory, _upstream = served
    port = server.url.rsplit(":", 1)[1]
    for method, path in (("GET", "/api/v1/chats/c/export"), ("GET", "/panel/"), ("GET", "/api/v1/health"),
                         ("POST", "/v1/chat/completions"), ("GET", "/openapi.json")):
        answer = http.request(method, path, headers={"host": f"attacker.example:{port}"}, json={})
        assert answer.status_code == 421 and answer.json()["error"]["code"] == "misdirected_request", path
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert http.get("/api/v1/chats/c", headers={"host": host}).status_code == 200


def test_the_host_allow_list_is_configurable(tmp_path):
    memory = curator.open(tmp_path / "data")
    for policy, host, status in ((SitePolicy(allowed_hosts=("curator.lan",)), "curator.lan:9", 200),
                                 (SitePolicy(allowed_hosts=("curator.lan",)), "other.lan", 421),
                                 (SitePolicy(allowed_hosts=("*",)), "any.example", 200),
                                 (SitePolicy(allowed_hosts=("*",)), "any.example|https://evil.example", 403),
                                 (SitePolicy(bind_host="10.1.2.3"), "10.1.2.3:8787", 200),
                                 (SitePolicy(bind_host="0.0.0.0"), "0.0.0.0:8787", 421)):
        with ThreadedServer(create_app(memory, ServiceConfig(site=policy, token="t"))) as server, \
                httpx2.Client(base_url=server.url, headers={"authorization": "Bearer t"}) as http:
            host, _, origin = host.partition("|")
            headers = {"host": host, **({"origin": origin} if origin else {})}
            assert http.get("/api/v1/chats", headers=headers).status_code == status, (policy, host)
    memory.close()


def test_only_loopback_addresses_count_as_loopback():
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_bind(host, None)
    for host in ("", "0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com"):
        assert not is_loopback(host)
        with pytest.raises(CuratorError):
            check_bind(host, None)
        check_bind(host, "token")


def test_lone_surrogates_are_told_from_pairs_and_escaped_backslashes():
    assert lone_surrogate(json.dumps("\ud800").encode()) and lone_surrogate(json.dumps("a\udc00b").encode())
    assert lone_surrogate(json.dumps("😀\ud83d").encode())
    assert not lone_surrogate(json.dumps("😀 小明 \\ud800").encode())  # a pair, CJK, an escaped backslash
    assert not lone_surrogate("😀".encode())


@pytest.mark.parametrize("chat_id", IDS)
def test_unicode_chat_ids_through_the_proxy_and_the_api(served, chat_id):
    server, http, memory, _upstream = served
    messages = [{"role": "user", "content": "What happens next? (turn 0)"}]
    ways = [("/v1/chat/completions", {}, {"user": chat_id}),
            (f"/v1/chats/{quote(chat_id, safe='')}/chat/completions", {}, {}),
            ("/v1/chat/completions", {"x-curator-chat": encode_chat_id(chat_id)}, {})]
    for path, headers, extra in ways:
        answer = http.post(path, json={"model": "m", "messages": messages, **extra}, headers=headers)
        assert answer.status_code == 200, answer.text
        assert header_chat_id(answer.headers["x-curator-chat"]) == chat_id
        messages = [*messages, {"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]},
                    {"role": "user", "content": f"And then? ({len(messages)})"}]
        settle(server, chat_id)
    assert memory.store.messages(chat_id)[-1].role == "assistant"  # every reply was remembered
    assert len(memory.store.messages(chat_id)) == 6
    enc = quote(chat_id, safe="")
    assert http.get(f"/api/v1/chats/{enc}").json()["id"] == chat_id
    assert http.get(f"/api/v1/chats/{enc}/export").json()["chat"]["id"] == chat_id
    assert chat_id in http.get("/api/v1/chats").json()["chats"]
    assert http.get(f"/api/v1/chats/{enc}/nodes").status_code == 200


def test_unicode_chat_ids_through_the_cli(tmp_path):
    runner = CliRunner()
    chat_file = tmp_path / "chat.jsonl"
    chat_file.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in [
        {"role": "user", "content": "你好"}, {"role": "assistant", "content": "こんにちは 🐉"}]), encoding="utf-8")
    data = ["--data", str(tmp_path / "data")]
    for chat_id in IDS:
        ingest = runner.invoke(cli_app, [*data, "ingest", str(chat_file), "--chat", chat_id, "--limit", "0"])
        assert ingest.exit_code == 0, ingest.output
        shown = runner.invoke(cli_app, [*data, "show", "--chat", chat_id, "--json"])
        assert shown.exit_code == 0 and json.loads(shown.stdout)["chat"] == chat_id
        out = tmp_path / "export.json"
        assert runner.invoke(cli_app, [*data, "export", "--chat", chat_id, "-o", str(out)]).exit_code == 0
        assert json.loads(out.read_text(encoding="utf-8"))["chat"]["id"] == chat_id
    listed = runner.invoke(cli_app, [*data, "chats", "--json"])
    assert sorted(row["chat"] for row in json.loads(listed.stdout)) == sorted(IDS)


def test_a_request_that_would_wipe_a_chat_is_refused_and_can_be_meant(served):
    server, http, memory, upstream = served
    client = __import__("openai").OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    history = converse(client, server, 4, chat="long")
    before, floors = quiet_dump(server, memory, "long"), len(memory.store.messages("long"))
    other = {"model": "m", "user": "long", "messages": [{"role": "user", "content": "A different story."}]}
    answer = http.post("/v1/chat/completions", json=other)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "rollback_refused"
    message = answer.json()["error"]["message"]  # what SillyTavern shows: it names the setting and the header
    assert "share no floor" in message and "Include Request Headers" in message
    assert "X-Curator-Allow-Rollback: true" in message and "/v1/chats/<another id>" in message
    far = [*history[:2], {"role": "user", "content": "An edit far back."}]  # from floor 1 on: 7 of 8 floors
    answer = http.post("/v1/chat/completions", json={"model": "m", "user": "long", "messages": far})
    assert answer.status_code == 409 and "leave 2 of the stored chat's 8 floors" in answer.json()["error"]["message"]
    assert dump(memory) == before and len(upstream.requests) == 4  # nothing stored, the model never called
    # a regenerate (one floor) passes; saying so lets the far edit through
    regen = http.post("/v1/chat/completions", json={"model": "m", "user": "long", "messages": history[:-1]})
    assert regen.status_code == 200
    settle(server, "long")
    meant = http.post("/v1/chat/completions", json={"model": "m", "user": "long", "messages": far},
                      headers={"x-curator-allow-rollback": "true"})
    assert meant.status_code == 200
    settle(server, "long")
    assert len(memory.store.messages("long")) == 3 < floors


def _commits(data, chat):
    memory = curator.open(data)
    try:
        return len(memory.store.commits(chat))
    finally:
        memory.close()


def test_the_cli_asks_before_erasing(tmp_path, monkeypatch):
    from curator.paths import example_file

    runner = CliRunner()
    data = ["--data", str(tmp_path / "data")]
    assert runner.invoke(cli_app, [*data, "import", str(example_file("lantern_road.graph.json")), "--chat", "r"]
                         ).exit_code == 0
    for floor in range(4):  # a few more commits to revert
        node = {"op": "create_node", "type": "character_sheet", "fields": {"name": f"Extra {floor}"}}
        memory = curator.open(tmp_path / "data")
        memory.commit("r", [node], 59, "manual", "extra")
        memory.close()
    assert _commits(tmp_path / "data", "r") == 5
    negative = runner.invoke(cli_app, [*data, "rollback", "--chat", "r", "--floor", "-5"])
    assert negative.exit_code == 1 and "floors start at 0" in negative.output
    monkeypatch.setattr("curator.cli.guards.os.isatty", lambda fd: True)
    declined = runner.invoke(cli_app, [*data, "rollback", "--chat", "r", "--floor", "0"], input="n\n")
    assert declined.exit_code == 1 and "Revert 5 commits" in declined.output
    assert _commits(tmp_path / "data", "r") == 5
    assert runner.invoke(cli_app, [*data, "rollback", "--chat", "r", "--floor", "0", "--yes"]).exit_code == 0
    assert _commits(tmp_path / "data", "r") == 0


def test_ingest_of_a_file_without_chat_messages_is_refused(tmp_path):
    runner = CliRunner()
    data = ["--data", str(tmp_path / "data")]
    good = tmp_path / "good.jsonl"
    good.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    assert runner.invoke(cli_app, [*data, "ingest", str(good), "--chat", "c", "--limit", "0"]).exit_code == 0
    memory = curator.open(tmp_path / "data")
    memory.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Kept"}}], 1)
    before = dump(memory)
    memory.close()
    header_only = tmp_path / "header.jsonl"
    header_only.write_text('{"user_name": "U", "character_name": "C", "chat_metadata": {}}\n')
    system_only = tmp_path / "system.jsonl"
    system_only.write_text('{"role": "system", "content": "You are the narrator."}\n')
    for path in (header_only, system_only):
        refused = runner.invoke(cli_app, [*data, "ingest", str(path), "--chat", "c"])
        assert refused.exit_code == 1 and "no chat messages" in refused.output
    memory = curator.open(tmp_path / "data")
    assert dump(memory) == before
    memory.close()
