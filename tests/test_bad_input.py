"""The adversarial walk: every route of the service (enumerated from the app's own OpenAPI document, plus the proxy)
and the CLI commands get the same table of bad values (huge integers, deep JSON, lone surrogates, wrong shapes,
negative limits, odd ids). Nothing may answer 5xx (or, on the CLI, end in a traceback), every refusal has the
documented `{"error": {code, message, hint}}` shape (CLI: a message and exit code 1 or 2), and a refused request
leaves the store exactly as it was. The counts are printed (`pytest -s`) for the record."""

from __future__ import annotations

import json
import shutil
import sqlite3
from urllib.parse import quote

import httpx2
import pytest
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

import curator
from curator.llm.access import Models
from curator.cli.main import app as cli_app
from curator.testing.scripted import scripted_chat, scripted_model
from curator.paths import example_file
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.store.location import store_url

from store_dump import StoreDump, dump_store
from test_proxy import Upstream

DEPTH = 100_000


class RawJSON(str):
    """JSON text spliced into a body as it is (what json.dumps cannot write: lone surrogates, deep nesting)."""


HUGE = 2**63
# (name, JSON value or raw JSON text) for body fields and bodies; the same names, as text, for paths and queries
BAD_VALUES: list[tuple[str, object]] = [
    ("huge_int", HUGE), ("huge_negative", -HUGE - 1), ("1e20", 10**20), ("negative", -1), ("float", 1e308),
    ("bool", True), ("null", None), ("empty_string", ""), ("long_string", "x" * 5000), ("list", []),
    ("object", {"a": {"b": 1}}), ("traversal", "../../etc/passwd"), ("rtl", "\u202eevil"), ("nul", "a\x00b"),
    ("chinese", "小明的聊天"), ("emoji", "🐉"),
    ("surrogate", RawJSON('"\\ud800"')),
    ("deep", RawJSON("[" * 5000 + "]" * 5000)),  # past any parser's recursion limit; 100k-deep bodies below
]
BAD_TEXT = [str(HUGE), str(-HUGE - 1), "1" + "0" * 20, "-1", "1e308", "NaN", "", "x" * 5000, "../..", "%2e%2e%2fx",
            "%ED%A0%80", "%00", "a%2Fb", "小明", "🐉", "\u202eevil", "[]"]
BROKEN_BODIES = [b"{not json", b"[" * DEPTH + b"]" * DEPTH, b'{"a": "\\ud800"}', b"\xff\xfe", b"null", b"[]", b"1"]


def _raw(value) -> bytes:
    return value.encode() if isinstance(value, RawJSON) else json.dumps(value).encode()


def _body_with(base: dict, field: str, value) -> bytes:
    """`base` with `field` set to `value`, as JSON text (raw values spliced in as they are)."""
    if not isinstance(value, RawJSON):
        return json.dumps({**base, field: value}).encode()
    rest = json.dumps({k: v for k, v in base.items() if k != field})
    return (rest[:-1] + (", " if len(rest) > 2 else "") + json.dumps(field) + ": " + value + "}").encode()


def dump(data_dir) -> str:
    return dump_store(data_dir)


