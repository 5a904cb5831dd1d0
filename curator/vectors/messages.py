"""Message vectors: each chat message is embedded once, and an event's source vector is the mean of the vectors
of the messages it came from (`documents.source_floors`), so a message shared by several events (the question
before a reply, a reply that gave three memories) costs one embedding, not one per event.

A message's vector lives in the store (`message_vectors`: chat, floor, the hash of what was embedded, the vector as
float16), not in Chroma: nothing searches it, it is only read back by floor, and a Chroma write costs ~4-5 ms of CPU
however small (a reply's sync made three of them; bench/README.md, "Fourth round"). The hash is of the start of the
"name: text" line (near 64 tokens: `documents.message_document`) under the embedding profile: an edited or swiped
message has a new hash and is embedded again; an unchanged one is read back, never re-embedded. Only the hashes of
a chat are kept in memory (a 100k-message chat would hold 100 MB of vectors); vectors come from a small cache or
from the store by floor. Chroma's message collections of older versions (`mm_`) are deleted with the chat's others."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from curator.store import vector_rows

if TYPE_CHECKING:
    from curator.store.store import Store

from curator.vectors.documents import message_document

LEGACY_MESSAGES = "mm_"  # the Chroma collections that held message vectors before the store did
VECTORS_KEPT = 4096  # message vectors cached in memory across chats (the newest floors are the ones asked again)


def _hash(profile_key: str, document: str) -> str:
    return hashlib.blake2b(f"{profile_key}\x1f{document}".encode(), digest_size=12).hexdigest()


class MessageVectors:
    """The message vectors of the chats of one store. `embed(texts)` embeds documents (raising on failure: the
    caller reports it per node)."""

    def __init__(self, profile_key: str, store: Store, embed: Callable[[list[str]], np.ndarray]) -> None:
        self.profile_key, self.store, self._embed = profile_key, store, embed
        self._hashes: dict[str, dict[int, str]] = {}  # chat -> floor -> hash of the vector stored for it
        self._vectors: OrderedDict[tuple[str, int, str], np.ndarray] = OrderedDict()
        self.embedded = 0  # messages this process embedded (tests and benchmarks read it)

    def documents(self, lines: dict[int, str], floors: Iterable[int]) -> dict[int, str]:
        return {f: message_document(lines[f]) for f in floors if f in lines}

    def ready(self, chat_id: str, lines: dict[int, str], floors: Iterable[int]) -> bool:
        """Whether every one of the floors' messages has its vector already (nothing would be embedded)."""
        wanted = {f: _hash(self.profile_key, d) for f, d in self.documents(lines, floors).items()}
        known = self._known(chat_id)
        return all(known.get(f) == h for f, h in wanted.items())

    def vectors(self, chat_id: str, lines: dict[int, str], floors: Iterable[int]) -> tuple[dict[int, np.ndarray], int]:
        """The vectors of the floors' messages (those in `lines`), embedding the missing or changed ones in one
        batch; returns them and how many were embedded."""
        documents = self.documents(lines, floors)
        wanted = {f: _hash(self.profile_key, d) for f, d in documents.items()}
        known = self._known(chat_id)
        stale = [f for f, h in wanted.items() if known.get(f) != h]
        written = self._write(chat_id, stale, documents, wanted)
        found: dict[int, np.ndarray | None] = {f: written.get(f, self._vectors.get((chat_id, f, h)))
                                               for f, h in wanted.items()}
        missing = [f for f, v in found.items() if v is None]
        for floor, digest, blob in vector_rows.message_vectors(self.store, chat_id, missing):
            if digest == wanted[floor]:  # another process may have rewritten it since
                vector = np.frombuffer(blob, dtype=np.float16).astype(np.float32)
                found[floor] = self._remember(chat_id, floor, digest, vector)
        rewritten = [f for f in missing if found[f] is None]
        found.update(self._write(chat_id, rewritten, documents, wanted))
        return {f: v for f, v in found.items() if v is not None}, len(stale) + len(rewritten)

    def _write(self, chat_id: str, floors: list[int], documents: dict[int, str],
               wanted: dict[int, str]) -> dict[int, np.ndarray]:
        """Embed the floors' messages in one batch and store them under their floors with their hashes."""
        if not floors:
            return {}
        fresh = np.asarray(self._embed([documents[f] for f in floors]), dtype=np.float32)
        stored = fresh.astype(np.float16)
        vector_rows.save_message_vectors(self.store, chat_id,
                                         [(f, wanted[f], row.tobytes()) for f, row in zip(floors, stored)])
        known = self._hashes.setdefault(chat_id, {})
        rows = {}
        for floor, row in zip(floors, stored):  # the vector as read back later: the same on every path
            known[floor] = wanted[floor]
            rows[floor] = self._remember(chat_id, floor, wanted[floor], row.astype(np.float32))
        self.embedded += len(floors)
        return rows

    def _known(self, chat_id: str) -> dict[int, str]:
        """The chat's floor -> hash map, read from the store once per chat."""
        known = self._hashes.get(chat_id)
        if known is None:
            known = self._hashes[chat_id] = vector_rows.message_hashes(self.store, chat_id)
        return known

    def _remember(self, chat_id: str, floor: int, digest: str, vector: np.ndarray) -> np.ndarray:
        self._vectors[(chat_id, floor, digest)] = vector
        while len(self._vectors) > VECTORS_KEPT:
            self._vectors.popitem(last=False)
        return vector

    def evict(self, chat_id: str) -> None:
        self._hashes.pop(chat_id, None)
        for key in [k for k in self._vectors if k[0] == chat_id]:
            del self._vectors[key]

    def drop(self, chat_id: str) -> None:
        """Delete the chat's message vectors (a full rebuild embeds them again)."""
        self.evict(chat_id)
        vector_rows.drop_message_vectors(self.store, chat_id)


def combine(vectors: list[np.ndarray]) -> np.ndarray:
    """An event's source vector: the normalized mean of its messages' vectors."""
    mean = np.mean(np.stack(vectors), axis=0)
    unit: np.ndarray = mean / max(float(np.linalg.norm(mean)), 1e-12)
    return unit
