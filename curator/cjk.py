"""Is there CJK text here: one answer for recall, the lexicon and the triggers.

The character classes are compiled on the first text that is not ASCII: `re` expands a class of wide ranges one
character at a time (~2 ms each, a few per process), which a chat in English never needs."""

from __future__ import annotations

import re
from functools import cache

# Kana, CJK ideographs (with extension A) and Hangul syllables.
CJK_RANGES = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
# The lexicon's runs also take the compatibility ideographs (its tokenizer, `recall/lexical.py`).
LEXICON_RANGES = CJK_RANGES + r"\uf900-\ufaff"


@cache
def cjk_class(ranges: str = CJK_RANGES) -> re.Pattern[str]:
    """One character of `ranges`, compiled once."""
    return re.compile(rf"[{ranges}]")


def has_cjk(text: str) -> bool:
    """Whether `text` holds a kana, CJK ideograph or Hangul character."""
    return not text.isascii() and cjk_class().search(text) is not None
