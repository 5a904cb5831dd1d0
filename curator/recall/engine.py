"""Recall: choose the memories for the next generation and pack them into an injection.

- `hybrid` (default, no LLM): BM25 over node text (CJK-aware) and the vector index, fused by normalized scores,
  each event also scored by its source messages; then the steps of `curator/recall/scoring.py` (dates, mentions,
  context, diversity) and a one-hop graph expansion (an event brings its people and places; a person or place
  its latest event).
- `rag`: optional LLM query rewrite -> vector top-K -> optional cross-encoder rerank -> the best `max_results`.

The pool leaves out archived nodes and always-inject types (they are injected anyway), and, by setting, what the
last N floors made. A compressed type shows its highest active summary; a leaf folded into it comes back only when
it matches the query better than the summary does (the query needs its detail).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any, cast

from curator.prompts import prompts_for
from curator.schemas import Schema

from curator.store.graph import Node, normalize_name
from curator.recall.injection import Chosen, Injection, pack
from curator.recall.persistent import PersistentPlan, mark_overflow, note_left_out, plan_persistent
from curator.store.plans import latest_plan
from curator.recall.pool import build_pool, update_pool
from curator.recall.entities import entities_in, entity_focus
from curator.recall.query import RecallQuery, build_query, fuse_parts
from curator.recall.cold import ColdState
from curator.recall.state import ChatState
from curator.llm.records import LLMTrace, Usage
from curator.llm.usage import log_calls
from curator.store.queries import GraphView
from curator.recall.story import StoryContext, annotate, label_views, speaker_of, story_boost, story_context, withhold
from curator.recall import scoring
from curator.recall.scoring import (
    SOURCE_WEIGHT,
    Links,
    Pool,
    add_scores,
    best_first,
    date_bonus,
    diversify,
    expand,
    fuse,
    fuse_vectors,
    lift_leaves,
    mention_boost,
    propagate,
    strip_names,
)
from curator.settings import RecallSettings, Settings
from curator.store.access import add_access
from curator.store.commit_log import floor_stamp
from curator.store.store import Store, utc_now
from curator.vectors.index import VectorIndex

if TYPE_CHECKING:
    from pydantic_ai.models import Model

log = logging.getLogger(__name__)

DENSE_POOL = 200  # vector candidates scored per query
# events' sources scored per query: 50 measured better than 200 (LoCoMo dev hybrid R@10 0.707 against 0.704; 20:
# 0.697) and costs Chroma half as much at 10k (1.4 ms against 2.9; bench/README.md, "Fourth round")
SOURCE_POOL = 50
# BM25 candidates scored per query, of node texts and of events' sources (keeps a query's cost flat as a chat grows).
# With the default's e5 channels, 100 and 100 give LoCoMo dev hybrid R@10 0.7156 / 0.8231 (observations / turns)
# against 0.7152 / 0.8207 with 300 and 150 (75 for the nodes: 0.7124 / 0.8192), for a third of the candidates to
# fuse and score (bench/README.md, "Issue 31, second round"; 300 and 150 were chosen in the "Ninth round")
LEXICAL_POOL = 100
SOURCE_LEXICAL_POOL = 100
# Sources could be searched with a second query vector, of the query without the speakers' names (BM25 over sources
# always uses the query without names). Measured again with sources as the mean of their messages' vectors (LoCoMo
# dev, bench/recall_locomo.py, same built chats): hybrid R@10 0.715 with it, 0.703 without (held out 0.711 / 0.694),
# for a second model call that made recall's p50 78 ms instead of 42 with e5. None: as the embedder says
# (`second_query_vector`: the static profiles and the default, whose documents are static, use it; the default
# embeds only the query without names and adds the names' static share for the nodes' vector, one e5 pass in all:
# `VectorSearch.pair_vectors`); True/False: always.
SOURCE_QUERY_VECTOR: bool | None = None


LEAVES_PER_RECALL = 24  # deferred leaf sources one recall may embed (the rest wait for the next)
# Leaves under this many best candidates get their deferred sources; a fixed number, not the recall's own limit,
# so that recalls with other options do not each embed a different set first (their results would depend on order).
LEAF_CANDIDATES = 30
STATES_KEPT = 256  # chats whose recall state stays in memory
# Recalls of a chat in one process after which its whole state (`ChatState`) is loaded, in the background: until
# then, and in a one-shot command, recall reads what each query needs from the store (`ColdState`), with the same
# answers. 8 as for the vectors' copy in memory (`vectors/mirror.py`): the service's second or third turn of a chat.
FULL_AFTER = 8
TOUCH_RECALLS = 16  # recalls whose access counts are written in one transaction


def _prefetch(found: object, ids: Iterable[str]) -> None:
    """Let a cold state's map read the ids it will be asked about in a few statements (a whole state has them)."""
    prefetch = getattr(found, "prefetch", None)
    if prefetch is not None:
        prefetch(ids)


