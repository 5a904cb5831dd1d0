"""Read-only queries over one chat's graph: what the tools, recall, the CLI and the exporter look at."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Literal

from curator.store.db import Connection
from curator.store.graph import EDGE_COLUMNS, NODE_COLUMNS, Edge, Node, edge_from_row, node_from_row, normalize_name

_NODE_SELECT = f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes"
_EDGE_SELECT = f"SELECT {', '.join(EDGE_COLUMNS)} FROM edges"
CHILDREN_SQL = ("SELECT c.parent_id, n.floor_from, c.id FROM (SELECT parent_id, id FROM nodes WHERE chat_id=? AND "
                "parent_id IN ({})) AS c JOIN nodes n ON n.chat_id=? AND n.id=c.id")


class GraphView:
    """Queries over the graph of one chat. Cheap to create; holds no state of its own."""

    def __init__(self, conn: Connection, chat_id: str) -> None:
        self.conn, self.chat_id = conn, chat_id

    def _nodes(self, where: str = "", params: tuple[Any, ...] = (), order: str = "floor_from, id",
               limit: int | None = None, offset: int = 0) -> list[Node]:
        sql = f"{_NODE_SELECT} WHERE chat_id=?{' AND ' + where if where else ''} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        rows = self.conn.execute(sql, (self.chat_id, *params)).fetchall()
        children = self._children_of([r["id"] for r in rows])
        return [node_from_row(r, children.get(r["id"])) for r in rows]

    def _children_of(self, ids: list[str]) -> dict[str, list[str]]:
        """Each node's children in (floor_from, id) order. The children are found by the parent index alone (it
        holds their ids), their floors read by key, and the order made here: asked for the floors or an ORDER BY
        in one select, SQLite walked every node of the chat by its primary key instead (3-5 ms at 30k nodes, on
        every read of a few nodes)."""
        found: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(CHILDREN_SQL.format(", ".join("?" * len(chunk))),
                                     (self.chat_id, *chunk, self.chat_id))
            for parent, floor_from, child in rows:
                found[parent].append((floor_from, child))
        return {parent: [child for _, child in sorted(children)] for parent, children in found.items()}

    def get(self, node_id: str) -> Node | None:
        nodes = self._nodes("id=?", (node_id,))
        return nodes[0] if nodes else None

    def nodes(self, type: str | None = None, level: int | None = None, archived: bool | None = False,
              limit: int | None = None, offset: int = 0) -> list[Node]:
        """Nodes by type/level; `archived=None` gives both active and archived ones. Ordered by floor."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("type", type), ("level", level)):
            if value is not None:
                clauses.append(f"{column}=?")
                params.append(value)
        if archived is not None:
            clauses.append("archived=?")
            params.append(int(archived))
        return self._nodes(" AND ".join(clauses), tuple(params), limit=limit, offset=offset)

    def story_segments(self) -> list[tuple[str | None, str]]:
        """(label, stored segment) of every node with a segment, archived ones too, in floor order: the story
        clock's input without reading and decoding whole nodes (each extraction step asks; it read every node)."""
        return [(r[0], r[1]) for r in self.conn.execute(
            "SELECT story_label, story_segment FROM nodes WHERE chat_id=? AND story_segment IS NOT NULL "
            "ORDER BY floor_from, id", (self.chat_id,))]

    def story_floors(self) -> list[tuple[int, int, str | None, str]]:
        """(floor_from, floor_to, label, stored segment) of every node with a segment, archived ones too, in floor
        order: where the story's time stands at each floor."""
        return [(r[0], r[1], r[2], r[3]) for r in self.conn.execute(
            "SELECT floor_from, floor_to, story_label, story_segment FROM nodes WHERE chat_id=? AND "
            "story_segment IS NOT NULL ORDER BY floor_from, id", (self.chat_id,))]

    def latest_of_types(self, types: list[str], limit: int) -> list[tuple[str, str, dict[str, Any]]]:
        """(type, title, fields) of the `limit` active nodes of `types` with the latest floor_to; ties in the order
        of `types`, then of `nodes()` (floor_from, id). Reads only what it returns (the extractor's known names
        read every entity of the chat, whole, each step)."""
        if not types or limit <= 0:
            return []
        rank = "CASE type " + " ".join("WHEN ? THEN ?" for _ in types) + " END"
        rows = self.conn.execute(
            f"SELECT type, title, fields_json FROM nodes WHERE chat_id=? AND archived=0 AND type IN "
            f"({', '.join('?' * len(types))}) ORDER BY floor_to DESC, {rank}, floor_from, id LIMIT ?",
            (self.chat_id, *types, *[x for i, t in enumerate(types) for x in (t, i)], int(limit)))
        return [(r[0], r[1], json.loads(r[2])) for r in rows]

    def titles(self, type: str) -> list[str]:
        """Titles of every node of a type, archived ones included (cheap: no other columns)."""
        return [
            r[0] for r in self.conn.execute("SELECT title FROM nodes WHERE chat_id=? AND type=?", (self.chat_id, type))
        ]

    def find_by_name(self, name: str, types: list[str] | None = None, include_archived: bool = False,
                     partial: bool = False) -> list[Node]:
        """Nodes whose title, primary key or an alias equals `name` after normalization (trimmed, spaces
        folded, case-folded); with `partial`, nodes where it appears inside one of those names."""
        key = normalize_name(name)
        if not key:
            return []
        if partial:
            pattern = "%" + key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            cond, param = "name LIKE ? ESCAPE '\\'", pattern
        else:
            cond, param = "name=?", key
        ids = [r[0] for r in self.conn.execute(
            f"SELECT DISTINCT node_id FROM node_names WHERE chat_id=? AND {cond}", (self.chat_id, param))]
        if not ids:
            return []
        where = f"id IN ({', '.join('?' * len(ids))})"
        params: tuple[Any, ...] = tuple(ids)
        if types:
            where += f" AND type IN ({', '.join('?' * len(types))})"
            params += tuple(types)
        if not include_archived:
            where += " AND archived=0"
        return self._nodes(where, params)

    def edges(self, node_id: str | None = None, relation: str | None = None) -> list[Edge]:
        clauses, params = [], []
        if node_id is not None:
            clauses.append("(source=? OR target=?)")
            params += [node_id, node_id]
        if relation is not None:
            clauses.append("relation=?")
            params.append(relation)
        where = "".join(" AND " + c for c in clauses)
        rows = self.conn.execute(f"{_EDGE_SELECT} WHERE chat_id=?{where} ORDER BY id", (self.chat_id, *params))
        return [edge_from_row(r) for r in rows]

    def edges_at(self, node_ids: list[str]) -> dict[str, list[Edge]]:
        """The edges at each of `node_ids` (in edge id order), read in one statement per 500 ids: recall's
        expansion asks for all its seeds at once, since on a database server every statement is a round trip."""
        found: dict[str, list[Edge]] = {i: [] for i in node_ids}
        ids = list(found)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks, wanted = ", ".join("?" * len(chunk)), set(chunk)
            rows = self.conn.execute(f"{_EDGE_SELECT} WHERE chat_id=? AND (source IN ({marks}) OR target IN ({marks}))"
                                     " ORDER BY id", (self.chat_id, *chunk, *chunk))
            for edge in map(edge_from_row, rows):
                for end in {edge.source, edge.target} & wanted:
                    found[end].append(edge)
        return found

    def neighbours(self, node_id: str, relations: list[str] | None = None,
                   direction: Literal["out", "in", "both"] = "both",
                   include_archived: bool = False) -> list[tuple[Edge, Node]]:
        """Edges at `node_id` with the node at their other end."""
        found = []
        for edge in self.edges(node_id):
            if relations and edge.relation not in relations:
                continue
            outgoing = edge.source == node_id
            if (direction == "out" and not outgoing) or (direction == "in" and outgoing):
                continue
            other = self.get(edge.target if outgoing else edge.source)
            if other is not None and (include_archived or not other.archived):
                found.append((edge, other))
        return found

    def timeline(self, floor_from: int = 0, floor_to: int | None = None, types: list[str] | None = None,
                 include_archived: bool = False) -> list[Node]:
        """Nodes whose floor range overlaps [floor_from, floor_to], in story order."""
        where, params = "floor_to >= ?", [floor_from]  # type: str, list[Any]
        if floor_to is not None:
            where += " AND floor_from <= ?"
            params.append(floor_to)
        if types:
            where += f" AND type IN ({', '.join('?' * len(types))})"
            params += types
        if not include_archived:
            where += " AND archived=0"
        return self._nodes(where, tuple(params))

    def by_ids(self, ids: list[str]) -> list[Node]:
        """The nodes of `ids` that exist, archived or not (read in chunks: a statement's parameters are limited)."""
        found: list[Node] = []
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            found.extend(self._nodes(f"id IN ({', '.join('?' * len(chunk))})", tuple(chunk)))
        return found

    def ids_reaching(self, floor: int, types: list[str] | None = None) -> list[str]:
        """The ids of the nodes (of `types`) whose floors reach `floor` or later, archived ones too."""
        where = f" AND type IN ({', '.join('?' * len(types))})" if types is not None else ""
        return [r[0] for r in self.conn.execute(f"SELECT id FROM nodes WHERE chat_id=? AND floor_to >= ?{where}",
                                                (self.chat_id, floor, *(types or ())))]

    def links(self, edge_ids: list[str] | None = None) -> list[tuple[str, str, str, str]]:
        """(id, relation, source, target) of every edge, or of those of `edge_ids` that exist; ordered by id."""
        sql = "SELECT id, relation, source, target FROM edges WHERE chat_id=?"
        if edge_ids is None:
            return [tuple(r) for r in self.conn.execute(sql + " ORDER BY id", (self.chat_id,))]
        found: list[tuple[str, str, str, str]] = []
        for start in range(0, len(edge_ids), 500):
            chunk = edge_ids[start:start + 500]
            found.extend(tuple(r) for r in self.conn.execute(
                f"{sql} AND id IN ({', '.join('?' * len(chunk))}) ORDER BY id", (self.chat_id, *chunk)))
        return found

    def contradictions(self) -> list[Edge]:
        """The open contradictions: `contradicts` links between two active nodes of the objective layer (a
        point-of-view memory that contradicts the facts is a mistaken belief, by design, not a conflict)."""
        edges = self.edges(relation="contradicts")
        nodes = {n.id: n for n in self.by_ids(sorted({i for e in edges for i in (e.source, e.target)}))}
        return [e for e in edges if all(i in nodes and not nodes[i].archived
                                        and nodes[i].scope.get("layer", "objective") != "pov"
                                        for i in (e.source, e.target))]

    def names_of_type(self, type: str) -> list[str]:
        """The normalized names and aliases of the type's active nodes."""
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT nn.name FROM node_names nn JOIN nodes n ON n.chat_id = nn.chat_id AND n.id = nn.node_id "
            "WHERE nn.chat_id=? AND n.type=? AND n.archived=0", (self.chat_id, type))]

    def level_counts(self, type: str) -> dict[int, int]:
        """How many active nodes of a type sit at each level."""
        return dict(self.conn.execute("SELECT level, COUNT(*) FROM nodes WHERE chat_id=? AND type=? AND archived=0 "
                                      "GROUP BY level", (self.chat_id, type)).fetchall())

    def isolated(self) -> int:
        """How many active nodes have no edge."""
        return int(self.conn.execute(
            "SELECT COUNT(*) FROM nodes n WHERE n.chat_id=? AND n.archived=0 AND NOT EXISTS (SELECT 1 FROM edges e "
            "WHERE e.chat_id=n.chat_id AND (e.source=n.id OR e.target=n.id))", (self.chat_id,)).fetchone()[0])

    def outline(self, archived: bool | None = False) -> list[dict[str, Any]]:
        """Every node without its fields (id, type, title, level, floors from/to, importance, archived), by floor:
        what a picture of the whole graph needs."""
        where = "" if archived is None else f" AND archived={int(archived)}"
        return [{"id": r[0], "type": r[1], "title": r[2], "level": r[3], "floors": [r[4], r[5]],
                 "importance": r[6], "archived": bool(r[7])} for r in self.conn.execute(
                     "SELECT id, type, title, level, floor_from, floor_to, importance, archived FROM nodes "
                     f"WHERE chat_id=?{where} ORDER BY floor_from, id", (self.chat_id,))]

    def top_level(self, types: list[str], floor_to_max: int, limit: int) -> tuple[int, list[str]]:
        """Active nodes of `types` folded into nothing and ending at `floor_to_max` or before: how many, and the
        ids of the newest `limit` (by last floor, then first floor, then id)."""
        where = (f"chat_id=? AND archived=0 AND parent_id IS NULL AND type IN ({', '.join('?' * len(types))})"
                 " AND floor_to <= ?")
        params = (self.chat_id, *types, floor_to_max)
        total = self.conn.execute(f"SELECT COUNT(*) FROM nodes WHERE {where}", params).fetchone()[0]
        ids = [r[0] for r in self.conn.execute(
            f"SELECT id FROM nodes WHERE {where} ORDER BY floor_to DESC, floor_from DESC, id DESC LIMIT ?",
            (*params, limit))]
        return total, ids

    def roots(self, type: str, level: int) -> list[str]:
        """Ids of the active, unfolded nodes of a type at one level, in story order."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM nodes WHERE chat_id=? AND type=? AND level=? AND archived=0 AND parent_id IS NULL "
            "ORDER BY floor_from, floor_to, created_at, id", (self.chat_id, type, level))]

    def active_texts(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        """(id, type, title, fields) of every active node: what a keyword index is built from."""
        return [(r[0], r[1], r[2], json.loads(r[3])) for r in self.conn.execute(
            "SELECT id, type, title, fields_json FROM nodes WHERE chat_id=? AND archived=0", (self.chat_id,))]

    def stats(self) -> dict[str, Any]:
        """Counts of active and archived nodes (in all and per type), edges and commits."""
        by_type: dict[str, dict[str, int]] = defaultdict(lambda: {"active": 0, "archived": 0})
        for type_, archived, number in self.conn.execute(
                "SELECT type, archived, COUNT(*) FROM nodes WHERE chat_id=? GROUP BY type, archived", (self.chat_id,)):
            by_type[type_]["archived" if archived else "active"] = number

        def count(sql: str) -> int:
            return int(self.conn.execute(sql, (self.chat_id,)).fetchone()[0])

        return {
            "nodes_active": sum(v["active"] for v in by_type.values()),
            "nodes_archived": sum(v["archived"] for v in by_type.values()),
            "edges": count("SELECT COUNT(*) FROM edges WHERE chat_id=?"),
            "commits": count("SELECT COUNT(*) FROM commits WHERE chat_id=?"),
            "messages": count("SELECT COUNT(*) FROM messages WHERE chat_id=?"),
            "by_type": dict(sorted(by_type.items())),
        }

    def snapshot(self) -> dict[str, Any]:
        """Every node and edge as plain data, ordered by id: a canonical picture for comparisons."""
        nodes = self._nodes(order="id")
        return {"nodes": [n.to_dict() for n in nodes], "edges": [e.to_dict() for e in self.edges()]}
