"""The vector index: derived state in Chroma, one collection per chat (queries need no filter, and one chat can
never see another's vectors). Each node's document is built from its type's embedded fields; a content hash per
node says what must be re-embedded after a commit or a rollback, and what vanished.

A second collection per chat holds each event's *source*: the messages it was extracted from (its floors and the
message before them, which usually holds the question the reply answers). Recall scores an event by its own text
and by its source, since a short memory loses words that a query may use. A source's vector is the mean of its
messages' vectors, and each message is embedded once, its vector kept in the store (`vectors/messages.py`): the
start of the message, near 64 tokens. An archived leaf's source waits until recall needs it (`embed_sources`).

A sync after a commit or rollback stages its writes in the store and Chroma gets them in batches
(`vectors/pending.py`); searches see both. A chat searched often is searched in a copy of its vectors in memory
instead of in Chroma (`vectors/mirror.py`), kept in step with this process's writes."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from curator.vectors.documents import SOURCE_CHARS, SOURCE_SPAN, embedded_source, node_document, source_floors
from curator.vectors.messages import LEGACY_MESSAGES, MessageVectors
from curator.vectors.mirror import Mirrors
from curator.vectors.pending import FLUSH_ROWS, Batch, PendingWrites
from curator.vectors.chroma_client import collection_name, connect, open_collection
from curator.vectors.chroma_direct import DirectReader
from curator.vectors.embeddings import LazyEmbedder
from curator.vectors.profile import EmbeddingProfile
from curator.vectors.hashes import StoredHashes
from curator.vectors.search import NODES, SOURCES, VectorSearch
from curator.vectors.writes import Direct, SyncReport, VectorWrites, node_metadata
from curator.store.graph import Node
from curator.store import vector_rows
from curator.store.message_rows import message_lines
from curator.store.queries import GraphView
from curator.store.store import Store

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

    from curator.schemas import Schema

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
Hashes = tuple[str | None, str | None, str]  # a node's content, metadata and source hashes
Stamp = tuple[tuple[int, str], int, int]  # the chat's epoch, graph and messages versions (Store.stamp)


def _digest(*parts: object) -> str:
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=12).hexdigest()


def _six_key_meta_digest(node: Node) -> str:
    """The metadata hash of an index written when Chroma kept six keys of a node (type, level, archived, parent and
    floors): a node whose hash is this holds the right type and archived already, so an index from then is
    taken as it is (its hashes rewritten) rather than updated node by node."""
    return _digest(node.type, node.level, node.archived, node.parent or "", node.floor_from, node.floor_to)


class VectorIndex(VectorSearch, VectorWrites):
    """Chroma collections for the chats of one store: embedded (on disk under the data directory) by default,
    or a Chroma server when `url` is given."""

    def __init__(self, store: Store, profile: EmbeddingProfile, url: str | None = None) -> None:
        self.store, self.profile, self.url = store, profile, url
        self.function = LazyEmbedder(profile)  # `.embedder`: the model, loaded at first use
        self._locks: dict[str, threading.RLock] = {}  # one sync at a time per chat; chats in parallel
        self._locks_guard = threading.Lock()
        self._collections: dict[tuple[str, str], Collection] = {}  # (chat, kind) -> Chroma collection handle
        self._counts: dict[tuple[str, str], int] = {}  # (chat, kind) -> vectors in it (> 0 once we wrote some)
        # per chat: the versions the index was last brought to (epoch, graph, messages) and the hashes it holds,
        # so the next sync asks the store's change log what changed instead of reading the whole chat
        self._known: dict[str, tuple[Stamp, dict[str, Hashes] | StoredHashes, set[str]]] = {}
        self._saved_stamps: dict[str, str | None] = {}  # chat -> the synced stamp the store holds, as last written
        self._search_pool = None  # threads for the source searches, made on first use (`VectorSearch._searches`)
        self._query_cache: OrderedDict[tuple[str, ...], np.ndarray] = (
            OrderedDict()
        )  # (kind, text) or ("named", text, source text)
        self.embedded_total = 0  # node documents and messages this index embedded (progress bars show it)
        self.messages = MessageVectors(profile.key, store,
                                       lambda texts: self.function.embedder.embed_documents(texts))
        self.pending = PendingWrites(store, settle=bool(url))  # writes staged for Chroma, per chat
        self.mirrors = Mirrors(self._read_vectors, self._indexed_ids)  # in-memory copies searched instead of Chroma
        self.folder = Path(store.data_dir) / "chroma"
        # searches answered without chromadb's Python client until this process needs it (`chroma_direct.py`)
        self.direct = None if url else DirectReader(self.folder)
        self._client: ClientAPI | None = None
        self._client_lock = threading.Lock()
        if url or not self.folder.is_dir():  # a server is reached now, a new index's folder made now: either fails
            self.client  # noqa: B018 - here, clearly, rather than at the first search

    @property
    def client(self) -> ClientAPI:
        """Chroma's client, made at first use (a write, a metadata read, a rebuild): embedded, on disk under the data
        directory, or the server at `url`."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    if self.direct is not None:
                        self.direct.close()
                    self._client = connect(self.folder, self.url)
        return self._client

    def close(self) -> None:
        """Write the staged rows to Chroma and let the search threads go (the Chroma client needs no closing). A
        flush that fails leaves its rows in the store, where the next process finds them."""
        self._mark_synced()
        for chat_id in self.pending.chats():
            try:
                self.flush(chat_id)
            except Exception as exc:  # noqa: BLE001 - closing goes on; the rows are safe in the store
                log.warning("staged vector writes of chat %r stay in the store for now: %s", chat_id, exc)
        self.mirrors.close()
        if self.direct is not None:
            self.direct.close()
        if self._search_pool is not None:
            self._search_pool.shutdown(wait=True)
            self._search_pool = None

    collection_name = staticmethod(collection_name)

    def _collection(self, chat_id: str, kind: str = NODES) -> Collection:
        """The chat's collection (handles are kept: opening one costs a round of Chroma's catalogue)."""
        found = self._collections.get((chat_id, kind))
        if found is None:
            found = self._collections[(chat_id, kind)] = open_collection(self.client, chat_id, kind, self.profile,
                                                                          self.function)
        return found

    def _count(self, chat_id: str, kind: str) -> int:
        """A lower bound of how many vectors the collection holds, 0 only when it holds none (a query only needs to
        know whether there is any: Chroma returns fewer than `n_results` when it has fewer)."""
        found = self._counts.get((chat_id, kind))
        if found is None:  # the store's hashes say whether there is any (Chroma's count took 0.3 s at 100k nodes)
            found = int(vector_rows.has_vectors(self.store.conn, chat_id, kind == SOURCES))
            self._counts[(chat_id, kind)] = found
        return found

    def _stamp(self, chat_id: str) -> Stamp:
        return self.store.stamp(chat_id)

    def _state(self, chat_id: str) -> tuple[str | None, dict[str, Hashes]]:
        """The profile the chat was indexed with, and per node: content, metadata and source hashes (the source
        hash rides in the content column as "content|source", so no table change was needed for it)."""
        hashes: dict[str, Hashes] = {}
        for node_id, (content, meta) in vector_rows.hashes(self.store, chat_id).items():
            item, _, source = content.partition("|")
            hashes[node_id] = (item or None, meta, source)
        return vector_rows.indexed_profile(self.store, chat_id), hashes

    def _lock(self, chat_id: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks.setdefault(chat_id, threading.RLock())

    def flush(self, chat_id: str) -> int:
        """Write the chat's staged rows to Chroma now; returns how many there were."""
        with self._lock(chat_id):
            if not self.pending.count(chat_id):
                return 0
            self._counts.pop((chat_id, NODES), None)
            self._counts.pop((chat_id, SOURCES), None)
            return self.pending.flush(chat_id, lambda kind: self._collection(chat_id, kind), self.mirrors.written)

    def sync(self, chat_id: str, full: bool = False, floors: tuple[int, int] | None = None,
             progress: Progress | None = None) -> SyncReport:
        """Bring the chat's collections in line with its graph and messages: embed what is new or changed, update
        metadata that changed, delete what vanished. `full` re-embeds everything; `floors` re-embeds the nodes
        whose floor range meets [a, b]. A profile change turns any sync into a full one. Failures are per node."""
        with self._lock(chat_id):  # the HTTP service syncs a chat from request and job threads
            return self._sync(chat_id, full, floors, progress)

    def _sync(self, chat_id: str, full: bool, floors: tuple[int, int] | None, progress: Progress | None) -> SyncReport:
        stamp = self._stamp(chat_id)
        if not full and floors is None:
            report = self._follow(chat_id, stamp, progress, stored=False)
            if report is None and self._resume(chat_id, stamp):
                report = self._follow(chat_id, stamp, progress)
            if report is not None:
                return report
        self._known.pop(chat_id, None)
        # The store could not say what changed (another process wrote, or this process never synced the chat):
        # what this process remembers of the chat's collections may be stale too (another process may have
        # filled them, or dropped and made them again), so it is asked of Chroma afresh.
        self._drop_handles(chat_id)
        self.pending.evict(chat_id)
        self.mirrors.evict(chat_id)
        chat = self.store.chat(chat_id)
        profile_key, hashes = self._state(chat_id)
        if profile_key is not None and profile_key != self.profile.key:
            full = True
        mode = "full" if full else "floors" if floors else "incremental"
        report = SyncReport(chat_id, mode)
        if full:
            self.drop(chat_id)
            hashes = {}
        nodes = self.store.graph(chat_id).nodes(archived=None)
        vanished = sorted(set(hashes) - {n.id for n in nodes})
        kept, _ = self._reconcile(chat_id, chat.schema, nodes, self.message_lines(chat_id), hashes, vanished, floors,
                                  report, progress, resumable=True)
        if full or profile_key is None or kept != hashes:  # a sync that changed nothing writes nothing
            self._save_state(chat_id, kept, None if report.failed else stamp)
        self._known[chat_id] = (stamp, kept, set(report.failed))
        self._mark_synced(chat_id)
        return report

    def _resume(self, chat_id: str, stamp: Stamp) -> bool:
        """Take the index up from the stamp the store says it was last brought to (by this process or another),
        its hashes read on demand: `_follow` then syncs only what the writes since touched. False when the store
        cannot say (never indexed, another profile, a failed embedding since, a chat made again)."""
        state = vector_rows.synced_state(self.store.conn, chat_id)
        if state is None or state[0] != self.profile.key or not state[1]:
            return False
        created_at, graph_version, messages_version = state[1].rsplit("|", 2)
        if created_at != stamp[0][1]:
            return False
        self._drop_handles(chat_id)
        self.pending.evict(chat_id)
        self.pending.rows(chat_id)  # read now, so that closing writes what another process left staged
        self.mirrors.evict(chat_id)
        self._known[chat_id] = ((stamp[0], int(graph_version), int(messages_version)),
                                StoredHashes(self.store, chat_id),
                                set())
        self._saved_stamps[chat_id] = state[1]
        return True

    def _mark_synced(self, chat_id: str | None = None) -> None:
        """Record in the store the stamp each chat's index stands at (one chat, or every chat this process synced),
        where it differs from what the store holds: a sync that wrote nothing leaves it to this."""
        chats = [chat_id] if chat_id is not None else list(self._known)
        due = {}
        for chat in chats:
            known = self._known.get(chat)
            if known is None:
                continue
            text = None if known[2] else _stamp_text(known[0])
            if self._saved_stamps.get(chat, "?") != text:
                due[chat] = text
        if due:
            with self.store.transaction() as conn:
                for chat, text in due.items():
                    vector_rows.mark_synced(conn, chat, text)
            self._saved_stamps.update(due)

    def _follow(self, chat_id: str, stamp: Stamp, progress: Progress | None,
                stored: bool = True) -> SyncReport | None:
        """The sync after writes this process saw (or, `stored`, that the store's change log names): only the nodes
        they touched, and the events whose sources reach the floors rewritten. None when the change log cannot say
        (then the whole chat is compared)."""
        known = self._known.get(chat_id)
        if known is None or known[0][0] != stamp[0]:
            return None
        (_, graph_version, messages_version), hashes, pending = known
        report = SyncReport(chat_id, "incremental")
        if stamp == known[0] and not pending:
            report.unchanged = len(hashes)
            return report
        changes = self.store.changes
        graph = changes.graph_since(chat_id, graph_version, stamp[1], stored) if stamp[1] != graph_version else None
        floor = changes.messages_since(chat_id, messages_version, stamp[2], stored) \
            if stamp[2] != messages_version else False
        if (stamp[1] != graph_version and graph is None) or floor is None:
            return None
        ids = (set(graph.nodes) if graph is not None else set()) | pending  # failed last time: tried again
        schema = self.store.chat(chat_id).schema
        events = sorted(_event_types(schema))
        if floor is not False and events:  # messages rewritten from `floor`: only an event's source can change
            ids.update(self.store.graph(chat_id).ids_reaching(floor, events))
        nodes = _fetch(self.store.graph(chat_id), ids)
        wanted = _source_reach(nodes)
        lines = self.message_lines(chat_id, wanted) if len(wanted) < 5000 else self.message_lines(chat_id)
        if hasattr(hashes, "prefetch"):  # read from the store by id (`_resume`)
            hashes.prefetch(ids)
        vanished = sorted(i for i in ids if i in hashes and i not in {n.id for n in nodes})
        before = {i: hashes[i] for i in ids if i in hashes}
        after, staged = self._reconcile(chat_id, schema, nodes, lines, before, vanished,
                                        None, report, progress, stage=True)
        changed = {i: v for i, v in after.items() if before.get(i) != v}
        self._save_changes(chat_id, changed, vanished, staged, None if report.failed else stamp)
        report.unchanged += len(hashes) - len(before)  # untouched, so unchanged (counted without a scan)
        for node_id in vanished:  # in place: a copy of a 100k-node map cost a link-only commit 5 ms
            hashes.pop(node_id, None)
        hashes.update(after)
        self._known[chat_id] = (stamp, hashes, set(report.failed))
        return report

    def _reconcile(self, chat_id: str, schema: Schema, nodes: list[Node], lines: dict[int, str],
                   hashes: dict[str, Hashes], vanished: list[str], floors: tuple[int, int] | None,
                   report: SyncReport, progress: Progress | None, leaves: AbstractSet[str] = frozenset(),
                   stage: bool = False, resumable: bool = False) -> tuple[dict[str, Hashes], Batch | None]:
        """Embed what is new or changed among `nodes`, update what only moved, delete `vanished`; returns the
        hashes the nodes now have, and the batch of staged writes when `stage` and the changes fit one (else they
        went to Chroma). An archived leaf's source is combined only when its messages are embedded already, or
        when recall asks for it (`leaves`, see `embed_sources`): until then it has none."""
        events = _event_types(schema)
        items: list[tuple[Node, str]] = []
        to_update: list[tuple[Node, str]] = []
        kept: dict[str, Hashes] = {}
        source_items: list[tuple[Node, list[int], str]] = []
        source_gone: list[str] = []
        joined = getattr(self.function.embedder, "joined_sources", False)  # a source embedded as one text
        for node in nodes:
            document = node_document(node, schema)
            at = source_floors(node, lines, events)
            source = (embedded_source("\n".join(lines[f] for f in at)[:SOURCE_CHARS]) if at else "") if joined \
                else "\n".join(self.messages.documents(lines, at).values())
            content, meta = _digest(self.profile.key, document), _digest(*node_metadata(node).values())
            source_hash = _digest(self.profile.key, source) if source else ""
            old_content, old_meta, old_source = hashes.get(node.id, (None, None, ""))
            forced = floors is not None and node.floor_from <= floors[1] and node.floor_to >= floors[0]
            if source and node.archived and node.id not in leaves and (old_source != source_hash or forced) \
                    and not self.messages.ready(chat_id, lines, at):
                source, source_hash = "", ""  # not needed yet: embedding it would embed messages for it
                report.sources_deferred += 1
            kept[node.id] = (content, meta, source_hash)
            if old_content != content or forced:
                items.append((node, document))
            elif old_meta != meta and old_meta != _six_key_meta_digest(node):
                to_update.append((node, document))
            else:
                report.unchanged += 1
            if source and (old_source != source_hash or forced):
                source_items.append((node, at, source))
            elif old_source and not source:
                source_gone.append(node.id)
        changes = len(items) + len(source_items) + len(to_update) + 2 * len(vanished) + len(source_gone)
        sink: Batch | Direct
        if stage and changes < FLUSH_ROWS:
            sink = staged = self.pending.batch(chat_id, lambda kind, i: _indexed(hashes, kind, i))
        else:
            staged = None
            self.flush(chat_id)  # what is staged is older than these changes: it goes first
            sink = Direct(chat_id, lambda kind: self._collection(chat_id, kind), self._counts, self.mirrors.written)
        if vanished:
            sink.delete(NODES, vanished)
            sink.delete(SOURCES, vanished)
            report.deleted = len(vanished)
        if source_gone:
            sink.delete(SOURCES, source_gone)
        checkpoint = self._checkpoint(chat_id, hashes, kept) if resumable and staged is None else None
        self._write(chat_id, sink, items, source_items, to_update, lines, report, kept, progress, checkpoint)
        self.embedded_total += report.embedded + report.messages_embedded
        return kept, staged

    def _checkpoint(self, chat_id: str, hashes: Mapping[str, Hashes],
                    kept: dict[str, Hashes]) -> Callable[[list[str], list[str]], None]:
        """After each batch a long sync writes to Chroma, the hashes of what it wrote, so a sync stopped midway
        (Ctrl-C, a crash) is taken up by the next one where it stopped: a node whose vector is written has its
        content hash, one whose source vector is written its source hash; the rest keep what they had."""
        saved = {i: hashes[i] for i in kept if i in hashes}

        def checkpoint(nodes: list[str], sources: list[str]) -> None:
            changed: dict[str, Hashes] = {}
            for node_id in nodes:
                content, meta, _ = kept[node_id]
                changed[node_id] = (content, meta, saved.get(node_id, (None, None, ""))[2])
            for node_id in sources:
                content, meta, _ = changed.get(node_id) or saved.get(node_id, (None, None, ""))
                changed[node_id] = (content, meta, kept[node_id][2])
            if changed:
                saved.update(changed)
                with self.store.transaction(chat_id) as conn:
                    vector_rows.replace_hashes(conn, chat_id, [], _columns(changed))

        return checkpoint

    def unsourced(self, chat_id: str, node_ids: Iterable[str]) -> list[str]:
        """Those of `node_ids` that have no source vector now (as far as this process's last sync knows)."""
        known = self._known.get(chat_id)
        hashes = known[1] if known is not None else {}
        return [i for i in node_ids if not hashes.get(i, ("", "", ""))[2]]

    def embed_sources(self, chat_id: str, node_ids: Iterable[str]) -> SyncReport:
        """Give these events (archived leaves whose detail recall needs) their source vectors now: their messages
        are embedded once, like any other's, and the vectors stay for later recalls."""
        with self._lock(chat_id):
            self._sync(chat_id, False, None, None)  # up to date first, so the hashes below are the chat's
            stamp, hashes, failed = self._known[chat_id]
            nodes = _fetch(self.store.graph(chat_id), set(node_ids))
            wanted = _source_reach(nodes)
            report = SyncReport(chat_id, "sources")
            before = {n.id: hashes[n.id] for n in nodes if n.id in hashes}
            after, staged = self._reconcile(chat_id, self.store.chat(chat_id).schema, nodes,
                                            self.message_lines(chat_id, wanted), before, [], None, report, None,
                                            leaves={n.id for n in nodes}, stage=True)
            failed = failed | set(report.failed)
            self._save_changes(chat_id, {i: v for i, v in after.items() if before.get(i) != v}, [], staged,
                               None if failed else stamp)
            hashes.update(after)
            self._known[chat_id] = (stamp, hashes, failed)
            return report

    def message_lines(self, chat_id: str, floors: set[int] | None = None) -> dict[int, str]:
        """Each floor's message (or only those of `floors`) as the "name: text" line a source document is made of."""
        return message_lines(self.store, chat_id, floors)

    def _save_changes(self, chat_id: str, changed: dict[str, Any], removed: list[str], staged: Batch | None = None,
                      stamp: Stamp | None = None) -> None:
        """Write the hashes of the nodes a sync changed and forget those of the nodes that vanished, with the
        writes it staged (one transaction: the hashes never claim a vector that is neither in Chroma nor staged)
        and the stamp the index then stands at (None: not in step, a node failed); a flush follows once enough
        are staged."""
        if changed or removed or (staged is not None and staged.changed):
            with self.store.transaction(chat_id) as conn:
                text = _stamp_text(stamp) if stamp is not None else None
                vector_rows.replace_hashes(conn, chat_id, removed, _columns(changed))
                vector_rows.mark_synced(conn, chat_id, text)
                self._saved_stamps[chat_id] = text
                if staged is not None:
                    staged.write(conn)
        if staged is not None:
            self.pending.take(staged)
            if self.pending.count(chat_id) >= FLUSH_ROWS:
                self.flush(chat_id)

    def _save_state(self, chat_id: str, hashes: dict[str, tuple[str | None, str | None, str]],
                    stamp: Stamp | None = None) -> None:
        """Every node's hashes after a whole sync, the profile, and the stamp the index stands at (None: unknown)."""
        text = _stamp_text(stamp) if stamp is not None else None
        vector_rows.save_state(self.store, chat_id, self.profile.key, _columns(hashes), synced=text)
        self._saved_stamps[chat_id] = text

    def _indexed_ids(self, chat_id: str, kind: str) -> list[str] | None:
        """The ids whose vector (node, or source) the index holds, as this process's last sync knows them."""
        known = self._known.get(chat_id)
        slot = 0 if kind == NODES else 2
        return None if known is None else [i for i, hashes in list(known[1].items()) if hashes[slot]]

    def _read_vectors(self, chat_id: str, kind: str, ids: list[str]) -> tuple[list[str], Any]:
        found = self._collection(chat_id, kind).get(ids=ids, include=["embeddings"])
        return found["ids"], found["embeddings"]

    def _drop_handles(self, chat_id: str) -> None:
        for kind in (NODES, SOURCES):
            self._collections.pop((chat_id, kind), None)
            self._counts.pop((chat_id, kind), None)
            if self.direct is not None:
                self.direct.forget(self.collection_name(chat_id, kind))

    def drop(self, chat_id: str) -> None:
        """Forget the chat's vectors (the collection and the hashes)."""
        self._known.pop(chat_id, None)
        self._saved_stamps.pop(chat_id, None)
        self.messages.drop(chat_id)
        self.mirrors.evict(chat_id)
        self._drop_handles(chat_id)
        self.pending.evict(chat_id)
        names = {c.name if hasattr(c, "name") else str(c) for c in self.client.list_collections()}
        for kind in (NODES, SOURCES, LEGACY_MESSAGES):
            if self.collection_name(chat_id, kind) in names:
                self.client.delete_collection(self.collection_name(chat_id, kind))
        with self.store.transaction(chat_id) as conn:
            vector_rows.drop_state(conn, chat_id)  # the staged writes with it
        self.pending.evict(chat_id)

    def status(self, chat_id: str) -> dict[str, Any]:
        profile_key, hashes = self._state(chat_id)
        total = len(self.store.graph(chat_id).nodes(archived=None))
        staged = vector_rows.pending_count(self.store, chat_id)
        return {
            "chat": chat_id,
            "profile": profile_key,
            "current_profile": self.profile.key,
            "indexed": sum(1 for c, _, _ in hashes.values() if c),
            "sources": sum(1 for *_, s in hashes.values() if s),
            "nodes": total,
            "stale_profile": profile_key not in (None, self.profile.key),
            "staged": staged,
        }  # writes waiting for Chroma's next batch (searched already)


def _columns(hashes: dict[str, tuple[str | None, str | None, str]]) -> vector_rows.Hashes:
    """The hashes as the store keeps them: the source hash rides in the content column as "content|source"."""
    return {node_id: (f"{c or ''}|{s}", m or "") for node_id, (c, m, s) in hashes.items() if c or s}


def _stamp_text(stamp: Stamp) -> str:
    (_, created_at), graph_version, messages_version = stamp
    return f"{created_at}|{graph_version}|{messages_version}"


def _fetch(graph: GraphView, ids: set[str]) -> list[Node]:
    return graph.by_ids(sorted(ids))


def _indexed(hashes: dict[str, Hashes], kind: str, node_id: str) -> bool:
    """Whether the index held the node's vector (or its source's) before this sync: in Chroma, or staged."""
    content, _, source = hashes.get(node_id, (None, None, ""))
    return content is not None if kind == NODES else bool(source)


def _event_types(schema: Schema) -> set[str]:
    """The types whose nodes have a source (their floors' messages): only they change when messages do."""
    return {name for name, spec in schema.types.items() if spec.identity == "event"}


def _source_reach(nodes: list[Node]) -> set[int]:
    """The floors whose messages the nodes' sources may use: only a node over at most SOURCE_SPAN floors can have
    a source (`documents.source_floors`), so a character over the whole chat asks for no messages (it made the
    sync after every reply read all of them)."""
    return {f for n in nodes if n.floor_to - n.floor_from + 1 <= SOURCE_SPAN
            for f in range(max(0, n.floor_from - 1), n.floor_to + 1)}
