"""Story soft features for recall: who speaks next, where and when the story is, and what that character knows.

Each effect is a weight added to the one z-fused score (never a bucket sort), and each leaves its reason:
- the speaker knows a memory only some characters know (a `knows` link, or took part in it): up; a memory only
  others know: down (it is also shown apart, as not known to the speaker);
- the speaker's own point-of-view memory: up; another character's: down (shown as a rumour);
- a memory of the current region: up; of an adjacent one (same wider place, or one inside the other): a little up;
- a memory whose story-time label the query names ("the night of the fire"): up.
The speaker is the `speaker` recall option, else the name of the newest assistant message; the current region is
the region of the newest memory that has one (a flashback does not move it). The features are inert on a chat with
no story data, so such a chat's recall is unchanged."""

from __future__ import annotations

import itertools
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from curator.cjk import has_cjk
from curator.prompts import SHIPPED, Prompts
from curator.recall.injection import Chosen, Injection, render_text
from curator.schemas import Schema
from curator.store.changes import ChangeLog
from curator.store.graph import Node, normalize_name
from curator.store.queries import GraphView
from curator.store.recall_reads import RecallReads, StoryRow
from curator.store.story_time import KNOWS, parse_segment

# Chosen on bench/pov_recall.py's tuning story (a grid; ties go to the smallest weights), checked on its held-out one.
KNOWN_BONUS = 0.5  # the speaker knows a memory only some know
UNKNOWN_PENALTY = 0.5  # only others know it
OWN_POV_BONUS = 1.0  # the speaker's own belief or view
OTHER_POV_PENALTY = 1.0  # another character's
STORY_TIME_BONUS = 1.0  # the query names the memory's story time
# The current region, an adjacent one: chosen on the same tuning story's walk (`python bench/pov_recall.py`: place
# questions at each stop, "Is there a well here?" / "...nearby?" / "...at the docks?"; REGION {0, 0.25, 0.5, 1} x
# ADJACENT {0, 0.1, 0.25, 0.5}, other weights as above, no loss on the secret and day questions, no leak; ties go to
# the smallest). Needed memories kept, tuning walk: off 0.756, 0.5/0.25 (the former hand-set values) 0.867, 0.5/0.5
# 0.889 (tied with 1.0/0.5); held-out walk: off 0.870, 0.5/0.5 0.957. Secrets kept 1.0, leak share 0 on both stories.
REGION_BONUS, ADJACENT_BONUS = 0.5, 0.5
KNOWING = (KNOWS, "involved_in")  # relations from a character to a memory that make them know it
_STOP = set("the a an of in on at to and or for by with from into after before during this that these those its "
            "his her their our my your when what which who whom how did does do was were is are happened happen "
            "then there".split())
_MONTHS = set("january february march april may june july august september october november december jan feb mar "
              "apr jun jul aug sep sept oct nov dec am pm".split())
_WORD = re.compile(r"[^\W_]+")


@dataclass
class StoryData:
    """What the graph says about knowledge, views, places and times (one per graph version)."""

    knowers: dict[str, set[str]] = field(default_factory=dict)  # memory -> character ids that know it
    restricted: set[str] = field(default_factory=set)  # memories with `knows` links: only those know them
    owners: dict[str, str] = field(default_factory=dict)  # point-of-view memory -> normalized owner name
    mistaken: set[str] = field(default_factory=set)  # point-of-view memories the objective layer contradicts
    regions: dict[str, str] = field(default_factory=dict)  # node -> region path
    labels: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)  # node -> (label, its words)
    current_region: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.restricted or self.owners or self.regions or self.labels)

    @cached_property
    def label_groups(self) -> dict[tuple[str, frozenset[str]], list[str]]:
        """The nodes of each distinct label: many memories share one (a session's date, a scene), so a query
        checks each label once, not each node (worked out at the first query of a graph version)."""
        groups: dict[tuple[str, frozenset[str]], list[str]] = {}
        for node_id, label in self.labels.items():
            groups.setdefault(label, []).append(node_id)
        return groups


