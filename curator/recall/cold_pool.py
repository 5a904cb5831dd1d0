"""The recall pool of a `ColdState`: the maps recall's scoring steps read (`scoring.Pool`), each answering for the ids
it is asked about, from the state's nodes, instead of being filled with every node of the chat first.

Who is in the pool is decided as `pool.build_pool` decides it: a node is recallable when active, not persistent and
within the horizon; an archived leaf is folded under its first active ancestor when that one is recallable or
persistent; documents, story days and scenes are those of the recallable, folded and persistent nodes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import date
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, overload

from curator.recall.entities import is_bare
from curator.recall.scoring import top_ancestor
from curator.recall.state import cached_day
from curator.store.graph import Node
from curator.store.recall_reads import RecallReads
from curator.vectors.documents import node_document

if TYPE_CHECKING:
    from curator.schemas import Schema

V = TypeVar("V")
D = TypeVar("D")


class _Nodes(Protocol):
    """What the pool asks of a cold state's nodes (`cold.LazyNodes`)."""

    def prefetch(self, ids: Iterable[str]) -> None: ...

    def add(self, nodes: Iterable[Node]) -> None: ...

    @overload
    def get(self, node_id: str) -> Node | None: ...

    @overload
    def get(self, node_id: str, default: D) -> Node | D: ...

    def __getitem__(self, node_id: str) -> Node: ...

    def __contains__(self, node_id: str) -> bool: ...


class _State(Protocol):
    """What the pool reads of its `cold.ColdState` (which imports this module)."""

    @property
    def event_types(self) -> set[str]: ...

    @property
    def schema(self) -> Schema: ...

    @property
    def nodes(self) -> _Nodes: ...

    def flag(self, name: str) -> bool: ...

    def reads(self) -> RecallReads: ...


class ColdPool:
    def __init__(self, state: _State, persistent: list[Node], horizon: int | None) -> None:
        self.state, self.horizon = state, horizon
        self.event_types = set(state.event_types)
        self.injected = {n.id for n in persistent}
        state.nodes.add(persistent)
        self._tops: dict[str, str | None] = {}
        self._documents: dict[str, str] = {}
        self._by_day: list[tuple[date, str]] | None = None
        self._folded: dict[str, frozenset[str]] = {}
        self.nodes, self.leaves, self.leaf_nodes = _Recallable(self), _Leaves(self), _LeafNodes(self)
        self.documents, self.scenes, self.folded = _Documents(self), _Scenes(self), _Folded(self)
        self.days = _Flag(lambda: state.flag("labels"))  # date_bonus asks only whether any node may be dated
        self._bare: dict[str, bool]
        self.entities, self._bare = _Entities(self), {}  # as `Pool.entities`: worked out per candidate asked about

    # ---- who is in it -------------------------------------------------------------------------
    def _within(self, floor_to: int) -> bool:
        return self.horizon is None or floor_to <= self.horizon

    def recallable(self, node: Node | None) -> bool:
        return node is not None and not node.archived and node.id not in self.injected and self._within(node.floor_to)

    def top_of(self, node_id: str) -> str | None:
        """The ancestor a folded leaf is shown under, or None when the node is not a folded leaf of the pool."""
        if node_id not in self._tops:
            node = self.state.nodes.get(node_id)
            top = None
            if node is not None and node.archived and node.parent and self._within(node.floor_to):
                ancestor = top_ancestor(node, self.state.nodes)
                if ancestor is not None and (self.recallable(ancestor) or ancestor.id in self.injected):
                    top = ancestor.id
            self._tops[node_id] = top
        return self._tops[node_id]

    def scored(self, node_id: str) -> bool:
        """Whether the node has a document in the pool: recallable, a folded leaf, or persistent."""
        return (node_id in self.injected or self.recallable(self.state.nodes.get(node_id))
                or self.top_of(node_id) is not None)

    def prefetch(self, ids: Collection[str]) -> None:
        """Read the nodes of `ids` (and the ancestors of the archived ones) in a few statements."""
        nodes = self.state.nodes
        nodes.prefetch(ids)
        wanted = {n.parent for i in ids if (n := nodes.get(i)) is not None and n.archived and n.parent}
        while wanted:
            nodes.prefetch(wanted)
            wanted = {n.parent for i in wanted if (n := nodes.get(i)) is not None and n.archived and n.parent}

    # ---- the lookups that read more than one node ---------------------------------------------
    @property
    def by_day(self) -> list[tuple[date, str]]:
        """(day, id) of every dated node with a document in the pool, sorted: read when a query names a date."""
        if self._by_day is None:
            reads = self.state.reads()
            dated = [(day, node_id) for node_id, label in reads.labels() if (day := cached_day(label))]
            tree = reads.tree() if dated else {}
            self._by_day = sorted(entry for entry in dated if self._scored_in(tree, entry[1]))
        return self._by_day

    def _scored_in(self, tree: dict[str, tuple[str | None, bool, int]], node_id: str) -> bool:
        """`scored`, from the nodes' parent, archived and floor_to columns (a date query may reach thousands)."""
        if node_id in self.injected:
            return True
        parent, archived, floor_to = tree[node_id]
        if not self._within(floor_to):
            return False
        if not archived:
            return True
        if not parent:
            return False
        seen: set[str] = set()
        current = node_id
        while (up := tree[current][0]) and up in tree and current not in seen:  # as `top_ancestor`
            seen.add(current)
            current = up
            if not tree[current][1]:
                return current in self.injected or self._within(tree[current][2])
        return False

    def folded_under(self, ancestor: str) -> frozenset[str]:
        """The leaves folded under `ancestor`: its archived descendants, down to the next active node."""
        if ancestor not in self._folded:
            nodes = self.state.nodes
            found: set[str] = set()
            top = nodes.get(ancestor)
            level = list(top.children) if top is not None else []
            while level:
                nodes.prefetch(level)
                below: list[str] = []
                for child in level:
                    node = nodes.get(child)
                    if node is not None and node.archived:
                        if self.top_of(child) == ancestor:
                            found.add(child)
                        below.extend(node.children)
                level = below
            self._folded[ancestor] = frozenset(found)
        return self._folded[ancestor]