class Recaller:
    """Recall for the chats of one store. Keeps small caches keyed by graph version, so a swipe or regenerate of
    the same floor gets the same injection again with no embedding or LLM call."""

    def __init__(self, store: Store, settings: Settings, index: VectorIndex | None, model: Model | None = None,
                 full_after: int | None = FULL_AFTER) -> None:
        self.store, self.settings, self.index = store, settings, index
        self.prompts = prompts_for(store.data_dir)  # the injection's templates and labels (the user's own, if any)
        self.model = model  # replaces the `recall` profile's model for LLM stages (tests, scripted runs)
        # recalls of a chat before its whole state is loaded: 0 loads it at the first (in the caller's thread),
        # None never (each recall reads what it needs; the `llm` mode, which lists the pool, loads it anyway)
        self.full_after = full_after
        self._states: OrderedDict[str, ChatState] = OrderedDict()  # per chat, kept in step commit by commit
        self._cold: OrderedDict[str, ColdState] = OrderedDict()  # per chat, until its whole state is loaded
        self._loading: dict[str, threading.Thread] = {}
        self._recalls: Counter[str] = Counter()  # chat -> recalls in this process
        self._pinned = threading.local()  # chat -> the state a recall under way in this thread reads
        self._states_guard = threading.Lock()
        # key -> (when it is valid: the memory up to the user floor and the chat's update time, the result)
        self._results: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...] | None, Injection]] = OrderedDict()
        self._synced: dict[str, tuple[Any, ...]] = {}
        self._pools: OrderedDict[tuple[Any, ...], tuple[PersistentPlan, Pool]] = OrderedDict()
        # (chat, horizon) -> the newest pool's key, pool and persistent plan
        self._last_pool: dict[tuple[str, int | None], tuple[tuple[Any, ...], Pool, PersistentPlan]] = {}
        self._in_flight: Counter[str] = Counter()  # chat -> its recalls under way (`_pool_for`)
        self._touched: dict[tuple[str, str], tuple[int, str]] = {}  # (chat, node) -> recalls not written, the last
        self._touch_recalls = 0
        self._touch_lock = threading.Lock()

    def recall(self, chat_id: str, query: str, *, mode: str | None = None, user_floor: int | None = None,
               options: RecallSettings | None = None, messages: list[Any] | None = None) -> Injection:
        """`messages`: the conversation's recent turns (oldest first, the message answered last): the query is
        built from them (`curator/recall/query.py`); `query` alone when not given."""
        with self._states_guard:
            self._in_flight[chat_id] += 1
            self._recalls[chat_id] += 1
        pinned = self._pinned.__dict__.setdefault("states", {})
        try:
            with self.store.reading(chat_id):  # the chat's versions read once for this recall, not at every step
                return self._recall(chat_id, query, mode=mode, user_floor=user_floor, options=options,
                                    messages=messages)
        finally:
            pinned.pop(chat_id, None)
            with self._states_guard:
                self._in_flight[chat_id] -= 1
                if not self._in_flight[chat_id]:
                    del self._in_flight[chat_id]

    def _recall(self, chat_id: str, query: str, *, mode: str | None, user_floor: int | None,
                options: RecallSettings | None, messages: list[Any] | None) -> Injection:
        chat = self.store.chat(chat_id)
        opts = options or self.settings.for_chat(chat.settings).recall  # the chat's own recall settings
        mode = mode or opts.mode
        epoch = self.store.stamp(chat_id)[0]
        user, assistant, previous_user = opts.turn_weights
        rq = build_query(query, messages, user=user, assistant=assistant, previous_user=previous_user)
        query = rq.text or query
        digest = hashlib.sha256("\x1f".join([rq.turns, *(f"{p.weight}:{p.text}" for p in rq.parts)]).encode())
        key = (chat_id, epoch, user_floor, digest.hexdigest(), mode, opts.model_dump_json())
        # A regenerate or swipe of the turn answering `user_floor` reuses the result, even after the previous
        # reply's extraction committed (anchored after the turn): what it may not change is the memory up to the
        # turn (the commits anchored at it or before) and the chat's schema and settings.
        reuse = (floor_stamp(self.store, chat_id, user_floor), chat.updated_at) if user_floor is not None else None
        cached = self._results.get(key) if user_floor is not None else None
        if cached is not None and cached[0] == reuse:
            self._results.move_to_end(key)
            return Injection(**{**cached[1].__dict__, "reused": True, "usage": Usage()})
        started = time.perf_counter()
        graph = self.store.graph(chat_id)
        # one state for the whole recall, though the whole one may come in meanwhile (`state`); the llm mode lists
        # the pool, so it loads the whole state
        state = self._pinned.__dict__["states"][chat_id] = self._current_state(chat_id, whole=mode == "llm")
        version = state.graph_version
        latest = self._latest_floor(chat_id)
        plan, pool = self._pool_for(chat_id, state, latest, opts)
        injection = Injection(chat_id, query, mode, budget_tokens=opts.budget_tokens, graph_version=version,
                              placement={"position": opts.position, "depth": opts.depth, "role": opts.role})
        self._ensure_synced(chat_id, version)
        group = state.group_chat  # two or more characters reply
        story = story_context(graph, version, speaker_of(opts.speaker, state.last_speaker, group), self.store.changes)
        hide = opts.knowledge == "hide" or (opts.knowledge == "auto" and group)
        calls = LLMTrace()  # the LLM stages' requests: in the injection's usage and the store's usage log
        if mode == "rag":
            chosen = self._rag(chat_id, query, pool, opts, injection, calls, rq)
        elif mode == "llm":  # the model picks over a few rounds; falls back to hybrid on any failure
            from curator.recall.llm_recall import llm_recall

            chosen = llm_recall(self, chat_id, version, graph, query, pool, opts, injection, calls, rq=rq)
        else:
            chosen = self._hybrid(chat_id, version, graph, query, pool, opts, rq, story)
            if opts.llm_rerank and chosen:
                from curator.recall.llm_rerank import llm_rerank

                chosen = llm_rerank(self.settings, rq.turns or query, chosen, pool.documents, calls,
                                    self.model, self.prompts) or chosen
        if calls.records:
            for record in calls.records:
                injection.usage.add(record)
            log_calls(self.store, chat_id, calls.records)
        with state.lock:  # the plan's left-out nodes are read from the state (`persistent.LeftOut`)
            injection.plan = self._plan(chat_id, chat.settings, user_floor)
            persistent, recalled, withheld = plan.kept, mark_overflow(chosen, plan), []
            if hide:  # the knowledge filter: what the speaker does not know never reaches their prompt
                (persistent, gone), (recalled, gone_too) = withhold(persistent, story), withhold(recalled, story)
                withheld = [getattr(n, "node", n) for n in (*gone, *gone_too)]
            pack(injection, chat.schema, persistent, recalled, self.prompts)
            dropped = {i: n for i in injection.dropped_for_budget if (n := pool.nodes.get(i) or pool.leaf_nodes.get(i))}
            note_left_out(injection, plan, dropped)
            if withheld:
                injection.left_out += [{"id": n.id, "type": n.type, "title": n.title, "why": "knowledge",
                                        "block": "persistent" if n in plan.kept else "recalled"} for n in withheld[:50]]
                injection.left_out_count += len(withheld)
        label_views(injection, chat.schema, story, self.prompts)  # grouped: known, own view, rumours, not known
        self._touch(chat_id, [c.node.id for c in injection.recalled])
        injection.usage.latency_ms += (time.perf_counter() - started) * 1000
        if user_floor is not None:
            self._results[key] = (reuse, injection)
            while len(self._results) > 256:
                self._results.popitem(last=False)
        return injection

    def _plan(self, chat_id: str, chat_settings: dict[str, Any], user_floor: int | None) -> list[str]:
        """The plot planner's newest beats, when it is on and injects (curator/maintenance/planner.py)."""
        planner = self.settings.for_chat(chat_settings).planner
        if not (planner.enabled and planner.inject):
            return []
        found = latest_plan(self.store, chat_id, user_floor)
        return found["beats"] if found else []

    def evict_floors(self, chat_id: str, floor: int) -> int:
        """Drop results cached for user floors >= `floor` of a chat (history sync rolled them back)."""
        stale = [k for k in self._results if k[0] == chat_id and k[2] is not None and k[2] >= floor]
        for key in stale:
            del self._results[key]
        return len(stale)

    # ---- the pool -----------------------------------------------------------------------------
    def state(self, chat_id: str) -> ChatState | ColdState:
        """The chat's recall state, brought up to date (by what changed since the last recall): the one the recall
        under way in this thread reads, else the whole state when it is loaded, else the cold one."""
        pinned: ChatState | ColdState | None = self._pinned.__dict__.get("states", {}).get(chat_id)
        if pinned is not None:
            with pinned.lock:
                pinned.refresh(self.store)
            return pinned
        return self._current_state(chat_id)

    def _current_state(self, chat_id: str, whole: bool = False) -> ChatState | ColdState:
        with self._states_guard:
            state: ChatState | ColdState | None = self._states.get(chat_id)
            if state is None and (whole or self.full_after == 0):
                state = self._states[chat_id] = ChatState(chat_id)
            if state is not None:
                self._states.move_to_end(chat_id)
                self._cold.pop(chat_id, None)
                while len(self._states) > STATES_KEPT:
                    self._states.popitem(last=False)
            else:
                state = self._cold.get(chat_id)
                if state is None:
                    state = self._cold[chat_id] = ColdState(chat_id)
                    while len(self._cold) > STATES_KEPT:
                        self._cold.popitem(last=False)
                self._cold.move_to_end(chat_id)
                if self.full_after is not None and self._recalls[chat_id] >= self.full_after \
                        and chat_id not in self._loading:
                    self._loading[chat_id] = thread = threading.Thread(
                        target=self._load_whole, args=(chat_id,), name="curator-recall-state", daemon=True)
                    thread.start()
        with state.lock:
            state.refresh(self.store)
        return state

    def _load_whole(self, chat_id: str) -> None:
        """Load a chat's whole state beside the recalls that read the cold one, then hand it over."""
        try:
            state = ChatState(chat_id)
            with state.lock:
                state.refresh(self.store)
            with self._states_guard:
                self._states[chat_id] = state
                self._cold.pop(chat_id, None)
        except Exception:  # noqa: BLE001 - the cold state goes on answering; the next recalls try again
            log.exception("could not load the recall state of chat %r", chat_id)
        finally:
            with self._states_guard:
                self._loading.pop(chat_id, None)

    def wait_loaded(self, timeout: float | None = None) -> None:
        """Wait for the whole states being loaded in the background (tests and benchmarks)."""
        for thread in list(self._loading.values()):
            thread.join(timeout)

    def _pool_for(self, chat_id: str, state: ChatState | ColdState, latest: int,
                  opts: RecallSettings) -> tuple[PersistentPlan, Pool]:
        """The persistent block's plan and the recall pool: built once per graph version, the pool updated from
        the last one by the nodes that changed."""
        horizon = latest - opts.exclude_recent_floors if opts.exclude_recent_floors else None
        pool_key = (chat_id, state.epoch, state.graph_version, latest, horizon, opts.budget_tokens, opts.max_per_type,
                    state.kind)
        found = self._pools.get(pool_key)
        if found is None:
            with state.lock:
                # always-inject nodes that the caps or the persistent share leave out stay in the pool: nothing
                # is unreachable (curator/recall/persistent.py); `plan.kept` is already in packing order
                plan = plan_persistent(state.typed(), state.schema, latest, opts.budget_tokens, opts.max_per_type,
                                       self.prompts)
                last = self._last_pool.get((chat_id, horizon))
                touched = state.touched_since(last[0][2]) if last and last[0][1] == state.epoch \
                    and last[0][-1] == state.kind else None
                if last is not None and touched is not None and isinstance(state, ChatState):  # never cold's
                    with self._states_guard:
                        # no other recall of the chat under way: none holds the last pool, and none can take it
                        # once its keys are gone (a recall counts itself in before it looks), so it is updated
                        # in place rather than copied
                        alone = self._in_flight[chat_id] <= 1
                        if alone:
                            for key in [k for k, (_, p) in self._pools.items() if p is last[1]]:
                                del self._pools[key]
                    pool = update_pool(last[1], state, plan.kept, horizon, touched, in_place=alone)
                else:
                    pool = self._pool(state, state.schema, plan.kept, latest, opts)
                found = (plan, pool)
                with self._states_guard:
                    self._pools[pool_key] = found
                    self._last_pool[(chat_id, horizon)] = (pool_key, pool, plan)
                    while len(self._pools) > 128:
                        self._pools.popitem(last=False)
        return found

    def _latest_floor(self, chat_id: str) -> int:
        """The newest message's floor, else (no messages) the highest floor a node reaches, from the state."""
        state = self.state(chat_id)
        if state.latest_floor is not None:
            return state.latest_floor
        with state.lock:
            return state.highest_floor()

    def _pool(self, state: ChatState | ColdState, schema: Schema, persistent: list[Node], latest: int,
              opts: RecallSettings) -> Pool:
        horizon = latest - opts.exclude_recent_floors if opts.exclude_recent_floors else None
        if isinstance(state, ColdState):  # kind "cold"
            # a ColdPool is no dataclass of maps, but answers each lookup recall makes of a Pool's maps
            return cast(Pool, state.build_pool(persistent, horizon))
        return build_pool(state, persistent, horizon)

    # ---- hybrid -------------------------------------------------------------------------------
    def _hybrid(self, chat_id: str, version: int, graph: GraphView, query: str, pool: Pool,
                opts: RecallSettings, rq: RecallQuery | None = None,
                story: StoryContext | None = None) -> list[Chosen]:
        state = self.state(chat_id)
        speakers = list(state.speakers)
        # the maps of the message answered, for reasons and diversity
        first: list[tuple[dict[str, float], dict[str, float], dict[str, float]]] = []
        second_vector, weights = self._embedder_settings()
        dense_weight, lexical_weight, source_weight = weights["dense"], weights["lexical"], weights["source"]

        def source_text(text: str) -> str:
            # Sources are "name: text" lines, so the speakers' names match every one of them: leave them out there.
            return strip_names(text, speakers) or text

        def score(text: str) -> dict[str, float]:
            source_query = source_text(text)
            dense, source_dense = self._dense_scores(chat_id, text, max(opts.top_k, DENSE_POOL),
                                                     source_query if second_vector else text, text in context)
            with state.lock:  # the state's maps are read here; another recall thread may be updating them
                lexical, source_lexical, sourced = self._lexical_scores(chat_id, version, graph, text, source_query,
                                                                        pool)
                _prefetch(pool, (dense.keys() | lexical.keys() | source_dense.keys() | source_lexical.keys()))
                allowed = pool.documents  # a mapping: `in` is all fuse asks of it
                by_source = (fuse(source_dense, source_lexical, allowed, sourced, dense_weight, lexical_weight)
                             if source_weight else {})
                fused = add_scores(fuse(dense, lexical, allowed, dense_weight=dense_weight,
                                        lexical_weight=lexical_weight), by_source, source_weight, sourced)
            first.append((by_source, lexical, dense))
            return fused

        # the recent turns: each part scored on its own, then fused by weight (curator/recall/query.py); their
        # query vectors are embedded in one model call first
        # (the turns before it only add context: an embedder may embed them more cheaply, `vectors/search.py`)
        context: set[str] = set()
        if self.index is not None and rq is not None and not rq.single:
            asked = {p.text for p in rq.parts if p.group == "user"}
            context = {p.text for p in rq.parts} - asked
            self.index.pair_vectors([(t, source_text(t) if second_vector else t) for t in asked])
            self.index.pair_vectors([(t, source_text(t) if second_vector else t) for t in context], context=True)
        fused = fuse_parts(rq.parts, score) if rq is not None and not rq.single else score(query)
        if self._source_leaves(chat_id, state, fused, pool):  # their sources were deferred
            first.clear()
            fused = fuse_parts(rq.parts, score) if rq is not None and not rq.single else score(query)
        by_source, lexical, dense = first[0]
        with state.lock:
            fused = date_bonus(fused, query, pool, weights["date"])
            linked, adjacent = self._links(chat_id, version, graph, pool)
            _prefetch(linked, fused.keys())
            mentioned = self._mentioned(chat_id, query)
            if not mentioned and rq is not None:  # "what did she say?": the names are in the turns before
                mentioned = self._mentioned(chat_id, " ".join(p.text for p in rq.parts if p.group != "user"))
            fused = mention_boost(fused, mentioned, adjacent, pool, weights["mention"])
            fused, story_reasons = story_boost(fused, query, story, pool.documents) if story else (fused, {})
            fused = propagate(fused, linked, pool, weights["neighbour"])
            fused = entity_focus(fused, *entities_in(fused, query, mentioned, pool, state.schema))
        limit = max(opts.max_results, 30) if opts.llm_rerank else opts.max_results  # the LLM picks from 30
        fused = diversify(fused, by_source, pool, limit, source_weight)
        chosen = lift_leaves(fused, pool, limit, lexical, dense)
        if opts.expand and not opts.llm_rerank:
            chosen = expand(graph, chosen, pool, opts.max_results)
        return annotate(chosen, story_reasons)

    def _source_leaves(self, chat_id: str, state: ChatState | ColdState, fused: dict[str, float], pool: Pool) -> bool:
        """Embed the deferred sources of the leaves folded under the best candidates (an archived leaf's source
        waits until a recall needs it: `vectors/index.py`); True when any was, so the query is scored again."""
        if self.index is None or not pool.leaves:
            return False
        top = [node_id for node_id, _ in best_first(fused, LEAF_CANDIDATES)]
        with state.lock:  # the leaves under the top candidates: their subtrees, not every leaf of the chat
            leaves, stack = [], [c for node_id in top if (n := state.nodes.get(node_id)) for c in n.children]
            while stack:
                node = state.nodes.get(stack.pop())
                if node is not None:
                    stack.extend(node.children)
                    if node.id in pool.leaves and node.id in state.sources:
                        leaves.append(node.id)
        needed = self.index.unsourced(chat_id, leaves)[:LEAVES_PER_RECALL]
        return bool(needed) and self.index.embed_sources(chat_id, needed).sources_embedded > 0

    def _lexical_scores(self, chat_id: str, version: int, graph: GraphView, query: str, source_query: str,
                        pool: Pool) -> tuple[dict[str, float], dict[str, float], Container[str]]:
        """BM25 over node text, and over events' source messages (kept in step with the chat by `ChatState`)."""
        state = self.state(chat_id)
        with state.lock:
            return (dict(state.bm25.top(query, LEXICAL_POOL)),
                    dict(state.source_bm25.top(source_query, SOURCE_LEXICAL_POOL)), state.sources.keys())

    def _speakers(self, chat_id: str) -> list[str]:
        """The names the chat's messages are written under."""
        return list(self.state(chat_id).speakers)

    def _links(self, chat_id: str, version: int, graph: GraphView, pool: Pool) -> tuple[Links, Links]:
        """Two neighbour maps: the context of each event-type node (linked events, and the previous and next node
        of its type and level in story order), and every node's linked nodes. Both answer `.get(id, default)`."""
        state = self.state(chat_id)
        return state.context(), state.neighbours()

    def _mentioned(self, chat_id: str, query: str) -> set[str]:
        """Entities (non-event nodes) whose name or alias appears in the query, as 1-3 word spans."""
        words = [w for w in normalize_name(re.sub(r"[^\w\s'-]", " ", query)).split() if w]
        spans = {" ".join(words[i:i + n]) for n in (1, 2, 3) for i in range(len(words) - n + 1)}
        spans |= {s[:-2] for s in spans if s.endswith("'s")}
        if not spans:
            return set()
        state = self.state(chat_id)
        named = state.names  # the state's copy of the store's names, of the entities alone
        return {node_id for span in spans for node_id in named.get(span, ())
                if (node := state.nodes.get(node_id)) is not None and not node.archived}

    def _embedder_settings(self) -> tuple[bool, dict[str, float]]:
        """The second query vector and the fusion weights that suit the index's embedder (`vectors/embeddings.py`:
        `dense_weight`, and `fusion` for the others; the shipped ones where it sets none)."""
        embedder = self.index.function.embedder if self.index is not None else None
        second = getattr(embedder, "second_query_vector", False) if SOURCE_QUERY_VECTOR is None else SOURCE_QUERY_VECTOR
        shipped = {"lexical": scoring.LEXICAL_WEIGHT, "source": SOURCE_WEIGHT, "mention": scoring.MENTION_BONUS,
                   "date": scoring.DATE_BONUS, "neighbour": scoring.NEIGHBOUR_SHARE}
        return second, {"dense": getattr(embedder, "dense_weight", None) or scoring.DENSE_WEIGHT,
                        **shipped, **(getattr(embedder, "fusion", None) or {})}

    def _dense_scores(self, chat_id: str, query: str, k: int, source_query: str | None = None,
                      context: bool = False) -> Any:  # scores, or (node scores, source scores) given `source_query`
        """Vector matches of node documents (and, given a `source_query`, of events' sources); `context`: the
        query is a turn before the message answered."""
        if self.index is None:
            return {} if source_query is None else ({}, {})
        if source_query is None:
            return dict(self.index.query(chat_id, query, k))
        items, sources = self.index.query_both(chat_id, query, source_query, k, context, min(k, self._source_pool()))
        return dict(items), dict(sources)

    def _source_pool(self) -> int:
        """Sources scored per query: the embedder's own number, else SOURCE_POOL."""
        embedder = self.index.function.embedder if self.index is not None else None
        return getattr(embedder, "source_pool", None) or SOURCE_POOL

    def _ensure_synced(self, chat_id: str, version: int) -> None:
        """Sync the index when the graph or the messages (the events' sources) changed since the last recall."""
        stamp = self.store.stamp(chat_id)  # a chat created again by another process is synced afresh
        if self.index is not None and self._synced.get(chat_id) != stamp:
            self.index.sync(chat_id)
            self._synced[chat_id] = stamp

    # ---- rag ----------------------------------------------------------------------------------
    def _rag(self, chat_id: str, query: str, pool: Pool, opts: RecallSettings, injection: Injection,
             calls: LLMTrace, rq: RecallQuery | None = None) -> list[Chosen]:
        search = query
        if opts.rewrite:
            from curator.recall.rewrite import rewrite_query

            search = rewrite_query(self.settings, rq.turns if rq is not None else query, calls, self.prompts) or query
        if rq is not None and not rq.single and search == query:  # no rewrite: the turns' parts, fused by weight
            scores = fuse_parts(rq.parts, lambda text: self._vector_scores(chat_id, text, opts.top_k))
        else:
            scores = self._vector_scores(chat_id, search, opts.top_k)
        hits = [(i, s) for i, s in scores.items() if i in pool.documents]
        if hits:  # a bare name matches by the name alone (`scoring.entity_focus`)
            state = self.state(chat_id)
            with state.lock:
                ranked = dict(hits)
                mentioned = self._mentioned(chat_id, query)
                ranked = entity_focus(ranked, *entities_in(ranked, query, mentioned, pool, state.schema))
            hits = list(ranked.items())
        hits.sort(key=lambda kv: -kv[1])
        reason = "vector match"
        if opts.rerank and hits:
            from curator.recall.rerank import rerank  # httpx: loaded when a reranker is configured

            order = rerank(opts.rerank, search, [pool.documents[i] for i, _ in hits])
            if order is not None:
                hits = [(hits[i][0], score) for i, score in order]
                reason = "reranked"
        return lift_leaves(dict(hits), pool, opts.max_results, {}, dict(hits), reason=reason)

    def _vector_scores(self, chat_id: str, query: str, k: int) -> dict[str, float]:
        """`rag`'s vector scores: node texts searched with the query, events' sources with the query less the
        speakers' names (every source line carries one), fused (`scoring.fuse_vectors`). An event is often asked about
        in words its source messages hold and its own text does not; with no BM25 to count the names, the node search
        keeps them (LoCoMo dev R@10 on raw turns: 0.598 with node texts alone, 0.717 with both)."""
        if self.index is None:
            return {}
        state = self.state(chat_id)
        source_query = strip_names(query, list(state.speakers)) or query
        k = max(k, DENSE_POOL)
        nodes, sources = self.index.query_apart(chat_id, query, source_query, k, min(k, self._source_pool()))
        with state.lock:  # another recall thread may be updating the state's maps
            return fuse_vectors(dict(nodes), dict(sources), state.sources.keys())

    # ---- bookkeeping ----------------------------------------------------------------------------
    def _touch(self, chat_id: str, node_ids: list[str]) -> None:
        """Count the recall on each node. Not a commit: bookkeeping that a rollback need not undo. Kept in memory
        and written for TOUCH_RECALLS recalls at once (a write transaction was 0.5 ms of a 17 ms recall at 10k
        nodes); `write_access` writes them now (reads of the graph through `Memory` and its close ask it)."""
        if not node_ids:
            return
        now = utc_now()
        with self._touch_lock:
            for node_id in node_ids:
                count, _ = self._touched.get((chat_id, node_id), (0, now))
                self._touched[(chat_id, node_id)] = (count + 1, now)
            self._touch_recalls += 1
            due = self._touch_recalls >= TOUCH_RECALLS
        if due:
            self.write_access()

    def write_access(self) -> None:
        """Write the access counts kept since the last write."""
        with self._touch_lock:
            touched, self._touched, self._touch_recalls = self._touched, {}, 0
        if not touched:
            return
        try:
            add_access(self.store, touched)
        except BaseException:
            with self._touch_lock:  # kept for the next write
                for key, (count, last) in touched.items():
                    more, newer = self._touched.get(key, (0, last))
                    self._touched[key] = (count + more, newer)
            raise
