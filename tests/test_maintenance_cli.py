"""The maintenance commands as a user runs them: `curator compact | forget | summarize ...` in a subprocess,
against a fake OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import json
import re

from test_cli import run

import curator
from curator.paths import example_file
from curator.testing import FakeOpenAI, completion


def fold(body: dict) -> dict:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    first, last = re.search(r"floors (\d+)-(\d+)\)", prompt).groups()
    return completion(body, tool_args={"title": f"Arc {first}-{last}", "summary": f"What happened in {first}-{last}."})


def test_compact_forget_and_summarize_from_the_command_line(tmp_path):
    data = tmp_path / "data"
    run("import", str(example_file("lantern_road.graph.json")), "--chat", "road", data=data)
    # events 1-9 are already folded in the example; add more to go over the threshold again
    ops = [{"op": "create_node", "type": "event", "title": f"Summary {100 + i}",
            "fields": {"summary": f"Extra event {i}."}, "floor_from": 60 + i, "floor_to": 60 + i} for i in range(12)]
    with curator.open(data) as memory:
        memory.commit("road", ops, anchor_floor=72, origin="test")
        active_before = memory.graph("road").stats()["nodes_active"]

    without = run("compact", "--chat", "road", "--json", data=data)
    assert "no model" in json.loads(without.stdout)["skipped"]

    with FakeOpenAI(fold) as fake:
        (data / "config.yaml").write_text(
            f"profiles:\n  default: {{model: fake, base_url: '{fake.base_url}', api_key_env: NO_KEY_NEEDED}}\n")
        report = json.loads(run("compact", "--chat", "road", "--json", data=data).stdout)
        assert report["ok"] and report["usage"]["calls"] == len(fake.requests) == len(report["changes"]) > 0
        assert report["usage"]["input_tokens"] > 0
        text = run("compact", "--chat", "road", data=data).stdout
        assert "every level is within its threshold" in text and "0 LLM calls" in text
    with curator.open(data) as memory:
        assert memory.graph("road").stats()["nodes_active"] < active_before
        assert memory.store.commits("road")[-1].origin == "maintenance"

    dry = json.loads(run("forget", "--chat", "road", "--dry-run", "--json", data=data).stdout)
    assert dry["dry_run"] and dry["commits"] == [] and dry["usage"]["calls"] == 0
    summary = run("summarize", "--chat", "road", data=data).stdout
    assert "no 'synopsis' type" in summary
    missing = run("forget", "--chat", "nope", data=data, check=False)
    assert missing.returncode == 1 and "no chat 'nope'" in missing.stderr