class _View(Generic[V]):
    def __init__(self, pool: ColdPool) -> None:
        self.pool = pool

    def get(self, node_id: str, default: V | None = None) -> V | None:
        raise NotImplementedError  # each view answers its own

    def __getitem__(self, node_id: str) -> V:
        found = self.get(node_id)
        if found is None:
            raise KeyError(node_id)
        return found

    def __contains__(self, node_id: str) -> bool:
        return self.get(node_id) is not None


class _Recallable(_View[Node]):
    def get(self, node_id: str, default: Node | None = None) -> Node | None:
        node = self.pool.state.nodes.get(node_id)
        return node if self.pool.recallable(node) else default


class _Leaves(_View[str]):
    def get(self, node_id: str, default: str | None = None) -> str | None:
        top = self.pool.top_of(node_id)
        return default if top is None else top

    def __bool__(self) -> bool:
        return self.pool.state.flag("leaves")


class _LeafNodes(_View[Node]):
    def get(self, node_id: str, default: Node | None = None) -> Node | None:
        return self.pool.state.nodes.get(node_id) if self.pool.top_of(node_id) is not None else default


class _Documents(_View[str]):
    def get(self, node_id: str, default: str | None = None) -> str | None:
        pool = self.pool
        found = pool._documents.get(node_id)
        if found is None:
            if not pool.scored(node_id):
                return default
            found = pool._documents[node_id] = node_document(pool.state.nodes[node_id], pool.state.schema)
        return found


class _Entities(_View[bool]):
    """A recallable node that is not of an event type -> whether its document is its names alone."""

    def get(self, node_id: str, default: bool | None = None) -> bool | None:
        pool = self.pool
        found = pool._bare.get(node_id)
        if found is None:
            node = pool.state.nodes.get(node_id)
            if node is None or node.type in pool.event_types or not pool.recallable(node):
                return default
            found = pool._bare[node_id] = is_bare(node, pool.documents[node_id], pool.state.schema)
        return found


class _Scenes(_View[str]):
    def get(self, node_id: str, default: str | None = None) -> str | None:
        pool = self.pool
        node = pool.state.nodes.get(node_id)
        if node is None or node.type not in pool.event_types or not pool.scored(node_id):
            return default
        return (node.story_time.get("label") or "").strip() or default

    def __bool__(self) -> bool:
        return self.pool.state.flag("labels")


class _Folded(_View[Collection[str]]):
    def get(self, node_id: str, default: Collection[str] | None = ()) -> Collection[str] | None:
        return self.pool.folded_under(node_id) or default


class _Flag:
    def __init__(self, check: Callable[[], bool]) -> None:
        self._check = check

    def __bool__(self) -> bool:
        return self._check()
