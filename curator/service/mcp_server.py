"""The MCP server (`curator mcp`): the read-only graph tools and recall for any MCP client; write tools (node
create/edit/delete, each one commit) only when enabled explicitly.

Every tool names its chat, and every parameter says what it takes: the chats, their node types, relations and
floor ranges as they were when the server started are in the descriptions, and `chat_schema` gives them for any
chat. Wrong arguments (an unknown chat, node, type or relation, a floor range that is backwards, a value of the
wrong kind) come back as the tool's error in plain words with a hint, so the calling model can correct itself.
Resources: the chat list, and per chat its schema, graph stats and the last recall made through this server.
Prompt: `memory_for_reply`, the memory to put before the next reply. Write tools follow the agent's identity
rules (a second character with an existing name is refused with the id to edit), and their commits are anchored
at the newest user message unless a floor is given, so regenerating or swiping the reply keeps them.
"""

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from pydantic import Field, ValidationError

from curator import __version__
from curator.errors import CuratorError, MissingExtra, NotFound

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
except ImportError as exc:
    raise MissingExtra("server", "the MCP server") from exc

from curator.api.memory import Memory  # noqa: E402
from curator.schemas import Schema  # noqa: E402
from curator.store.graph import Node  # noqa: E402
from curator.store.messages import manual_anchor_floor  # noqa: E402

P = ParamSpec("P")
T = TypeVar("T")

READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)
MAX_LISTED_CHATS = 12  # chats spelled out in the parameter descriptions; `chat_schema` covers the rest


def _node(node: Node) -> dict[str, Any]:
    return {"id": node.id, "type": node.type, "title": node.title, "fields": node.fields, "level": node.level,
            "floors": [node.floor_from, node.floor_to], "importance": node.importance, "archived": node.archived,
            "parent": node.parent}


def _guard(fn: Callable[P, T]) -> Callable[P, T]:
    """Errors as text the model can act on (message and hint), not a traceback."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except CuratorError as exc:
            raise ToolError(f"{exc}" + (f" ({exc.hint})" if exc.hint else "")) from None

    return run


def plain_errors(exc: ValidationError) -> str:
    """A pydantic validation error in plain words: each argument and what is wrong with it, no URLs."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        given = err.get("input")
        shown = "" if err["type"] == "missing" else f" (got {json.dumps(given, default=str)[:60]})"
        parts.append(f"{where}: {err['msg']}{shown}")
    return "invalid arguments: " + "; ".join(parts) + ". The tool's input schema lists every parameter."


class CuratorMCP(MCPServer):
    """The MCP server, with argument errors reported in plain words."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"{name}: {plain_errors(exc.__cause__)}") from None
            raise


class ChatInfo:
    """What the tools need to know about the chats: valid types, relations, floors; checks with hints."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def schema(self, chat: str) -> Schema:
        return self.memory.chat(chat).schema  # ChatNotFound with its hint for an unknown chat

    def types(self, chat: str) -> list[str]:
        return list(self.schema(chat).types)

    def relations(self, chat: str) -> list[str]:
        return [r.name for r in self.schema(chat).relations]

    def floors(self, chat: str) -> int:
        return len(self.memory.store.messages(chat))

    def check_types(self, chat: str, types: list[str] | None) -> None:
        known = self.types(chat)
        for name in types or ():
            if name not in known:
                raise CuratorError(f"chat {chat!r} has no node type {name!r}",
                                   f"Its types: {', '.join(known)} (chat_schema lists their fields).")

    def check_relations(self, chat: str, relations: list[str] | None) -> None:
        known = self.relations(chat)
        for name in relations or ():
            if name not in known:
                raise CuratorError(f"chat {chat!r} has no relation {name!r}", f"Its relations: {', '.join(known)}.")

    def node(self, chat: str, node_id: str) -> Node:
        node = self.memory.graph(chat).get(node_id)
        if node is None:
            raise NotFound(f"no node {node_id!r} in chat {chat!r}", "Find ids with list_nodes or find_by_name.")
        return node

    def check_floor(self, chat: str, floor: int, what: str) -> None:
        count = self.floors(chat)
        if not 0 <= floor < max(count, 1):
            raise CuratorError(f"{what} {floor} is outside chat {chat!r}'s floors (0..{max(count - 1, 0)})",
                               "Floors are 0-based message indices.")

    def describe(self, chat: str) -> dict[str, Any]:
        schema = self.schema(chat)
        count = self.floors(chat)
        return {"chat": chat, "schema": schema.name, "floors": [0, max(count - 1, 0)], "messages": count,
                "types": {name: {"identity": spec.identity, "fields": list(spec.field_names),
                                 "primary_key": list(spec.primary_key), "description": spec.description}
                          for name, spec in schema.types.items()},
                "relations": {r.name: r.description for r in schema.relations if not r.internal}}

    def catalogue(self) -> str:
        """One line per chat (the first `MAX_LISTED_CHATS`): its types, relations and floor range."""
        lines = []
        chats = self.memory.chats()
        for chat in chats[:MAX_LISTED_CHATS]:
            try:
                info = self.describe(chat)
            except CuratorError:
                continue
            lines.append(f"{chat!r}: types {', '.join(info['types'])}; relations {', '.join(info['relations'])}; "
                         f"floors {info['floors'][0]}..{info['floors'][1]}")
        more = f" (and {len(chats) - MAX_LISTED_CHATS} more)" if len(chats) > MAX_LISTED_CHATS else ""
        return ("Chats when the server started" + more + ": " + " | ".join(lines) + ". "
                if lines else "No chats yet. ") + "chat_schema gives the types, relations and floors of any chat."