SEED = scripted_chat(6)
MESSAGE = {"role": "user", "text": "hi"}
BASES = {  # a valid body per route, so a bad field reaches past the first check
    ("POST", "/api/v1/chats"): {"id": "fresh"},
    ("PUT", "/api/v1/chats/{chat_id}/settings"): {"extraction": {}, "maintenance": {}},
    ("POST", "/api/v1/chats/{chat_id}/sync"): {"messages": [MESSAGE], "start": 6, "extract": False},
    ("POST", "/api/v1/chats/{chat_id}/nodes"): {"type": "character_sheet", "fields": {"name": "Probe"}},
    ("PATCH", "/api/v1/chats/{chat_id}/nodes/{node_id}"): {"title": "Eileen"},
    ("POST", "/api/v1/chats/{chat_id}/recall"): {"query": "lantern"},
    ("POST", "/api/v1/chats/{chat_id}/recall/try"): {"query": "lantern"},
    ("POST", "/api/v1/chats/{chat_id}/rollback"): {"floor": 5},
    ("POST", "/api/v1/chats/{chat_id}/curate"): {"dry_run": True},
    ("POST", "/api/v1/chats/{chat_id}/import"): {"mode": "bind_latest"},
    ("POST", "/api/v1/chats/{chat_id}/scouts"): {"message": "lantern"},
    ("POST", "/api/v1/chats/{chat_id}/contradictions/{contradiction_id}"): {"action": "drop"},
    ("PUT", "/api/v1/prompts/{name}"): {"text": "x"},
    ("POST", "/v1/chat/completions"): {"model": "m", "user": "c", "messages": [{"role": "user", "content": "hi"}]},
    ("POST", "/v1/chats/{chat_id}/chat/completions"): {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ("POST", "/api/v1/frontends/{frontend}/open"): {"scope": "character:probe.png", "file": "probe",
                                                    "messages": [MESSAGE], "extract": False},
    ("POST", "/api/v1/frontends/{frontend}/rename"): {"scope": "character:probe.png", "file": "probe",
                                                      "new_file": "probe 2"},
    ("POST", "/api/v1/frontends/{frontend}/forget"): {"scope": "character:probe.png", "file": "probe 2"},
    ("POST", "/api/v1/chats/{chat_id}/fork"): {"floor": 2},
    ("POST", "/api/v1/chats/{chat_id}/events"): {"event": "sync", "messages": [MESSAGE], "start": 6,
                                                 "extract": False},
}
PROXY_FIELDS = ["model", "user", "messages", "stream"]


class Walk:
    def __init__(self, http, memory, data_dir):
        self.http, self.memory, self.data_dir = http, memory, data_dir
        # SQLite: PRAGMA data_version changes whenever another connection (the service's) commits, a cheap "store
        # changed"; PostgreSQL has no such counter, so there the whole store's rows are compared.
        self.dumper = StoreDump(data_dir)
        self.watch = None if self.dumper.url else sqlite3.connect(data_dir / "memory.db", isolation_level=None,
                                                                  check_same_thread=False)
        self.tried = self.server_errors = self.changed = self.bad_shape = 0
        self.failures: list[str] = []

    def settle(self):
        for _ in range(600):
            if not any(j["state"] in ("queued", "running") for j in self.http.get("/api/v1/jobs").json()["jobs"]):
                return
            __import__("time").sleep(0.02)

    def seed(self):
        """Chat `c` with six floors and an `Eileen` node, whatever the previous requests did to it."""
        memory = self.memory
        if not memory.store.has_chat("c"):
            memory.create_chat("c", "default")
        if len(memory.store.messages("c")) != len(SEED) or memory.store.messages("c")[-1].hash != SEED[-1].hash:
            memory.sync("c", SEED, 0)
        graph = memory.graph("c")
        found = list(graph.find_by_name("Eileen", ["character_sheet"]))
        if not found:
            memory.commit("c", [{"op": "create_node", "type": "character_sheet", "fields": {"name": "Eileen"}}], 5)
            found = graph.find_by_name("Eileen", ["character_sheet"])
        return found[0].id

    def version(self) -> int | str:
        if self.watch is None:
            return self.dumper.dump()
        return self.watch.execute("PRAGMA data_version").fetchone()[0]

    def send(self, method: str, path: str, what: str, *, params=None, content: bytes | None = None):
        before = self.version()
        headers = {"content-type": "application/json"} if content is not None else {"x-curator-client": "walk"}
        answer = self.http.request(method, path, params=params, content=content, headers=headers)
        self.tried += 1
        where = f"{method} {path[:80]} {what}"
        if answer.status_code >= 500:
            self.server_errors += 1
            self.failures.append(f"{where}: {answer.status_code} {answer.text[:200]}")
        elif answer.status_code >= 400:
            error = answer.json().get("error") if answer.headers.get("content-type", "").startswith(
                "application/json") else None
            if not (isinstance(error, dict) and {"code", "message", "hint"} <= set(error)):
                self.bad_shape += 1
                self.failures.append(f"{where}: {answer.status_code} not in the error shape: {answer.text[:200]}")
            if self.version() != before:
                self.changed += 1
                self.failures.append(f"{where}: refused with {answer.status_code} but the store changed")
        elif method != "GET":
            self.quiet()

    def quiet(self):
        """Wait for what an accepted request left running (jobs; the proxy's remembering of the reply, which
        runs after the answer is sent) to end: the store is still for two looks in a row."""
        last = None
        for _ in range(200):
            self.settle()
            now = self.version()
            if now == last:
                return
            last = now
            __import__("time").sleep(0.05)


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    data = tmp_path_factory.mktemp("walk") / "data"
    memory = curator.open(data)
    upstream = Upstream()
    app = create_app(memory, ServiceConfig(models=Models(scripted_model(), TestModel(call_tools=[]),
                                                                  TestModel(call_tools=[])), upstream=upstream.url))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url, timeout=60) as http:
        yield Walk(http, memory, data), app
    upstream.server.shutdown()
    memory.close()


