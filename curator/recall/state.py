"""Recall's picture of one chat, kept in step with the chat by what each write touched (`store.changes`), so the
first recall after a commit costs about what a warm one does.

It holds every node (archived ones too) and its document, the two BM25 indexes (node text; events' source
messages), the messages as source lines and their speakers, the edges as neighbour maps, and each event type's
story-order chain. A commit rereads the nodes and edges it touched (and the parents of moved nodes); a write of
messages rereads the floors it rewrote and the sources of the events that reach them. When the change log cannot
say what changed (another process wrote, a schema change, a deleted chat), the state is loaded whole again.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, deque
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import date
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from curator.dates import day_of
from curator.recall.lexical import LiveBM25
from curator.store.graph import Node, names_of
from curator.store.message_rows import messages_from
from curator.store.queries import GraphView
from curator.vectors.documents import node_document, source_document

if TYPE_CHECKING:
    from curator.schemas import Schema
    from curator.store.store import Store



class ChatState:
    kind = "whole"

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.lock = threading.RLock()
        self.epoch: (
            tuple[int, str] | tuple[()]
        ) = ()  # store.stamp's epoch: (this process's deletions, the chat's creation time)
        self.graph_version = self.messages_version = -1
        self.loads = self.updates = 0  # whole loads and incremental updates (tests and benchmarks read these)
        self.loaded_at = -1  # the graph version of the last whole load
        # (from version, to version, nodes touched in between): one refresh may follow several commits at once
        self.history: deque[tuple[int, int, frozenset[str]]] = deque(maxlen=64)
        self._clear()

    @property
    def schema(self) -> Schema:
        """The chat's schema, as of the last load (`refresh` first)."""
        if self._schema is None:
            raise RuntimeError(f"the recall state of chat {self.chat_id!r} is not loaded yet")
        return self._schema

    def _clear(self) -> None:
        self._schema: Schema | None = None
        self.event_types: set[str] = set()
        self.nodes: dict[str, Node] = {}
        self.documents: dict[str, str] = {}  # node id -> its document (what is embedded for it)
        self.sources: dict[str, str] = {}  # event id -> its source messages (only the non-empty ones)
        self.names: dict[str, set[str]] = {}  # normalized name -> the non-event nodes it names (`names_of`)
        self.bm25, self.source_bm25 = LiveBM25(), LiveBM25()
        self.lines: dict[int, str] = {}  # floor -> "name: text"
        self.speaker: dict[int, str] = {}
        self.speakers: Counter[str] = Counter()
        self.named_replies: dict[int, str] = {}  # floor -> name, of the assistant messages that have a name
        self.reply_names: Counter[str] = Counter()  # the names assistant messages are written under (two: a group chat)
        self.latest_floor: int | None = None  # the newest message's floor (None: no messages)
        self.last_speaker: str | None = None  # the newest named assistant message's name
        self.edges: dict[str, tuple[str, str]] = {}  # edge id -> (source, target)
        self.adjacent: dict[str, Counter[str]] = {}  # node id -> linked node ids (counted: two edges may join a pair)
        self.chains: dict[tuple[str, int], list[tuple[Any, ...]]] = {}  # (event type, level) -> sorted story-order keys
        self._chain_key: dict[str, tuple[Any, ...]] = {}
        self.active: dict[str, dict[str, Node]] = {}  # type -> its active nodes
        self.active_order: dict[str, list[tuple[int, str]]] = {}  # type -> (floor_from, id) of them, sorted
        self.context_map: dict[str, set[str]] = {}  # event-type node -> its context (see `context`)
        # always-inject type -> the rank keys of its active top-level nodes, ascending (the persistent plan reads
        # them best first: `ranked`), so a commit moves the nodes it touched instead of a sort of every one
        self.ranked: dict[str, list[tuple[Any, ...]]] = {}
        self._rank_key: dict[str, tuple[str, tuple[Any, ...]]] = {}
        self._newest_first: dict[str, bool] = {}  # always-inject type -> ranked by recency alone (its own cap)
        self._dirty: set[str] = set()  # nodes whose context must be worked out again

    # ---- keeping up --------------------------------------------------------------------------
    def refresh(self, store: Store) -> bool:
        """Follow the chat to its current versions; True when anything changed."""
        chat_id = self.chat_id
        epoch, version, messages_version = store.stamp(chat_id)
        if (epoch, version, messages_version) == (self.epoch, self.graph_version, self.messages_version):
            return False
        graph = None if version == self.graph_version else store.changes.graph_since(chat_id, self.graph_version,
                                                                                      version)
        floor = False if messages_version == self.messages_version else store.changes.messages_since(
            chat_id, self.messages_version, messages_version)
        if epoch != self.epoch or (version != self.graph_version and graph is None):
            self._load(store)
            self.loaded_at = version
            self.history.clear()
        else:
            if floor is not False:
                self._read_messages(store, 0 if floor is None else floor)
            if graph is not None:
                self._apply(store, graph.nodes, graph.edges)
                self.history.append((self.graph_version, version, frozenset(graph.nodes)))
            if floor is not False:
                self._resource(store, 0 if floor is None else floor)
            self.updates += 1
        self._settle()
        self.epoch, self.graph_version, self.messages_version = epoch, version, messages_version
        return True

    def touched_since(self, version: int) -> set[str] | None:
        """The nodes touched after graph version `version` (None: not known, e.g. a whole load came between)."""
        if version < self.loaded_at:
            return None
        found = [(start, end, ids) for start, end, ids in self.history if end > version]
        if sum(end - max(start, version) for start, end, _ in found) != self.graph_version - version:
            return None  # a step this state did not follow (a whole load came between)
        return set[str]().union(*(ids for _, _, ids in found))

    def _settle(self) -> None:
        """Work out again the context of the nodes a change reached."""
        nodes, events = self.nodes, self.event_types
        for node_id in self._dirty:
            node = nodes.get(node_id)
            if node is None or node.type not in events:
                self.context_map.pop(node_id, None)
                continue
            found = {n for n in self.adjacent.get(node_id, ()) if getattr(nodes.get(n), "type", None) in events}
            chain_key = self._chain_key.get(node_id)
            if chain_key is not None:
                chain = self.chains[chain_key[:2]]
                at = bisect.bisect_left(chain, chain_key[2])
                if at > 0:
                    found.add(chain[at - 1][3])
                if at + 1 < len(chain):
                    found.add(chain[at + 1][3])
            if found:
                self.context_map[node_id] = found
            else:
                self.context_map.pop(node_id, None)
        self._dirty.clear()

    def _chain_around(self, node_id: str) -> None:
        """Mark a chained node and its previous and next node as needing their context again."""
        chain_key = self._chain_key.get(node_id)
        if chain_key is None:
            return
        chain = self.chains[chain_key[:2]]
        at = bisect.bisect_left(chain, chain_key[2])
        self._dirty.update(chain[i][3] for i in (at - 1, at, at + 1) if 0 <= i < len(chain))

    def _load(self, store: Store) -> None:
        self._clear()
        self.loads += 1
        self._schema = store.chat(self.chat_id).schema
        self.event_types = {name for name, spec in self.schema.types.items() if spec.identity == "event"}
        # a schema's own cap keeps the newest; the default cap, the highest summaries first (`plan_persistent`)
        self._newest_first = {name: bool(spec.always_inject.max_per_type) for name, spec in self.schema.types.items()
                              if spec.always_inject.enabled}
        self._read_messages(store, 0)
        graph = store.graph(self.chat_id)
        for node in graph.nodes(archived=None):
            self._put(node)
        for edge_id, _relation, source, target in graph.links():
            self._link(edge_id, source, target)

    def _read_messages(self, store: Store, floor: int) -> None:
        """Reread the messages from `floor` on (a live turn writes the newest: what it costs is those few)."""
        gone = range(floor, self.latest_floor + 1) if self.latest_floor is not None and floor > 0 else list(self.lines)
        for old in gone:
            if old in self.lines:
                del self.lines[old]
                self.speakers[self.speaker.pop(old)] -= 1
                if (gone_name := self.named_replies.pop(old, None)) is not None:
                    self.reply_names[gone_name] -= 1
        newest = newest_named = None
        for f, role, name, text in messages_from(store, self.chat_id, floor):
            self.lines[f] = f"{name}: {text}" if name else text
            self.speaker[f] = name
            self.speakers[name] += 1
            newest = f if newest is None else max(newest, f)
            if role == "assistant" and name:
                self.named_replies[f] = name
                self.reply_names[name] += 1
                newest_named = f if newest_named is None else max(newest_named, f)
        self.speakers = +self.speakers  # drop the names no message uses any more
        self.reply_names = +self.reply_names
        # what recall asks every time, answered here so a warm recall sends no statement for it; every floor left
        # is below `floor`, so the newest is a new one, else the old one nearest below
        self.latest_floor = newest if newest is not None else _last_below(self.lines, floor)
        named = newest_named if newest_named is not None else _last_below(self.named_replies, floor)
        self.last_speaker = self.named_replies[named] if named is not None else None

    def _resource(self, store: Store, floor: int) -> None:
        """Sources of the events that reach the rewritten floors (an event's source ends at its last floor)."""
        ids = GraphView(store.conn, self.chat_id).ids_reaching(floor) if floor else list(self.nodes)
        for node_id in ids:
            if node_id in self.nodes:
                self._set_source(self.nodes[node_id])

    def _apply(self, store: Store, node_ids: Iterable[str], edge_ids: Iterable[str]) -> None:
        graph = GraphView(store.conn, self.chat_id)
        wanted = set(node_ids)
        fresh = self._fetch(graph, wanted)
        parents = {p for i in wanted for p in (getattr(self.nodes.get(i), "parent", None),
                                                getattr(fresh.get(i), "parent", None)) if p}
        fresh.update(self._fetch(graph, parents - wanted))  # their children lists changed
        for node_id in wanted | parents:
            if node_id in fresh:
                self._put(fresh[node_id])
            else:
                self._drop(node_id)
        edge_ids = list(edge_ids)
        found = {edge_id: (source, target) for edge_id, _relation, source, target in graph.links(edge_ids)}
        for edge_id in edge_ids:
            self._unlink(edge_id)
            if edge_id in found:
                self._link(edge_id, *found[edge_id])

    @staticmethod
    def _fetch(graph: GraphView, ids: set[str]) -> dict[str, Node]:
        return {node.id: node for node in graph.by_ids(list(ids))}

    def _put(self, node: Node) -> None:
        self._drop(node.id)
        self.nodes[node.id] = node
        if not node.archived:
            self.active.setdefault(node.type, {})[node.id] = node
            bisect.insort(self.active_order.setdefault(node.type, []), (node.floor_from, node.id))
            if node.parent is None and (newest := self._newest_first.get(node.type)) is not None:
                key = (node.floor_to, node.floor_from, node.created_at, node.id) if newest else \
                    (node.level, node.floor_to, node.floor_from, node.created_at, node.id)
                self._rank_key[node.id] = (node.type, key)
                bisect.insort(self.ranked.setdefault(node.type, []), key)
        self._dirty.add(node.id)
        self._dirty.update(self.adjacent.get(node.id, ()))  # whether it is an event decides their context
        document = self.documents[node.id] = node_document(node, self.schema)
        self.bm25.set(node.id, f"{node.title}\n{document}")
        if node.type not in self.event_types:  # recall looks up the entities a query names
            for name in names_of(node.title, node.fields, self.schema.type(node.type)):
                self.names.setdefault(name, set()).add(node.id)
        self._set_source(node)
        if node.type in self.event_types:
            key = (node.floor_from, node.floor_to, node.created_at, node.id)
            self._chain_key[node.id] = (node.type, node.level, key)
            bisect.insort(self.chains.setdefault((node.type, node.level), []), key)
            self._chain_around(node.id)

    def _drop(self, node_id: str) -> None:
        node = self.nodes.pop(node_id, None)
        if node is None:
            return
        if self.active.get(node.type, {}).pop(node_id, None) is not None:
            order = self.active_order[node.type]
            del order[bisect.bisect_left(order, (node.floor_from, node_id))]
        if (ranked := self._rank_key.pop(node_id, None)) is not None:
            keys = self.ranked[ranked[0]]
            del keys[bisect.bisect_left(keys, ranked[1])]
        self._dirty.add(node_id)
        self._dirty.update(self.adjacent.get(node_id, ()))
        self._chain_around(node_id)
        self.documents.pop(node_id, None)
        self.bm25.remove(node_id)
        if node.type not in self.event_types:
            for name in names_of(node.title, node.fields, self.schema.type(node.type)):
                named = self.names.get(name)
                if named is not None:
                    named.discard(node_id)
                    if not named:
                        del self.names[name]
        if self.sources.pop(node_id, None) is not None:
            self.source_bm25.remove(node_id)
        if (found := self._chain_key.pop(node_id, None)) is not None:
            chain = self.chains[found[:2]]
            del chain[bisect.bisect_left(chain, found[2])]

    def _set_source(self, node: Node) -> None:
        source = source_document(node, self.lines, self.event_types)
        if source == self.sources.get(node.id, ""):
            return
        if source:
            self.sources[node.id] = source
            self.source_bm25.set(node.id, source)
        else:
            self.sources.pop(node.id, None)
            self.source_bm25.remove(node.id)

    def _link(self, edge_id: str, source: str, target: str) -> None:
        self._dirty.update((source, target))
        self.edges[edge_id] = (source, target)
        self.adjacent.setdefault(source, Counter())[target] += 1
        self.adjacent.setdefault(target, Counter())[source] += 1

    def _unlink(self, edge_id: str) -> None:
        ends = self.edges.pop(edge_id, None)
        if ends is None:
            return
        self._dirty.update(ends)
        for a, b in (ends, ends[::-1]):
            near = self.adjacent.get(a)
            if near is not None:
                near[b] -= 1
                if near[b] <= 0:
                    del near[b]
                if not near:
                    del self.adjacent[a]

    # ---- what recall reads ---------------------------------------------------------------------
    @property
    def group_chat(self) -> bool:
        """Whether assistant messages are written under two names or more."""
        return len(self.reply_names) >= 2

    def highest_floor(self) -> int:
        """The highest floor a node reaches (0 without nodes)."""
        return max((n.floor_to for n in self.nodes.values()), default=0) or 0

    def neighbours(self) -> Neighbours:
        """Every node's linked nodes (a mapping: node id -> ids)."""
        return Neighbours(self)

    def context(self) -> dict[str, set[str]]:
        """The context of each event-type node: linked events, and the previous and next node of its type and
        level in story order. The state's own map (kept worked out by `_settle`; only nodes that have a context
        are in it), handed out as it is: recall asks it a few hundred times per query. Do not change it."""
        return self.context_map

    def typed(self) -> TypedNodes:
        return TypedNodes(self)


