"""Nothing lost, nothing blocked (issue 30), tried as a user and as bad luck would: broken configs, damaged and
emptied databases, read-only data directories, forged and rebound requests, ids that cannot be addressed, huge
messages, floors that are not integers, a service with no extraction model, front-end requests that are no chat
turn, stopped streams, edits far back. Every case counts as an attempt; each must be refused cleanly (one line, the
store unchanged) or handled (no memory lost). `pytest -s` prints the tally."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from pydantic_ai.models.function import FunctionModel
from typer.testing import CliRunner

import curator
from curator.cli.main import app as cli_app
from curator.errors import CuratorError
from curator.service.server import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy
from curator.service.server.runner import ThreadedServer
from curator.store.location import SETTINGS_KEYS
from curator.store.messages import Message
from curator.testing import FakeOpenAI, completion, one_event
from curator.testing.scripted import reply_text, scripted_chat, scripted_model

import st_harness
from store_dump import dump_store

TALLY: Counter = Counter()  # category -> attempts; every attempt below is also an assertion
CLIENT = {"x-curator-client": "test"}
sqlite_only = pytest.mark.engine("sqlite", reason="a memory.db file is SQLite's own")
# what the HTTP layer and the proxy's reading of requests do does not depend on the store engine: one run is enough
once = pytest.mark.engine("sqlite", reason="the HTTP layer's and the proxy's own behaviour: the SQLite run covers it")


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield
    print(f"\nadversarial safety: {sum(TALLY.values())} attempts in {len(TALLY)} categories, all held: "
          + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))


def attempt(category: str) -> None:
    TALLY[category] += 1


def cli(data: Path, *args: str, input: str | None = None):
    """The command's result; `.flat` is its output as one line (the terminal wraps long messages)."""
    result = CliRunner().invoke(cli_app, ["--data", str(data), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    result.flat = "".join(result.output.split())
    return result


def says(result, text: str) -> bool:
    """Whether the output holds `text`, however the terminal wrapped it."""
    return "".join(text.split()) in result.flat


def seeded(data: Path, chat: str = "c", floors: int = 8) -> None:
    with curator.open(data) as memory:
        memory.create_chat(chat, "default")
        memory.sync(chat, scripted_chat(floors), extract=True, model=scripted_model())


# ---- configs, damaged and emptied stores, read-only data directories -------------------------------------------

COMMANDS = [["chats"], ["show", "--chat", "c"], ["export", "--chat", "c"], ["history", "--chat", "c"],
            ["rollback", "--chat", "c", "--floor", "0", "--yes"], ["undo", "--chat", "c"], ["init", "--chat", "x"],
            ["recall", "--chat", "c", "--query", "x"], ["usage", "--chat", "c"], ["store", "check"]]


def test_every_command_refuses_a_config_it_cannot_read(tmp_path):
    """A config.yaml that names a PostgreSQL store but does not parse (or misspells `store:`) must stop every
    command: going on would write a new local memory.db beside the real store (a split brain)."""
    chat_file = tmp_path / "chat.jsonl"
    chat_file.write_text("\n".join(json.dumps({"role": m.role, "content": m.text}) for m in scripted_chat(4)))
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps({"format": "memory-curator/graph", "nodes": [], "edges": []}))
    broken = {"bad YAML": "store: postgresql://u:p@db.example/memory\nrecall: [unclosed\n",
              "misspelt store": "stor: postgresql://u:p@db.example/memory\n",
              "a list": "- store: postgresql://u:p@db.example/memory\n",
              "not UTF-8": b"store: \xff\xfe\n"}
    commands = [*COMMANDS, ["import", str(graph), "--chat", "c"], ["ingest", str(chat_file), "--chat", "c"],
                ["sync", str(chat_file), "--chat", "c"]]
    for label, text in broken.items():
        data = tmp_path / label.replace(" ", "-")
        data.mkdir()
        (data / "config.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
        for args in commands:
            attempt("config it cannot read")
            result = cli(data, *args)
            assert result.exit_code == 1 and says(result, "config.yaml"), (label, args, result.output)
            assert not (data / "memory.db").exists(), (label, args)  # no split brain


def test_the_settings_keys_the_store_knows_are_the_settings():
    from curator.settings import Settings

    assert SETTINGS_KEYS == set(Settings.model_fields)


def _damage_an_index(data: Path) -> None:
    """Flip bits in the cells of one index's root page: the table rows stay, the index no longer matches them."""
    db = data / "memory.db"
    with sqlite3.connect(db) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name='node_names_by_node'").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    raw = bytearray(db.read_bytes())
    at = (root - 1) * size
    raw[at + size - 200:at + size - 10] = bytes(b ^ 0x01 for b in raw[at + size - 200:at + size - 10])
    db.write_bytes(bytes(raw))


@sqlite_only
def test_a_damaged_store_takes_no_writes_until_repaired(tmp_path):
    data = tmp_path / "data"
    seeded(data)
    _damage_an_index(data)
    before = (data / "memory.db").read_bytes()
    for args in (["rollback", "--chat", "c", "--floor", "0", "--yes"], ["init", "--chat", "x"],
                 ["history", "purge", "--chat", "c", "--all", "--yes"]):
        attempt("damaged store")
        result = cli(data, *args)
        assert result.exit_code == 1 and says(result, "integrity check"), result.output
        assert says(result, "curator store check --repair")
        assert (data / "memory.db").read_bytes() == before
    assert cli(data, "store", "check").exit_code == 1
    repaired = cli(data, "store", "check", "--repair", "--json")
    report = json.loads(repaired.stdout)
    assert repaired.exit_code == 0 and report["ok"] and report["before"] and report["after"] == []
    assert Path(report["backup"]).read_bytes() == before  # the damaged file is kept
    assert cli(data, "rollback", "--chat", "c", "--floor", "0", "--yes").exit_code == 0


@sqlite_only
def test_an_emptied_memory_db_is_an_error_not_an_empty_store(tmp_path):
    data = tmp_path / "data"
    seeded(data)
    (data / "memory.db").write_bytes(b"")
    os.utime(data / "memory.db", (time.time() - 60, time.time() - 60))
    for args in COMMANDS:
        attempt("0-byte memory.db")
        result = cli(data, *args)
        assert result.exit_code == 1 and says(result, "is empty (0 bytes)"), (args, result.output)
        assert (data / "memory.db").stat().st_size == 0
    with pytest.raises(CuratorError, match="0 bytes"):
        curator.open(data)


@pytest.fixture
def read_only(tmp_path):
    """A data directory (with its vector index, copied while open so its -wal and -shm files are there) bind-mounted
    read-only: a real read-only file system, which root cannot write either."""
    source, data = tmp_path / "source", tmp_path / "data"
    with curator.open(source) as memory:
        memory.create_chat("c", "default")
        memory.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Eileen"}}], 0)
        memory.settings = memory.settings.model_copy(update={"embedding": memory.settings.embedding.model_copy(
            update={"provider": "local", "model": "use-m3"})})
        shutil.copytree(source, data)
    (data / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(data), str(data)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {mounted.stderr.decode().strip()}")
    try:
        yield data
    finally:
        subprocess.run(["umount", str(data)], check=True)


@sqlite_only
def test_a_read_only_data_directory_gives_one_line(read_only):
    for args in (["recall", "--chat", "c", "--query", "Eileen"], ["vectors", "status", "--chat", "c"],
                 ["rollback", "--chat", "c", "--floor", "0", "--yes"], ["init", "--chat", "x"],
                 ["history", "--chat", "c"]):
        attempt("read-only data directory")
        result = cli(read_only, *args)
        assert result.exit_code in (0, 1) and "Traceback" not in result.output, (args, result.output)
        if result.exit_code:
            assert says(result, "writ"), (args, result.output)  # says what to do: writable, --data


# ---- the service: forged and rebound requests, unaddressable ids, strict floors, methods ------------------------

@pytest.fixture(scope="module")
def any_host(tmp_path_factory):
    """A service started with `--allow-host '*'`, a chat with memory in it."""
    data = tmp_path_factory.mktemp("anyhost") / "data"
    seeded(data)
    memory = curator.open(data)
    upstream = st_harness.Upstream()
    app = create_app(memory, ServiceConfig(site=SitePolicy(allowed_hosts=("*",)), model=scripted_model(),
                                           upstream=upstream.url))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
        yield server, http, memory, data
    upstream.close()
    memory.close()


@once
def test_allow_host_star_keeps_the_origin_check(any_host):
    """With every Host allowed, a DNS-rebinding page (its own name in Host and Origin) still cannot write."""
    server, http, memory, data = any_host
    port = server.url.rsplit(":", 1)[1]
    before = dump_store(data)
    for host in ("attacker.example", "192.168.1.66", "localhost.evil"):
        for method, path, body in (("POST", "/api/v1/chats/c/rollback", {"floor": 0}),
                                   ("DELETE", "/api/v1/chats/c/trash?all=true", None),
                                   ("DELETE", "/api/v1/chats/c", None), ("POST", "/api/v1/chats/c/undo", {}),
                                   ("POST", "/v1/chat/completions", {"model": "m", "user": "c", "messages": [
                                       {"role": "user", "content": "wipe"}]})):
            attempt("--allow-host '*' and a rebinding page")
            headers = {"host": f"{host}:{port}", "origin": f"http://{host}:{port}", **CLIENT}
            answer = http.request(method, path, json=body, headers=headers)
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden_origin", (host, path)
    assert dump_store(data) == before
    own = {"host": f"127.0.0.1:{port}", "origin": f"http://127.0.0.1:{port}"}  # the panel's own pages still work
    assert http.post("/api/v1/chats/c/rollback", json={"floor": 7}, headers=own).status_code == 200
    assert http.get("/api/v1/chats/c", headers={"host": f"anything.example:{port}"}).status_code == 200  # '*'


def test_ids_that_cannot_be_addressed_are_refused_at_creation(any_host, tmp_path):
    server, http, memory, data = any_host
    before = dump_store(data)
    for chat_id in ("a/b", "/", "..", ".", "x%2Fy", "a%41b", "\ufffd", "bad\ufffdid"):
        attempt("unaddressable chat id")
        answer = http.post("/api/v1/chats", json={"id": chat_id})
        assert answer.status_code == 400 and "could not be addressed" in answer.json()["error"]["message"], chat_id
        attempt("unaddressable chat id")
        proxied = http.post("/v1/chat/completions", json={"model": "m", "user": chat_id,
                                                          "messages": [{"role": "user", "content": "hi"}]})
        assert proxied.status_code == 400, (chat_id, proxied.text)
    for raw in ("%ff", "%fe", "%c3%28"):  # invalid UTF-8 sequences: none becomes a chat, none collides with one
        attempt("unaddressable chat id")
        proxied = http.post(f"/v1/chats/{raw}/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "hi"}]})
        assert proxied.status_code == 400, (raw, proxied.text)
    assert dump_store(data) == before
    result = cli(tmp_path / "cli", "init", "--chat", "a/b")
    attempt("unaddressable chat id")
    assert result.exit_code == 1 and says(result, "could not be addressed")
    for chat_id in ("小明的聊天", "100%", "a%zz", "émile: part 2"):  # odd but addressable ids still work
        assert http.post("/api/v1/chats", json={"id": chat_id}).status_code == 201, chat_id
        assert http.get(f"/api/v1/chats/{quote(chat_id, safe='')}").json()["id"] == chat_id


def test_rollback_floors_are_strict_integers(any_host):
    server, http, memory, data = any_host
    before = dump_store(data)
    for floor in (True, False, "7", 7.0, 7.5, -1, 2**63, None, [7], {"n": 7}):
        attempt("rollback floor that is not an integer")
        answer = http.post("/api/v1/chats/c/rollback", json={"floor": floor})
        assert answer.status_code == 422, (floor, answer.text)
    assert dump_store(data) == before
    for floor in (True, "7", 7.0, -1):
        attempt("rollback floor that is not an integer")
        with pytest.raises(CuratorError):
            memory.rollback("c", floor)
    assert dump_store(data) == before


@once
def test_a_wrong_method_is_405_not_415(any_host):
    server, http, memory, data = any_host
    for method, path in (("DELETE", "/api/v1/health"), ("POST", "/api/v1/chats/c/export"),
                         ("PUT", "/api/v1/chats/c/trash"), ("PATCH", "/api/v1/chats"), ("DELETE", "/v1/models")):
        attempt("wrong method")
        answer = http.request(method, path)  # no JSON, no header: a route that does not take the method says 405
        assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed", (method, path)
    attempt("wrong method")
    assert http.post("/api/v1/chats/c/rollback", content=b"floor=0").status_code == 415  # a real route: still 415


# ---- extraction: huge messages, no model at start, the upstream's model ----------------------------------------

def _recording(prompts: list[str]) -> FunctionModel:
    inner = scripted_model()

    def answer(messages, info):
        prompts.append(messages[0].parts[-1].content)
        return inner.function(messages, info)

    return FunctionModel(answer, model_name="recording")


@once
def test_a_huge_message_is_cut_to_the_models_context_with_a_note(memory):
    from curator.llm.tokens import count_tokens

    memory.create_chat("big", "default")
    huge = "Rowan went to the mill and found a lantern. " * 120_000  # 5.3 MB, about 1.2 million tokens
    memory.set_messages("big", [Message("user", "Alex", "Tell me everything."), Message("assistant", "Eileen", huge)])
    prompts: list[str] = []
    attempt("message beyond the model's context")
    result = memory.extract("big", model=_recording(prompts))[0]
    assert result.ok and result.cut and result.cut[1] > 5_000_000
    assert count_tokens(prompts[0]) < 32_000 and "characters of this message left out" in prompts[0]
    assert memory.usage("big")["usage"]["total"]["calls"] == 1


@pytest.fixture
def bare_service(tmp_path, monkeypatch):
    """A service with no extraction model configured (no profile, no CURATOR_MODEL), in front of a fake upstream
    that answers chat turns with text and extraction requests (which carry tools) with one event."""

    def respond(body: dict) -> dict:
        return one_event(body) if body.get("tools") else completion(body, content=reply_text(1))

    monkeypatch.delenv("CURATOR_MODEL", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")
    with FakeOpenAI(respond) as upstream:
        memory = curator.open(data)
        app = create_app(memory, ServiceConfig(upstream=upstream.base_url))
        with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
            yield http, memory, upstream, server
        memory.close()


def test_no_extraction_model_is_a_visible_warning_and_the_upstream_extracts(bare_service, monkeypatch):
    http, memory, upstream, server = bare_service
    attempt("no extraction model")
    health = http.get("/api/v1/health").json()["extraction"]
    assert health["ok"] and health["source"] == "upstream" and "no extraction model configured" in health["warning"]
    answer = http.post("/v1/chats/c/chat/completions", json={"model": "story-model", "messages": [
        {"role": "user", "content": "What happens next? (turn 0)"}]})
    assert answer.status_code == 200
    st_harness.settle(server.url, memory, "c")
    extraction = [r for r in upstream.requests if r.get("tools")]
    assert extraction and extraction[0]["model"] == "story-model"  # the front end's model, at the upstream
    assert [c.origin for c in memory.store.commits("c")] == ["extract"]
    assert memory.chat("c").settings["model"]["model"] == "story-model"  # the chat's own model, kept with it
    assert http.get("/api/v1/health").json()["extraction"]["source"] == "upstream"


@once
def test_without_an_upstream_the_missing_model_is_an_error_in_health_and_the_banner(tmp_path, monkeypatch):
    monkeypatch.delenv("CURATOR_MODEL", raising=False)
    attempt("no extraction model")
    memory = curator.open(tmp_path / "data")
    with ThreadedServer(create_app(memory, ServiceConfig(proxy=False))) as server:
        health = httpx2.get(server.url + "/api/v1/health").json()["extraction"]
    memory.close()
    assert not health["ok"] and "every reply's extraction will fail" in health["warning"]
    (tmp_path / "off").mkdir()
    (tmp_path / "off" / "config.yaml").write_text("extraction: {upstream_fallback: false}\n")
    port = st_harness.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CURATOR_MODEL",)}
    attempt("no extraction model")
    proc = subprocess.Popen([sys.executable, "-m", "curator", "--data", str(tmp_path / "off"), "serve", "--port",
                             str(port), "--upstream", "http://127.0.0.1:9/v1"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env={**env, "COLUMNS": "300"}, text=True)
    try:
        banner = ""
        deadline = time.monotonic() + 120
        # the warning follows the banner: it is worked out while the app loads, the port already answering
        while not ("memory-curator service on" in banner and "extraction will fail" in banner) \
                and time.monotonic() < deadline and proc.poll() is None:
            banner += proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(30)
    assert "warning:" in banner and "extraction will fail" in banner, banner


@once
def test_the_upstream_timeout_is_settable(tmp_path):
    upstream = st_harness.Upstream(delay=3.0)
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model(), upstream=upstream.url, upstream_timeout=0.5))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=30) as http:
        attempt("slow upstream")
        began = time.monotonic()
        answer = http.post("/v1/chats/t/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "hi"}]})
        assert answer.status_code == 504 and time.monotonic() - began < 2.9
    upstream.close()
    memory.close()


# ---- the proxy: edits far back, requests that are no chat turn, stopped streams, names -----------------------------

POST_HISTORY = {"role": "system", "content": "[Stay in character as Eileen; never write for Alex.]"}


@pytest.fixture
def proxied(tmp_path):
    """The service in front of a streaming upstream, its extraction model recording every prompt."""
    upstream = st_harness.Upstream(chunk_delay=0.01)
    prompts: list[str] = []
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=_recording(prompts), upstream=upstream.url))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=60) as http:
        yield http, upstream, memory, server, prompts
    upstream.close()
    memory.close()


def floors_extracted(prompts: list[str]) -> list[int]:
    return [int(p.split("## Newest reply", 1)[1].split("[floor ", 1)[1].split("]", 1)[0]) for p in prompts]


def turn(http, server, memory, upstream, chat, history, text, reply, *, stream=False, extra=(), **body):
    """One chat turn as a front end sends it (system prompt, history, the user's message, post-history
    instructions); the reply is added to `history` as the front end keeps it."""
    history.append({"role": "user", "content": text})
    upstream.queue.append([reply])
    answer = http.post(f"/v1/chats/{chat}/chat/completions", json={
        "model": "m", "stream": stream, "messages": [{"role": "system", "content": "You are Eileen."}, *history,
                                                      POST_HISTORY, *extra], **body})
    assert answer.status_code == 200, answer.text
    history.append({"role": "assistant", "content": st_harness.sse_text(answer.text) if stream else
                    answer.json()["choices"][0]["message"]["content"]})
    st_harness.settle(server.url, memory, chat)
    return answer


def test_an_edit_far_back_goes_through_is_reported_and_is_restored_in_one_call(proxied):
    http, upstream, memory, server, prompts = proxied
    history: list[dict] = []
    for n in range(8):
        turn(http, server, memory, upstream, "far", history, f"What happens next? (turn {n})", reply_text(2 * n + 1))
    before = (memory.graph("far").snapshot(), memory.store.messages("far"))
    assert floors_extracted(prompts) == list(range(1, 16, 2))
    edited = [dict(m) for m in history]
    edited[1]["content"] = "Mira went to the chapel and found nothing at all."  # the first reply, 14 floors back
    attempt("an edit far back (must not be blocked)")
    answer = turn(http, server, memory, upstream, "far", edited, "Go on.", reply_text(17))
    assert "from floor 1 (edited)" in answer.headers["x-curator-reverted"]
    batch = int(answer.headers["x-curator-reverted-batch"])
    assert floors_extracted(prompts)[8:] == list(range(1, 18, 2))  # the edited chat extracted again, once a reply
    overview = http.get("/api/v1/chats/far/overview").json()
    assert overview["reverted"][0]["id"] == batch and overview["reverted"][0]["reason"] == "proxy"
    restored = http.post("/api/v1/chats/far/undo", json={"batch": batch, "extract": False}, headers=CLIENT)
    assert restored.status_code == 200 and (memory.graph("far").snapshot(), memory.store.messages("far")) == before
    # what still needs a deliberate signal: a request that replaces the chat or empties most of it
    stored = dump_store(memory.data_dir)
    for messages, says_what in (([{"role": "user", "content": "A different story."}], "share no floor"),
                                (history[:3] + [{"role": "user", "content": "Start over."}], "leave 4 of")):
        attempt("a request that would replace or empty the chat")
        refused = http.post("/v1/chats/far/chat/completions", json={"model": "m", "messages": messages})
        error = refused.json()["error"]
        assert refused.status_code == 409 and error["code"] == "rollback_refused" and says_what in error["message"]
        # SillyTavern shows the message only: it names the setting and the header
        assert "Additional Parameters > Include Request Headers" in error["message"]
        assert "`X-Curator-Allow-Rollback: true`" in error["message"]
    assert dump_store(memory.data_dir) == stored


@once
def test_quiet_system_only_and_impersonate_requests_never_become_floors(proxied):
    http, upstream, memory, server, prompts = proxied
    history: list[dict] = []
    for n in range(2):
        turn(http, server, memory, upstream, "q", history, f"What happens next? (turn {n})", reply_text(2 * n + 1),
             stream=True)
    floors = len(memory.store.messages("q"))
    chat = [{"role": "system", "content": "You are Eileen."}, *history, POST_HISTORY]
    requests = [("system-only", [{"role": "system", "content": "Summarize the story."}], False)]
    requests += [(f"/gen {n}", [*chat, {"role": "system", "content": f"Write a haiku about the lantern ({n})."}],
                  False) for n in range(5)]  # SillyTavern never streams a quiet prompt
    requests.append(("rewritten impersonation", [*chat, {"role": "system", "content": "Now write Alex's next line."}],
                     True))
    for label, messages, stream in requests:
        attempt("a request that is no chat turn")
        upstream.queue.append([f"An answer to {label}."])
        answer = http.post("/v1/chats/q/chat/completions", json={"model": "m", "stream": stream, "messages": messages})
        assert answer.status_code == 200 and answer.headers["x-curator-kind"] == "quiet", label
        st_harness.settle(server.url, memory, "q")
        assert len(memory.store.messages("q")) == floors, label
    attempt("a request that is no chat turn")
    turn(http, server, memory, upstream, "q", history, "And then?", reply_text(5), stream=True)  # no 409, no rollback
    assert [m.text for m in memory.store.messages("q")] == [m["content"] for m in history]
    assert floors_extracted(prompts) == [1, 3, 5] and memory.trash("q") == []


@once
def test_a_stopped_reply_costs_one_extraction(proxied):
    http, upstream, memory, server, prompts = proxied
    history: list[dict] = []
    turn(http, server, memory, upstream, "s", history, "Hello.", reply_text(1))
    history.append({"role": "user", "content": "Tell me a long story."})
    upstream.queue.append(["Rowan went to the mill and found a lantern. " * 30])
    got = ""
    attempt("a stopped stream")
    with http.stream("POST", "/v1/chats/s/chat/completions", json={"model": "m", "stream": True, "messages": [
            {"role": "system", "content": "You are Eileen."}, *history, POST_HISTORY]}) as answer:
        for line in answer.iter_lines():  # the user presses Stop after some words
            got += st_harness.sse_text(line + "\n")
            if len(got) > 120:
                break
    st_harness.settle(server.url, memory, "s")
    shown = got[:len(got) - 15].strip()  # what the front end had shown when the stop took effect, trimmed
    history.append({"role": "assistant", "content": shown})
    turn(http, server, memory, upstream, "s", history, "Go on.", reply_text(5))
    assert floors_extracted(prompts) == [1, 3, 5] and memory.trash("s") == []  # the stopped reply: one extraction
    assert memory.store.messages("s")[3].text == shown


@once
def test_the_reply_is_named_as_the_front_end_names_the_speaker(proxied):
    http, upstream, memory, server, prompts = proxied
    history: list[dict] = []
    turn(http, server, memory, upstream, "n", history, "Hello.", reply_text(1))
    history[-1]["name"] = "Eileen"  # names behaviour "Completion Object": the front end's copy names the speaker
    attempt("the speaker's name")
    turn(http, server, memory, upstream, "n", history, "And then?", reply_text(3))
    assert memory.store.messages("n")[3].name == "Eileen" and "Eileen (assistant)" in prompts[-1].split(
        "## Newest reply", 1)[1]
    content = [{"role": m["role"], "content": f"{'Eileen' if m['role'] == 'assistant' else 'Alex'}: {m['content']}"}
               for m in history]  # names behaviour "Message Content": every message starts "Name: "
    attempt("the speaker's name")
    turn(http, server, memory, upstream, "n", content, "Alex: Onwards.", reply_text(5))
    assert memory.store.messages("n")[5].name == "Eileen" and floors_extracted(prompts) == [1, 3, 5]


@once
def test_only_a_name_the_chat_uses_is_taken_for_a_name_prefix(proxied):
    http, upstream, memory, server, prompts = proxied
    history: list[dict] = []
    turn(http, server, memory, upstream, "h", history, "Begin.", "Chapter 3: The bridge burns.")
    turn(http, server, memory, upstream, "h", history, "Next.", reply_text(3))
    history[1]["content"] = "Chapter 4: The bridge burns."  # an edit of the heading: a change, not a copy
    attempt("a heading taken for a name")
    answer = turn(http, server, memory, upstream, "h", history, "Go on.", reply_text(5))
    assert "from floor 1 (edited)" in answer.headers["x-curator-reverted"]
    assert memory.store.messages("h")[1].text == "Chapter 4: The bridge burns."
    assert floors_extracted(prompts) == [1, 3, 1, 3, 5]