# The proxy's pass-through endpoints relay the upstream's own answers, status and body unchanged (what a front end
# expects of an OpenAI-compatible server); they touch no store. tests/test_proxy_frontends.py covers them.
PASS_THROUGH = {"models", "embeddings", "completions"}


def _routes(app) -> list[tuple[str, str, list[str], list[str], list[str] | None]]:
    """(method, path, path params, query params, body fields or None) of every route the app documents."""
    spec = app.openapi()
    schemas = spec.get("components", {}).get("schemas", {})
    routes = []
    for path, ops in spec["paths"].items():
        if path.rsplit("/", 1)[-1] in PASS_THROUGH and not path.endswith("/chat/completions"):
            continue
        for method, op in ops.items():
            params = op.get("parameters", [])
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            fields = None
            if body is not None:
                body = schemas.get(body.get("$ref", "").rsplit("/", 1)[-1], body)
                fields = list(body.get("properties", {})) or ["schema", "name", "types"]
            if path.startswith("/v1/"):
                fields = PROXY_FIELDS
            routes.append((method.upper(), path, [p["name"] for p in params if p["in"] == "path"],
                           [p["name"] for p in params if p["in"] == "query"], fields))
    return routes


def test_every_route_refuses_every_bad_value_cleanly(walk):
    walk_, app = walk
    routes = _routes(app)
    assert len(routes) >= 40 and any(p.startswith("/v1/") for _, p, *_ in routes)
    for method, path, path_params, query_params, fields in routes:
        def valid_path(path: str = path, path_params: list[str] = path_params, **override) -> str:
            node = walk_.seed()
            values = {"chat_id": "c", "node_id": node, "op": "compact", "name": "default", "job_id": "none",
                      "frontend": "sillytavern", "floor": 3, "batch_id": 1, "contradiction_id": "none"}
            values.update(override)
            return path.format(**{k: quote(str(values[k]), safe="%") for k in path_params})

        base = BASES.get((method, path), {})
        has_body = fields is not None
        for name in path_params:
            for text in BAD_TEXT:
                walk_.send(method, valid_path(**{name: text}), f"path {name}={text[:20]!r}",
                           content=json.dumps(base).encode() if has_body else None)
        for name in query_params:
            for text in BAD_TEXT:
                walk_.send(method, valid_path(), f"query {name}={text[:20]!r}", params={name: text},
                           content=json.dumps(base).encode() if has_body else None)
        if not has_body:
            continue
        for raw in BROKEN_BODIES:
            walk_.send(method, valid_path(), f"body {raw[:20]!r}", content=raw)
        for label, value in BAD_VALUES:
            walk_.send(method, valid_path(), f"body={label}", content=_raw(value))
            for field in fields:
                walk_.send(method, valid_path(), f"{field}={label}", content=_body_with(base, field, value))
    # unknown routes and methods answer in the same shape
    for method, path in (("GET", "/api/v1/nope"), ("DELETE", "/api/v1/health"), ("GET", "/v2/x")):
        walk_.send(method, path, "unknown route")
    print(f"\nadversarial walk: {walk_.tried} requests tried, {walk_.server_errors} answered 5xx, "
          f"{walk_.bad_shape} refusals not in the error shape, {walk_.changed} stores changed by a refused request")
    assert not walk_.failures, "\n".join(walk_.failures[:40])
    assert walk_.tried > 1500


# ---------------------------------------------------------------- the CLI


