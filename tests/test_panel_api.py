"""The panel's service side over real loopback HTTP: its files (served without a token, nothing fetched from
elsewhere) and its endpoints: overview, whole graph, last injection, try-a-recall, rollback, compatible schema."""

from __future__ import annotations

import re

import httpx2
import pytest
from panel_seed import seed_story
from test_proxy import converse, proxy  # noqa: F401 - the proxy fixture (a fake upstream model on loopback)

import curator
from curator.service.panel import STATIC_DIR
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer

CLIENT = {"x-curator-client": "test"}  # state-changing requests need it (or a JSON body)

TOKEN = "t0ken"


@pytest.fixture
def served(tmp_path):
    memory = curator.open(tmp_path / "data")
    seed_story(memory)
    app = create_app(memory, ServiceConfig(token=TOKEN))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1", timeout=60,
                                                      headers={**CLIENT, "authorization": f"Bearer {TOKEN}"}) as client:
        yield server.url, client, memory
    memory.close()


def test_the_panel_files_are_served_without_a_token_and_need_nothing_from_elsewhere(served):
    url, _client, _memory = served
    with httpx2.Client(base_url=url) as anonymous:
        assert anonymous.get("/panel").status_code in (307, 308)
        page = anonymous.get("/panel/")
        assert page.status_code == 200 and '<script type="module" src="js/app.js">' in page.text
        for path in sorted(STATIC_DIR.rglob("*.js")):
            served_file = anonymous.get(f"/panel/{path.relative_to(STATIC_DIR)}")
            assert served_file.status_code == 200 and "javascript" in served_file.headers["content-type"]
        assert anonymous.get("/panel/../api/v1/chats").status_code in (401, 404)  # no way around the token
        assert anonymous.get("/api/v1/chats/story/overview").status_code == 401
    for path in STATIC_DIR.rglob("*"):
        if path.is_file():
            # offline: no CDN, no web font, no remote script; every import is relative
            assert not re.search(r"https?://", path.read_text()), path
            imports = re.findall(r'from "([^"]+)"', path.read_text())
            assert all(i.startswith("./") and (path.parent / i).is_file() for i in imports), (path, imports)


def test_overview_counts_fragmentation_status_and_recent_work(served):
    _url, client, memory = served
    o = client.get("/chats/story/overview").json()
    stats = memory.graph("story").stats()
    assert o["stats"]["nodes_active"] == stats["nodes_active"] and o["stats"]["edges"] == stats["edges"]
    linked = {e.source for e in memory.graph("story").edges()} | {e.target for e in memory.graph("story").edges()}
    isolated = [n for n in memory.graph("story").nodes() if n.id not in linked]
    assert o["stats"]["isolated"] == len(isolated)
    assert o["stats"]["fragmentation"] == round(len(isolated) / stats["nodes_active"], 4)
    assert o["history"]["floors"] == 20 and o["history"]["extracted_to"] == 19 and o["history"]["due"] == []
    assert len(o["recent_extractions"]) == 10 and o["recent_extractions"][0]["floor"] == 19
    assert o["vectors"]["ok"] and o["vectors"]["nodes"] == stats["nodes_active"]
    assert o["recent_recalls"] == []
    assert client.get("/chats/nope/overview").status_code == 404


def test_whole_graph_hides_archived_nodes_when_asked_and_keeps_edges_consistent(served):
    _url, client, memory = served
    node = memory.graph("story").find_by_name("Eileen")[0]
    assert client.patch(f"/chats/story/nodes/{node.id}", json={"archived": True}).status_code == 200
    everything = client.get("/chats/story/graph/all").json()
    active = client.get("/chats/story/graph/all?archived=false").json()
    assert len(everything["nodes"]) == len(active["nodes"]) + 1
    assert next(n for n in everything["nodes"] if n["id"] == node.id)["archived"] is True
    ids = {n["id"] for n in active["nodes"]}
    assert node.id not in ids and all(e["source"] in ids and e["target"] in ids for e in active["edges"])
    assert len(active["edges"]) < len(everything["edges"])  # Eileen's links went with her


