"""Read-only tools: what the curator looks at before it writes. Each is a plain function over a Workspace
(the staged copy of one chat's graph); its docstring is the description the model reads. They raise
ToolError with a hint when a call cannot be answered."""

from __future__ import annotations

from collections import Counter, deque
from types import SimpleNamespace
from typing import Any, cast

from curator.vectors.documents import node_document
from curator.store.graph import Node
from curator.recall.lexical import BM25

from curator.tools.workspace import ToolError, Workspace

BRIEF_CHARS = 160
MAX_LIST = 200


def brief(node: Node, ws: Workspace, chars: int = BRIEF_CHARS) -> dict[str, Any]:
    """A node in one small mapping: id, type, title, level, floors and the start of its text."""
    text = " ".join(node_document(node, ws.schema).split())
    out = {"id": node.id, "type": node.type, "title": node.title, "level": node.level,
           "floors": [node.floor_from, node.floor_to], "text": text if len(text) <= chars else text[:chars - 1] + "…"}
    if node.archived:
        out["archived"] = True
    if node.children:
        out["children"] = len(node.children)
    return out


def _check_types(ws: Workspace, types: list[str] | None) -> list[str] | None:
    for name in types or ():
        ws.spec(name)
    return types or None


def memory_schema(ws: Workspace) -> dict[str, Any]:
    """The chat's memory schema: every node type with its fields (required ones marked), identity policy and
    compression settings, which types you may write this run, and the relations links may use."""
    types = {}
    for name, spec in ws.schema.types.items():
        types[name] = {
            "description": spec.description, "identity": spec.identity,
            "fields": [{"name": f.name, "hint": f.hint, "required": f.required} for f in spec.fields],
            "primary_key": list(spec.primary_key), "writable_this_run": name in ws.active_types,
            "compression": spec.compression.model_dump() if spec.compression.mode == "hierarchical" else None,
        }
        if spec.extraction_instructions:
            types[name]["rules"] = spec.extraction_instructions
    relations = [{"name": r.name, "description": r.description, "symmetric": r.symmetric}
                 for r in ws.schema.relations if not r.internal]
    return {"floor": ws.anchor, "seq": ws.seq, "active_types": ws.active_types, "types": types,
            "relations": relations}


def memory_list_candidates(ws: Workspace, types: list[str] | None = None, exclude_recent_floors: int = 0,
                           limit: int = 30) -> dict[str, Any]:
    """Active top-level nodes (summaries stand for the nodes folded into them), newest first, as brief lines.
    `types` narrows to some types; `exclude_recent_floors` leaves out nodes that reach into the last N floors."""
    types = _check_types(ws, types) or list(ws.schema.types)
    limit = max(1, min(limit, MAX_LIST))
    total, ids = ws.graph.top_level(types, ws.latest_floor - max(0, exclude_recent_floors)
                                    if exclude_recent_floors > 0 else 2 ** 62, limit)
    return {"total": total, "nodes": [brief(ws.node(i), ws) for i in ids]}


def memory_edge_summary(
    ws: Workspace, node_id: str, relations: list[str] | None = None, limit: int = 8
) -> dict[str, Any]:
    """The links of one node: how many, how many per relation, and up to `limit` neighbours (relation,
    direction, id, title, type)."""
    ws.node(node_id)
    edges = [e for e in ws.graph.edges(node_id) if not relations or e.relation in relations]
    samples = []
    for edge in edges[:max(0, limit)]:
        other_id = edge.target if edge.source == node_id else edge.source
        other = ws.graph.get(other_id)
        samples.append({"relation": edge.relation, "direction": "out" if edge.source == node_id else "in",
                        "id": other_id, "title": other.title if other else None,
                        "type": other.type if other else None, "strength": edge.strength})
    return {"degree": len(edges), "by_relation": dict(Counter(e.relation for e in edges)), "neighbours": samples}


def memory_node_brief(
    ws: Workspace, node_id: str, include_edge_summary: bool = True, edge_limit: int = 8
) -> dict[str, Any]:
    """Everything about one node: all its fields, floor range, level, importance, whether it is archived, its
    parent summary and its children, and (by default) a summary of its links."""
    node = ws.node(node_id)
    graph = ws.graph
    parent = graph.get(node.parent) if node.parent else None
    out = {"id": node.id, "type": node.type, "title": node.title, "fields": node.fields, "level": node.level,
           "floors": [node.floor_from, node.floor_to], "importance": node.importance, "archived": node.archived,
           "parent": {"id": parent.id, "title": parent.title} if parent else None,
           "children": [{"id": c.id, "title": c.title} for c in map(graph.get, node.children) if c]}
    if include_edge_summary:
        out["edges"] = memory_edge_summary(ws, node_id, limit=edge_limit)
    return out