@dataclass
class StoryContext:
    """StoryData seen from one speaker."""

    data: StoryData
    speaker: str | None = None
    speaker_ids: set[str] = field(default_factory=set)

    def withheld(self, node_id: str) -> bool:
        """Whether the knowledge filter leaves the memory out for this speaker (`recall.knowledge` hide): a memory
        only others know, another character's point of view; without a speaker (a group chat where nobody said who
        speaks next), every memory only some know and every point of view (it fails closed)."""
        data = self.data
        if not self.speaker:
            return node_id in data.restricted or node_id in data.owners
        return self.view(node_id) in ("unknown", "rumour")

    def view(self, node_id: str) -> str:
        """How the speaker holds a memory: known | own | mistaken | rumour | unknown ('' without a speaker)."""
        if not self.speaker:
            return ""
        data = self.data
        owner = data.owners.get(node_id)
        if owner is not None:
            if owner != normalize_name(self.speaker):
                return "rumour"
            return "mistaken" if node_id in data.mistaken else "own"
        if node_id in data.restricted and not (data.knowers.get(node_id, set()) & self.speaker_ids):
            return "unknown"
        return "known"


_CACHE: OrderedDict[tuple[Any, ...], StoryData] = OrderedDict()
_LIVE: OrderedDict[tuple[Any, ...], _Live] = OrderedDict()
_LOCK = threading.Lock()  # per (connection, chat): the newest version, kept in step
_CONNECTIONS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_SERIAL = itertools.count()


def _connection(conn: Any) -> int:
    """A number of its own for each connection while it lives. Not `id(conn)`: a closed store's connection leaves
    its id to the next one, whose chat of the same id and version would be given the closed one's story (a test
    suite that opens a store per test saw a point of view read as another store's)."""
    number = _CONNECTIONS.get(conn)
    if number is None:
        number = _CONNECTIONS[conn] = next(_SERIAL)
    return number


@dataclass
class _Live:
    """What `StoryData` is derived from, kept per chat and followed commit by commit through the store's change
    log (a commit rereads the nodes and edges it touched, not the whole graph: a 100k-node chat took 1.5 s)."""

    version: int
    ids: set[str] = field(default_factory=set)  # nodes known to exist: the story rows and the ends of `edges`
    owners: dict[str, str] = field(default_factory=dict)
    regions: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, tuple[Any, ...]] = field(
        default_factory=dict
    )  # active, non-flashback region nodes -> recency rank
    labels: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    edges: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # knowing / contradicts edges

    def put(self, node: Node | StoryRow) -> None:
        self.ids.add(node.id)
        if node.scope.get("layer") == "pov" and node.scope.get("owner"):
            self.owners[node.id] = normalize_name(node.scope["owner"])
        if region := node.scope.get("region"):
            self.regions[node.id] = region
            segment = parse_segment(node.story_time.get("segment"))
            if not (segment and segment.flashback) and not node.archived:
                self.ranks[node.id] = ((node.floor_to, segment.key if segment else "", node.updated_at), region)
        if label := (node.story_time.get("label") or "").strip():
            self.labels[node.id] = (label, _words(label))

    def drop(self, node_id: str) -> None:
        self.ids.discard(node_id)
        for part in (self.owners, self.regions, self.ranks, self.labels):
            part.pop(node_id, None)

    def link(self, edge_id: str, relation: str, source: str, target: str) -> None:
        if relation in KNOWING or relation == "contradicts":
            self.edges[edge_id] = (relation, source, target)

    def data(self) -> StoryData:
        data = StoryData(owners=dict(self.owners), regions=dict(self.regions), labels=dict(self.labels))
        newest = max(self.ranks.values(), default=None)
        data.current_region = newest[1] if newest else None
        for relation, source, target in self.edges.values():
            if relation in KNOWING:
                data.knowers.setdefault(target, set()).add(source)
                if relation == KNOWS:
                    data.restricted.add(target)
            else:
                for pov, other in ((source, target), (target, source)):
                    if pov in data.owners and other in self.ids and other not in data.owners:
                        data.mistaken.add(pov)
        return data