def test_the_last_injection_is_what_a_recall_produced_and_a_try_does_not_replace_it(served):
    _url, client, _memory = served
    missing = client.get("/chats/story/injection/last")
    assert missing.status_code == 404 and "since the service started" in missing.json()["error"]["message"]
    real = client.post("/chats/story/recall", json={"query": "Where did Eileen go?", "mode": "rag"}).json()
    tried = client.post("/chats/story/recall/try", json={"query": "Who is Rowan?", "mode": "rag"}).json()
    assert tried["query"] == "Who is Rowan?" and tried["blocks"]["recalled"]
    last = client.get("/chats/story/injection/last").json()
    assert last["query"] == "Where did Eileen go?" and last["blocks"] == real["blocks"] and last["at"]
    recent = client.get("/chats/story/overview").json()["recent_recalls"]
    assert [r["query"] for r in recent] == ["Where did Eileen go?"] and recent[0]["tokens"] == real["tokens"]["total"]
    assert client.post("/chats/story/recall/try", json={"query": "x", "mode": "psychic"}).status_code == 422


def test_rollback_to_a_floor_undoes_the_later_commits(served):
    _url, client, memory = served
    before = [c.id for c in memory.store.commits("story")]
    answer = client.post("/chats/story/rollback", json={"floor": 11})
    assert answer.status_code == 200
    left = [c.id for c in memory.store.commits("story")]
    assert all(c.anchor_floor < 11 for c in memory.store.commits("story")) and len(left) < len(before)
    assert sorted(answer.json()["reverted"]) == sorted(set(before) - set(left))
    history = client.get("/chats/story/overview").json()["history"]
    assert history["extracted_to"] == 9 and history["due"] == [11, 13, 15, 17, 19]  # "Extract now" redoes them
    assert client.post("/chats/story/rollback", json={"floor": -1}).status_code == 422


def test_a_schema_change_is_taken_only_while_every_node_stays_valid(served):
    _url, client, memory = served
    schema = client.get("/chats/story/schema").json()
    schema["types"]["location_state"]["extract_every"] = 4
    schema["types"]["character_sheet"]["always_inject"] = {"enabled": True, "max_per_type": 3, "max_floor_distance": 0}
    schema["types"]["faction"] = {"fields": [{"name": "name", "required": True}, {"name": "goals"}],
                                  "primary_key": ["name"]}
    version = memory.store.graph_version("story")
    assert client.put("/chats/story/schema/compatible", json=schema).status_code == 200
    chat = memory.chat("story")
    assert chat.schema.type("location_state").extract_every == 4 and chat.schema.type("faction")
    assert chat.schema.type("character_sheet").always_inject.max_per_type == 3
    assert memory.store.graph_version("story") > version  # cached recalls were packed with the old settings
    dropped = {**schema, "types": {k: v for k, v in schema["types"].items() if k != "event"}}
    answer = client.put("/chats/story/schema/compatible", json=dropped)
    assert answer.status_code == 400 and "which the schema drops" in answer.json()["error"]["message"]
    schema["types"]["character_sheet"]["fields"].append({"name": "oath", "required": True})
    answer = client.put("/chats/story/schema/compatible", json=schema)
    assert answer.status_code == 400 and "new required field(s) oath" in answer.json()["error"]["message"]
    schema["types"]["character_sheet"]["extract_every"] = 0
    assert client.put("/chats/story/schema/compatible", json=schema).status_code == 422
    assert memory.chat("story").schema.type("character_sheet").field("oath") is None  # nothing half-saved


def test_a_generation_through_the_proxy_becomes_the_last_injection(proxy):  # noqa: F811
    client, upstream, _memory, server, _calls = proxy
    converse(client, server, 3)
    with httpx2.Client(headers=CLIENT, base_url=server.url + "/api/v1") as api:
        last = api.get("/chats/c/injection/last").json()
    sent = upstream.requests[-1]["messages"][1]["content"]  # the memory as the upstream model received it
    assert last["query"] == "What happens next? (turn 2)" and last["text"] and last["text"] in sent
