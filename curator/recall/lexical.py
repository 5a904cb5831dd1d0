"""Lexical retrieval: BM25 over node text with a tokenizer that handles CJK (no spaces between words) as
character unigrams plus bigrams, and other scripts as case-folded words, English ones lightly stemmed."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

import numpy as np

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
_IS_CJK = re.compile(rf"[{_CJK}]")
STOPWORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "that", "the", "their", "them", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your", "s", "t", "d", "ll", "re", "ve"])  # the tails of it's, don't, we'll...


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


def tokenize(text: str) -> list[str]:
    """Case-folded words (English stop words dropped, the rest stemmed); CJK runs as unigrams and bigrams."""
    tokens: list[str] = []
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).casefold()):
        word = match.group(0)
        if _IS_CJK.match(word):
            tokens.extend(word)
            tokens.extend(word[i:i + 2] for i in range(len(word) - 1))
        elif word not in STOPWORDS:
            tokens.append(stem(word))
    return tokens


class BM25:
    """Okapi BM25 over a fixed list of documents (k1 1.2, b 0.75). Each term's contribution to each document
    is worked out once, at build time, so a query only adds up a few precomputed arrays."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75):
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
