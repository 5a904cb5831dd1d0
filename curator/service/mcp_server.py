"""The MCP server (`curator mcp`): the read-only graph tools and recall for any MCP client; write tools (node
create/edit/delete, each one commit) only when enabled explicitly.

Every tool names its chat; a tool's errors come back as the tool's error result with the hint, so the calling
model can correct itself.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from curator import __version__
from curator.errors import CuratorError, NotFound
from curator.service.memory import Memory

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)


def _node(node) -> dict[str, Any]:
    return {"id": node.id, "type": node.type, "title": node.title, "fields": node.fields, "level": node.level,
            "floors": [node.floor_from, node.floor_to], "importance": node.importance, "archived": node.archived,
            "parent": node.parent}


def _guard(fn):
    """Errors as text the model can act on (message and hint), not a traceback."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CuratorError as exc:
            raise ToolError(f"{exc}" + (f" ({exc.hint})" if exc.hint else "")) from None

    return run


def build_mcp(memory: Memory, allow_writes: bool = False) -> MCPServer:
    server = MCPServer("memory-curator", version=__version__,
                       instructions="Memory of long role-play chats: look up characters, places, events and "
                                    "their links; `recall` gives the memory for the next reply.")

    def read(fn):
        server.add_tool(_guard(fn), annotations=READ_ONLY)
        return fn

    @read
    def list_chats() -> list[str]:
        """The ids of every chat with memory."""
        return memory.chats()

    @read
    def graph_stats(chat: str) -> dict:
        """Counts of the chat's nodes per type (active and archived) and of its edges."""
        return memory.graph(chat).stats()

    @read
    def list_nodes(chat: str, type: str | None = None, include_archived: bool = False, limit: int = 50,
                   offset: int = 0) -> list[dict]:
        """Nodes of the chat, oldest first, optionally of one type."""
        nodes = memory.graph(chat).nodes(type=type, archived=None if include_archived else False,
                                         limit=max(1, min(limit, 500)), offset=max(0, offset))
        return [_node(n) for n in nodes]

    @read
    def get_node(chat: str, node_id: str) -> dict:
        """One node with its edges."""
        graph = memory.graph(chat)
        node = graph.get(node_id)
        if node is None:
            raise NotFound(f"no node {node_id!r} in chat {chat!r}", "Find ids with list_nodes or find_by_name.")
        return {**_node(node), "edges": [{"source": e.source, "relation": e.relation, "target": e.target}
                                         for e in graph.edges(node_id)]}

    @read
    def find_by_name(chat: str, name: str, types: list[str] | None = None) -> list[dict]:
        """Nodes whose name or alias matches `name` (case- and width-insensitive)."""
        return [_node(n) for n in memory.graph(chat).find_by_name(name, types)]

    @read
    def neighbours(chat: str, node_id: str, relations: list[str] | None = None) -> list[dict]:
        """The nodes linked to a node, optionally through some relations only."""
        return [_node(n) for n in memory.graph(chat).neighbours(node_id, relations)]

    @read
    def timeline(chat: str, floor_from: int = 0, floor_to: int | None = None, types: list[str] | None = None) -> list[dict]:
        """Nodes whose floor range overlaps [floor_from, floor_to], in story order."""
        return [_node(n) for n in memory.graph(chat).timeline(floor_from, floor_to, types)][:500]

    @read
    def recall(chat: str, query: str, user_floor: int | None = None, speaker: str | None = None) -> dict:
        """The memory for the next reply to `query`: persistent and recalled blocks within the token budget,
        the rendered text and where to place it. `speaker`: who speaks next (default: the newest assistant name)."""
        return memory.recall(chat, query, user_floor=user_floor, **({"speaker": speaker} if speaker else {})).to_dict()

    if allow_writes:
        def write(fn):
            server.add_tool(_guard(fn), annotations=WRITES)
            return fn

        def commit(chat: str, ops: list[dict], note: str) -> dict:
            anchor = max(len(memory.store.messages(chat)) - 1, 0)
            record = memory.commit(chat, ops, anchor, "manual", note)
            return {"commit": record.id, "ops": record.ops}

        @write
        def create_node(chat: str, type: str, fields: dict[str, str], title: str | None = None) -> dict:
            """Create a node of a schema type (one commit at the chat's latest floor)."""
            return commit(chat, [{"op": "create_node", "type": type, "title": title, "fields": fields}],
                          "created over MCP")

        @write
        def edit_node(chat: str, node_id: str, set_fields: dict[str, str] | None = None,
                      title: str | None = None) -> dict:
            """Change a node's fields or title (one commit)."""
            op: dict = {"op": "update_node", "id": node_id, "set_fields": set_fields or {}}
            if title is not None:
                op["title"] = title
            return commit(chat, [op], "edited over MCP")

        @write
        def delete_node(chat: str, node_id: str) -> dict:
            """Delete a node and its edges (one commit; a rollback past it brings it back)."""
            return commit(chat, [{"op": "delete_node", "id": node_id}], "deleted over MCP")

    return server
