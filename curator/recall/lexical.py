"""Lexical retrieval: BM25 over node text with a tokenizer that handles CJK (no spaces between words) as
character unigrams plus bigrams, and other scripts as case-folded words, English ones lightly stemmed."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import cache

import numpy as np

from curator.cjk import LEXICON_RANGES, cjk_class

_ASCII_TOKEN = re.compile(r"[^\W_]+")  # what `_token()` finds in ASCII text, without its CJK classes to compile
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "s",
        "t",
        "d",
        "ll",
        "re",
        "ve",
    ]
)  # the tails of it's, don't, we'll...


_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "s", "ly")


def stem(word: str) -> str:
    """A light suffix stripper for ASCII words ("painted", "painting", "paints" -> "paint"): enough for a
    question's wording to meet a memory's; other scripts are left as they are."""
    if len(word) <= 3 or not word.isascii() or word.endswith(("ss", "us", "is")):
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            if suffix in ("s", "es") and base.endswith(("ing", "ed")):  # "paintings" -> "painting" -> "paint"
                return stem(base)
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":  # "running" -> "run"
                base = base[:-1]
            return base
    return word


@cache
def _token() -> re.Pattern[str]:
    return re.compile(rf"[{LEXICON_RANGES}]+|[^\W_{LEXICON_RANGES}]+")


def tokenize(text: str) -> list[str]:
    """Case-folded words (English stop words dropped, the rest stemmed); CJK runs as unigrams and bigrams."""
    tokens: list[str] = []
    text = unicodedata.normalize("NFKC", text).casefold()
    for match in (_ASCII_TOKEN if text.isascii() else _token()).finditer(text):
        word = match.group(0)
        if not word.isascii() and cjk_class(LEXICON_RANGES).match(word):
            tokens.extend(word)
            tokens.extend(word[i:i + 2] for i in range(len(word) - 1))
        elif word not in STOPWORDS:
            tokens.append(stem(word))
    return tokens


class BM25:
    """Okapi BM25 over a fixed list of documents (k1 1.2, b 0.75). Each term's contribution to each document
    is worked out once, at build time, so a query only adds up a few precomputed arrays."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        counts = [Counter(tokenize(d)) for d in documents]
        self.size = len(counts)
        lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        avg = float(lengths.mean()) if self.size else 0.0
        rows: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(counts):
            for term, tf in doc.items():
                ids, tfs = rows.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        self.avg = avg
        self.idf = {t: math.log(1 + (self.size - len(ids) + 0.5) / (len(ids) + 0.5)) for t, (ids, _) in rows.items()}
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (ids, tfs) in rows.items():
            ids_a, tf_a = np.array(ids, dtype=np.int64), np.array(tfs, dtype=np.float64)
            norm = tf_a + k1 * (1 - b + b * lengths[ids_a] / (avg or 1))
            self.postings[term] = (ids_a, self.idf[term] * tf_a * (k1 + 1) / norm)

    def score_text(self, query: str, text: str) -> float:
        """The score a document outside the collection would get, by the collection's statistics (a term it
        has never seen counts as the rarest)."""
        counts = Counter(tokenize(text))
        length = sum(counts.values())
        rare = math.log(1 + (self.size + 0.5) / 0.5)
        score = 0.0
        for term in set(tokenize(query)):
            tf = counts.get(term, 0)
            if tf:
                norm = tf + self.k1 * (1 - self.b + self.b * length / (self.avg or 1))
                score += self.idf.get(term, rare) * tf * (self.k1 + 1) / norm
        return score

    def _vector(self, query: str) -> np.ndarray | None:
        hits = [self.postings[t] for t in set(tokenize(query)) if t in self.postings]
        if not hits:
            return None
        return np.bincount(np.concatenate([ids for ids, _ in hits]),
                           weights=np.concatenate([w for _, w in hits]), minlength=self.size)

    def scores(self, query: str) -> dict[int, float]:
        """Score of every document that shares a term with the query."""
        vector = self._vector(query)
        if vector is None:
            return {}
        found = np.flatnonzero(vector)
        return dict(zip(found.tolist(), vector[found].tolist()))

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The k best documents, best first (ties: lower index first)."""
        vector = self._vector(query)
        if vector is None:
            return []
        found = np.flatnonzero(vector)
        if len(found) > k:
            found = found[np.argpartition(-vector[found], k - 1)[:k]]
        order = sorted(found.tolist(), key=lambda i: (-vector[i], i))
        return [(i, float(vector[i])) for i in order]


WEIGHTS_KEPT = 4096  # query terms whose weights `LiveBM25` keeps between two changes


class LiveBM25:
    """BM25 over a set of documents that changes a few at a time: a document is added, replaced or removed by
    its key, and only its own terms' postings change. Scores are those of `BM25` over the same documents (the
    collection statistics, document count and average length, are applied at query time); ties go to the
    document added first."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._slot: dict[str, int] = {}  # key -> slot
        self._keys: list[str | None] = []  # slot -> key (None: free)
        self._terms: list[Counter[str] | None] = []  # slot -> term counts
        self._free: list[int] = []
        self._lengths = np.zeros(64, dtype=np.float64)
        self._total = 0.0
        self._postings: dict[str, dict[int, int]] = {}  # term -> slot -> tf
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # term -> (slots, tfs), until it changes
        # term -> (slots, BM25 weights) while the collection is unchanged (its statistics weigh every term): the
        # queries between two commits share most of their words
        self._weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: str) -> bool:
        return key in self._slot

    def set(self, key: str, text: str) -> None:
        """Add or replace the document `key` (an empty text removes it)."""
        self.remove(key)
        counts = Counter(tokenize(text)) if text else Counter()
        if not counts and not text:
            return
        slot = self._free.pop() if self._free else len(self._keys)
        if slot == len(self._keys):
            self._keys.append(None)
            self._terms.append(None)
            if slot >= len(self._lengths):
                self._lengths = np.concatenate([self._lengths, np.zeros(len(self._lengths), dtype=np.float64)])
        self._slot[key], self._keys[slot], self._terms[slot] = slot, key, counts
        self._weights.clear()
        length = sum(counts.values())
        self._lengths[slot] = length
        self._total += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[slot] = tf
            self._arrays.pop(term, None)

    def remove(self, key: str) -> None:
        slot = self._slot.pop(key, None)
        if slot is None:
            return
        for term in self._terms[slot] or ():
            postings = self._postings[term]
            del postings[slot]
            if not postings:
                del self._postings[term]
            self._arrays.pop(term, None)
        self._total -= self._lengths[slot]
        self._weights.clear()
        self._lengths[slot] = 0.0
        self._keys[slot], self._terms[slot] = None, None
        self._free.append(slot)

    def _term(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            postings = self._postings[term]
            arrays = self._arrays[term] = (np.fromiter(postings.keys(), dtype=np.int64, count=len(postings)),
                                           np.fromiter(postings.values(), dtype=np.float64, count=len(postings)))
        return arrays

    def top(self, query: str, k: int) -> list[tuple[str, float]]:
        """The k best documents as (key, score), best first."""
        size = len(self._slot)
        terms = [t for t in set(tokenize(query)) if t in self._postings]
        if not terms or not size:
            return []
        avg = self._total / size or 1.0
        slots, weights = [], []
        for term in terms:
            known = self._weights.get(term)
            if known is None:
                ids, tfs = self._term(term)
                idf = math.log(1 + (size - len(ids) + 0.5) / (len(ids) + 0.5))
                norm = tfs + self.k1 * (1 - self.b + self.b * self._lengths[ids] / avg)
                if len(self._weights) >= WEIGHTS_KEPT:
                    self._weights.clear()
                known = self._weights[term] = (ids, idf * tfs * (self.k1 + 1) / norm)
            slots.append(known[0])
            weights.append(known[1])
        vector = np.bincount(np.concatenate(slots), weights=np.concatenate(weights), minlength=len(self._keys))
        found = np.flatnonzero(vector)
        if len(found) > k:
            found = np.sort(found[np.argpartition(-vector[found], k - 1)[:k]])
        order = found[np.argsort(-vector[found], kind="stable")]  # best first; ties: the lower slot first
        keys = self._keys
        return [(keys[i], score) for i, score in zip(order.tolist(), vector[order].tolist())]