def build_mcp(memory: Memory, allow_writes: bool = False) -> MCPServer:
    info = ChatInfo(memory)
    catalogue = info.catalogue()
    server = CuratorMCP("memory-curator", version=__version__,
                        instructions="Memory of long role-play chats: look up characters, places, events and "
                                     "their links; `recall` gives the memory for the next reply. " + catalogue)
    last_recall: dict[str, dict[str, Any]] = {}

    Chat = Annotated[str, Field(description="the chat's id (list_chats gives them). " + catalogue)]
    NodeId = Annotated[str, Field(description="a node id such as 'n_1a2b' (from list_nodes, find_by_name, "
                                              "timeline or recall)")]
    Types = Annotated[list[str] | None, Field(description="only nodes of these types (the chat's schema types, "
                                                         "see chat_schema); omit for all")]

    def read(fn: Callable[P, T]) -> Callable[P, T]:
        server.add_tool(_guard(fn), annotations=READ_ONLY)
        return fn

    @read
    def list_chats() -> list[str]:
        """The ids of every chat with memory."""
        return memory.chats()

    @read
    def chat_schema(chat: Chat) -> dict[str, Any]:
        """The chat's node types (fields, identity rule), relations and floor range: what the other tools accept."""
        return info.describe(chat)

    @read
    def graph_stats(chat: Chat) -> dict[str, Any]:
        """Counts of the chat's nodes per type (active and archived) and of its edges."""
        return memory.graph(chat).stats()

    @read
    def list_nodes(
        chat: Chat,
        type: Annotated[
            str | None, Field(description="one node type of the chat (see chat_schema); omit for every type")
        ] = None,
        include_archived: Annotated[bool, Field(description="also archived (folded or forgotten) nodes")] = False,
        limit: Annotated[int, Field(ge=1, le=500, description="at most this many nodes")] = 50,
        offset: Annotated[int, Field(ge=0, description="skip this many (paging)")] = 0,
    ) -> list[dict[str, Any]]:
        """Nodes of the chat, oldest first, optionally of one type."""
        info.check_types(chat, [type] if type else None)
        nodes = memory.graph(chat).nodes(type=type, archived=None if include_archived else False,
                                         limit=limit, offset=offset)
        return [_node(n) for n in nodes]

    @read
    def get_node(chat: Chat, node_id: NodeId) -> dict[str, Any]:
        """One node with its edges."""
        graph = memory.graph(chat)
        node = info.node(chat, node_id)
        return {**_node(node), "edges": [{"source": e.source, "relation": e.relation, "target": e.target}
                                         for e in graph.edges(node_id)]}

    @read
    def find_by_name(chat: Chat,
                     name: Annotated[str, Field(min_length=1, description="a name or alias, e.g. 'Eileen'")],
                     types: Types = None) -> list[dict[str, Any]]:
        """Nodes whose name or alias matches `name` (case- and width-insensitive)."""
        info.check_types(chat, types)
        return [_node(n) for n in memory.graph(chat).find_by_name(name, types)]

    @read
    def neighbours(
        chat: Chat,
        node_id: NodeId,
        relations: Annotated[
            list[str] | None,
            Field(description="only links of these relations (the chat's relations, see chat_schema); omit for all"),
        ] = None,
    ) -> list[dict[str, Any]]:
        """The nodes linked to a node, optionally through some relations only, each with the link's relation and
        direction (`out`: from this node to it)."""
        info.node(chat, node_id)
        info.check_relations(chat, relations)
        return [{**_node(other), "relation": edge.relation, "direction": "out" if edge.source == node_id else "in"}
                for edge, other in memory.graph(chat).neighbours(node_id, relations)]

    @read
    def timeline(chat: Chat,
                 floor_from: Annotated[int, Field(ge=0, description="first floor (0-based message index)")] = 0,
                 floor_to: Annotated[int | None, Field(ge=0, description="last floor; omit for the chat's "
                                                                         "end")] = None,
                 types: Types = None) -> list[dict[str, Any]]:
        """Nodes whose floor range overlaps [floor_from, floor_to], in story order (at most 500)."""
        if floor_to is not None and floor_from > floor_to:
            raise CuratorError(f"floor_from {floor_from} is after floor_to {floor_to}",
                               "Give floor_from <= floor_to, or omit floor_to for the chat's end.")
        info.check_types(chat, types)
        return [_node(n) for n in memory.graph(chat).timeline(floor_from, floor_to, types)][:500]

    @read
    def recall(chat: Chat,
               query: Annotated[str, Field(min_length=1, description="what the next reply is about, usually the "
                                                                     "user's last message")],
               user_floor: Annotated[int | None, Field(ge=0, description="the floor of that user message; a "
                                                                         "repeat for the same floor reuses the "
                                                                         "result")] = None,
               speaker: Annotated[str | None, Field(description="who speaks next (a character's name); memories "
                                                                "are weighed and grouped by what that character "
                                                                "knows. Default: the newest assistant name")] = None,
               ) -> dict[str, Any]:
        """The memory for the next reply to `query`: persistent and recalled blocks within the token budget,
        the rendered text and where to place it."""
        options: dict[str, Any] = {"speaker": speaker} if speaker else {}
        result = memory.recall(chat, query, user_floor=user_floor, **options).to_dict()
        last_recall[chat] = result
        return result

    @read
    def scout(chat: Chat,
              message: Annotated[str, Field(min_length=1, description="the user's message about to be answered")],
              speaker: Annotated[str | None, Field(description="the character about to speak")] = None,
              ) -> dict[str, Any]:
        """Before writing a reply: what memory holds about `message` (the entities it names, where the story
        stands, open threads and undecided contradictions, what `speaker` does not know, what recall will show).
        Read-only; no model call."""
        return memory.scout(chat, message, speaker).to_dict()

    @read
    def facts_at(chat: Chat,
                 name: Annotated[str, Field(min_length=1, description="a name (or node id), e.g. Mira")],
                 at: Annotated[str, Field(min_length=1, description="a story time the memory uses ('day 5'), a "
                                                                    "date or a floor")]) -> dict[str, Any]:
        """What the node named `name` held at a point in story time, and the spans of story time of its values."""
        return memory.facts_at(chat, name, at)

    @server.resource("memory://chats", name="chats", mime_type="application/json",
                     description="The ids of every chat with memory.")
    def chats_resource() -> str:
        return json.dumps(memory.chats())

    @server.resource("memory://chats/{chat}/schema", name="chat schema", mime_type="application/json",
                     description="A chat's node types, relations and floor range.")
    def schema_resource(chat: str) -> str:
        return json.dumps(info.describe(chat), ensure_ascii=False)

    @server.resource("memory://chats/{chat}/stats", name="graph stats", mime_type="application/json",
                     description="A chat's node counts per type and edge count.")
    def stats_resource(chat: str) -> str:
        return json.dumps(memory.graph(chat).stats(), ensure_ascii=False)

    @server.resource("memory://chats/{chat}/injection", name="last injection", mime_type="application/json",
                     description="The last recall made through this server for a chat (what the model was given).")
    def injection_resource(chat: str) -> str:
        memory.chat(chat)
        if chat not in last_recall:
            raise NotFound(f"no recall for chat {chat!r} through this server yet", "Call the recall tool first.")
        return json.dumps(last_recall[chat], ensure_ascii=False)

    @server.prompt(name="memory_for_reply", description="The chat's memory for the next reply to a message, as a "
                                                        "message to put before the conversation.")
    def memory_for_reply(chat: str, message: str) -> str:
        result = memory.recall(chat, message)
        last_recall[chat] = result.to_dict()
        return ("Memory of this story so far (use it; do not repeat it verbatim):\n\n" + result.text
                if result.text else "There is no memory for this chat yet.")

    if allow_writes:
        _write_tools(server, memory, info, Chat, NodeId)
    return server


