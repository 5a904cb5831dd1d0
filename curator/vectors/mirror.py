"""In-memory copies of a chat's Chroma collections, searched exactly by a matrix product instead of by Chroma.

Why: a Chroma query costs 2-4 ms of CPU at 10k rows whatever k is, and a recall makes two of them (nodes at k=200,
sources at k=50); the same search over a copy of the vectors costs about 0.4 ms each, and is exact where Chroma's
graph search is approximate (bench/README.md, "Ninth round").

A copy holds the vectors Chroma holds, as this process last wrote or read them. It follows this process's own
writes (a flush of staged rows, a direct write), which are all the vector writes there are while the store's
change log can say what changed; when it cannot (another process wrote), the index drops the chat's copies
(`evict`) and they load again. The staged rows stay searched beside a copy as beside Chroma: their ids are left
out of the copy's answer (`hidden`).

A copy loads in a background thread once its collection has been searched MIRROR_AFTER times in this process, so
a one-shot command never pays for it: Chroma answers until then. Loading reads the vectors back from Chroma (about
33 ms of CPU per 1,000 rows); writes made meanwhile are kept and applied over what was read. Copies are kept up
to MIRROR_BYTES across chats, the least recently searched dropped first; a collection bigger than that stays with
Chroma, whose graph search grows more slowly than a full scan.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MIRROR_AFTER = 8  # searches of a collection in this process before its copy is loaded (a recall of a message with its
# turns searches each collection three times: a one-shot command never loads a copy, a chat in the service soon does)
MIRROR_BYTES = 96 << 20  # vectors kept in copies, across chats (a 10k-node chat at 256 dimensions: ~18 MB)
LOAD_ROWS = 200  # ids per Chroma read while loading (~7 ms each: the thread yields between reads)
# Elements per matrix-vector product: OpenBLAS hands a bigger one to its threads, which then spin for ~0.1 s after
# it, and a recall's CPU doubled (27 ms of CPU for 15 of wall at 10k nodes); in parts this size it keeps to one.
ONE_THREAD = 1 << 17
PAUSE = 0.002  # seconds between two reads of a load
EXACT_ROWS = 2048  # a copy this small is searched from its floats alone (it stays in cache)
OVERSAMPLE = 2  # rows of the int8 pass scored again from the floats, per row asked (int8 moves a row by ~25 places
# at 10k at worst)
# A bigger copy is first read in a projection of its rows (`_basis`): their main directions about the copy's mean row,
# PROJECTED_DIMS of them (e5's 384 dimensions share a large common part and fall in topics), plus each row's product
# with the mean, so that a row's score there approximates its cosine with the query. One product over 64 floats a row
# (a sixth of the floats) picks the best PROJECTED_OVERSAMPLE x k; those go on to the int8 codes, and their best
# OVERSAMPLE x k to the floats. On LoCoMo's e5 vectors (its 4.2k turns and observations and 5.8k mixes of them, its
# questions) the k = 200 / 100 found are 99.9% / 99.6% of the exact ones, against 99.6% / 99.2% for the two bits a
# dimension read before, and a warm recall at 10k nodes costs ~0.6 ms less CPU (bench/README.md, "Issue 31, fourth
# look"; bench/mirror_search.py).
PROJECTED_DIMS = 64
PROJECTED_OVERSAMPLE = 10
PROJECTED_ROWS = 4096  # copies of more rows than this use the projection's pass (when it leaves out at least half)
BASIS_SAMPLE = 4096  # rows the main directions are found from (~50 ms of CPU at 384 dimensions, when the copy loads)

Key = tuple[str, str]  # (chat, collection kind)
Fetch = Callable[[str, str, list[str]], tuple[list[str], np.ndarray]]  # (chat, kind, ids) -> the ids found, vectors
Listing = Callable[[str, str], "list[str] | None"]  # (chat, kind) -> the ids the index holds, None when unknown
Write = tuple[dict[str, np.ndarray], list[str]]  # upserts (id -> vector) and deletes made while a copy loads


PART_ROWS = 4096  # rows normalized and coded at a time: a load's temporaries stay a few MB, not the copy's size


def _unit(vectors: np.ndarray | Sequence[Any], owned: bool = False) -> np.ndarray:
    """The rows normalized, in place when the array is `owned` float32 (a load's), else in a copy."""
    matrix = np.asarray(vectors, dtype=np.float32) if owned else np.array(vectors, dtype=np.float32)
    matrix = matrix.reshape(len(vectors), -1)
    for start in range(0, len(matrix), PART_ROWS):
        part = matrix[start:start + PART_ROWS]
        part /= np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)
    return matrix


