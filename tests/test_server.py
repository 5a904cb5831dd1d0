"""The HTTP service over real loopback HTTP (uvicorn): chats, sync with re-extraction jobs, graph, auth, limits."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx2
import pytest

import curator
from curator.llm.access import Models
from curator.errors import CuratorError
from curator.testing.scripted import graph_signature, reply_text, scripted_chat, scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.service.server.security import Limits, check_bind

CLIENT = {"x-curator-client": "test"}  # state-changing requests need it (or a JSON body)

TOKEN = "s3cret-token"


def as_json(messages, start=0):
    return [{"floor": start + i, "role": m.role, "name": m.name, "text": m.text, "swipe_id": m.swipe_id}
            for i, m in enumerate(messages)]


@pytest.fixture
def served(tmp_path):
    """(client, memory) against a service with the scripted extraction model."""
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model()))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1",
                                                      headers=CLIENT, timeout=30) as client:
        yield client, memory
    memory.close()


def wait(client, job):
    for _ in range(1000):
        job = client.get(f"/jobs/{job['id']}").json()
        if job["state"] not in ("queued", "running"):
            return job
        threading.Event().wait(0.02)
    raise AssertionError(f"job did not finish: {job}")


def test_chats_sync_and_reextraction_over_http(served, tmp_path):
    client, memory = served
    assert client.post("/chats", json={"id": "c"}).status_code == 201
    assert client.get("/chats").json() == {"chats": ["c"]}
    chat = scripted_chat(40)
    synced = client.post("/chats/c/sync", json={"messages": as_json(chat)}).json()
    assert synced["due"] == list(range(1, 40, 2)) and synced["job"]["kind"] == "extract"
    job = wait(client, synced["job"])
    assert job["state"] == "done" and job["result"]["steps_done"] == 20 and job["progress"]["done"] == 20
    # an edit of floor 21 and a swipe of the last reply, sent as a tail window from floor 20
    edited = list(chat)
    edited[21] = dataclasses.replace(edited[21], text="Saela went to the mill and found a map.")
    edited[39] = dataclasses.replace(edited[39], text=reply_text(39, 1), swipe_id=1)
    synced = client.post("/chats/c/sync", json={"messages": as_json(edited[20:], 20), "allow_rollback": True}).json()
    assert synced["dirty_floor"] == 21 and synced["reason"] == "edited" and len(synced["reverted"]) == 10
    assert wait(client, synced["job"])["state"] == "done"
    with curator.open(tmp_path / "fresh") as fresh:
        fresh.create_chat("c", "default")
        fresh.sync("c", edited, extract=True, model=scripted_model())
        assert graph_signature(memory, "c") == graph_signature(fresh, "c")
    info = client.get("/chats/c").json()
    assert info["floors"] == 40 and client.get("/chats/c/usage").json()["usage"]["total"]["calls"] == 30
    assert client.get("/usage").json()["total"]["calls"] == 30


def test_graph_nodes_are_scoped_to_their_chat_and_every_edit_is_a_commit(served):
    client, _memory = served
    client.post("/chats", json={"id": "a"})
    client.post("/chats", json={"id": "b"})
    created = client.post("/chats/a/nodes", json={"type": "character_sheet", "fields": {"name": "Eileen"}})
    assert created.status_code == 201
    node = created.json()["node"]
    assert client.get(f"/chats/a/nodes/{node}").json()["fields"]["name"] == "Eileen"
    for method, path in (("GET", f"/chats/b/nodes/{node}"), ("PATCH", f"/chats/b/nodes/{node}"),
                         ("DELETE", f"/chats/b/nodes/{node}")):
        answer = client.request(method, path, json={"title": "x"} if method == "PATCH" else None)
        assert answer.status_code == 404 and "no node" in answer.json()["error"]["message"]
    assert client.get("/chats/b/nodes").json()["nodes"] == []
    edited = client.patch(f"/chats/a/nodes/{node}", json={"set_fields": {"goal": "repay Rowan"}})
    assert edited.status_code == 200
    assert client.delete(f"/chats/a/nodes/{node}").status_code == 200
    commits = client.get("/chats/a/commits").json()["commits"]
    assert [c["origin"] for c in commits] == ["manual"] * 3
    bad = client.patch(f"/chats/a/nodes/{node}", json={"title": "x"})
    assert bad.status_code == 404
    invalid = client.post("/chats/a/nodes", json={"type": "dragon", "fields": {}})
    assert invalid.status_code == 400 and "dragon" in invalid.json()["error"]["message"]


def test_import_export_world_info_and_schemas(served):
    client, _memory = served
    client.post("/chats", json={"id": "a"})
    client.post("/chats/a/nodes", json={"type": "character_sheet", "fields": {"name": "Rowan"}})
    exported = client.get("/chats/a/export").json()
    assert client.post("/chats/copy/import", json={"graph": exported}).status_code == 201
    assert [n["title"] for n in client.get("/chats/copy/nodes").json()["nodes"]] == ["Rowan"]
    assert client.get("/chats/copy/worldinfo").json()["entries"]
    broken = dict(exported, nodes=[{"id": "x"}])
    answer = client.post("/chats/other/import", json={"graph": broken})
    assert answer.status_code == 400 and answer.json()["error"]["hint"]
    assert client.get("/chats/other").status_code == 404  # nothing half-imported
    assert "default" in client.get("/schemas").json()["presets"]
    schema = client.get("/schemas/default").json()
    assert client.post("/schemas/validate", json=schema).json()["valid"]
    bad = client.post("/schemas/validate", json={**schema, "types": {"x": {"fields": "nope"}}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "SchemaError"
    assert client.put("/chats/a/schema", json=schema).status_code == 400  # the chat has memory already
    client.post("/chats", json={"id": "empty"})
    assert client.put("/chats/empty/schema", json=schema).status_code == 200
    paths = client.get(str(client.base_url).removesuffix("/api/v1/") + "/openapi.json").json()["paths"]
    assert "/api/v1/chats/{chat_id}/sync" in paths and "/v1/chat/completions" in paths


def test_bad_input_gets_a_clear_4xx(served):
    client, _memory = served
    assert client.get("/chats/nope").status_code == 404
    assert client.post("/chats", json={"id": "a"}).status_code == 201
    assert client.post("/chats", json={"id": "a"}).status_code == 409
    answer = client.post("/chats/a/sync", json={"messages": [{"role": "wizard", "text": "hi"}]})
    assert answer.status_code == 422 and "role" in answer.json()["error"]["message"]
    answer = client.post("/chats/a/sync", json={"messages": [{"floor": 3, "role": "user", "text": "hi"}]})
    assert answer.status_code == 400 and "tail window" in answer.json()["error"]["message"]
    answer = client.post("/chats/a/sync", json={"messages": [{"floor": 0, "role": "user", "text": "a"},
                                                             {"floor": 5, "role": "user", "text": "b"}]})
    assert answer.status_code == 400 and "consecutive" in answer.json()["error"]["hint"]
    assert client.post("/chats/a/recall", json={"query": "x", "mode": "psychic"}).status_code == 422
    assert client.post("/chats", content=b"{not json", headers={"content-type": "application/json"}).status_code == 422
    assert client.post("/jobs/job_nope/cancel").status_code == 404
    answer = client.put("/chats/a/settings", json={"extraction": {"extract_every": 0}})  # typed: refused as a body
    assert answer.status_code == 422 and "extraction.extract_every" in answer.json()["error"]["message"]


def test_token_limits_and_bind_rules(tmp_path):
    with pytest.raises(CuratorError, match="without a bearer token"):
        check_bind("0.0.0.0", None)
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)
    memory = curator.open(tmp_path / "data")
    limits = Limits(max_body_bytes=2000, rate_per_minute=60, burst=8)
    app = create_app(memory, ServiceConfig(token=TOKEN, limits=limits))
    with ThreadedServer(app) as server, httpx2.Client(headers=CLIENT, base_url=server.url + "/api/v1") as client:
        assert client.get("/health").status_code == 200  # liveness needs no token
        assert client.get("/chats").status_code == 401
        wrong = client.get("/chats", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
        auth = {"authorization": f"Bearer {TOKEN}"}
        assert client.get("/chats", headers=auth).status_code == 200
        big = client.post("/chats", headers=auth, json={"id": "a", "settings": {"x": "y" * 5000}})
        assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"

        def chunks(size):  # no content-length: the body is measured as it is read
            yield b'{"id": "b", "settings": {"x": "'
            yield b"y" * size
            yield b'"}}'

        chunked = client.post("/chats", headers={**auth, "content-type": "application/json"}, content=chunks(5000))
        assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "body_too_large"
        small = client.post("/chats", headers={**auth, "content-type": "application/json"}, content=chunks(10))
        assert small.status_code == 422 and "settings.x: Extra inputs" in small.json()["error"]["message"]
        codes = [client.get("/chats", headers=auth).status_code for _ in range(12)]
        assert 429 in codes and codes[0] == 200
    memory.close()


def test_one_writer_per_chat_and_chats_in_parallel(served):
    """Many concurrent syncs: every chat ends fully extracted, no floor extracted twice."""
    client, memory = served
    chats = [f"chat{i}" for i in range(4)]
    for chat_id in chats:
        client.post("/chats", json={"id": chat_id})
    chat = scripted_chat(30)

    def grow(chat_id):
        jobs = []
        for end in range(6, 31, 6):
            jobs.append(client.post(f"/chats/{chat_id}/sync", json={"messages": as_json(chat[:end])}).json()["job"])
        return jobs

    with ThreadPoolExecutor(8) as pool:
        all_jobs = [j for jobs in pool.map(grow, chats * 2) for j in jobs if j]
    for job in all_jobs:
        assert wait(client, job)["state"] == "done"
    for chat_id in chats:
        anchors = [c.anchor_floor for c in memory.store.commits(chat_id)]
        assert anchors == list(range(1, 30, 2)), chat_id


def test_a_job_can_be_cancelled_between_steps(tmp_path):
    gate = threading.Semaphore(0)
    base = scripted_model()
    entered = []  # one entry per model call begun
    third_in_flight = threading.Event()

    def slow(messages, info):
        entered.append(1)
        if len(entered) == 3:
            third_in_flight.set()
        gate.acquire(timeout=10)
        return base.function(messages, info)

    from pydantic_ai.models.function import FunctionModel

    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=FunctionModel(slow, model_name="slow")))
    with ThreadedServer(app) as server, httpx2.Client(headers=CLIENT, base_url=server.url + "/api/v1") as client:
        client.post("/chats", json={"id": "c"})
        job = client.post("/chats/c/sync", json={"messages": as_json(scripted_chat(20))}).json()["job"]
        gate.release()
        gate.release()
        # the third step is in flight (its model call begun) when the cancel comes: waiting on the progress count
        # raced the job thread's way from one step to the next
        assert third_in_flight.wait(10)
        assert client.get(f"/jobs/{job['id']}").json()["progress"]["done"] == 2
        assert client.post(f"/jobs/{job['id']}/cancel").json()["message"] == "cancel requested"
        gate.release()  # the step in flight finishes; no further step starts
        done = wait(client, job)
        assert done["state"] == "cancelled"
        assert len(memory.store.commits("c")) == 3
        again = client.post(f"/jobs/{job['id']}/cancel")
        assert again.status_code == 400 and "cancelled" in again.json()["error"]["message"]
    memory.close()


def _text_only(messages, info):
    from pydantic_ai.messages import ModelResponse, TextPart

    return ModelResponse(parts=[TextPart("Nothing to change.")])


def test_the_extraction_channel_decides_which_job_a_sync_queues(tmp_path):
    from pydantic_ai.models.function import FunctionModel

    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(models=Models(scripted_model(), FunctionModel(_text_only))))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1",
                                                      headers=CLIENT, timeout=30) as client:
        client.post("/chats", json={"id": "c", "settings": {"extraction": {"channel": "off"}}})
        synced = client.post("/chats/c/sync", json={"messages": as_json(scripted_chat(4))}).json()
        assert synced["due"] == [] and synced["job"] is None  # nobody writes, so nothing is due
        client.put("/chats/c/settings", json={"extraction": {"channel": "curator"}})
        synced = client.post("/chats/c/sync", json={"messages": as_json(scripted_chat(6))}).json()
        done = wait(client, synced["job"])
        assert done["kind"] == "extract" and done["result"]["curated"] == [1, 3, 5]  # the channel's writer
        assert done["result"]["extracted"] == []
        assert [c.origin for c in memory.store.commits("c")] == ["curate"] * 3  # the agent's runs, one commit each
        changed = client.put("/chats/c/settings", json={"extraction": {"channel": "both", "extract_every": 1}})
        assert changed.json()["settings"]["extraction"]["channel"] == "both"
        synced = client.post("/chats/c/sync", json={"messages": as_json(scripted_chat(8))}).json()
        both = wait(client, synced["job"])["result"]
        assert both["extracted"] == [1, 3, 5, 7] and both["curated"] == [7]  # the curator had done 1, 3 and 5
        bad = client.post("/chats", json={"id": "d", "settings": {"extraction": {"channel": "psychic"}}})
        assert bad.status_code == 422 and "channel" in bad.json()["error"]["message"]
    memory.close()


def test_curate_and_maintenance_run_as_jobs(tmp_path):
    from pydantic_ai.models.function import FunctionModel

    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(models=Models(scripted_model(), FunctionModel(_text_only))))
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1",
                                                      headers=CLIENT, timeout=30) as client:
        client.post("/chats", json={"id": "c"})
        wait(client, client.post("/chats/c/sync", json={"messages": as_json(scripted_chat(6))}).json()["job"])
        before = len(memory.store.commits("c"))
        dry = wait(client, client.post("/chats/c/curate", json={"draft_reply": "She waves.", "dry_run": True}).json())
        assert dry["state"] == "done" and dry["result"]["runs"][0]["dry_run"] is True
        assert len(memory.store.commits("c")) == before  # a dry run commits nothing
        forget = wait(client, client.post("/chats/c/maintenance/forget", json={"dry_run": True}).json())
        assert forget["state"] == "done" and forget["result"]["op"] == "forget"
        assert client.post("/chats/c/maintenance/teleport", json={}).status_code == 422
        assert client.post("/chats/nope/curate", json={}).status_code == 404
    memory.close()


def test_each_chat_recalls_through_its_own_cache_and_a_sync_drops_the_rolled_back_floors(tmp_path):
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=scripted_model()))
    service = app.state.service
    with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1",
                                                      headers=CLIENT, timeout=30) as client:
        client.post("/chats", json={"id": "c"})
        chat = scripted_chat(12)
        wait(client, client.post("/chats/c/sync", json={"messages": as_json(chat)}).json()["job"])
        first = client.post("/chats/c/recall", json={"query": "Where did Eileen go?", "user_floor": 10}).json()
        again = client.post("/chats/c/recall", json={"query": "Where did Eileen go?", "user_floor": 10}).json()
        assert not first["reused"] and again["reused"] and first["blocks"] == again["blocks"]
        assert len(service.recallers["c"][0]._results) == 1
        client.post("/chats/c/sync", json={"messages": as_json(chat[:9]), "extract": False})
        assert len(service.recallers["c"][0]._results) == 0
        assert client.post("/chats/nope/recall", json={"query": "x"}).status_code == 404
        assert "nope" not in service.recallers
    memory.close()
