"""Floors cut to the model's context: a prompt never carries more chat text than the model can read.

A reply or a pasted document can be huge (a 50 MB message is 13 million tokens). The floors a prompt shows share
a token budget, the model's context (`context_tokens` of its profile) less its answer (`max_tokens`) and the rest of
the prompt (`RESERVED`): short floors stay whole, and what is left is shared evenly by the long ones, each cut at
its end with a note that says how much was left out, so the model (and whoever reads the prompt) knows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from curator.llm.tokens import count_tokens, encoding
from curator.store.messages import Message

if TYPE_CHECKING:
    from curator.settings import ModelProfile

log = logging.getLogger("curator.extract")

DEFAULT_CONTEXT = 32_000  # a model profile's `context_tokens` when none is known (a given model object)
RESERVED = 6_000  # the system prompt, the schema's types and the known entities, besides the floors
MIN_BUDGET = 1_000
CHARS_PER_TOKEN_MAX = 8  # no text has more characters per token than this; longer texts are cut first, cheaply


def floors_budget(profile: ModelProfile | None) -> int:
    """Tokens the floors of one prompt may take for a model profile (None: a model given directly)."""
    context = getattr(profile, "context_tokens", None) or DEFAULT_CONTEXT
    answer = getattr(profile, "max_tokens", None) or 2048
    return max(MIN_BUDGET, context - answer - RESERVED)


def fit(texts: dict[int, str], budget: int) -> tuple[dict[int, str], dict[int, int]]:
    """The texts (floor -> text) cut to share `budget` tokens, and the characters left out of each cut floor."""
    if not texts:
        return {}, {}
    heads = {f: t[:budget * CHARS_PER_TOKEN_MAX] for f, t in texts.items()}  # a bound before counting anything
    sizes = {f: count_tokens(t) for f, t in heads.items()}
    if sum(sizes.values()) <= budget and heads == texts:
        return dict(texts), {}
    caps: dict[int, int] = {}
    left, open_ = budget, sorted(sizes, key=lambda f: sizes[f])
    while open_:  # water filling: the short ones whole, the rest share what is left evenly
        share = left // len(open_)
        floor = open_[0]
        if sizes[floor] > share:
            for f in open_:
                caps[f] = share
            break
        caps[floor] = sizes[floor]
        left -= sizes[floor]
        open_.pop(0)
    out: dict[int, str] = {}
    cut: dict[int, int] = {}
    for f, text in texts.items():
        kept = heads[f] if sizes[f] <= caps[f] else encoding().decode(encoding().encode(heads[f],
                                                                                        disallowed_special=())[:caps[f]])
        if len(kept) < len(text):
            cut[f] = len(text) - len(kept)
            kept += f"\n[… {cut[f]:,} characters of this message left out to fit the model's context]"
        out[f] = kept
    return out, cut


def fitted_messages(messages: Sequence[Message], floors: Iterable[int],
                    budget: int) -> tuple[dict[int, Message], dict[int, int]]:
    """The messages of `floors`, their texts cut to `budget` (see `fit`), and what was cut; logged when anything was."""
    floors = [f for f in floors if 0 <= f < len(messages)]
    texts, cut = fit({f: messages[f].text for f in floors}, budget)
    if cut:
        log.warning("floors %s cut to fit the model's context (%d tokens for the floors): %s characters left out",
                    sorted(cut), budget, sum(cut.values()))
    return {f: replace(messages[f], text=texts[f]) if f in cut else messages[f] for f in floors}, cut
