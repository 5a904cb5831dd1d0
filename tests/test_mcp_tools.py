"""The MCP server as a model meets it: described parameters, errors with hints in plain words, resources and a
prompt that answer, write tools with the agent's identity rules and commits that survive a regenerate."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client

import curator

from curator.paths import example_file
from curator.service.mcp_server import build_mcp
from curator.store.messages import Message


@pytest.fixture(scope="module")
def road(tmp_path_factory):
    """The example chat and its graph, read-only for the tests that share it (loading it embeds every node)."""
    data = tmp_path_factory.mktemp("road")
    (data / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")  # the fast local embedder
    with curator.open(data) as memory:
        memory.import_("road", example_file("lantern_road.graph.json"))
        memory.load_chat_file("road", example_file("lantern_road.jsonl"))
        yield memory


def _data(result):
    assert not result.is_error, result.content
    data = result.structured_content
    if data is not None:
        return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data
    return json.loads(result.content[0].text)


def _error(result) -> str:
    assert result.is_error, result.content
    return result.content[0].text


def test_every_parameter_is_described_with_the_chats_types_relations_and_floors(road):
    async def session():
        async with Client(build_mcp(road, allow_writes=True)) as client:
            tools = (await client.list_tools()).tools
            for tool in tools:
                for name, schema in tool.input_schema.get("properties", {}).items():
                    assert schema.get("description"), f"{tool.name}.{name} has no description"
            chat = next(t for t in tools if t.name == "list_nodes").input_schema["properties"]["chat"]["description"]
            assert "'road'" in chat and "character_sheet" in chat and "involved_in" in chat and "floors 0.." in chat
            schema = _data(await client.call_tool("chat_schema", {"chat": "road"}))
            assert "event" in schema["types"] and "occurred_at" in schema["relations"]
            assert schema["floors"][0] == 0 and schema["floors"][1] == len(road.store.messages("road")) - 1

    asyncio.run(session())


def test_unknown_nodes_types_relations_and_backwards_ranges_are_errors_with_a_hint(road):
    async def session():
        async with Client(build_mcp(road)) as client:
            assert "no node 'n_nope'" in _error(await client.call_tool("neighbours", {"chat": "road",
                                                                                      "node_id": "n_nope"}))
            text = _error(await client.call_tool("list_nodes", {"chat": "road", "type": "dragon"}))
            assert "no node type 'dragon'" in text and "character_sheet" in text
            text = _error(await client.call_tool("timeline", {"chat": "road", "floor_from": 9, "floor_to": 3}))
            assert "after floor_to" in text
            node = _data(await client.call_tool("find_by_name", {"chat": "road", "name": "Eileen"}))[0]
            text = _error(await client.call_tool("neighbours", {"chat": "road", "node_id": node["id"],
                                                                "relations": ["loves"]}))
            assert "no relation 'loves'" in text and "involved_in" in text
            near = _data(await client.call_tool("neighbours", {"chat": "road", "node_id": node["id"]}))
            assert near and all(n["id"] != node["id"] and n["relation"] and n["direction"] in ("in", "out")
                                for n in near)  # each a node with its link (issue 32: was a tuple, and crashed)
            # argument errors in plain words: which argument, what is wrong, no pydantic URL
            text = _error(await client.call_tool("timeline", {"chat": "road", "floor_from": "soon"}))
            assert "floor_from" in text and "integer" in text and "http" not in text
            text = _error(await client.call_tool("list_nodes", {"chat": "road", "limit": 0}))
            assert "limit" in text and "http" not in text

    asyncio.run(session())


def test_resources_and_the_prompt_answer(road):
    async def session():
        async with Client(build_mcp(road)) as client:
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            assert "memory://chats" in listed
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            assert {"memory://chats/{chat}/schema", "memory://chats/{chat}/stats",
                    "memory://chats/{chat}/injection"} <= set(templates)
            schema = json.loads((await client.read_resource("memory://chats/road/schema")).contents[0].text)
            assert "character_sheet" in schema["types"]
            stats = json.loads((await client.read_resource("memory://chats/road/stats")).contents[0].text)
            assert stats == road.graph("road").stats()
            await client.call_tool("recall", {"chat": "road", "query": "What does Eileen owe?"})
            injection = json.loads((await client.read_resource("memory://chats/road/injection")).contents[0].text)
            assert injection["text"] and injection["tokens"]
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            assert prompts == ["memory_for_reply"]
            prompt = await client.get_prompt("memory_for_reply", {"chat": "road", "message": "Eileen, the salve?"})
            assert "Eileen" in prompt.messages[0].content.text

    asyncio.run(session())


def test_write_tools_keep_identity_rules_and_survive_a_regenerate(memory):
    memory.create_chat("c", "default")
    chat = [Message("user", "U", "Hi"), Message("assistant", "N", "Eileen went to the bridge.")]
    memory.sync("c", chat)

    async def session():
        async with Client(build_mcp(memory, allow_writes=True)) as client:
            made = _data(await client.call_tool("create_node", {"chat": "c", "type": "character_sheet",
                                                                "fields": {"name": "Eileen"}}))
            assert made["anchor_floor"] == 0  # the user message, not the reply a regenerate replaces
            text = _error(await client.call_tool("create_node", {"chat": "c", "type": "character_sheet",
                                                                 "fields": {"name": "eileen"}}))
            assert "exists already" in text and "edit_node" in text
            text = _error(await client.call_tool("create_node", {"chat": "c", "type": "character_sheet",
                                                                 "fields": {"name": "Rowan", "mood": "x"}}))
            assert "no field 'mood'" in text
            text = _error(await client.call_tool("create_node", {"chat": "c", "type": "event",
                                                                 "fields": {"summary": "x"}, "anchor_floor": 7}))
            assert "outside" in text and "0..1" in text
            return made

    asyncio.run(session())
    memory.sync("c", chat[:1])  # a regenerate: the reply is gone
    memory.sync("c", [chat[0], Message("assistant", "N", "Another reply.")])
    assert memory.graph("c").find_by_name("Eileen")
