"""What recall's first query in a process reads of a chat (`curator/recall/cold.py`): the nodes, links, names and
messages its candidates need, a few statements per query, never the whole chat."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from curator.store.dbtypes import Connection, Row
from curator.store.graph import Node
from curator.store.queries import GraphView

CHUNK = 500  # ids per statement: under the 999 parameters older SQLite builds allow

T = TypeVar("T")


def _chunks(items: list[T]) -> list[list[T]]:
    return [items[start:start + CHUNK] for start in range(0, len(items), CHUNK)]


def _marks(items: Sequence[object]) -> str:
    return ", ".join("?" * len(items))


@dataclass
class StoryRow:
    """What recall's story features read of a node (`recall/story.py`), without its fields."""

    id: str
    archived: bool
    floor_to: int
    updated_at: str
    scope: dict[str, Any] = field(default_factory=dict)
    story_time: dict[str, Any] = field(default_factory=dict)


class RecallReads:
    """Reads of one chat, on one connection."""

    def __init__(self, conn: Connection, chat_id: str) -> None:
        self.conn, self.chat_id = conn, chat_id
        self.graph = GraphView(conn, chat_id)

    # ---- nodes ----------------------------------------------------------------------------------
    def nodes(self, ids: Iterable[str]) -> dict[str, Node]:
        found: dict[str, Node] = {}
        for chunk in _chunks(sorted(ids)):
            for node in self.graph._nodes(f"id IN ({_marks(chunk)})", tuple(chunk)):
                found[node.id] = node
        return found

    def types(self, ids: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for chunk in _chunks(sorted(ids)):
            found.update(self.conn.execute(f"SELECT id, type FROM nodes WHERE chat_id=? AND id IN ({_marks(chunk)})",
                                           (self.chat_id, *chunk)).fetchall())
        return found

    def top_level_count(self, type_: str) -> int:
        count: int = self.conn.execute("SELECT COUNT(*) FROM nodes WHERE chat_id=? AND type=? AND archived=0 AND "
                                       "parent_id IS NULL", (self.chat_id, type_)).fetchone()[0]
        return count

    def top_level(self, type_: str, newest_first: bool, limit: int, offset: int) -> list[Node]:
        """Active top-level nodes of a type, best first as the persistent plan ranks them: by recency (a type with
        its own cap), else highest level first, then recency; ties by id."""
        order = "floor_to DESC, floor_from DESC, created_at DESC, id"
        return self.graph._nodes("type=? AND archived=0 AND parent_id IS NULL", (type_,),
                                 order=order if newest_first else "level DESC, " + order, limit=limit, offset=offset)

    def highest_floor(self) -> int:
        return self.conn.execute("SELECT MAX(floor_to) FROM nodes WHERE chat_id=?", (self.chat_id,)).fetchone()[0] or 0

    def story_neighbours(self, type_: str, level: int, key: tuple[int, int, str, str]) -> tuple[str | None, str | None]:
        """The ids just before and just after `key` (floor_from, floor_to, created_at, id) among the nodes of a type
        and level, archived ones too, in that order: two reads of the `nodes_by_story` index."""
        where = "chat_id=? AND type=? AND level=? AND (floor_from, floor_to, created_at, id)"
        params = (self.chat_id, type_, level, *key)
        before = self.conn.execute(f"SELECT id FROM nodes WHERE {where} < (?, ?, ?, ?) ORDER BY floor_from DESC, "
                                   "floor_to DESC, created_at DESC, id DESC LIMIT 1", params).fetchone()
        after = self.conn.execute(f"SELECT id FROM nodes WHERE {where} > (?, ?, ?, ?) ORDER BY floor_from, floor_to, "
                                  "created_at, id LIMIT 1", params).fetchone()
        return (before[0] if before else None), (after[0] if after else None)

    def has_leaves(self) -> bool:
        return self.conn.execute("SELECT 1 FROM nodes WHERE chat_id=? AND archived=1 AND parent_id IS NOT NULL LIMIT 1",
                                 (self.chat_id,)).fetchone() is not None

    def has_labels(self) -> bool:
        return self.conn.execute("SELECT 1 FROM nodes WHERE chat_id=? AND story_label IS NOT NULL LIMIT 1",
                                 (self.chat_id,)).fetchone() is not None

    def labels(self) -> list[tuple[str, str]]:
        """(id, story label) of every node that has one."""
        return [tuple(r) for r in self.conn.execute(
            "SELECT id, story_label FROM nodes WHERE chat_id=? AND story_label IS NOT NULL", (self.chat_id,))]

    def tree(self) -> dict[str, tuple[str | None, bool, int]]:
        """id -> (parent, archived, floor_to) of every node: the folded leaves' ancestry without whole nodes."""
        return {r[0]: (r[1], bool(r[2]), r[3]) for r in self.conn.execute(
            "SELECT id, parent_id, archived, floor_to FROM nodes WHERE chat_id=?", (self.chat_id,))}

    def reaching(self, floor: int) -> list[str]:
        """The nodes whose floors reach `floor` or later (their sources may read rewritten messages)."""
        return [r[0] for r in self.conn.execute("SELECT id FROM nodes WHERE chat_id=? AND floor_to >= ?",
                                                (self.chat_id, floor))]

    def story_rows(self) -> list[StoryRow]:
        """The nodes with a point of view, a region or a story-time label (the others give the story nothing)."""
        return [StoryRow(r[0], bool(r[1]), r[2], r[3], {"layer": r[4], "owner": r[5], "region": r[6]},
                         {"label": r[7], "segment": r[8]}) for r in self.conn.execute(
            "SELECT id, archived, floor_to, updated_at, scope_layer, scope_owner, scope_region, story_label, "
            "story_segment FROM nodes WHERE chat_id=? AND (scope_owner IS NOT NULL OR scope_region IS NOT NULL OR "
            "story_label IS NOT NULL)", (self.chat_id,))]

    # ---- links and names ------------------------------------------------------------------------
    def links_of(self, relations: Iterable[str]) -> list[tuple[str, str, str, str]]:
        """(id, relation, source, target) of every edge of the given relations."""
        ordered = sorted(relations)
        return [tuple(r) for r in self.conn.execute(
            f"SELECT id, relation, source, target FROM edges WHERE chat_id=? AND relation IN ({_marks(ordered)})",
            (self.chat_id, *ordered))]

    def edges(self, ids: Iterable[str]) -> list[tuple[str, str, str]]:
        """(edge id, source, target) of every edge at one of `ids`."""
        found: dict[str, tuple[str, str, str]] = {}
        for chunk in _chunks(sorted(ids)):
            for column in ("source", "target"):
                for edge_id, source, target in self.conn.execute(
                        f"SELECT id, source, target FROM edges WHERE chat_id=? AND {column} IN ({_marks(chunk)})",
                        (self.chat_id, *chunk)):
                    found[edge_id] = (edge_id, source, target)
        return list(found.values())

    def named(self, names: Iterable[str], types: Iterable[str]) -> dict[str, set[str]]:
        """name -> the nodes of `types` it names (normalized names, as `node_names` keeps them), archived ones too."""
        found: dict[str, set[str]] = {}
        ordered = sorted(types)
        if not ordered:
            return found
        for chunk in _chunks(sorted(names)):
            for name, node_id in self.conn.execute(
                    f"SELECT n.name, n.node_id FROM node_names n JOIN nodes d ON d.chat_id=n.chat_id "
                    f"AND d.id=n.node_id "
                    f"WHERE n.chat_id=? AND n.name IN ({_marks(chunk)}) AND d.type IN ({_marks(ordered)})",
                    (self.chat_id, *chunk, *ordered)):
                found.setdefault(name, set()).add(node_id)
        return found

    # ---- messages -------------------------------------------------------------------------------
    def speakers(self) -> list[str]:
        """The names the messages are written under, in the order they first appear: each name found from the one
        before it through the `messages_by_name` index (a loose index scan), not by reading every message."""
        return [r[0] for r in self.conn.execute(
            "WITH RECURSIVE names(name) AS (SELECT MIN(name) FROM messages WHERE chat_id=? UNION ALL "
            "SELECT (SELECT MIN(name) FROM messages WHERE chat_id=? AND name > names.name) FROM names "
            "WHERE names.name IS NOT NULL) "
            "SELECT name, (SELECT MIN(floor) FROM messages m WHERE m.chat_id=? AND m.name=names.name) AS first "
            "FROM names WHERE name IS NOT NULL ORDER BY first", (self.chat_id,) * 3)]

    def reply_names(self, limit: int) -> list[str]:
        """The first `limit` names (in name order) assistant messages are written under: two or more, a group chat.
        One read of the `messages_by_role` index a name."""
        names: list[str] = []
        while len(names) < limit:
            row = self.conn.execute("SELECT MIN(name) FROM messages WHERE chat_id=? AND role='assistant' AND name > ?",
                                    (self.chat_id, names[-1] if names else "")).fetchone()
            if row is None or row[0] is None:
                break
            names.append(row[0])
        return names

    def latest_floor(self) -> int | None:
        floor: int | None = self.conn.execute("SELECT MAX(floor) FROM messages WHERE chat_id=?",
                                              (self.chat_id,)).fetchone()[0]
        return floor

    def last_speaker(self) -> str | None:
        row = self.conn.execute("SELECT name FROM messages WHERE chat_id=? AND role='assistant' AND name <> '' "
                                "ORDER BY floor DESC LIMIT 1", (self.chat_id,)).fetchone()
        return row[0] if row else None

    def lines(self, floors: Iterable[int] | None = None) -> dict[int, str]:
        """Each floor's message as the "name: text" line a source is made of (every floor, or those of `floors`)."""
        rows: Iterable[Row]
        if floors is None:
            rows = self.conn.execute("SELECT floor, name, text FROM messages WHERE chat_id=?", (self.chat_id,))
        else:
            rows = [r for chunk in _chunks(sorted(floors)) for r in self.conn.execute(
                f"SELECT floor, name, text FROM messages WHERE chat_id=? AND floor IN ({_marks(chunk)})",
                (self.chat_id, *chunk))]
        return {floor: f"{name}: {text}" if name else text for floor, name, text in rows}
