"""Recall's picture of a chat for its first recalls in a process: everything read from the store when a query asks
for it, nothing of the whole chat loaded.

`ChatState` holds every node, its document and the BM25 postings in memory, and keeps them in step commit by commit:
the right thing for a service that recalls a chat every turn, and what made a process's first recall pay for the
whole chat (3.8 s of CPU at 10k nodes, most of it tokenizing every node and source). `ColdState` answers the same
questions, each from the store: the BM25 statistics from the lexicon snapshot and what changed since
(`curator/recall/lexicon.py`), a node when a candidate is scored, its links and story-order neighbours when it is
propagated, names when a query names them. The recaller uses it for a chat's first recalls in a process and loads
the whole state in the background once the chat is recalled often (`Recaller`); a one-shot command never does. The
answers are those of a freshly loaded `ChatState` (tests/test_cold_recall.py compares the injections)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar, overload

from curator.recall.cold_pool import ColdPool
from curator.recall.lexicon import NODES, SOURCES, CorpusLexicon, chat_lexicon
from curator.store.graph import Node
from curator.store.recall_reads import RecallReads

if TYPE_CHECKING:
    from curator.store.store import Store

D = TypeVar("D")
MessageFacts = tuple[list[str], int | None, str | None, bool]  # speakers, latest floor, last speaker, a group chat?


class ColdState:
    kind = "cold"

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        self.lock = threading.RLock()
        self.epoch: tuple[int, str] | tuple[()] = ()
        self.graph_version = self.messages_version = -1
        self.loads = self.updates = 0
        self._store: Store | None = None

    def refresh(self, store: Store) -> bool:
        """Follow the chat to its current versions (what was read of an older one is dropped)."""
        stamp = store.stamp(self.chat_id)
        if stamp == (self.epoch, self.graph_version, self.messages_version):
            return False
        self._store, self._stamp = store, stamp
        self.schema = store.chat(self.chat_id).schema
        self.event_types = {name for name, spec in self.schema.types.items() if spec.identity == "event"}
        self._newest_first = {name: bool(spec.always_inject.max_per_type) for name, spec in self.schema.types.items()
                              if spec.always_inject.enabled}
        self.nodes = LazyNodes(self)
        self._lexicon: dict[str, CorpusLexicon] | None = None
        self._messages: MessageFacts | None = None
        self._types: dict[str, str | None] = {}
        self._flags: dict[str, bool] = {}
        self._context, self._neighbours = ColdContext(self), ColdNeighbours(self)
        self.names = ColdNames(self)
        self.sources = _Sourced(self)
        self.epoch, self.graph_version, self.messages_version = stamp
        self.loads += 1
        return True

    def reads(self) -> RecallReads:
        """Reads on this thread's connection (a state may be asked from several threads)."""
        assert self._store is not None, "refresh first"  # as every recall does before it reads
        return RecallReads(self._store.conn, self.chat_id)

    def touched_since(self, version: int) -> set[str] | None:
        return None  # a cold pool is made per graph version, never brought up to date

    # ---- what recall reads ---------------------------------------------------------------------
    def _lexicons(self) -> dict[str, CorpusLexicon]:
        with self.lock:
            if self._lexicon is None:
                assert self._store is not None, "refresh first"
                self._lexicon = chat_lexicon(self._store, self.chat_id, self.schema, self.event_types, self._stamp)
            return self._lexicon

    @property
    def bm25(self) -> CorpusLexicon:
        return self._lexicons()[NODES]

    @property
    def source_bm25(self) -> CorpusLexicon:
        return self._lexicons()[SOURCES]

    def _message_facts(self) -> MessageFacts:
        if self._messages is None:
            reads = self.reads()
            self._messages = (reads.speakers(), reads.latest_floor(), reads.last_speaker(),
                              len(reads.reply_names(2)) >= 2)
        return self._messages

    @property
    def speakers(self) -> list[str]:
        return self._message_facts()[0]

    @property
    def latest_floor(self) -> int | None:
        return self._message_facts()[1]

    @property
    def last_speaker(self) -> str | None:
        return self._message_facts()[2]

    @property
    def group_chat(self) -> bool:
        """Whether assistant messages are written under two names or more."""
        return self._message_facts()[3]

    def highest_floor(self) -> int:
        return self.reads().highest_floor()

    def flag(self, name: str) -> bool:
        """Whether the chat has any folded leaf ("leaves") or story-time label ("labels")."""
        found = self._flags.get(name)
        if found is None:
            reads = self.reads()
            found = self._flags[name] = reads.has_leaves() if name == "leaves" else reads.has_labels()
        return found

    def type_of(self, node_id: str) -> str | None:
        if node_id not in self._types:
            self.types_of([node_id])
        return self._types[node_id]

    def types_of(self, ids: Iterable[str]) -> None:
        missing = [i for i in ids if i not in self._types]
        if missing:
            found = self.reads().types(missing)
            for node_id in missing:
                self._types[node_id] = found.get(node_id)

    def story_neighbours(self, node: Node) -> tuple[str | None, str | None]:
        """The node before and the node after `node` among those of its type and level in story order
        ((floor_from, floor_to, created_at, id), archived ones too), read for this node alone."""
        return self.reads().story_neighbours(node.type, node.level,
                                             (node.floor_from, node.floor_to, node.created_at, node.id))

    def neighbours(self) -> ColdNeighbours:
        return self._neighbours

    def context(self) -> ColdContext:
        return self._context

    def typed(self) -> ColdTyped:
        return ColdTyped(self)

    def build_pool(self, persistent: list[Node], horizon: int | None) -> ColdPool:
        return ColdPool(self, persistent, horizon)


