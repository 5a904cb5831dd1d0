"""A long scripted role-play with planted facts, and the scripted models that turn it into memory: for tests and
`bench/long_chat.py`, where the whole pipeline (extraction, compression, recall) must run with no real model.

- `story(floors, seed)`: user turns and narrator replies. Most replies are routine (someone walks somewhere and
  does something small); some plant a fact at a known floor: an item and where it is, a promise, a debt, a name
  and an alias, a death, a rule of the world. Each fact has a question asked later and the words of its answer.
- `story_extractor()`: writes what the newest reply says as a model would: one event per step (time and place,
  the routine line, the fact as a line marked `[!]` as an irreversible milestone), the character who acts (with
  the item he carries, or the alias the story reveals), the place on the steps its type is active, and the links.
- `milestone_summarizer()`: the compression (and any other `summarize`) model: it keeps the time and place of the
  first and last child and every line marked as a milestone, word for word, newest first when they do not fit.
- `story_maintainer()`: the `maintain` model (consolidation and synopses on the default settings).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from curator.store.messages import Message
from curator.testing.scripted import prompt_text

PEOPLE = ("Eileen", "Rowan", "Brannoch", "Mira", "Tobin", "Saela", "Hedda", "Corvin")
PLACES = ("the bridge", "the mill", "the chapel", "the market", "the harbour", "the orchard", "the watchtower")
ROUTINE = ("fetched water", "mended a torn sleeve", "counted the coins twice", "watched the rain", "fed the mules",
           "swept the floor", "haggled over bread", "sharpened a knife", "sang an old song", "napped in the shade",
           "traded gossip", "polished the lamps", "patched the roof", "tied up the boat", "split firewood")
MARK = "[!]"

# kind -> (reply sentence, question, answer words); the fields are filled per fact.
ITEMS = ("silver compass", "bone flute", "copper key", "green ledger", "ivory die", "amber brooch", "iron crown",
         "glass eye", "oak seal", "blue lantern", "jade comb", "tin whistle")
SPOTS = ("under the loose stone of the well", "inside the hollow ash tree", "behind the altar cloth",
         "in the false bottom of the flour barrel", "beneath the third step of the watchtower",
         "in the eel trap at the pier", "sewn into the saddle blanket", "buried under the plum tree",
         "in the bell of the chapel tower", "wrapped in oilcloth in the cistern", "behind the mill wheel",
         "in the empty beehive")
PROMISES = ("carry her letter to the coast", "teach him to read the star charts", "never sell the family farm",
            "light a candle for her brother every winter", "guard the ferry until spring", "bring back the lost goat",
            "dance at the harvest wedding", "keep the secret of the cellar door", "plant a rowan at the crossroads",
            "return the borrowed sword unbroken", "sing at the midsummer fire", "repair the chapel bell")
AMOUNTS = ("forty silver marks", "seven gold crowns", "twelve copper bits", "three pearls", "a sack of barley",
           "nine silver stags", "a cask of cider", "sixty iron pennies", "two good horses", "a bolt of red wool",
           "eleven gold rings", "a herd of goats")
ALIASES = ("the Grey Widow", "the Lantern Man", "Old Thistle", "the Salt Queen", "the Quiet Knife", "Mother Fen",
           "the Owl of Dunmere", "Red Hob", "the Ferryman", "the Tin Saint", "Aunt Cinder", "the Pale Rider")
TRUE_NAMES = ("Ysolde Marrow", "Anselm Dree", "Wenna Coil", "Ilsabet Varga", "Gorlan Fisk", "Maudry Pell",
              "Oswin Tarrant", "Hobb Lacey", "Cedric Wane", "Fennick Osk", "Brisa Hale", "Tamsin Orr")
VICTIMS = ("the miller Garrick", "the ferryman Aldo", "the smith Pernel", "the herb woman Joss", "the old priest Ulric",
           "the tax man Bede", "the shepherd Idris", "the bard Lysa", "the brewer Haskel", "the guard Roderick",
           "the weaver Nell", "the hunter Orm")
KILLERS = ("a poisoned cup of mead", "a falling bell", "the marsh fever", "a crossbow bolt from the ridge",
           "a wolf in the snow", "a fall from the cliff path", "a knife in the dark", "the black cough",
           "an adder in the hay", "a burning barn", "the flooding river", "a kick from a wild horse")
RULES = (
    ("iron", "no iron may cross the river after dusk"),
    ("names", "a true name spoken at the stones binds the speaker"),
    ("bells", "the chapel bell must never ring thirteen times"),
    ("salt", "salt on a doorstep keeps the fen spirits out"),
    ("mirrors", "mirrors must be covered when someone dies"),
    ("bread", "bread shared at the hearth makes a guest sacred"),
    ("ravens", "killing a raven brings a year of drought"),
    ("oaths", "an oath sworn on the old oak cannot be broken"),
    ("fire", "the midsummer fire must burn until dawn"),
    ("wells", "nobody draws water from the north well at night"),
    ("ferries", "the ferry never carries the dead across"),
    ("songs", "the harvest song may only be sung by a child"),
)
KINDS = ("item", "promise", "debt", "alias", "death", "rule")


@dataclass
class Fact:
    """A fact planted at `floor`; `question` is asked later and `answer` are the words that must be recalled."""

    floor: int
    kind: str
    sentence: str
    question: str
    answer: str
    actor: str
    alias: str = ""
    item: str = ""
    cue: str = ""  # a narrator line that brings the fact up again, without its answer
    follow_up: str = ""  # the user's question after that line: it has no subject on its own


def story(floors: int = 640, seed: int = 7, every: int = 9) -> tuple[list[Message], list[Fact]]:
    """A deterministic role-play of `floors` messages (user on even floors, the narrator on odd ones), with a
    planted fact in about one reply out of `every` (never in the first one)."""
    rng = random.Random(seed)
    messages: list[Message] = []
    facts: list[Fact] = []
    used = dict.fromkeys(KINDS, 0)
    next_fact = 3
    for floor in range(floors):
        if floor % 2 == 0:
            messages.append(Message("user", "Wren", f"Wren looks around. What happens next? (turn {floor // 2})"))
            continue
        who = rng.choice(PEOPLE)
        place = rng.choice(PLACES)
        day = floor // 10 + 1
        text = f"Day {day}, at {place}. {who} {rng.choice(ROUTINE)} while the others {rng.choice(ROUTINE)}."
        if floor >= next_fact and floor + 1 < floors:
            kind = KINDS[len(facts) % len(KINDS)]
            if used[kind] < 12:
                fact = _fact(kind, used[kind], floor, who, place, rng)
                used[kind] += 1
                facts.append(fact)
                text += " " + fact.sentence
            next_fact = floor + 2 * rng.randint(every - 3, every + 3)
        messages.append(Message("assistant", "Narrator", text))
    return messages, facts


def _fact(kind: str, i: int, floor: int, who: str, place: str, rng: random.Random) -> Fact:
    other = rng.choice([p for p in PEOPLE if p != who])
    if kind == "item":
        item, spot = ITEMS[i], SPOTS[i]
        return Fact(floor, kind, f"{who} took the {item} from {other} and hid it {spot}.",
                    f"Where is the {item} now?", spot, who, item=item,
                    cue=f"{other} asks everyone whether they have seen the {item}.", follow_up="Where did it end up?")
    if kind == "promise":
        return Fact(floor, kind, f"{who} swore to {other}: I promise to {PROMISES[i]}.",
                    f"What did {who} promise {other}?", PROMISES[i], who,
                    cue=f"{other} reminds {who} of the promise {who} once made.", follow_up="What was it again?")
    if kind == "debt":
        return Fact(floor, kind, f"{who} borrowed {AMOUNTS[i]} from {other} and must pay it back.",
                    f"What does {who} owe {other}?", AMOUNTS[i], who,
                    cue=f"{other} glares at {who} about the money borrowed.", follow_up="How much was it?")
    if kind == "alias":
        return Fact(floor, kind, f"The stranger {ALIASES[i]} told {who} her true name: {TRUE_NAMES[i]}.",
                    f"What is the true name of {ALIASES[i]}?", TRUE_NAMES[i], TRUE_NAMES[i], alias=ALIASES[i],
                    cue=f"A hooded woman, {ALIASES[i]}, walks past the inn.", follow_up="What is her real name?")
    if kind == "death":
        return Fact(floor, kind, f"{VICTIMS[i][0].upper()}{VICTIMS[i][1:]} died at {place}, killed by {KILLERS[i]}.",
                    f"How did {VICTIMS[i]} die?", KILLERS[i], who,
                    cue=f"Someone leaves flowers on the grave of {VICTIMS[i]}.", follow_up="How did that happen?")
    topic, rule = RULES[i]
    return Fact(floor, kind, f"The elders taught {who} the rule of the valley about {topic}: {rule}.",
                f"What is the rule of the valley about {topic}?", rule, who,
                cue=f"A child asks {who} about the old rule concerning {topic}.", follow_up="What does it say?")


_ROUTINE = re.compile(r"Day (?P<day>\d+), at (?P<place>[\w ]+?)\. (?P<who>\w+) (?P<rest>[^.]+)\.")


def story_extractor(calls: list[Any] | None = None) -> FunctionModel:
    """The extraction model for `story()` (see the module's docstring); `calls` collects the focus floors."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = prompt_text(messages)
        focus = prompt.split("## Newest reply", 1)[1]
        floor = int(focus.split("[floor ", 1)[1].split("]", 1)[0])
        if calls is not None:
            calls.append(floor)
        tool = info.output_tools[0]
        active = set(tool.parameters_json_schema.get("properties", {}))
        body = focus.split("(assistant): ", 1)[-1].strip()
        routine = _ROUTINE.search(body)
        fact = body[routine.end():].strip() if routine else ""
        lines = [f"Day {routine['day']}, at {routine['place']}." if routine else f"Floor {floor}.",
                 f"1. {routine['who']} {routine['rest']}." if routine else "1. " + body[:120]]
        if fact:
            lines.append(f"{MARK} {fact}")
        record: dict[str, Any] = {"event": [{"ref": "e", "summary": "\n".join(lines)}], "links": []}
        if routine:
            sheet = {"ref": "c", "name": routine["who"]}
            if fact and (item := re.search(r"took the ([\w ]+?) from", fact)):
                sheet["inventory"] = f"the {item.group(1)} (hidden)"
            record["character_sheet"] = [sheet]
            record["links"].append({"source": "c", "relation": "involved_in", "target": "e"})
            alias = re.search(r"The stranger (.+?) told \w+ her true name: ([\w ]+)\.", fact)
            if alias:
                record["character_sheet"].append({"ref": "s", "name": alias.group(2), "aliases": alias.group(1),
                                                  "identity": "a stranger in the valley"})
                record["links"].append({"source": "s", "relation": "involved_in", "target": "e"})
            record["location_state"] = [{"ref": "p", "name": routine["place"], "danger": "quiet"}]
            record["links"].append({"source": "e", "relation": "occurred_at", "target": "p"})
        record = {k: v for k, v in record.items() if k in active or k == "links"}
        if "location_state" not in record:
            record["links"] = [link for link in record["links"] if link["target"] != "p"]
        if "character_sheet" not in record:
            record["links"] = [link for link in record["links"] if link["source"] not in ("c", "s")]
        if not record["links"]:
            del record["links"]
        return ModelResponse(parts=[ToolCallPart(tool.name, record)])

    return FunctionModel(answer, model_name="scripted-story")


_CHILD = re.compile(r"summary: (?P<text>.*?)(?=\n(?:event|[a-z_]+) \"|\Z)", re.S)
_TIME = re.compile(r"(Day \d+, at [\w ]+?\.)")
_MILESTONE = re.compile(re.escape(MARK) + r" ([^\[\n]+?)\s*(?=" + re.escape(MARK) + r"|\n|$)")


def milestone_summarizer(calls: list[Any] | None = None) -> FunctionModel:
    """Compression answers that keep the time and place of the first and last child and every milestone line
    (newest dropped last when they do not all fit the size limit the prompt gives)."""
    return FunctionModel(_milestone_answer(calls), model_name="scripted-summarizer")


def _milestone_answer(calls: list[Any] | None) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts
                           if p.part_kind in ("user-prompt", "retry-prompt"))
        if calls is not None:
            calls.append(prompt)
        tool = info.output_tools[0]
        schema = tool.parameters_json_schema
        limit = int(m.group(1)) if (m := re.search(r"at most (\d+) characters", prompt)) else 800
        children = prompt.split("Nodes to fold, oldest first:", 1)[-1]
        times = _TIME.findall(children)
        head = f"{times[0]} to {times[-1]}" if len(times) > 1 else (times[0] if times else "Earlier.")
        milestones = list(dict.fromkeys(m.strip() for m in _MILESTONE.findall(children)))
        text = head
        kept: list[str] = []
        for line in reversed(milestones):  # the newest first, so the oldest are the ones cut
            if len(text) + sum(len(k) + 5 for k in kept) + len(line) + 5 > limit - 10:
                continue
            kept.insert(0, line)
        text = "\n".join([head, *(f"{MARK} {k}" for k in kept)]) if kept else head + " Routine days."
        fields = {name: text for name in schema.get("required", []) if name != "title"}
        if "title" in schema.get("properties", {}):
            fields["title"] = head[:60]
        return ModelResponse(parts=[ToolCallPart(tool.name, fields)])

    return answer