def _codes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row as int8 with one scale: a quarter of the bytes for the first pass of a search."""
    codes, scales = np.empty(rows.shape, dtype=np.int8), np.empty(len(rows), dtype=np.float32)
    for start in range(0, len(rows), PART_ROWS):
        part = rows[start:start + PART_ROWS]
        scale = scales[start:start + PART_ROWS] = np.maximum(np.abs(part).max(axis=1), 1e-12) / 127
        codes[start:start + PART_ROWS] = np.round(part / scale[:, None])
    return codes, scales


def _basis(live: np.ndarray, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean of the `live` rows, and their `dims` main directions about it (a dimension x dims matrix), found from
    BASIS_SAMPLE rows spread over the copy."""
    center = live.mean(axis=0)
    sample = live[::max(1, len(live) // BASIS_SAMPLE)][:BASIS_SAMPLE] - center
    # the eigenvectors of the sample's covariance with the largest eigenvalues (its right singular vectors, for a
    # tenth of the CPU of an SVD of the sample)
    _, vectors = np.linalg.eigh((sample.T @ sample).astype(np.float64))
    return center.astype(np.float32), np.ascontiguousarray(vectors[:, ::-1][:, :dims], dtype=np.float32)


def _project(rows: np.ndarray, center: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows in the basis (about the center), and each row's product with the center."""
    projected = np.empty((len(rows), basis.shape[1]), dtype=np.float32)
    for start in range(0, len(rows), PART_ROWS):
        np.dot(rows[start:start + PART_ROWS] - center, basis, out=projected[start:start + PART_ROWS])
    return projected, (rows @ center).astype(np.float32)


def _products(rows: np.ndarray, query: np.ndarray, out: np.ndarray) -> np.ndarray:
    """rows @ query in parts of ONE_THREAD elements (int8 rows are cast part by part, in a buffer that stays in
    cache)."""
    step = max(1, ONE_THREAD // max(rows.shape[1], 1))
    buffer = np.empty((min(step, len(rows)), rows.shape[1]), dtype=np.float32) if rows.dtype != np.float32 else None
    for start in range(0, len(rows), step):
        part = rows[start:start + step]
        if buffer is not None:
            part = buffer[:len(part)]
            part[...] = rows[start:start + step]
        np.dot(part, query, out=out[start:start + step])
    return out


class Copy:
    """One collection's vectors (normalized), a row per id; a removed id's row is dead until the id comes back.

    A search reads every row, and after the query's e5 pass none of them is in the CPU's cache: at 10k rows of 256
    floats it waited 1.3 ms on memory, against 0.4 with the rows cached. So the first pass reads the rows as int8
    (0.8 ms), and the best OVERSAMPLE x k of it are scored again from the floats: the similarities returned are
    exact, and so is the order, unless int8's error (under 0.01 of a cosine) moves a row past that many others."""

    def __init__(self, ids: list[str], vectors: np.ndarray, owned: bool = False) -> None:
        self.lock = threading.Lock()
        self.ids = list(ids)
        self.row_of = {node_id: row for row, node_id in enumerate(self.ids)}
        self.matrix = _unit(vectors, owned) if len(self.ids) else np.zeros((0, 0), dtype=np.float32)
        self.codes, self.scales = _codes(self.matrix)
        # the projection (`_search_projected`), made with the copy when it is big (else at the first search that uses
        # it): the center and basis of the rows then (rows written later are projected in the same one)
        self.center: np.ndarray | None = None
        self.basis: np.ndarray | None = None
        self.projected: np.ndarray | None = None
        self.bias = np.zeros(0, dtype=np.float32)  # each row's product with the center
        self.live = np.ones(len(self.ids), dtype=bool)
        self.dead = 0  # rows not live
        if len(self.ids) > PROJECTED_ROWS:  # a copy loads in the background: its projection too, not at a search
            self._project_all()

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.codes.nbytes + (self.projected.nbytes if self.projected is not None else 0)

    @staticmethod
    def size(rows: int, dim: int) -> int:
        """The bytes of a copy: the floats, the int8 codes and, past PROJECTED_ROWS, the projection (scales, bias
        and liveness add 9 bytes a row)."""
        return rows * (dim * 5 + (4 * _projected_dims(dim) if rows > PROJECTED_ROWS else 0))

    def put(self, ids: list[str], vectors: np.ndarray | Sequence[Any]) -> None:
        if not ids:
            return
        rows = _unit(vectors)
        codes, scales = _codes(rows)
        with self.lock:
            if not self.ids:
                self.matrix = np.zeros((0, rows.shape[1]), dtype=np.float32)
                self.codes = np.zeros((0, rows.shape[1]), dtype=np.int8)
            projected, bias = _project(rows, self.center, self.basis) \
                if self.center is not None and self.basis is not None else (None, None)
            new = []
            for n, node_id in enumerate(ids):
                row = self.row_of.get(node_id)
                if row is None:
                    new.append(n)
                else:
                    self.matrix[row], self.codes[row], self.scales[row] = rows[n], codes[n], scales[n]
                    if projected is not None and bias is not None and self.projected is not None:
                        self.projected[row], self.bias[row] = projected[n], bias[n]
                    self.dead -= not self.live[row]
                    self.live[row] = True
            if new:
                start = len(self.ids)
                self.ids.extend(ids[n] for n in new)
                self.row_of.update((ids[n], start + at) for at, n in enumerate(new))
                self.matrix = np.vstack([self.matrix, rows[new]])
                self.codes = np.vstack([self.codes, codes[new]])
                if projected is not None and bias is not None and self.projected is not None:
                    self.projected = np.vstack([self.projected, projected[new]])
                    self.bias = np.concatenate([self.bias, bias[new]])
                self.scales = np.concatenate([self.scales, scales[new]])
                self.live = np.concatenate([self.live, np.ones(len(new), dtype=bool)])

    def remove(self, ids: list[str]) -> None:
        with self.lock:
            for node_id in ids:
                row = self.row_of.get(node_id)
                if row is not None:
                    self.dead += bool(self.live[row])
                    self.live[row] = False

    def search(self, vector: np.ndarray, k: int, hidden: frozenset[str]) -> list[tuple[str, float]]:
        """The k live rows nearest to `vector` that are not `hidden`, as (id, cosine similarity)."""
        query = np.asarray(vector, dtype=np.float32)
        query = query / max(float(np.linalg.norm(query)), 1e-12)
        with self.lock:
            if not self.ids or k <= 0:
                return []
            count = len(self.ids)
            rough = count > EXACT_ROWS
            if count > PROJECTED_ROWS and PROJECTED_OVERSAMPLE * k < count // 2:
                return self._search_projected(query, k, hidden)
            scores = _products(self.codes if rough else self.matrix, query, np.empty(count, np.float32))
            if rough:
                scores *= self.scales
            self._hide(scores, -np.inf, hidden)
            rows = _best(scores, OVERSAMPLE * k if rough else k)
            if rough:  # scored again from the floats
                exact = _products(self.matrix[rows], query, np.empty(len(rows), np.float32))
                exact[scores[rows] == -np.inf] = -np.inf
                top = _best(exact, k)
                rows, scores = rows[top], exact[top]
            else:
                scores = scores[rows]
            ids = self.ids
            return [(ids[row], score) for row, score in zip(rows.tolist(), scores.tolist()) if score != -np.inf]

    def _project_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row in the live rows' main directions about their mean."""
        live = self.matrix[self.live] if self.live.any() else self.matrix
        center, basis = self.center, self.basis = _basis(live, _projected_dims(self.matrix.shape[1]))
        self.projected, self.bias = _project(self.matrix, center, basis)
        return center, basis, self.projected

    def _hide(self, scores: np.ndarray, worst: float, hidden: frozenset[str]) -> None:
        """Dead rows and `hidden` ids get the `worst` score."""
        if self.dead:
            scores[~self.live] = worst
        for node_id in hidden:
            row = self.row_of.get(node_id)
            if row is not None:
                scores[row] = worst

    def _search_projected(self, query: np.ndarray, k: int, hidden: frozenset[str]) -> list[tuple[str, float]]:
        """`search` of a big copy: the projection's pass, then the int8 codes of its best, then the floats of theirs."""
        center, basis, projected = self.center, self.basis, self.projected
        if center is None or basis is None or projected is None:
            center, basis, projected = self._project_all()
        count = len(projected)
        # row . query = (row - c) . (query - c) + row . c + (query . c - c . c): the last term is the same for every
        # row, `bias` holds row . c, and (row - c) . (query - c) is read in the basis B as (row - c) B . (query - c) B
        scores = _products(projected, (query - center) @ basis, np.empty(count, np.float32))
        scores += self.bias
        self._hide(scores, -np.inf, hidden)
        asked = min(PROJECTED_OVERSAMPLE * k, count)
        near = np.argpartition(scores, count - asked)[count - asked:]
        near = near[scores[near] != -np.inf]
        rough = _products(self.codes[near], query, np.empty(len(near), np.float32)) * self.scales[near]
        near = near[_best(rough, OVERSAMPLE * k)]
        exact = _products(self.matrix[near], query, np.empty(len(near), np.float32))
        top = _best(exact, k)
        ids = self.ids
        return [(ids[row], score) for row, score in zip(near[top].tolist(), exact[top].tolist())]


def _projected_dims(dim: int) -> int:
    return min(PROJECTED_DIMS, max(dim // 4, 8))


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """The positions of the k highest scores, highest first."""
    count = len(scores)
    k = min(k, count)
    best = np.argpartition(scores, count - k)[count - k:] if k < count else np.arange(count)
    return best[np.argsort(-scores[best], kind="stable")]


class Mirrors:
    """The copies of one index's collections: `search` answers from a copy when one is ready (None: ask Chroma),
    `written` keeps them in step with this process's writes, `evict` drops a chat's."""

    def __init__(self, fetch: Fetch, listing: Listing, budget: int = MIRROR_BYTES, after: int = MIRROR_AFTER) -> None:
        self._fetch, self._listing, self._budget, self._after = fetch, listing, budget, after
        self._lock = threading.Lock()
        self._copies: OrderedDict[Key, Copy] = OrderedDict()
        self._loading: dict[Key, list[Write]] = {}  # key -> writes made while it loads (applied over what was read)
        self._asked: dict[Key, int] = {}
        self._too_big: set[Key] = set()
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._one_load = threading.Lock()  # loads one at a time: each takes CPU that recalls under way want
        self.loads: list[dict[str, Any]] = []  # what each load cost (the last few; bench/recall_latency.py shows them)

    def ready(self, chat_id: str, kind: str) -> bool:
        return (chat_id, kind) in self._copies

    def search(self, chat_id: str, kind: str, vector: np.ndarray, k: int,
               hidden: frozenset[str]) -> list[tuple[str, float]] | None:
        key = (chat_id, kind)
        with self._lock:
            copy = self._copies.get(key)
            if copy is not None:
                self._copies.move_to_end(key)
            else:
                self._ask(key, len(vector))
        return None if copy is None else copy.search(vector, k, hidden)

    def _ask(self, key: Key, dim: int) -> None:
        if key in self._loading or key in self._too_big or self._closing.is_set():
            return
        self._asked[key] = asked = self._asked.get(key, 0) + 1
        if asked < self._after:
            return
        ids = self._listing(*key)
        if ids is None:
            return
        if Copy.size(len(ids), dim) > self._budget:  # it would be dropped as soon as loaded
            self._too_big.add(key)
            return
        writes: list[Write] = []
        self._loading[key] = writes
        thread = threading.Thread(target=self._load, args=(key, ids, writes), name="curator-mirror", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _load(self, key: Key, ids: list[str], writes: list[Write]) -> None:
        with self._one_load:
            started, cpu = time.perf_counter(), time.thread_time()
            found, matrix = self._read(key, ids, writes)
            if found is None:
                return
            copy = Copy(found, matrix, owned=True)
            if self._install(key, copy, writes):
                cost = {"chat": key[0], "kind": key[1], "rows": len(found),
                        "wall_ms": (time.perf_counter() - started) * 1000, "cpu_ms": (time.thread_time() - cpu) * 1000}
                self.loads = [*self.loads[-15:], cost]
                log.info("copied %d vectors of chat %r (%s) into memory: %.0f ms, %.0f ms of CPU", len(found),
                         key[0], key[1], cost["wall_ms"], cost["cpu_ms"])

    def _read(self, key: Key, ids: list[str], writes: list[Write]) -> tuple[list[str] | None, np.ndarray]:
        """The ids Chroma holds of `ids` and their vectors, read into one array as they come: a part kept until
        the end stayed in the thread's heap after it (a 10k-node chat's load grew the process by 81 MB for a
        copy of 22)."""
        found: list[str] = []
        matrix = np.zeros((0, 0), dtype=np.float32)
        try:
            for start in range(0, len(ids), LOAD_ROWS):
                if self._closing.is_set() or self._loading.get(key) is not writes:  # closing, or forgotten
                    return None, matrix
                got, vectors = self._fetch(*key, ids[start:start + LOAD_ROWS])
                time.sleep(PAUSE)  # Chroma's read holds the GIL: a recall under way gets it back in between
                if len(got):
                    vectors = np.asarray(vectors, dtype=np.float32).reshape(len(got), -1)
                    if not matrix.size:
                        matrix = np.empty((len(ids), vectors.shape[1]), dtype=np.float32)
                    matrix[len(found):len(found) + len(got)] = vectors
                    found.extend(got)
            return found, matrix[:len(found)]
        except Exception as exc:  # noqa: BLE001 - Chroma keeps answering; the copy is tried again later
            log.warning("could not copy the vectors of chat %r (%s) into memory: %s", key[0], key[1], exc)
            with self._lock:
                if self._loading.get(key) is writes:
                    del self._loading[key]
                    self._asked[key] = 0
            return None, matrix

    def _install(self, key: Key, copy: Copy, writes: list[Write]) -> bool:
        with self._lock:
            if self._loading.get(key) is not writes:  # forgotten meanwhile: what was read may be stale
                return False
            del self._loading[key]
            for upserts, deletes in writes:
                _apply(copy, upserts, deletes)
            self._copies[key] = copy
            self._trim()
        return True

    def _trim(self) -> None:
        """Drop the least recently searched copies past the budget; one over it alone goes back to Chroma."""
        while self._copies and sum(c.nbytes for c in self._copies.values()) > self._budget:
            dropped, copy = self._copies.popitem(last=False)
            self._asked[dropped] = 0
            if copy.nbytes > self._budget:
                self._too_big.add(dropped)

    def written(self, chat_id: str, kind: str, upserts: dict[str, np.ndarray], deletes: list[str]) -> None:
        """This process wrote these vectors to (or deleted these ids from) the collection."""
        key = (chat_id, kind)
        with self._lock:
            if key in self._loading:
                self._loading[key].append((upserts, deletes))
            copy = self._copies.get(key)
            if copy is not None:
                _apply(copy, upserts, deletes)
                self._trim()

    def evict(self, chat_id: str) -> None:
        """Drop the chat's copies (and any load under way): another process may have written its collections."""
        with self._lock:
            for key in [k for k in (*self._copies, *self._loading, *self._asked) if k[0] == chat_id]:
                self._copies.pop(key, None)
                self._loading.pop(key, None)
                self._asked.pop(key, None)
                self._too_big.discard(key)

    def wait(self, timeout: float | None = None) -> None:
        """Until the loads under way are done (tests, benchmarks)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def close(self) -> None:
        self._closing.set()
        self.wait()


def _apply(copy: Copy, upserts: dict[str, np.ndarray], deletes: list[str]) -> None:
    copy.remove(deletes)
    if upserts:
        copy.put(list(upserts), np.stack(list(upserts.values())))