def memory_expand_seeds(
    ws: Workspace,
    seed_ids: list[str],
    hops: int = 1,
    relations: list[str] | None = None,
    include_children: bool = True,
    include_archived: bool = False,
    limit: int = 40,
) -> dict[str, Any]:
    """Walk the graph from `seed_ids` up to `hops` links away (optionally only along `relations`), with the
    children of each node reached when `include_children`. Returns each node found, with how it was reached."""
    if not seed_ids:
        raise ToolError("seed_ids is empty", "Give at least one node id.")
    for seed in seed_ids:
        ws.node(seed)
    hops = max(0, min(hops, 3))
    graph = ws.graph
    seen: dict[str, dict[str, Any]] = {}
    queue = deque((seed, 0) for seed in seed_ids)
    visited = set(seed_ids)
    while queue and len(seen) < limit:
        current, depth = queue.popleft()
        steps = []
        if depth < hops:
            steps += [(other, f"{edge.relation} from {current}")
                      for edge, other in graph.neighbours(current, relations, include_archived=include_archived)]
        if include_children:
            node = graph.get(current)
            # Children are folded (archived) by nature: they are what "include_children" is for.
            steps += [(child, f"child of {current}") for child in map(graph.get, node.children if node else [])
                      if child]
        for other, via in steps:
            if other.id in visited or len(seen) >= limit:
                continue
            visited.add(other.id)
            seen[other.id] = brief(other, ws) | {"via": via}
            if via.startswith("child"):
                continue  # children are shown, not walked further
            queue.append((other.id, depth + 1))
    return {"found": len(seen), "nodes": list(seen.values())}


def memory_keyword_search(ws: Workspace, query: str, types: list[str] | None = None, k: int = 10) -> dict[str, Any]:
    """Active nodes whose text shares words with `query` (BM25; Chinese and Japanese text work too), best first."""
    types = _check_types(ws, types)
    if not query.strip():
        raise ToolError("query is empty", "Give a few words to search for.")
    if "bm25" not in ws.caches:  # built once per run; nodes the run changes are scored on their own below
        rows = [SimpleNamespace(id=i, type=t, title=title, fields=fields)
                for i, t, title, fields in ws.graph.active_texts()]
        ws.caches["bm25"] = (ws.version, rows, BM25([_text(n, ws) for n in rows]))
    built, rows, bm25 = ws.caches["bm25"]
    changed = {i for i, v in ws.touched.items() if v > built}
    k = max(1, min(k, 50))
    hits = [(node, s) for i, s in bm25.top(query, 10 * k + len(changed))
            if rows[i].id not in changed and (not types or rows[i].type in types)
            and (node := ws.graph.get(rows[i].id)) is not None][:k]
    for node_id in changed:
        node = ws.graph.get(node_id)
        if node is not None and not node.archived and (not types or node.type in types):
            score = bm25.score_text(query, _text(node, ws))
            if score > 0:
                hits.append((node, score))
    hits.sort(key=lambda h: -h[1])
    return {"nodes": [brief(n, ws) | {"score": round(s, 3)} for n, s in hits[:k]]}


def _text(node: Node | SimpleNamespace, ws: Workspace) -> str:
    # a row read for the keyword index has the type, title and fields node_document reads, as a Node has
    return f"{node.title}\n{node_document(cast(Node, node), ws.schema)}"


def memory_vector_search(ws: Workspace, query: str, types: list[str] | None = None, k: int = 10) -> dict[str, Any]:
    """Nodes whose meaning is closest to `query` (vector index of the committed graph; nodes staged in this run
    are not in it yet), best first."""
    types = _check_types(ws, types)
    if ws.index is None:
        raise ToolError("this chat has no vector index in this run", "Use memory_keyword_search instead.")
    out = []
    for node_id, score in ws.index.query(ws.chat_id, query, 5 * max(k, 1)):
        node = ws.graph.get(node_id)
        if node is not None and not node.archived and (not types or node.type in types):
            out.append(brief(node, ws) | {"score": round(score, 4)})
        if len(out) >= min(k, 50):
            break
    return {"nodes": out}


def memory_find_by_name(ws: Workspace, name: str, types: list[str] | None = None) -> dict[str, Any]:
    """Nodes named `name` by title, primary key or alias (case and spacing ignored); when none match exactly,
    nodes where it appears inside one of those names. Call this before creating any named entity."""
    types = _check_types(ws, types)
    found = ws.graph.find_by_name(name, types)
    match = "exact"
    if not found:
        found, match = ws.graph.find_by_name(name, types, partial=True), "partial"
    return {"match": match if found else "none", "nodes": [brief(n, ws) for n in found[:20]]}


def memory_timeline(ws: Workspace, floor_from: int = 0, floor_to: int | None = None, types: list[str] | None = None,
                    include_archived: bool = False, limit: int = 40) -> dict[str, Any]:
    """Nodes whose floor range overlaps [floor_from, floor_to], in story order (archived ones on request)."""
    types = _check_types(ws, types)
    if floor_to is not None and floor_to < floor_from:
        raise ToolError(f"floor range {floor_from}-{floor_to} runs backwards")
    nodes = ws.graph.timeline(floor_from, floor_to, types, include_archived)
    return {"total": len(nodes), "nodes": [brief(n, ws) for n in nodes[:max(1, min(limit, MAX_LIST))]]}


READ_TOOLS = (memory_schema, memory_list_candidates, memory_node_brief, memory_edge_summary, memory_expand_seeds,
              memory_keyword_search, memory_vector_search, memory_find_by_name, memory_timeline)
