"""The MCP server through the `mcp` package's client (in-process and over stdio), and the CLI's history
commands (`sync`, `rebuild`, `serve`) as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from curator.service.mcp_server import build_mcp
from curator.paths import example_file
from curator.testing import FakeOpenAI

CHAT = example_file("lantern_road.jsonl")
GRAPH = example_file("lantern_road.graph.json")


def _payload(result) -> object:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data
    return json.loads(result.content[0].text)


@pytest.fixture
def road(memory):
    memory.import_("road", GRAPH)
    memory.load_chat_file("road", CHAT)
    return memory


def test_mcp_read_tools_and_recall_in_process(road):
    async def session():
        async with Client(build_mcp(road)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"list_chats", "get_node", "find_by_name", "neighbours", "timeline", "recall"} <= set(tools)
            assert not {"create_node", "edit_node", "delete_node"} & set(tools)  # writes are opt-in
            assert all(t.annotations.read_only_hint for t in tools.values())
            assert _payload(await client.call_tool("list_chats", {})) == ["road"]
            found = _payload(await client.call_tool("find_by_name", {"chat": "road", "name": "Eileen"}))
            assert found and found[0]["type"] == "character_sheet"
            node = _payload(await client.call_tool("get_node", {"chat": "road", "node_id": found[0]["id"]}))
            assert node["edges"]
            recalled = _payload(await client.call_tool("recall", {"chat": "road", "query": "What does Eileen owe?"}))
            assert recalled["blocks"]["persistent"] or recalled["blocks"]["recalled"]
            missing = await client.call_tool("get_node", {"chat": "road", "node_id": "n_nope"})
            assert missing.is_error and "no node" in missing.content[0].text
            other = await client.call_tool("graph_stats", {"chat": "nope"})
            assert other.is_error and "curator chats" in other.content[0].text  # the hint comes along

    asyncio.run(session())


def test_mcp_write_tools_only_when_enabled(road):
    async def session():
        async with Client(build_mcp(road, allow_writes=True)) as client:
            created = _payload(await client.call_tool(
                "create_node", {"chat": "road", "type": "character_sheet", "fields": {"name": "Wren"}}))
            node_id = created["ops"][0]["id"]
            _payload(await client.call_tool("edit_node", {"chat": "road", "node_id": node_id,
                                                          "set_fields": {"goal": "find the lantern"}}))
            assert road.graph("road").get(node_id).fields["goal"] == "find the lantern"
            _payload(await client.call_tool("delete_node", {"chat": "road", "node_id": node_id}))
            assert road.graph("road").get(node_id) is None
            bad = await client.call_tool("create_node", {"chat": "road", "type": "dragon", "fields": {}})
            assert bad.is_error and "dragon" in bad.content[0].text
        assert [c.origin for c in road.store.commits("road")][-3:] == ["manual"] * 3

    asyncio.run(session())


def _exe() -> list[str]:
    exe = Path(sys.executable).with_name("curator")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "curator"]


def test_mcp_over_stdio_with_the_cli(road, tmp_path):
    data = str(road.data_dir)
    params = StdioServerParameters(command=_exe()[0], args=[*_exe()[1:], "--data", data, "mcp"],
                                   env={**os.environ, "NO_COLOR": "1"})

    async def session():
        async with Client(params) as client:
            assert _payload(await client.call_tool("list_chats", {})) == ["road"]
            stats = _payload(await client.call_tool("graph_stats", {"chat": "road"}))
            assert stats["nodes_active"] == 18

    asyncio.run(session())


def test_mcp_over_streamable_http_with_the_cli(road, tmp_path):
    import socket
    import time

    import httpx2

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path / "mcp.log").open("wb")
    proc = subprocess.Popen([*_exe(), "--data", str(road.data_dir), "mcp", "--http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        for _ in range(300):
            try:
                httpx2.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx2.TransportError:
                time.sleep(0.05)

        async def session():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                assert _payload(await client.call_tool("list_chats", {})) == ["road"]

        asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cli(data, fake_url, *args):
    env = {**os.environ, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake_url, "CURATOR_API_KEY": "k",
           "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(_exe() + ["--data", str(data), *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_cli_sync_and_rebuild(tmp_path):
    data = tmp_path / "data"
    lines = CHAT.read_text(encoding="utf-8").splitlines()
    with FakeOpenAI() as fake:
        assert _cli(data, fake.base_url, "init", "--chat", "road").returncode == 0
        # sync and rebuild are what is tested here: scheduled maintenance (on by default) off, 6 s less
        assert _cli(data, fake.base_url, "settings", "set", "maintenance.auto", "false").returncode == 0
        proc = _cli(data, fake.base_url, "sync", str(CHAT), "--chat", "road", "--json")
        assert proc.returncode == 0, proc.stderr
        first = json.loads(proc.stdout)
        assert first["dirty_floor"] is None and len(first["extracted"]) == 30 and first["still_due"] == []
        edited = json.loads(lines[1 + 41])
        edited["mes"] = edited["swipes"][0] = "An edited reply."
        path = tmp_path / "edited.jsonl"
        path.write_text("\n".join([*lines[:1 + 41], json.dumps(edited), *lines[1 + 42:]]) + "\n", encoding="utf-8")
        proc = _cli(data, fake.base_url, "sync", str(path), "--chat", "road")
        assert proc.returncode == 0, proc.stderr
        assert "floor 41 edited:" in proc.stdout and "extracted 10 steps" in proc.stdout
        proc = _cli(data, fake.base_url, "rebuild", "--chat", "road", "--json")
        assert proc.returncode == 0, proc.stderr
        rebuilt = json.loads(proc.stdout)
        assert rebuilt["steps_done"] == 30 and rebuilt["commits_removed"] >= 30  # extractions and compressions
        usage = json.loads(_cli(data, fake.base_url, "usage", "--chat", "road", "--json").stdout)["usage"]
        assert len(fake.requests) == usage["total"]["calls"] == usage["extract"]["calls"] + usage["summarize"]["calls"]
        assert usage["extract"]["calls"] == 70 and usage["summarize"]["calls"] > 0
        proc = _cli(data, fake.base_url, "sync", str(CHAT), "--chat", "nope")
        assert proc.returncode == 1 and "no chat 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_serve_refuses_an_open_bind_without_a_token(tmp_path):
    proc = _cli(tmp_path, "http://127.0.0.1:9", "serve", "--host", "0.0.0.0")
    assert proc.returncode == 1 and "without a bearer token" in proc.stderr and "--token" in proc.stderr
