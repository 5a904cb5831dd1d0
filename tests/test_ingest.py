"""Ingestion: replaying a chat floor by floor, resuming after interruption, following edits of the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from curator.extract.chatfile import read_chat
from curator.paths import example_file
from curator.testing import FakeOpenAI

CHAT = example_file("lantern_road.jsonl")
REPLIES = sum(m.role == "assistant" for m in read_chat(CHAT).messages)


def scripted(fail_at: int | None = None, error: type[BaseException] = RuntimeError):
    calls = []

    def answer(messages, info):
        calls.append(1)
        if fail_at is not None and len(calls) == fail_at:
            raise error("the model went away")
        prompt = messages[0].parts[-1].content
        focus = prompt.split("## Newest reply")[1]
        floor = focus.split("(floor ", 1)[1].split(")", 1)[0]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name,
                                                 {"event": [{"summary": f"what happened at floor {floor}"}]})])

    return FunctionModel(answer, model_name="scripted")


def events(memory, chat="road"):
    return {n.title: n.fields["summary"] for n in memory.graph(chat).nodes(type="event")}


def test_ingest_replays_every_reply(memory):
    steps = []
    report = memory.ingest("road", CHAT, model=scripted(), on_step=lambda r, done, due: steps.append((done, due)))
    data = report.to_dict()
    assert data["floors"] == 60 and data["steps_due"] == data["steps_done"] == REPLIES
    assert steps[-1] == (REPLIES, REPLIES)
    found = events(memory)
    assert len(found) == REPLIES and found["Summary 30"] == "what happened at floor 59"
    assert [c.anchor_floor for c in memory.store.commits("road")] == list(range(1, 60, 2))
    assert data["usage"]["calls"] == REPLIES
    again = memory.ingest("road", CHAT, model=scripted())
    assert again.steps_due == 0 and again.rolled_back_from is None  # nothing left to do


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_ingest_loses_nothing_and_resumes(memory, error):
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            memory.ingest("road", CHAT, model=scripted(fail_at=5, error=error))
    else:
        report = memory.ingest("road", CHAT, model=scripted(fail_at=5, error=error))
        assert report.failed.floor == 9 and "went away" in report.failed.reason
    assert len(memory.store.commits("road")) == 4
    report = memory.ingest("road", CHAT, model=scripted())
    assert report.steps_due == REPLIES - 4 and report.failed is None
    found = events(memory)
    assert sorted(found, key=lambda t: int(t.split()[1])) == [f"Summary {i}" for i in range(1, REPLIES + 1)]


def test_an_edited_file_rolls_memory_back_to_the_edit(memory, tmp_path):
    memory.ingest("road", CHAT, model=scripted())
    lines = CHAT.read_text(encoding="utf-8").splitlines()
    edited = json.loads(lines[1 + 21])  # floor 21
    edited["mes"] = edited["swipes"][0] = "An edited reply."
    lines[1 + 21] = json.dumps(edited)
    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join(lines[:1 + 40]) + "\n", encoding="utf-8")  # and the chat is cut after floor 39
    report = memory.ingest("road", path, model=scripted())
    assert report.rolled_back_from == 21
    assert report.steps_due == 10  # floors 21, 23, ..., 39
    assert [c.anchor_floor for c in memory.store.commits("road")] == list(range(1, 40, 2))
    assert events(memory)["Summary 11"] == "what happened at floor 21"
    assert len(events(memory)) == 20


def test_plain_jsonl(memory, tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "Bye."}, {"role": "assistant", "content": "Farewell."}]), encoding="utf-8")
    report = memory.ingest("plain", path, model=scripted())
    assert report.to_dict()["steps_done"] == 2


def _cli(tmp_path, fake_url, *args):
    env = {**os.environ, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake_url, "CURATOR_API_KEY": "k",
           "COLUMNS": "200"}
    exe = Path(sys.executable).with_name("curator")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "curator"]
    return subprocess.run(cmd + ["--data", str(tmp_path), *args], capture_output=True, text=True, env=env, timeout=300,
                          check=False)


def test_cli_ingest_against_a_loopback_endpoint(tmp_path):
    with FakeOpenAI() as fake:
        proc = _cli(tmp_path, fake.base_url, "ingest", str(CHAT), "--chat", "road", "--limit", "6")
        assert proc.returncode == 0, proc.stderr
        assert "6/30 extraction steps" in proc.stdout and "LLM calls" in proc.stdout
        proc = _cli(tmp_path, fake.base_url, "ingest", str(CHAT), "--chat", "road", "--json")
        data = json.loads(proc.stdout)
        assert data["steps_due"] == 24 and data["steps_done"] == 24
        assert {k.lower(): v for k, v in fake.headers[0].items()}["authorization"] == "Bearer k"
        usage = json.loads(_cli(tmp_path, fake.base_url, "usage", "--chat", "road", "--json").stdout)
        # the default profile serves `summarize` too: the event timeline is compressed as the chat grows; and
        # `maintain`: consolidation and small synopses run on the defaults (ST-BME's), their calls logged
        compressed, maintained = usage["usage"]["summarize"]["calls"], usage["usage"]["maintain"]["calls"]
        assert usage["usage"]["extract"]["calls"] == 30 and compressed > 0 and usage["failed_steps"] == []
        assert 30 <= maintained <= 30 * 6  # within maintenance.max_calls_per_step
        assert len(fake.requests) == usage["usage"]["total"]["calls"] == 30 + compressed + maintained
        show = json.loads(_cli(tmp_path, fake.base_url, "show", "--chat", "road", "--json").stdout)
        synopses = [n for n in show["nodes"] if n["type"] == "synopsis"]
        assert synopses and synopses[0]["title"].startswith("Synopsis ")


def test_cli_ingest_failure_is_one_line_and_resumable(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "profiles:\n  default: {model: fake, base_url: BASE, api_key_env: CURATOR_API_KEY, max_attempts: 1}\n")
    with FakeOpenAI(lambda body: (500, {}, {"error": {"message": "upstream down"}})) as fake:
        (tmp_path / "config.yaml").write_text((tmp_path / "config.yaml").read_text().replace("BASE", fake.base_url))
        proc = _cli(tmp_path, fake.base_url, "ingest", str(CHAT), "--chat", "road")
        assert proc.returncode == 1
        assert "Error: extraction of floor 1 failed" in proc.stderr and "Hint:" in proc.stderr
        assert "Traceback" not in proc.stderr
    with FakeOpenAI() as fake:
        (tmp_path / "config.yaml").write_text(
            f"profiles:\n  default: {{model: fake, base_url: '{fake.base_url}', api_key_env: CURATOR_API_KEY}}\n")
        proc = _cli(tmp_path, fake.base_url, "ingest", str(CHAT), "--chat", "road", "--limit", "2", "--json")
        assert json.loads(proc.stdout)["steps_done"] == 2
        usage = json.loads(_cli(tmp_path, fake.base_url, "usage", "--chat", "road", "--json").stdout)
        assert usage["failed_steps"] == []  # floor 1 failed, then this run extracted it: no longer a failed step
        assert usage["usage"]["total"]["failed_calls"] >= 1  # while its failed call stays counted
