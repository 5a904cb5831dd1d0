"""The memory_curator agent's tool surface: read-only graph queries and per-type write tools.

Each tool is a plain typed function over a Workspace (the staged copy of one chat's graph); its docstring is what
the model reads. `run_tools` lists the tools of one run: every read tool, and the write tools of the types
active at this cadence step, links and compaction.
"""

from __future__ import annotations

from curator.schemas import Schema

from curator.tools.compact import memory_compact_nodes, memory_compaction_candidates
from curator.tools.read import READ_TOOLS
from curator.tools.registry import ToolSpec, agent_tools, from_function, invoke
from curator.tools.workspace import ToolCall, ToolError, Workspace
from curator.tools.write import write_tools


def read_tools(vector_search: bool = True) -> list[ToolSpec]:
    functions = [f for f in READ_TOOLS if vector_search or f.__name__ != "memory_vector_search"]
    return [from_function(f) for f in (*functions, memory_compaction_candidates)]


def run_tools(schema: Schema, active_types: list[str], vector_search: bool = True) -> list[ToolSpec]:
    """The tools of one curator run."""
    return read_tools(vector_search) + write_tools(schema, active_types)


__all__ = ["ToolCall", "ToolError", "ToolSpec", "Workspace", "agent_tools", "from_function", "invoke",
           "memory_compact_nodes", "read_tools", "run_tools", "write_tools"]