def story_data(graph: GraphView, version: int, changes: ChangeLog | None = None) -> StoryData:
    """The story data of the chat at `version`; with the store's change log (`changes`), followed from the last
    version by what the commits between touched."""
    with _LOCK:  # the service recalls from several threads; `_Live` is updated in place
        key = (_connection(graph.conn), graph.chat_id, version)
        if key not in _CACHE:
            _CACHE[key] = _follow(graph, version, changes)
            while len(_CACHE) > 64:
                _CACHE.popitem(last=False)
        return _CACHE[key]


def _follow(graph: GraphView, version: int, changes: ChangeLog | None) -> StoryData:
    chat = (_connection(graph.conn), graph.chat_id)
    live = _LIVE.get(chat)
    change = None
    if live is not None and changes is not None and live.version < version:
        change = changes.graph_since(graph.chat_id, live.version, version)
    if live is None or change is None:  # the columns and edges the story reads, not whole nodes (100k: 1.5 s)
        live = _LIVE[chat] = _Live(version)
        reads = RecallReads(graph.conn, graph.chat_id)
        for row in reads.story_rows():
            live.put(row)
        links = reads.links_of((*KNOWING, "contradicts"))
        for edge in links:
            live.link(*edge)
        live.ids.update(reads.types({node for _, _, *ends in links for node in ends}))  # those edges' ends that exist
    else:
        ids = sorted(change.nodes)
        for node_id in ids:
            live.drop(node_id)
        for node in graph.by_ids(ids):
            live.put(node)
        edges = sorted(change.edges)
        for edge_id in edges:
            live.edges.pop(edge_id, None)
        links = graph.links(edges)
        for edge in links:
            live.link(*edge)
        ends = {node for _, _, *pair in links for node in pair} - live.ids
        if ends:
            live.ids.update(RecallReads(graph.conn, graph.chat_id).types(ends))
        live.version = version
    _LIVE.move_to_end(chat)
    while len(_LIVE) > 64:
        _LIVE.popitem(last=False)
    return live.data()


def story_context(graph: GraphView, version: int, speaker: str | None,
                  changes: ChangeLog | None = None) -> StoryContext:
    data = story_data(graph, version, changes)
    context = StoryContext(data, speaker)
    if speaker and data.active:
        context.speaker_ids = {n.id for n in graph.find_by_name(speaker)}
    return context


def story_boost(scores: dict[str, float], query: str, context: StoryContext,
                allowed: Container[str]) -> tuple[dict[str, float], dict[str, list[str]]]:
    """The scores with the story features added, and the reasons per node (only nodes in `allowed` move)."""
    data = context.data
    if not data.active or not scores:
        return scores, {}
    out, reasons = dict(scores), {}
    low = min(scores.values())
    named = _named_times(query, data) if data.labels else set()
    for node_id in set(scores) | named:
        if node_id not in allowed:
            continue
        delta, why = 0.0, list[str]()
        view = context.view(node_id)
        if view in ("own", "mistaken"):
            delta, why = delta + OWN_POV_BONUS, why + [f"{context.speaker}'s own view (+{OWN_POV_BONUS:g})"]
        elif view == "rumour":
            delta, why = delta - OTHER_POV_PENALTY, why + [f"another's view (-{OTHER_POV_PENALTY:g})"]
        elif view == "unknown":
            delta, why = delta - UNKNOWN_PENALTY, why + [f"not known to {context.speaker} (-{UNKNOWN_PENALTY:g})"]
        elif view == "known" and node_id in data.restricted:
            delta, why = delta + KNOWN_BONUS, why + [f"{context.speaker} knows it (+{KNOWN_BONUS:g})"]
        region = data.regions.get(node_id)
        if region and data.current_region:
            if region == data.current_region:
                delta, why = delta + REGION_BONUS, why + [f"current region (+{REGION_BONUS:g})"]
            elif adjacent(region, data.current_region):
                delta, why = delta + ADJACENT_BONUS, why + [f"adjacent region (+{ADJACENT_BONUS:g})"]
        if node_id in named:
            delta, why = delta + STORY_TIME_BONUS, why + [f"story time named (+{STORY_TIME_BONUS:g})"]
        if why:
            out[node_id] = out.get(node_id, low) + delta
            reasons[node_id] = why
    return out, reasons


