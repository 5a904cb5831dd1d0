"""One meaning of `extraction.channel` everywhere: each entry point (ingest, sync, rebuild, the service's sync
job, the panel's "extract now", the proxy) under each channel value (extractor, curator, both, off) runs the same
writers and commits the same things; a writer that failed is retried on the next run for that floor."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import curator
from curator.llm.access import Models
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.store.messages import Message

CHANNELS = ("extractor", "curator", "both", "off")
# The commits a 6-floor chat (replies at floors 1, 3, 5) must end with, per channel.
EXPECTED = {"extractor": [("extract", 1), ("extract", 3), ("extract", 5)],
            "curator": [("curate", 1), ("curate", 3), ("curate", 5)],
            "both": [("extract", 1), ("curate", 1), ("extract", 3), ("curate", 3), ("extract", 5), ("curate", 5)],
            "off": []}


class Writers:
    """Scripted extractor and curator models that note which floor each of them wrote."""

    def __init__(self, fail_curator_at: int | None = None):
        self.extracted: list[int] = []
        self.curated: list[int] = []
        self.fail_curator_at = fail_curator_at

    def _extract(self, messages, info: AgentInfo) -> ModelResponse:
        prompt = messages[0].parts[-1].content
        self.extracted.append(int(prompt.split("## Newest reply (floor ", 1)[1].split(")", 1)[0]))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"event": [{"summary": "extracted"}]})])

    def _curate(self, messages, info: AgentInfo) -> ModelResponse:
        prompt = str(messages[0].parts[-1].content)
        floor = int(prompt.split("[floor ", prompt.count("[floor "))[-1].split("]", 1)[0])
        if len(messages) == 1:
            if floor == self.fail_curator_at:
                self.fail_curator_at = None
                raise RuntimeError("the curator's model is down")
            self.curated.append(floor)
            return ModelResponse(parts=[ToolCallPart("create_event", {"summary": "curated"})])
        return ModelResponse(parts=[TextPart("done")])

    @property
    def extract_model(self) -> FunctionModel:
        return FunctionModel(self._extract, model_name="extractor")

    @property
    def curate_model(self) -> FunctionModel:
        return FunctionModel(self._curate, model_name="curator")


def messages(turns: int = 3) -> list[Message]:
    out = []
    for i in range(turns):
        out += [Message("user", "Wren", f"What happens next? (turn {i})"),
                Message("assistant", "Narrator", f"Mira went to the mill and found a lantern #{2 * i + 1}.")]
    return out


def commits(memory, chat_id):
    return [(c.origin, c.anchor_floor) for c in memory.store.commits(chat_id)]


def _library(entry: str, memory, chat_id: str, writers: Writers, tmp_path):
    models = {"model": writers.extract_model, "models": Models(curate=writers.curate_model)}
    if entry == "ingest":
        path = tmp_path / f"{chat_id}.jsonl"
        path.write_text("\n".join(json.dumps({"role": m.role, "name": m.name, "content": m.text})
                                  for m in messages()), encoding="utf-8")
        return memory.ingest(chat_id, path, **models).failed is None
    if entry == "sync":
        report = memory.sync(chat_id, messages(), extract=True, **models)
        return report.due == []
    memory.set_messages(chat_id, messages())  # rebuild
    result = memory.rebuild(chat_id, **models)
    return result["failed"] is None and result["due"] == []


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("entry", ["ingest", "sync", "rebuild"])
def test_library_entry_points_follow_the_channel(memory, tmp_path, entry, channel):
    memory.create_chat("c", "default", settings={"extraction": {"channel": channel}})
    writers = Writers()
    assert _library(entry, memory, "c", writers, tmp_path)
    assert commits(memory, "c") == EXPECTED[channel]
    assert writers.extracted == ([1, 3, 5] if channel in ("extractor", "both") else [])
    assert writers.curated == ([1, 3, 5] if channel in ("curator", "both") else [])


def wait(client, job):
    import time

    for _ in range(1500):
        job = client.get(f"/jobs/{job['id']}").json()
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.02)
    raise AssertionError(f"job did not finish: {job}")


def test_service_panel_and_proxy_follow_the_channel(tmp_path):
    from test_proxy import Upstream, settle

    upstream = Upstream()
    writers = Writers()
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(models=Models(writers.extract_model, writers.curate_model),
                                           upstream=upstream.url))
    wire = [{"role": m.role, "name": m.name, "text": m.text} for m in messages()]
    try:
        with ThreadedServer(app) as server, httpx2.Client(base_url=server.url + "/api/v1", timeout=60,
                                                     headers={"x-curator-client": "test"}) as client:
            for channel in CHANNELS:
                settings = {"extraction": {"channel": channel}}
                # the service: a sync queues the job that writes what is due
                client.post("/chats", json={"id": f"service-{channel}", "settings": settings})
                synced = client.post(f"/chats/service-{channel}/sync", json={"messages": wire}).json()
                if channel == "off":
                    assert synced["due"] == [] and synced["job"] is None  # nobody writes, nothing is due
                else:
                    assert wait(client, synced["job"])["state"] == "done"
                # the panel's "extract now"
                client.post("/chats", json={"id": f"panel-{channel}", "settings": settings})
                client.post(f"/chats/panel-{channel}/sync", json={"messages": wire, "extract": False})
                job = client.post(f"/chats/panel-{channel}/extract").json()
                done = wait(client, job)
                assert done["state"] == "done", done
                if channel != "off":
                    assert done["result"]["floors"] == [1, 3, 5]
                    assert done["result"]["curated"] == ([1, 3, 5] if channel != "extractor" else [])
                # the proxy: three turns through /v1/chat/completions
                client.post("/chats", json={"id": f"proxy-{channel}", "settings": settings})
                chat = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
                history = []
                for turn in range(3):
                    history.append({"role": "user", "content": f"What happens next? (turn {turn})"})
                    reply = chat.chat.completions.create(model="story", messages=history, user=f"proxy-{channel}")
                    history.append({"role": "assistant", "content": reply.choices[0].message.content})
                    settle(server, f"proxy-{channel}") if channel != "off" else None
            for channel in CHANNELS:
                for entry in ("service", "panel", "proxy"):
                    assert commits(memory, f"{entry}-{channel}") == EXPECTED[channel], (entry, channel)
    finally:
        upstream.server.shutdown()
        memory.close()


def test_a_failed_curator_is_retried_on_the_next_run_for_that_floor(memory):
    memory.create_chat("c", "default", settings={"extraction": {"channel": "both"}})
    writers = Writers(fail_curator_at=3)
    results = memory.extract_due("c", models=Models(writers.extract_model, writers.curate_model)) \
        if memory.set_messages("c", messages()) is None else None
    assert [r.ok for r in results] == [True, False]
    assert "curator" in results[-1].reason and results[-1].writers == ["extractor", "curator"]
    assert commits(memory, "c") == [("extract", 1), ("curate", 1), ("extract", 3)]  # the extraction stays
    again = memory.extract_due("c", models=Models(writers.extract_model, writers.curate_model))
    assert [r.writers for r in again] == [["curator"], ["extractor", "curator"]]  # floor 3: the curator only
    assert writers.extracted == [1, 3, 5] and writers.curated == [1, 3, 5]
    assert commits(memory, "c") == EXPECTED["both"]