class Neighbours:
    """A read-only mapping over the state's links, worked out per node on demand (recall asks for a few hundred)."""

    def __init__(self, state: ChatState) -> None:
        self.state = state

    def get(self, node_id: str, default: Collection[str] = (), /) -> Collection[str]:
        near = self.state.adjacent.get(node_id)
        return set(near) if near else default

    def __contains__(self, node_id: str) -> bool:
        return bool(self.get(node_id))


class TypedNodes:
    """Active nodes of a type, answered from the state: in (floor_from, id) order as `GraphView.nodes` gives them,
    and, for an always-inject type, its top-level ones best first (`ranked`, what `plan_persistent` reads)."""

    def __init__(self, state: ChatState) -> None:
        self.state = state

    def nodes(self, type: str | None = None, archived: bool | None = False, **_: object) -> list[Node]:
        if type is not None and archived is False:
            active = self.state.active.get(type, {})
            return [active[i] for _, i in self.state.active_order.get(type, ())]  # already in (floor_from, id) order
        else:
            found = [n for n in self.state.nodes.values() if (type is None or n.type == type)
                     and (archived is None or n.archived == archived)]
        found.sort(key=_BY_FLOOR)
        return found

    def ranked(self, type: str) -> tuple[int, Iterator[Node]]:
        """How many active top-level nodes an always-inject type has, and them best first: by the rank key
        descending, ties by id ascending (what a stable sort of them in (floor_from, id) order, reversed, gives)."""
        keys = self.state.ranked.get(type, [])
        return len(keys), self._best_first(keys)

    def _best_first(self, keys: list[tuple[Any, ...]]) -> Iterator[Node]:
        nodes, end = self.state.nodes, len(keys)
        while end > 0:
            start, tie = end - 1, keys[end - 1][:-1]
            while start > 0 and keys[start - 1][:-1] == tie:
                start -= 1
            for key in keys[start:end]:
                yield nodes[key[-1]]
            end = start


_BY_FLOOR = attrgetter("floor_from", "id")


def _last_below(floors: Mapping[int, object], floor: int) -> int | None:
    """The highest key below `floor`: looked for downwards first (floors are dense), then among them all."""
    for f in range(floor - 1, max(-1, floor - 65), -1):
        if f in floors:
            return f
    return max((f for f in floors if f < floor), default=None)


@lru_cache(maxsize=65536)
def cached_day(label: str | None) -> date | None:
    return day_of(label)
