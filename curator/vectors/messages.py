"""Message vectors: each chat message is embedded once, and an event's source vector is the mean of the vectors
of the messages it came from (`documents.source_floors`), so a message shared by several events (the question
before a reply, a reply that gave three memories) costs one embedding, not one per event.

A message's vector lives in the chat's message collection under its floor, with the hash of what was embedded
(the start of the "name: text" line, near 64 tokens: `documents.message_document`) as metadata: an edited or
swiped message has a new hash and is embedded again; an unchanged one is read back, never re-embedded. Only the
hashes of a chat are kept in memory (a 100k-message chat would hold 150 MB of vectors); vectors come from a small
cache or from Chroma by id."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from curator.vectors.documents import message_document

MESSAGES = "mm_"  # collection name prefix: one vector per message, id = its floor
VECTORS_KEPT = 4096  # message vectors cached in memory across chats (the newest floors are the ones asked again)


def _hash(profile_key: str, document: str) -> str:
    return hashlib.blake2b(f"{profile_key}\x1f{document}".encode(), digest_size=12).hexdigest()


class MessageVectors:
    """The message vectors of the chats of one index. `collection(chat_id)` opens a chat's message collection;
    `embed(texts)` embeds documents (raising on failure: the caller reports it per node)."""

    def __init__(self, profile_key: str, collection: Callable[[str], object], embed: Callable[[list[str]], np.ndarray]):
        self.profile_key, self._collection, self._embed = profile_key, collection, embed
        self._hashes: dict[str, dict[int, str]] = {}  # chat -> floor -> hash of the vector stored for it
        self._vectors: OrderedDict[tuple[str, int, str], np.ndarray] = OrderedDict()
        self.embedded = 0  # messages this process embedded (tests and benchmarks read it)

    def documents(self, lines: dict[int, str], floors) -> dict[int, str]:
        return {f: message_document(lines[f]) for f in floors if f in lines}

    def ready(self, chat_id: str, lines: dict[int, str], floors) -> bool:
        """Whether every one of the floors' messages has its vector already (nothing would be embedded)."""
        wanted = {f: _hash(self.profile_key, d) for f, d in self.documents(lines, floors).items()}
        known = self._known(chat_id, wanted)
        return all(known.get(f) == h for f, h in wanted.items())

    def vectors(self, chat_id: str, lines: dict[int, str], floors) -> tuple[dict[int, np.ndarray], int]:
        """The vectors of the floors' messages (those in `lines`), embedding the missing or changed ones in one
        batch; returns them and how many were embedded."""
        documents = self.documents(lines, floors)
        wanted = {f: _hash(self.profile_key, d) for f, d in documents.items()}
        known = self._known(chat_id, wanted)
        stale = [f for f, h in wanted.items() if known.get(f) != h]
        written = self._write(chat_id, stale, documents, wanted)
        found = {f: written.get(f, self._vectors.get((chat_id, f, h))) for f, h in wanted.items()}
        missing = [f for f, v in found.items() if v is None]
        if missing:
            got = self._collection(chat_id).get(ids=[str(f) for f in missing], include=["embeddings", "metadatas"])
            for floor_id, vector, meta in zip(got["ids"], got["embeddings"], got["metadatas"]):
                floor = int(floor_id)
                if (meta or {}).get("hash") == wanted[floor]:  # another process may have rewritten it since
                    found[floor] = self._remember(chat_id, floor, wanted[floor], np.asarray(vector, np.float32))
            rewritten = [f for f in missing if found[f] is None]
            found.update(self._write(chat_id, rewritten, documents, wanted))
            stale += rewritten
        return found, len(stale)

    def _write(self, chat_id: str, floors: list[int], documents: dict[int, str],
               wanted: dict[int, str]) -> dict[int, np.ndarray]:
        """Embed the floors' messages in one batch and store them under their floors with their hashes."""
        if not floors:
            return {}
        fresh = self._embed([documents[f] for f in floors])
        self._collection(chat_id).upsert(
            ids=[str(f) for f in floors], embeddings=list(fresh), documents=[documents[f] for f in floors],
            metadatas=[{"floor": f, "hash": wanted[f]} for f in floors])
        known = self._hashes.setdefault(chat_id, {})
        for floor, vector in zip(floors, fresh):
            known[floor] = wanted[floor]
            self._remember(chat_id, floor, wanted[floor], vector)
        self.embedded += len(floors)
        return dict(zip(floors, fresh))

    def _known(self, chat_id: str, wanted: dict[int, str]) -> dict[int, str]:
        """The chat's floor -> hash map, completed from Chroma's metadata for floors not seen yet."""
        known = self._hashes.setdefault(chat_id, {})
        unseen = [f for f in wanted if f not in known]
        for start in range(0, len(unseen), 5000):
            chunk = unseen[start:start + 5000]
            got = self._collection(chat_id).get(ids=[str(f) for f in chunk], include=["metadatas"])
            for floor_id, meta in zip(got["ids"], got["metadatas"]):
                known[int(floor_id)] = (meta or {}).get("hash", "")
        return known

    def _remember(self, chat_id: str, floor: int, digest: str, vector: np.ndarray) -> np.ndarray:
        self._vectors[(chat_id, floor, digest)] = vector
        while len(self._vectors) > VECTORS_KEPT:
            self._vectors.popitem(last=False)
        return vector

    def forget(self, chat_id: str) -> None:
        self._hashes.pop(chat_id, None)
        for key in [k for k in self._vectors if k[0] == chat_id]:
            del self._vectors[key]


def combine(vectors: list[np.ndarray]) -> np.ndarray:
    """An event's source vector: the normalized mean of its messages' vectors."""
    mean = np.mean(np.stack(vectors), axis=0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)