_NEW = re.compile(r"^NEW \[(?P<id>[^\]]+)\] (?P<type>[a-z_]+) \"(?P<title>[^\"]*)\"[^:]*: (?P<text>.*)$", re.M)
_NEIGHBOUR = re.compile(r"^  neighbour \((?P<sim>[\d.]+)\) \[(?P<id>[^\]]+)\] [a-z_]+ \"(?P<title>[^\"]*)\"[^:]*: "
                        r"(?P<text>.*)$", re.M)


def story_maintainer(calls: list[Any] | None = None) -> FunctionModel:
    """The `maintain` model of the scripted story, for maintenance on default settings: consolidation keeps every
    new node except one whose text repeats a neighbour's word for word (skipped); a synopsis (small or rolled up)
    keeps the time and place and the milestone lines of its material, within the length asked; a compression
    batch is answered as `milestone_summarizer` answers it."""
    fold = _milestone_answer(None)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = "\n".join(str(getattr(p, "content", "")) for m in messages for p in m.parts
                           if p.part_kind in ("user-prompt", "retry-prompt"))
        if calls is not None:
            calls.append(prompt)
        tool = info.output_tools[0]
        properties = tool.parameters_json_schema.get("properties", {})
        if "decisions" in properties:
            decisions = []
            for block in prompt.split("\nNEW ")[1:]:
                new = _NEW.search("NEW " + block)
                if new is None:
                    continue
                same = next((n["id"] for n in _NEIGHBOUR.finditer(block)
                             if new["text"].strip() and n["text"] == new["text"] and n["title"] == new["title"]), None)
                decisions.append({"node_id": new["id"], "action": "skip" if same else "keep",
                                  "reason": f"repeats {same}" if same else "new information"})
            return ModelResponse(parts=[ToolCallPart(tool.name, {"decisions": decisions})])
        if "text" in properties and "synops" in prompt:
            asked = re.search(r"Length: (\d+)-(\d+)", prompt)
            assert asked is not None, "a synopsis prompt states its length"
            low, high = map(int, asked.groups())
            material = prompt.split("characters", 1)[-1]
            times = _TIME.findall(material)
            head = f"{times[0]} to {times[-1]}" if len(times) > 1 else (times[0] if times else "Days passed.")
            # then the other sentences (the routine lines of events, the sentences of the synopses rolled up)
            deeds = [d for d in re.findall(r"(?:\d+\. |^- |(?<=\. ))([A-Z][^.\n]{3,}\.)", material, re.M)
                     if not _TIME.fullmatch(d) and MARK not in d]
            lines = [head, *dict.fromkeys([*(m.strip() for m in _MILESTONE.findall(material)), *deeds])]
            text = ""
            for line in lines:
                if len(text) + len(line) + 1 <= high:
                    text = f"{text} {line}".strip()
            return ModelResponse(parts=[ToolCallPart(tool.name, {"text": text.ljust(low, ".")})])
        return fold(messages, info)

    return FunctionModel(answer, model_name="scripted-maintainer")