class LazyNodes:
    """node id -> Node, read when first asked (in batches by `prefetch`)."""

    def __init__(self, state: ColdState) -> None:
        self.state = state
        self._found: dict[str, Node | None] = {}

    def prefetch(self, ids: Iterable[str]) -> None:
        missing = [i for i in ids if i not in self._found]
        if missing:
            fetched = self.state.reads().nodes(missing)
            for node_id in missing:
                node = self._found[node_id] = fetched.get(node_id)
                self.state._types[node_id] = node.type if node is not None else None

    def add(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            self._found[node.id] = node
            self.state._types[node.id] = node.type

    @overload
    def get(self, node_id: str) -> Node | None: ...

    @overload
    def get(self, node_id: str, default: D) -> Node | D: ...

    def get(self, node_id: str, default: object = None) -> object:
        if node_id not in self._found:
            self.prefetch([node_id])
        node = self._found[node_id]
        return default if node is None else node

    def __getitem__(self, node_id: str) -> Node:
        node = self.get(node_id)
        if node is None:
            raise KeyError(node_id)
        return node

    def __contains__(self, node_id: str) -> bool:
        return self.get(node_id) is not None


class ColdNeighbours:
    """node id -> its linked nodes (as `state.Neighbours`), read by batches of ids."""

    def __init__(self, state: ColdState) -> None:
        self.state = state
        self._near: dict[str, set[str]] = {}

    def prefetch(self, ids: Iterable[str]) -> None:
        missing = [i for i in ids if i not in self._near]
        if not missing:
            return
        found: dict[str, set[str]] = {i: set() for i in missing}
        for _, source, target in self.state.reads().edges(missing):
            if source in found:
                found[source].add(target)
            if target in found:
                found[target].add(source)
        self._near.update(found)

    def get(self, node_id: str, default: Collection[str] = ()) -> Collection[str]:
        if node_id not in self._near:
            self.prefetch([node_id])
        near = self._near[node_id]
        return set(near) if near else default

    def __contains__(self, node_id: str) -> bool:
        return bool(self.get(node_id))


class ColdContext:
    """The context of each event-type node (linked events, the previous and next node of its type and level in
    story order), as `ChatState.context()` holds it: `get` gives the set, or `default` when it is empty."""

    def __init__(self, state: ColdState) -> None:
        self.state = state
        self._found: dict[str, set[str]] = {}

    def prefetch(self, ids: Iterable[str]) -> None:
        state = self.state
        ids = [i for i in ids if i not in self._found]
        if not ids:
            return
        state.nodes.prefetch(ids)
        state.neighbours().prefetch(ids)
        events = state.event_types
        near = {i: state._neighbours._near.get(i, set()) for i in ids}
        state.types_of({n for found in near.values() for n in found})
        for node_id in ids:
            node = state.nodes.get(node_id)
            if node is None or node.type not in events:
                self._found[node_id] = set()
                continue
            found = {n for n in near[node_id] if state._types.get(n) in events}
            found.update(n for n in state.story_neighbours(node) if n is not None)
            self._found[node_id] = found

    @overload
    def get(self, node_id: str) -> set[str] | None: ...

    @overload
    def get(self, node_id: str, default: D) -> set[str] | D: ...

    def get(self, node_id: str, default: object = None) -> object:
        if node_id not in self._found:
            self.prefetch([node_id])
        return self._found[node_id] or default


class ColdNames:
    """normalized name -> the entities (non-event nodes, archived ones too) it names, from the store's names."""

    def __init__(self, state: ColdState) -> None:
        self.state = state
        self._found: dict[str, set[str]] = {}

    @overload
    def get(self, name: str) -> set[str] | None: ...

    @overload
    def get(self, name: str, default: D) -> set[str] | D: ...

    def get(self, name: str, default: object = None) -> object:
        if name not in self._found:
            state = self.state
            types = set(state.schema.types) - state.event_types
            self._found[name] = set()
            self._found.update(state.reads().named([name], types))
        return self._found[name] or default


class _Sourced:
    """The events that have a source (`ChatState.sources`): recall asks only whether an id is one."""

    def __init__(self, state: ColdState) -> None:
        self.state = state

    def keys(self) -> CorpusLexicon:
        return self.state.source_bm25

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.state.source_bm25


class ColdTyped:
    """The always-inject types' active top-level nodes, best first (what `plan_persistent` reads), page by page."""

    FIRST_PAGE = 16

    def __init__(self, state: ColdState) -> None:
        self.state = state

    def ranked(self, type_: str) -> tuple[int, Iterator[Node]]:
        return self.state.reads().top_level_count(type_), self._best_first(type_)

    def _best_first(self, type_: str) -> Iterator[Node]:
        state = self.state
        newest, offset, size = state._newest_first.get(type_, True), 0, self.FIRST_PAGE
        while True:
            page = state.reads().top_level(type_, newest, size, offset)
            state.nodes.add(page)
            yield from page
            if len(page) < size:
                return
            offset, size = offset + size, min(4 * size, 1024)
