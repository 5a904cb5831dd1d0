"""Export a chat's memory as a SillyTavern World Info (lorebook) file: persistent nodes become constant entries,
the others keyword entries triggered by their titles and aliases."""

from __future__ import annotations

from typing import Any

from curator.schemas import Schema

from curator.store.graph import split_aliases
from curator.recall.injection import node_line, persistent_nodes
from curator.store.queries import GraphView


def export_world_info(graph: GraphView, schema: Schema, latest_floor: int, order_base: int = 9800) -> dict[str, Any]:
    persistent, _ = persistent_nodes(graph, schema, latest_floor)
    constant = {n.id for n in persistent}
    entries = {}
    for uid, node in enumerate(graph.nodes()):
        spec = schema.type(node.type)
        keys = [node.title]
        if spec:
            for name in spec.name_fields:
                keys += split_aliases(node.fields.get(name, ""))
        keys = list(dict.fromkeys(k for k in keys if k))
        entries[str(uid)] = {
            "uid": uid, "key": keys, "keysecondary": [], "comment": f"{node.type}: {node.title} [{node.id}]",
            "content": node_line(node, schema)[2:], "constant": node.id in constant, "selective": False,
            "order": order_base + uid, "position": 4, "depth": 4, "role": 0, "disable": False,
            "excludeRecursion": True, "preventRecursion": True, "probability": 100, "useProbability": True,
            "group": "", "scanDepth": None, "caseSensitive": False, "matchWholeWords": None,
            "extensions": {"memory_curator": {"node_id": node.id, "type": node.type, "floors": [node.floor_from,
                                                                                                  node.floor_to]}},
        }
    return {"entries": entries, "name": "memory-curator", "description": "Exported by memory-curator"}
