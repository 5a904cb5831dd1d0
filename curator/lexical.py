"""Lexical retrieval: BM25 over node text with a tokenizer that handles CJK (no spaces between words) as
character unigrams plus bigrams, and other scripts as case-folded words, English ones lightly stemmed."""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

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
    """Okapi BM25 over a fixed list of documents (k1 1.2, b 0.75)."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(d)) for d in documents]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        df: Counter = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, doc in enumerate(self.docs):
            for t in doc:
                self.postings.setdefault(t, []).append(i)

    def scores(self, query: str) -> dict[int, float]:
        """Score of every document that shares a term with the query."""
        out: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i in self.postings[term]:
                tf = self.docs[i][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[i] / (self.avg or 1))
                out[i] = out.get(i, 0.0) + idf * tf * (self.k1 + 1) / norm
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        return sorted(self.scores(query).items(), key=lambda kv: -kv[1])[:k]