def adjacent(a: str, b: str) -> bool:
    """Two region paths are adjacent when one lies inside the other or both lie in the same wider place."""
    pa, pb = a.split(" > "), b.split(" > ")
    if pa[:len(pb)] == pb or pb[:len(pa)] == pa:
        return True
    return len(pa) > 1 and len(pb) > 1 and pa[:-1] == pb[:-1]


def _words(text: str) -> frozenset[str]:
    """Content words and numbers ("day 7", "the night of the fire"); month names and am/pm are left to the date
    bonus, so a calendar label ("1:56 pm on 8 May, 2023") matches only a query that names all its numbers."""
    return frozenset(_stem(w) for w in _WORD.findall(text.casefold()) if w not in _STOP and w not in _MONTHS
                     and (len(w) >= 3 or w.isdigit()))


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _named_times(query: str, data: StoryData) -> set[str]:
    """Memories whose story-time label the query names: every content word and number of the label (at least one
    word that is not a number) is in the query, or the CJK label appears in it whole."""
    words = _words(query)
    out = set()
    for (label, label_words), nodes in data.label_groups.items():
        if label_words and label_words <= words and not all(w.isdigit() for w in label_words):
            out.update(nodes)
        elif has_cjk(label) and label in query:
            out.update(nodes)
    return out


def annotate(chosen: list[Any], reasons: dict[str, list[str]]) -> list[Any]:
    """Add the story reasons to the chosen memories' reasons."""
    for item in chosen:
        if item.node.id in reasons:
            item.reason = "; ".join([item.reason, *reasons[item.node.id]])
    return chosen


def label_views(injection: Injection, schema: Schema, context: StoryContext, prompts: Prompts = SHIPPED) -> None:
    """Mark each injected memory with how the speaker holds it and render the injection grouped by it (objective
    and known, the speaker's own views, others' views as rumours, what the speaker does not know). Only on a chat
    with points of view or restricted knowledge; any other injection stays as it was."""
    data = context.data
    if not context.speaker or not (data.restricted or data.owners):
        return
    for item in (*injection.persistent, *injection.recalled):
        item.view = context.view(item.node.id)
    injection.speaker = context.speaker
    injection.text = render_text(injection, schema, prompts)


def speaker_of(given: str | None, last_speaker: str | None, group: bool = False) -> str | None:
    """Who speaks next: the given name (the character card's, the group member about to speak), else the newest
    named assistant message's name (`last_speaker`, which the recall state keeps). Not in a group chat: there the
    newest reply is another member's, so nobody is assumed (and the knowledge filter fails closed)."""
    if given and given.strip():
        return given.strip()
    return None if group else last_speaker


_Item = TypeVar("_Item", Node, Chosen)  # a node, or a chosen memory that holds one


def withhold(items: list[_Item], context: StoryContext) -> tuple[list[_Item], list[_Item]]:
    """`items` (nodes or chosen memories) split into those the speaker may see and those the knowledge filter
    leaves out for them."""
    if not context.data.active:
        return items, []
    kept: list[_Item] = []
    out: list[_Item] = []
    for item in items:
        node = item.node if isinstance(item, Chosen) else item
        (out if context.withheld(node.id) else kept).append(item)
    return kept, out