def _files(tmp) -> dict[str, list[str]]:
    """Each bad input as the arguments of one CLI command."""
    deep = tmp / "deep.jsonl"
    deep.write_text("[" * DEPTH + "]" * DEPTH + "\n")
    surrogate = tmp / "surrogate.jsonl"
    surrogate.write_text('{"role": "user", "content": "\\ud800"}\n{"role": "assistant", "content": "x"}\n')
    header = tmp / "header.jsonl"
    header.write_text('{"user_name": "U", "character_name": "C", "chat_metadata": {}}\n')
    binary = tmp / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    graph = json.loads(example_file("lantern_road.graph.json").read_text(encoding="utf-8"))
    graph["nodes"][0]["floor_from"] = 10**20
    huge_floor = tmp / "huge.json"
    huge_floor.write_text(json.dumps(graph))
    deep_graph = tmp / "deep.json"
    deep_graph.write_text('{"format": "memory-curator/graph", "nodes": ' + "[" * DEPTH + "]" * DEPTH + "}")
    surrogate_graph = tmp / "surrogate.json"
    surrogate_graph.write_text(json.dumps(json.loads(example_file("lantern_road.graph.json").read_text(
        encoding="utf-8")) | {"chat": {"id": "\ud800"}}))
    deep_yaml = tmp / "deep.yaml"
    deep_yaml.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    nested_yaml = tmp / "nested.yaml"
    nested_yaml.write_text("".join(" " * i + f"k{i}:\n" for i in range(5000)))
    return {
        "ingest a directory": ["ingest", str(tmp), "--chat", "c"],
        "ingest deep JSON": ["ingest", str(deep), "--chat", "c"],
        "ingest a lone surrogate": ["ingest", str(surrogate), "--chat", "c"],
        "ingest a header-only file": ["ingest", str(header), "--chat", "c"],
        "ingest binary": ["ingest", str(binary), "--chat", "c"],
        "ingest a missing file": ["ingest", str(tmp / "missing.jsonl"), "--chat", "c"],
        "import floors of 1e20": ["import", str(huge_floor), "--chat", "c", "--mode", "restore"],
        "import deep JSON": ["import", str(deep_graph), "--chat", "c"],
        "import a lone surrogate": ["import", str(surrogate_graph), "--chat", "c"],
        "import a directory": ["import", str(tmp), "--chat", "c"],
        "import bind_floor 2^63": ["import", str(example_file("lantern_road.graph.json")), "--chat", "c", "--mode",
                                   "bind_floor", "--floor", str(HUGE)],
        "schema: 5000-deep YAML": ["schema", "validate", str(deep_yaml)],
        "schema: 5000-nested YAML": ["schema", "validate", str(nested_yaml)],
        "rollback to a negative floor": ["rollback", "--chat", "c", "--floor", "-5"],
        "rollback to 2^63": ["rollback", "--chat", "c", "--floor", str(HUGE), "--yes"],
        "rollback an unknown chat": ["rollback", "--chat", "nope", "--floor", "0", "--yes"],
        "recall a budget of -1": ["recall", "--chat", "c", "--query", "x", "--budget", "-1"],
        "recall with 2^63 budget": ["recall", "--chat", "c", "--query", "\ud800", "--budget", str(HUGE)],
        "vectors: a range that is not one": ["vectors", "rebuild", "--chat", "c", "--floors", "ten-forty"],
        "show an odd chat id": ["show", "--chat", "../../etc"],
        "export to a directory": ["export", "--chat", "c", "-o", str(tmp)],
    }


def _damaged(tmp, base, how: str):
    """A copy of the data directory `base` whose database was damaged in one way."""
    data = tmp / f"damaged-{how}"
    shutil.copytree(base, data)
    db = data / "memory.db"
    if how == "garbage pages":
        raw = bytearray(db.read_bytes())
        for at in range(4096 * 2, len(raw), 4096):
            raw[at + 100:at + 900] = b"\xa5" * 800
        db.write_bytes(bytes(raw))
        return data
    conn = sqlite3.connect(db)
    with conn:
        if how == "schema_version abc":
            conn.execute("UPDATE meta SET value='abc' WHERE key='schema_version'")
        elif how == "schema_version -1":
            conn.execute("UPDATE meta SET value='-1' WHERE key='schema_version'")
        elif how == "bad schema_json":
            conn.execute("UPDATE chats SET schema_json='{not json'")
        elif how == "bad undo_json":
            conn.execute("UPDATE commits SET undo_json='[{\"op\": 5}'")
    conn.close()  # the last connection: the change is checkpointed into memory.db
    return data


DAMAGE = ["garbage pages", "schema_version abc", "schema_version -1", "bad schema_json", "bad undo_json"]