def _write_tools(server: MCPServer, memory: Memory, info: ChatInfo, Chat: Any, NodeId: Any) -> None:
    from curator.tools.write import refuse_duplicate  # the agent's identity rule, shared

    Anchor = Annotated[int | None, Field(ge=0, description="the floor this change belongs to: a rollback of this "
                                                           "floor or an earlier one undoes it. Omit for the newest "
                                                           "user message, so regenerating or swiping the reply "
                                                           "keeps it")]
    Fields = Annotated[dict[str, str], Field(description="field name -> text; the type's fields are in "
                                                         "chat_schema")]

    def write(fn: Callable[P, T]) -> Callable[P, T]:
        server.add_tool(_guard(fn), annotations=WRITES)
        return fn

    def commit(chat: str, ops: list[dict[str, Any]], note: str, anchor_floor: int | None) -> dict[str, Any]:
        if anchor_floor is None:
            anchor_floor = manual_anchor_floor(memory.store.messages(chat))
        else:
            info.check_floor(chat, anchor_floor, "anchor_floor")
        record = memory.commit(chat, ops, anchor_floor, "manual", note)
        return {"commit": record.id, "anchor_floor": record.anchor_floor, "ops": record.ops}

    @write
    def create_node(chat: Chat,
                    type: Annotated[str, Field(description="one node type of the chat (see chat_schema)")],
                    fields: Fields,
                    title: Annotated[str | None, Field(description="a title; by default it comes from the "
                                                                   "fields")] = None,
                    anchor_floor: Anchor = None) -> dict[str, Any]:
        """Create a node of a schema type (one commit). A character or place whose name or alias exists already
        is refused with the id to edit instead."""
        info.check_types(chat, [type])
        spec = info.schema(chat).types[type]
        unknown = sorted(set(fields) - set(spec.field_names))
        if unknown:
            raise CuratorError(f"{type} has no field {', '.join(map(repr, unknown))}",
                               f"Its fields: {', '.join(spec.field_names)}.")
        if spec.identity != "event":
            try:
                refuse_duplicate(memory.graph(chat), spec, {k: v.strip() for k, v in fields.items() if v.strip()})
            except CuratorError as exc:  # the agent's ToolError: same words, with its hint
                hint = getattr(exc, "hint", "") or ""
                raise CuratorError(str(exc).replace(f"edit_{type}(", "edit_node("), hint.replace(
                    f"edit_{type}(node_id=", "edit_node(node_id=")) from None
        return commit(chat, [{"op": "create_node", "type": type, "title": title, "fields": fields}],
                      "created over MCP", anchor_floor)

    @write
    def edit_node(chat: Chat, node_id: NodeId,
                  set_fields: Annotated[dict[str, str] | None, Field(description="fields to set: field name -> "
                                                                                 "text")] = None,
                  title: Annotated[str | None, Field(description="a new title")] = None,
                  anchor_floor: Anchor = None) -> dict[str, Any]:
        """Change a node's fields or title (one commit)."""
        node = info.node(chat, node_id)
        spec = info.schema(chat).types.get(node.type)
        unknown = sorted(set(set_fields or {}) - set(spec.field_names if spec else ()))
        if unknown:
            raise CuratorError(f"{node.type} has no field {', '.join(map(repr, unknown))}",
                               f"Its fields: {', '.join(spec.field_names if spec else ())}.")
        if not set_fields and title is None:
            raise CuratorError("nothing to change", "Give set_fields or title.")
        op: dict[str, Any] = {"op": "update_node", "id": node_id, "set_fields": set_fields or {}}
        if title is not None:
            op["title"] = title
        return commit(chat, [op], "edited over MCP", anchor_floor)

    @write
    def delete_node(chat: Chat, node_id: NodeId, anchor_floor: Anchor = None) -> dict[str, Any]:
        """Delete a node and its edges (one commit; a rollback past it brings it back)."""
        info.node(chat, node_id)
        return commit(chat, [{"op": "delete_node", "id": node_id}], "deleted over MCP", anchor_floor)
