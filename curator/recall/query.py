"""The recall query, built from the recent turns of the conversation, not from one line.

"What did she say about it?" has no subject on its own. As in the originals (ST-BME blends the last user message,
the last assistant reply and the previous user message 0.7 / 0.2 / 0.1 and splits multi-intent queries; Memory
Graph reads the last assistant turns), a query is a weighted set of parts:

- the message being answered (the newest user message, or the text given as the query), weight `user` (times
  `VAGUE_SHARE` when it has no content word of its own: "What was it again?" is about the turns before it);
- the assistant reply before it, weight `assistant`; the user message before that, weight `previous_user`
  (each the last `MAX_PART_CHARS` characters: a long reply's end is what the next message answers);
- a long message that asks several things ("Where is the key? And what did Mira promise?") is split into
  sub-queries: each one is scored on its own and a node keeps its best sub-query score, so every intent gets
  its own hits (`fuse_parts`).

The speakers' names are stripped from the text that searches the events' sources (every source line carries
one), as `scoring.strip_names` does for a single query. The same turns, rendered as "name (role): text" lines,
reach the LLM stages: llm recall's "recent turns", the query rewrite and the LLM rerank.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from curator.store.messages import Message

# Weights of the parts (defaults in the spirit of ST-BME's 0.7 / 0.2 / 0.1).
USER_WEIGHT, ASSISTANT_WEIGHT, PREVIOUS_USER_WEIGHT = 0.7, 0.2, 0.1
MAX_PART_CHARS = 600  # of a context turn, its end
TURNS_SHOWN = 4  # recent turns rendered for the LLM stages
TURN_CHARS = 1200  # of each of them
MIN_SPLIT_CHARS = 60  # shorter messages are never split
MAX_SUBQUERIES = 3
_SENTENCE = re.compile(r"(?<=[?!.。？！；;])\s+|(?<=[？！。；])")


@dataclass
class Part:
    """One text that is scored on its own; parts of the same `group` are fused by their best score."""

    text: str
    weight: float
    group: str  # "user" (the message answered, and its sub-queries), "assistant", "previous_user"


@dataclass
class RecallQuery:
    """What a recall searches for: `text` (the message answered), the weighted `parts`, and the recent turns
    rendered for the LLM stages (`turns`)."""

    text: str
    parts: list[Part] = field(default_factory=list)
    turns: str = ""

    @property
    def single(self) -> bool:
        return len(self.parts) <= 1


VAGUE_SHARE = 0.3  # of its weight, for a message answered that has no content word of its own
_FUNCTION_WORDS = frozenset("""a an the and or but if then so to of in on at by for with from about into over after
before again also just still now then there here this that these those it its it's they them their he him his she
her hers we us our you your i me my mine what which who whom whose when where why how whether is are was were be been
being do does did done have has had can could will would shall should may might must not no yes oh ah well okay ok
please tell say said says happen happened happens again really thing things one ones something anything
everything that's what's where's who's end up much many real true exactly""".split())


def content_words(text: str) -> list[str]:
    """The words of `text` that carry a subject (not question words, pronouns or auxiliaries); CJK text always
    counts as content."""
    if re.search(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]", text):
        return [text]
    return [w for w in re.findall(r"[\w']+", text.lower()) if w not in _FUNCTION_WORDS and len(w) > 1]


def split_intents(text: str) -> list[str]:
    """The sub-queries of a long message that asks several things (questions, or sentences separated by ? ! .);
    [] when it is short or asks one thing."""
    text = " ".join(text.split())
    if len(text) < MIN_SPLIT_CHARS:
        return []
    sentences = [s.strip() for s in _SENTENCE.split(text) if len(s.strip().split()) >= 3 or
                 (re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", s) and len(s.strip()) >= 4)]
    if len(sentences) < 2:
        return []
    questions = [s for s in sentences if s.endswith(("?", "？"))]
    chosen = questions if len(questions) >= 2 else sentences
    if len(chosen) > MAX_SUBQUERIES:  # the last ones stay whole; the first are merged
        chosen = [" ".join(chosen[:len(chosen) - MAX_SUBQUERIES + 1]), *chosen[len(chosen) - MAX_SUBQUERIES + 1:]]
    return chosen


def build_query(query: str, messages: Sequence[Message] | None = None, *, user: float = USER_WEIGHT,
                assistant: float = ASSISTANT_WEIGHT, previous_user: float = PREVIOUS_USER_WEIGHT) -> RecallQuery:
    """The query for a recall. `messages` are the conversation's recent turns, oldest first; the message answered
    is the last user message among them (or `query` when given and different). Without messages, the query
    alone (still split when it asks several things)."""
    messages = [m for m in (messages or ()) if m.role in ("user", "assistant") and m.text.strip()]
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    text = query.strip()
    if last_user is not None and (not text or text == messages[last_user].text.strip()):
        text, before, name = messages[last_user].text.strip(), messages[:last_user], messages[last_user].name
    else:
        before, name = messages, ""  # the query is not among the turns: every turn is context
    if before and not content_words(text):  # "What was it again?": the turns before say what it is about
        user *= VAGUE_SHARE
    parts = [Part(text, user, "user")] if text else []
    parts += [Part(sub, user, "user") for sub in split_intents(text)]
    reply_at = next((i for i in range(len(before) - 1, -1, -1) if before[i].role == "assistant"), None)
    if reply_at is not None and assistant > 0:
        parts.append(Part(_tail(before[reply_at].text), assistant, "assistant"))
        prior = next((before[i] for i in range(reply_at - 1, -1, -1) if before[i].role == "user"), None)
        if prior is not None and previous_user > 0:
            parts.append(Part(_tail(prior.text), previous_user, "previous_user"))
    shown = [*before[-(TURNS_SHOWN - 1):], Message("user", name, text)] if before else []
    turns = "\n".join(f"{m.name or m.role} ({m.role}): {_tail(m.text, TURN_CHARS)}" for m in shown) or text
    return RecallQuery(text, parts, turns)


def _tail(text: str, limit: int = MAX_PART_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return cut[cut.find(" ") + 1:] if " " in cut else cut


Scores = dict[str, float]


def fuse_parts(parts: list[Part], score: Callable[[str], Scores]) -> Scores:
    """Score each part and fuse: within a group a node keeps its best score (each sub-query finds its own
    memories), across groups the scores add up by weight. A node a group did not score counts as that group's
    lowest score."""
    groups: dict[str, tuple[float, list[Scores]]] = {}
    for part in parts:
        weight, maps = groups.setdefault(part.group, (part.weight, []))
        maps.append(score(part.text))
    best: list[tuple[float, Scores]] = []
    for weight, maps in groups.values():
        merged: Scores = {}
        for scores in maps:
            low = min(scores.values(), default=0.0)
            for key in set(merged) | set(scores):
                merged[key] = max(merged.get(key, low), scores.get(key, low))
        best.append((weight, merged))
    keys = set().union(*(m for _, m in best)) if best else set()
    total: Scores = dict.fromkeys(keys, 0.0)
    weights = sum(weight for weight, _ in best) or 1.0  # normalized: the scale of a single query's scores
    for weight, merged in best:
        low = min(merged.values(), default=0.0)
        for key in keys:
            total[key] += weight / weights * merged.get(key, low)
    return total