def test_every_cli_command_reports_bad_input_without_a_traceback(tmp_path):
    runner = CliRunner()
    data = tmp_path / "data"
    memory = curator.open(data)
    memory.create_chat("c", "default")
    memory.load_chat_file("c", example_file("lantern_road.jsonl"))
    memory.import_("c", example_file("lantern_road.graph.json"))
    memory.close()
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    tried, tracebacks, changed, failures = 0, 0, 0, []
    for label, args in _files(inputs).items():
        before = dump(data)
        result = runner.invoke(cli_app, ["--data", str(data), *args])
        tried += 1
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            tracebacks += 1
            failures.append(f"{label}: {type(result.exception).__name__}: {result.exception}")
        elif result.exit_code not in (1, 2):
            failures.append(f"{label}: exit code {result.exit_code}\n{result.output[-300:]}")
        if dump(data) != before:
            changed += 1
            failures.append(f"{label}: the store changed")
    for how in DAMAGE if store_url(data) is None else ():  # damaged memory.db files: SQLite's own case
        damaged = _damaged(tmp_path, data, how)
        for args in (["chats"], ["show", "--chat", "c"], ["rollback", "--chat", "c", "--floor", "3", "--yes"],
                     ["export", "--chat", "c"]):
            before = (damaged / "memory.db").read_bytes()
            result = runner.invoke(cli_app, ["--data", str(damaged), *args])
            tried += 1
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                tracebacks += 1
                failures.append(f"{how} / {args[0]}: {type(result.exception).__name__}: {result.exception}")
            elif result.exit_code not in (0, 1, 2):
                failures.append(f"{how} / {args[0]}: exit code {result.exit_code}")
            if result.exit_code != 0 and (damaged / "memory.db").read_bytes() != before:
                changed += 1
                failures.append(f"{how} / {args[0]}: refused but the database changed")
    unreachable = tmp_path / "unreachable"
    shutil.copytree(data, unreachable)
    (unreachable / "config.yaml").write_text("vectors_url: http://127.0.0.1:9\n")
    same_store = ["--store", store_url(data)] if store_url(data) else []  # a copied folder is not a copied database
    for args in (["vectors", "status", "--chat", "c"], ["recall", "--chat", "c", "--query", "lantern"]):
        result = runner.invoke(cli_app, ["--data", str(unreachable), *same_store, *args])
        tried += 1
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            tracebacks += 1
            failures.append(f"unreachable vectors_url / {args[0]}: {type(result.exception).__name__}")
        elif result.exit_code != 1 or "Chroma server" not in result.output:
            failures.append(f"unreachable vectors_url / {args[0]}: exit {result.exit_code}: {result.output[-300:]}")
    print(f"\nCLI walk: {tried} commands tried, {tracebacks} tracebacks, {changed} stores changed by a refusal")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- the semantic ones from the report


def test_limits_names_titles_and_a_recreated_chat(tmp_path):
    memory = curator.open(tmp_path / "data")
    with ThreadedServer(create_app(memory, ServiceConfig())) as server, \
            httpx2.Client(base_url=server.url + "/api/v1", headers={"x-curator-client": "t"}) as http:
        http.post("/chats", json={"id": "c"}).raise_for_status()
        first = http.post("/chats/c/nodes", json={"type": "character_sheet", "fields": {"name": "Eileen"}})
        other = http.post("/chats/c/nodes", json={"type": "character_sheet", "fields": {"name": "Mara"}})
        assert first.status_code == other.status_code == 201
        before = dump(tmp_path / "data")
        for params in ({"limit": -1}, {"limit": 5001}, {"limit": 0}, {"floor_from": 0, "limit": 10**6},
                       {"offset": -1}, {"level": -1}):
            answer = http.get("/chats/c/nodes", params=params)
            assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_request", params
        assert http.get("/chats/c/messages", params={"start": -3}).status_code == 422
        second = http.post("/chats/c/nodes", json={"type": "character_sheet", "fields": {"name": "eileen"}})
        assert second.status_code == 400 and second.json()["error"]["code"] == "NameTaken"
        rename = http.patch(f"/chats/c/nodes/{other.json()['node']}", json={"set_fields": {"name": "Eileen"}})
        assert rename.status_code == 400 and "exists already" in rename.json()["error"]["message"]
        empty = http.patch(f"/chats/c/nodes/{other.json()['node']}", json={"title": "  "})
        assert empty.status_code == 400 and "title is empty" in empty.json()["error"]["message"]
        assert dump(tmp_path / "data") == before
        # the node keeps its own name; a rename onto a free one passes
        assert http.patch(f"/chats/c/nodes/{first.json()['node']}", json={"set_fields": {"name": "Eileen"},
                                                                           "title": "Eileen"}).status_code == 200
        assert http.post("/chats/c/recall", json={"query": "Eileen"}).status_code == 200
        assert http.get("/chats/c/injection/last").json()
        assert http.delete("/chats/c").status_code == 200
        http.post("/chats", json={"id": "c"}).raise_for_status()
        last = http.get("/chats/c/injection/last")
        assert "Eileen" not in last.text  # the deleted chat's last injection went with it
        assert "Eileen" not in http.get("/chats/c/overview").text
    memory.close()
