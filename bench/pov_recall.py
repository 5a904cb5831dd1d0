"""Points of view in recall: secrets, mistaken beliefs and who knows what, on scripted stories extracted through the
real extractor (a scripted model writes the answers, the engine normalises story time and writes `knows` links).

Each story has six characters. For each secret, A tells B something in confidence (known_by A and B), one other
character C holds a false belief about it (a POV memory that `contradicts` the secret), the three others each hold
a guess of their own (POV memories), and a public event says the matter is rumoured. Filler events of the same
places compete for the slots. The chat uses the `bme` preset with
the event timeline capped at its newest 4 in the persistent block (the older events compete in recall), and recall
keeps at most 3 memories, so the order matters.

Then the same question about each secret is asked as every character ("What do you know about the forged
ledger?"). Reported, per story:
- leaks: the share of injections where a secret appears in the speaker's "known" section although the speaker was
  not told (goal 0);
- kept: the share where the memory the speaker needs is in the injection, in the right section: the secret for one
  who knows it, the speaker's own mistaken belief (labelled as their belief) for C, the public rumour for the others
  (goal >= 0.9);
- the same with the story features off (every story weight 0), measured in the same run;
- the share of story-time questions ("What happened on day 12?", about filler events) whose event is injected;
- place questions, on a walk with the same characters (a chat of its own per story): a survey notes things in ten
  places (region paths such as "Vale > Millbrook > Mill", towns and their places, so some are adjacent), each thing
  (a well, a bell, a dog...) in four places, so its name alone does not say which memory is meant; then the
  characters walk from place to place (the current region moves with them) and, at each stop, ask about a thing
  that is here ("Is there a well here?"), one that is only in an adjacent place ("Is there a bell nearby?") and one
  in another place they name ("What about the dog at the docks?"): the share whose needed memory is injected.
The point-of-view and story-time weights are chosen on the first story (tuning) from a small grid, then the region
weights (REGION x ADJACENT, other weights as shipped; no loss on the secret and day questions, no leak), and all
are reported on the second (held out).

A group chat: two members (Mira, Bram) take turns replying; each, alone, does things the other must not learn. Each
secret is asked about with each member about to speak, under four ways of picking the speaker and filtering
knowledge (the newest reply's name, as before; the member about to speak, labelled or left out; nobody named):
leaks in the "known" section and anywhere in the injection (goal 0), and the member's own secret kept.

    python bench/pov_recall.py [--quick] [--group-only] [--json]
"""

from __future__ import annotations

import itertools
import random

from _common import TempMemory, emit, environment, now, parse_args, progress, table
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import curator.recall.story as story
from curator.schemas import load_preset
from curator.store.messages import Message

STORIES = {
    "tune": (7, ("Alba", "Bram", "Cole", "Dara", "Evan", "Fenn")),
    "held_out": (11, ("Gale", "Hale", "Iris", "Joss", "Kael", "Lune")),
}
TOPICS = ["the forged ledger", "the hidden map", "the poisoned well", "the stolen crown", "the smuggled wine",
          "the broken seal", "the silver key", "the burned letter", "the secret tunnel", "the false will",
          "the missing heir", "the cursed ring"]
CULPRITS = ["the mayor", "the abbess", "the harbour master", "the old smith", "the captain's widow", "the innkeeper",
            "the tax collector", "the ferryman", "the bishop's clerk", "the miller's son", "the night watch",
            "the glassblower"]
PLACES = [("Vale > Millbrook", "Mill"), ("Vale > Millbrook", "Market"), ("Vale > Millbrook", "Chapel"),
          ("Vale > Ashford", "Inn"), ("Vale > Ashford", "Forge"), ("Capital", "Docks"), ("Capital", "Palace")]
FILLERS = ["{a} and {b} haggle over the price of salt", "{a} repairs a cart wheel while {b} watches",
           "{a} sings an old song and {b} joins in", "{a} loses a bet to {b} over a game of dice",
           "{a} and {b} shelter from the rain", "{a} teaches {b} to tie a sailor's knot"]
MAX_RESULTS = 3  # a tight recall, so the order matters
WEIGHTS = ("KNOWN_BONUS", "UNKNOWN_PENALTY", "OWN_POV_BONUS", "OTHER_POV_PENALTY", "REGION_BONUS", "ADJACENT_BONUS",
           "STORY_TIME_BONUS")


def script(seed: int, people: tuple[str, ...], secrets: int, fillers: int) -> tuple[list[dict], list[dict]]:
    """The story as extractor answers (one per reply) and the facts the questions check."""
    rng = random.Random(seed)
    answers, facts = [], []
    topics = rng.sample(range(len(TOPICS)), secrets)
    steps = [("secret", t) for t in topics] + [("rumour", t) for t in topics] + [("filler", i) for i in range(fillers)]
    rng.shuffle(steps)
    # a rumour comes after its secret: swap when needed so the story stays plausible
    for t in topics:
        a, b = steps.index(("secret", t)), steps.index(("rumour", t))
        if b < a:
            steps[a], steps[b] = steps[b], steps[a]
    for day, (kind, index) in enumerate(steps, start=1):
        wider, place = rng.choice(PLACES)
        when = f"day {day}"
        base = {"story_time": when, "region": place, "region_path": wider}
        if kind == "secret":
            teller, told, believer = rng.sample(people, 3)
            topic, culprit = TOPICS[index], CULPRITS[index]
            wrong = CULPRITS[(index + 5) % len(CULPRITS)]
            text = f"{teller} tells {told} in confidence that {topic} was the work of {culprit}."
            guesses = [{"owner": p, "pov": p, "belief": f"{p} suspects {topic} is tied to "
                        f"{CULPRITS[(index + 1 + k) % len(CULPRITS)]}.", **base}
                       for k, p in enumerate(x for x in people if x not in (teller, told, believer))]
            answers.append({"character": [{"name": p} for p in people],
                            "event": [{"ref": "s", "summary": text, "participants": f"{teller}, {told}",
                                       "known_by": [teller, told], **base}],
                            "pov_memory": [{"ref": "b", "owner": believer, "pov": believer,
                                            "belief": f"{believer} is sure {topic} was the work of {wrong}.", **base},
                                           *guesses],
                            "links": [{"source": "b", "relation": "contradicts", "target": "s"}],
                            "reply": f"{text} Meanwhile {believer} blames {wrong}."})
            facts.append({"topic": topic, "secret": text, "knowers": {teller, told}, "believer": believer,
                          "belief": f"{believer} is sure {topic}"})
        elif kind == "rumour":
            topic = TOPICS[index]
            text = f"Everyone in the square whispers about {topic}, but nobody says who was behind it."
            answers.append({"event": [{"summary": text, **base}], "reply": text})
            next(f for f in facts if f.get("topic") == topic)["rumour"] = text
        else:
            a, b = rng.sample(people, 2)
            text = FILLERS[index % len(FILLERS)].format(a=a, b=b) + f" at the {place.lower()}."
            summary = text[0].upper() + text[1:]
            answers.append({"character": [{"name": a}, {"name": b}],
                            "event": [{"summary": summary, "participants": f"{a}, {b}", **base}],
                            "reply": text})
            facts.append({"day": day, "summary": summary})
    return answers, facts


def model_for(answers: list[dict]) -> FunctionModel:
    def answer(messages, info: AgentInfo) -> ModelResponse:
        prompt = messages[0].parts[-1].content
        floor = int(prompt.split("## Newest reply (floor ", 1)[1].split(")", 1)[0].split("-")[-1])
        record = {k: v for k, v in answers[floor // 2].items() if k != "reply"}
        tool = info.output_tools[0]
        active = set(tool.parameters_json_schema.get("properties", {}))
        return ModelResponse(parts=[ToolCallPart(tool.name, {k: v for k, v in record.items() if k in active})])

    return FunctionModel(answer, model_name="pov-script")


def build(memory, name: str, answers: list[dict]) -> None:
    schema = load_preset("bme")
    event = schema.types["event"]
    capped = event.model_copy(update={"always_inject": event.always_inject.model_copy(update={"max_per_type": 4})})
    memory.create_chat(name, schema.model_copy(update={"types": {**schema.types, "event": capped}}))
    messages = []
    for i, item in enumerate(answers):
        messages += [Message("user", "Player", f"Go on (turn {i})."), Message("assistant", "Narrator", item["reply"])]
    memory.set_messages(name, messages)
    results = memory.extract(name, model=model_for(answers))
    failed = [r.reason for r in results if not r.ok]
    if failed:
        raise SystemExit(f"extraction failed: {failed[0]}")


def evaluate(memory, name: str, facts: list[dict], people: tuple[str, ...]) -> dict:
    """Leaks and kept memories over the secret questions, and the share of story-time questions ("What happened
    on day 12?") whose event is in the injection."""
    leaks = kept = total = 0
    misses: list[str] = []
    days = [f for f in facts if "day" in f]
    found = 0
    for fact in days:
        injection = memory.recall(name, f"What happened on day {fact['day']}?", speaker=people[fact["day"] % 6],
                                  max_results=MAX_RESULTS)
        found += any(c.node.fields.get("summary") == fact["summary"] for c in injection.recalled + injection.persistent)
    for fact in (f for f in facts if "topic" in f):
        for speaker in people:
            injection = memory.recall(name, f"What do you know about {fact['topic']}?", speaker=speaker,
                                      max_results=MAX_RESULTS)
            items = [*injection.persistent, *injection.recalled]
            text = lambda c: c.node.fields.get("summary") or c.node.fields.get("belief") or ""  # noqa: E731
            known = [text(c) for c in items if c.view == "known"]
            total += 1
            if speaker not in fact["knowers"] and fact["secret"] in known:
                leaks += 1
            if speaker in fact["knowers"]:
                ok = fact["secret"] in known
            elif speaker == fact["believer"]:
                ok = any(c.view == "mistaken" and text(c).startswith(fact["belief"]) for c in items) and \
                    f"[{speaker}'s belief, not fact]" in injection.text
            else:
                ok = fact.get("rumour", "") in known
            kept += ok
            if not ok and len(misses) < 5:
                misses.append(f"{speaker}: {fact['topic']}")
    return {"injections": total, "leaks": round(leaks / total, 4), "kept": round(kept / total, 4), "misses": misses,
            "time_questions": len(days), "time_kept": round(found / len(days), 4) if days else None}


# --- regions: a walk through places whose things share names ---------------------------------------------------
REGION_PLACES = ["Vale > Millbrook > Mill", "Vale > Millbrook > Market", "Vale > Millbrook > Chapel",
                 "Vale > Millbrook", "Vale > Ashford > Inn", "Vale > Ashford > Forge", "Vale > Ashford",
                 "Capital > Docks", "Capital > Palace", "Capital > Gardens"]
FIXTURES = {
    "well": ["is dry and choked with leaves", "has a rope frayed nearly through", "gives water that tastes of salt",
             "hides a coin glinting at the bottom", "is fenced off after a child fell in"],
    "bell": ["is cracked down one side", "rings on its own at midnight", "was cast from melted swords",
             "has lost its clapper", "is rung only for weddings"],
    "statue": ["has a broken nose", "is of a drowned saint", "wears a wreath of fresh flowers",
               "leans as if about to fall", "has a hollow in its base"],
    "cellar": ["is flooded to the knee", "is locked with a new padlock", "smells of vinegar",
               "holds barrels of pitch", "has a second door nobody admits to"],
    "notice board": ["lists a reward for a lost goat", "is covered in tax decrees", "bears a warning about wolves",
                     "names the debtors of the month", "has a love letter pinned to it"],
    "dog": ["is a grey hound with one ear", "guards a pile of sacks", "follows anyone who carries bread",
            "howls when the wind turns", "belongs to nobody"],
}
WALK_FILLERS = ["{a} and {b} eat bread and cheese", "{a} counts coins while {b} keeps watch",
                "{a} and {b} argue about the road ahead", "{a} mends a torn cloak and {b} dozes"]
PERSISTENT_EVENTS = 4  # the event timeline's cap in the persistent block (see build)


def place_name(region: str) -> str:
    """How the text names a region: a town by its name ('Millbrook'), a place in it as 'the mill'."""
    name = region.split(" > ")[-1]
    return name if any(r.startswith(region + " > ") for r in REGION_PLACES) else f"the {name.lower()}"


def walk_script(seed: int, people: tuple[str, ...], visits: int, per_fixture: int = 4) -> tuple[list[dict], list[dict]]:
    """A survey (each place's things noted: every thing is found in several places, so its name alone does not
    say which memory is meant), then a walk from place to place; at each stop after the first few the characters
    ask about things, and the questions say which memory they need:
    - here: the thing is in the current place ("Is there a well here?"): its memory there;
    - nearby: the thing is not here but in exactly one adjacent place (the same town, or the town itself): that one;
    - named: the question names another place that has it ("What about the well at the docks?"): that one,
      although the current place has one too (a region weight too large buries it under the current place).
    Returns the answers and, per stop, (the number of answers up to it, its questions)."""
    rng = random.Random(seed)
    answers, memories = [], {}  # (thing, region) -> summary
    layout = []
    for thing, details in FIXTURES.items():
        for region, detail in zip(rng.sample(REGION_PLACES, per_fixture), rng.sample(details, per_fixture)):
            layout.append((thing, region, detail))
    for region in REGION_PLACES:  # fillers: every place holds a few memories about nothing in particular
        layout += [(None, region, None)] * 2
    rng.shuffle(layout)
    day = 0
    for thing, region, detail in layout:
        day += 1
        a, b = rng.sample(people, 2)
        wider, place = region.rsplit(" > ", 1) if " > " in region else ("", region)
        base = {"story_time": f"day {day}", "region": place, **({"region_path": wider} if wider else {})}
        where = place_name(region)
        where = f"at {where}" if where.startswith("the ") else f"in {where}"
        if thing:
            text = f"{a} and {b} note that the {thing} {where} {detail}."
            memories[(thing, region)] = text
        else:
            text = rng.choice(WALK_FILLERS).format(a=a, b=b) + f" {where}."
        answers.append({"character": [{"name": a}, {"name": b}],
                        "event": [{"summary": text, "participants": f"{a}, {b}", **base}], "reply": text})
    stops = []
    route = rng.sample(REGION_PLACES * 3, visits + PERSISTENT_EVENTS)
    for i, region in enumerate(route):
        day += 1
        a, b = rng.sample(people, 2)
        wider, place = region.rsplit(" > ", 1) if " > " in region else ("", region)
        where = place_name(region)
        text = f"{a} and {b} walk on and reach {where}."
        answers.append({"event": [{"summary": text, "participants": f"{a}, {b}", "story_time": f"day {day}",
                                   "region": place, **({"region_path": wider} if wider else {})}], "reply": text})
        if i < PERSISTENT_EVENTS:  # the newest events are injected anyway: ask once the survey has left them
            continue
        questions = []
        for thing in rng.sample(list(FIXTURES), len(FIXTURES)):
            holders = [r for r in REGION_PLACES if (thing, r) in memories]
            near = [r for r in holders if r != region and story.adjacent(r, region)]
            far = [r for r in holders if r != region and not story.adjacent(r, region)]
            if region in holders and not any(q["kind"] == "here" for q in questions):
                ask = rng.choice(["Is there a {t} here?", "What about the {t}?", "What do we know of the {t} here?"])
                questions.append({"kind": "here", "query": ask.format(t=thing), "needed": memories[(thing, region)]})
            elif region not in holders and len(near) == 1 and not any(q["kind"] == "nearby" for q in questions):
                ask = rng.choice(["Is there a {t} nearby?", "Where is the nearest {t}?"])
                questions.append({"kind": "nearby", "query": ask.format(t=thing), "needed": memories[(thing, near[0])]})
            if region in holders and far and not any(q["kind"] == "named" for q in questions):
                other = rng.choice(far)
                there = place_name(other)
                there = f"at {there}" if there.startswith("the ") else f"in {there}"
                questions.append({"kind": "named", "query": f"What about the {thing} {there}?",
                                  "needed": memories[(thing, other)]})
        stops.append({"answers": len(answers), "speaker": a, "questions": questions})
    return answers, stops


def build_walk(memory, name: str, answers: list[dict], stops: list[dict]) -> list[tuple[str, dict]]:
    """One chat per stop, holding the story up to it (the current region is where that stop is)."""
    chats = []
    for k, stop in enumerate(stops):
        chat = f"{name}-walk{k}"
        build(memory, chat, answers[:stop["answers"]])
        chats.append((chat, stop))
    return chats


def evaluate_walk(memory, chats: list[tuple[str, dict]]) -> dict:
    """The share of place questions whose needed memory is in the injection, overall and per kind."""
    kept: dict[str, list[int]] = {}
    misses = []
    for chat, stop in chats:
        for q in stop["questions"]:
            injection = memory.recall(chat, q["query"], speaker=stop["speaker"], max_results=MAX_RESULTS)
            ok = any(c.node.fields.get("summary") == q["needed"] for c in injection.recalled + injection.persistent)
            kept.setdefault(q["kind"], []).append(ok)
            if not ok and len(misses) < 5:
                misses.append(f"{chat}: {q['query']}")
    every = [x for v in kept.values() for x in v]
    return {"questions": len(every), "kept": round(sum(every) / len(every), 4) if every else None,
            "by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(kept.items())}, "misses": misses}


# --- a group chat: two characters who must not learn each other's secrets -------------------------------------
GROUP = ("Mira", "Bram")
GROUP_SECRETS = {"Mira": [("the stolen crown", "hides the stolen crown behind the cider barrels in the cellar"),
                          ("the forged ledger", "burns the last page of the forged ledger in the inn's stove"),
                          ("the hidden map", "sews the hidden map into the lining of her cloak"),
                          ("the silver key", "drops the silver key into the well behind the chapel")],
                 "Bram": [("the poisoned well", "pours the vial into the poisoned well before dawn"),
                          ("the smuggled wine", "loads the smuggled wine onto the ferryman's boat"),
                          ("the broken seal", "breaks the seal on the bishop's letter and reads it"),
                          ("the false will", "swaps the true will for the false will in the notary's chest")]}
GROUP_CONFIGS = {  # how recall picks the speaker and what the knowledge filter does with the others' memories
    "newest reply's name, labelled (before)": ("previous", "label"),
    "the member about to speak, labelled": ("next", "label"),
    "the member about to speak, left out (auto)": ("next", "auto"),
    "nobody named (auto: fails closed)": ("none", "auto"),
}


def group_script(seed: int, fillers: int) -> tuple[list[dict], list[dict]]:
    """The two take turns replying; each, alone, does things the other must not learn (known_by: only them);
    public scenes between them fill the rest. Returns the answers (each with its `speaker`) and the secrets."""
    rng = random.Random(seed)
    steps = [(who, topic, deed) for who, deeds in GROUP_SECRETS.items() for topic, deed in deeds]
    steps += [(None, None, None)] * fillers
    rng.shuffle(steps)
    answers, secrets = [], []
    for day, (who, topic, deed) in enumerate(steps, start=1):
        speaker = GROUP[day % 2] if who is None else who
        base = {"story_time": f"day {day}", "region": "Inn", "region_path": "Vale > Ashford"}
        if who is None:
            text = rng.choice(FILLERS).format(a=GROUP[0], b=GROUP[1]) + " at the inn."
            answers.append({"character": [{"name": n} for n in GROUP], "speaker": speaker,
                            "event": [{"summary": text[0].upper() + text[1:], "participants": ", ".join(GROUP),
                                       **base}], "reply": text})
            continue
        text = f"{who}, alone and unseen, {deed}."
        answers.append({"character": [{"name": n} for n in GROUP], "speaker": who,
                        "event": [{"summary": text, "participants": who, "known_by": [who], **base}], "reply": text})
        secrets.append({"owner": who, "topic": topic, "secret": text})
    return answers, secrets


def build_group(memory, name: str, answers: list[dict]) -> None:
    memory.create_chat(name, "bme")
    messages = []
    for i, item in enumerate(answers):
        messages += [Message("user", "Wren", f"And then? (turn {i})"),
                     Message("assistant", item["speaker"], item["reply"])]
    memory.set_messages(name, messages)
    results = memory.extract(name, model=model_for([{k: v for k, v in a.items() if k != "speaker"} for a in answers]))
    failed = [r.reason for r in results if not r.ok]
    if failed:
        raise SystemExit(f"extraction failed: {failed[0]}")


def evaluate_group(memory, name: str, secrets: list[dict]) -> dict:
    """Each secret asked about with each member about to speak, under each configuration: a leak is another's
    secret in the speaker's "known" section (known), or anywhere in the injection's text (any); kept: the
    speaker's own secret is in the injection when asked about it."""
    out = {}
    for label, (who, knowledge) in GROUP_CONFIGS.items():
        known_leaks = any_leaks = kept = asked_own = injections = 0
        for fact in secrets:
            for speaker in GROUP:
                other = GROUP[1 - GROUP.index(speaker)]
                given = {"next": speaker, "previous": other, "none": None}[who]  # the newest reply is the other's
                options = {"knowledge": knowledge, **({"speaker": given} if given else {})}
                injection = memory.recall(name, f"What do you know about {fact['topic']}?", max_results=MAX_RESULTS,
                                          **options)
                injections += 1
                items = [*injection.persistent, *injection.recalled]
                summary = lambda c: c.node.fields.get("summary", "")  # noqa: E731
                if fact["owner"] != speaker:
                    known_leaks += any(summary(c) == fact["secret"] and c.view in ("known", "") for c in items)
                    any_leaks += fact["secret"] in injection.text
                else:
                    asked_own += 1
                    kept += fact["secret"] in injection.text
        out[label] = {"injections": injections, "known_leaks": known_leaks, "any_leaks": any_leaks,
                      "own_kept": round(kept / asked_own, 4) if asked_own else None}
    return out


def group_main(args) -> dict:
    with TempMemory() as tmp:
        answers, secrets = group_script(5, 8 if args.quick else 24)
        build_group(tmp.memory, "group", answers)
        progress(f"group chat: {len(answers)} replies by {', '.join(GROUP)}, {len(secrets)} secrets")
        return evaluate_group(tmp.memory, "group", secrets)


def set_weights(values: dict[str, float]) -> None:
    for key, value in values.items():
        setattr(story, key, value)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument(
        "--group-only", action="store_true", help="only the group chat (two members, each with secrets)"))
    group = group_main(args)
    if args.group_only:
        report = {"benchmark": "pov_recall", "quick": args.quick, "env": environment(), "results": {"group": group}}
        emit(args, report, lambda r: _group_table(r["results"]["group"]))
        return
    secrets, fillers, visits = (4, 6, 4) if args.quick else (10, 20, 16)
    shipped = {k: getattr(story, k) for k in WEIGHTS}
    off = dict.fromkeys(WEIGHTS, 0.0)
    grid = [{"KNOWN_BONUS": known, "UNKNOWN_PENALTY": unknown, "OWN_POV_BONUS": pov, "OTHER_POV_PENALTY": pov}
            for known, unknown, pov in itertools.product((0.5, 1.0, 2.0), (0.5, 1.5, 3.0), (0.5, 1.0))]
    region_grid = [{"REGION_BONUS": region, "ADJACENT_BONUS": adjacent}
                   for region, adjacent in itertools.product((0.0, 0.25, 0.5, 1.0), (0.0, 0.1, 0.25, 0.5))]
    if args.quick:
        grid = grid[::6]
        region_grid = [c for c in region_grid if c["REGION_BONUS"] in (0.0, 0.5) and c["ADJACENT_BONUS"] in (0.0, 0.25)]
    results: dict[str, dict] = {}
    with TempMemory() as tmp:
        memory = tmp.memory
        facts_of, walks = {}, {}
        for name, (seed, people) in STORIES.items():
            started = now()
            answers, facts = script(seed, people, secrets, fillers)
            build(memory, name, answers)
            facts_of[name] = (facts, people)
            walk_answers, stops = walk_script(seed + 100, people, visits)
            walks[name] = build_walk(memory, name, walk_answers, stops)
            progress(f"{name}: {len(answers)} replies extracted, and {len(stops)} walk stops "
                     f"({len(walk_answers)} replies at most) in {now() - started:.1f}s")

        def measure(names=STORIES) -> dict:
            return {n: {**evaluate(memory, n, *facts_of[n]), "region": evaluate_walk(memory, walks[n])} for n in names}

        set_weights(off)
        results["off"] = measure()
        tuned = []
        for combo in grid:  # the point-of-view weights, on the secret questions
            started = now()
            set_weights({**shipped, **combo})
            row = evaluate(memory, "tune", *facts_of["tune"])
            tuned.append(((row["kept"], row["time_kept"]), -sum(combo.values()), combo))
            progress(f"{combo}: kept {row['kept']} ({now() - started:.1f}s)")
        best = max(tuned, key=lambda t: (t[0], t[1]))[2]
        times = []
        for bonus in (0.5, 1.0, 2.0, 3.0):  # then the story-time weight, on the time questions
            set_weights({**shipped, **best, "STORY_TIME_BONUS": bonus})
            row = evaluate(memory, "tune", *facts_of["tune"])
            times.append(((row["time_kept"], row["kept"]), -bonus, bonus))
        best["STORY_TIME_BONUS"] = max(times)[2]
        # then the region weights, on the walk's place questions; the secret and day questions must not lose
        regions = []
        for combo in region_grid:
            started = now()
            set_weights({**shipped, **combo})
            row = measure(["tune"])["tune"]
            secrets = {k: row[k] for k in ("leaks", "kept", "time_kept")}
            regions.append({**combo, "tune": row["region"], "tune_secrets": secrets})
            progress(f"{combo}: place questions kept {row['region']['kept']} {row['region']['by_kind']}, "
                     f"secrets kept {row['kept']}, leaks {row['leaks']} ({now() - started:.1f}s)")
        base = next(r["tune_secrets"] for r in regions if not r["REGION_BONUS"] and not r["ADJACENT_BONUS"])
        fair = [r for r in regions if r["tune_secrets"]["leaks"] == 0 and r["tune_secrets"]["kept"] >= base["kept"]
                and (r["tune_secrets"]["time_kept"] or 0) >= (base["time_kept"] or 0)]  # no loss elsewhere
        chosen = max(fair or regions,
                     key=lambda r: (r["tune"]["kept"], r["tune_secrets"]["kept"], r["tune_secrets"]["time_kept"],
                                    -(r["REGION_BONUS"] + r["ADJACENT_BONUS"])))
        best.update(REGION_BONUS=chosen["REGION_BONUS"], ADJACENT_BONUS=chosen["ADJACENT_BONUS"])
        progress(f"best on tune: {best}")
        set_weights({**shipped, **best})
        results["tuned"] = measure()
        set_weights(shipped)
        results["shipped"] = measure()
        results["region_grid"] = regions
    results["group"] = group
    report = {"benchmark": "pov_recall", "quick": args.quick, "env": environment(),
              "params": {"secrets": secrets, "fillers": fillers, "visits": visits, "grid": len(grid),
                         "region_grid": len(region_grid), "shipped": shipped, "best": best},
              "results": results}

    def render(r: dict) -> str:
        rows = [(f"{weights}: {story_name}", m["injections"], m["leaks"], m["kept"], m["time_kept"],
                 m["region"]["questions"], m["region"]["kept"],
                 " ".join(f"{k} {v:g}" for k, v in m["region"]["by_kind"].items()), ", ".join(m["misses"][:2]))
                for weights, by_story in r["results"].items() if weights not in ("region_grid", "group")
                for story_name, m in by_story.items()]
        grid_rows = [(g["REGION_BONUS"], g["ADJACENT_BONUS"], g["tune"]["kept"],
                      " ".join(f"{k} {v:g}" for k, v in g["tune"]["by_kind"].items()), g["tune_secrets"]["kept"],
                      g["tune_secrets"]["leaks"], g["tune_secrets"]["time_kept"]) for g in r["results"]["region_grid"]]
        return (table(["weights: story", "injections", "leak share", "kept share", "day questions kept",
                       "place questions", "place kept", "by kind", "first misses"], rows)
                + "\n\nregion grid on the tuning story (other weights as shipped)\n"
                + table(["REGION", "ADJACENT", "place kept", "by kind", "secrets kept", "leak share",
                         "day questions kept"], grid_rows)
                + f"\nshipped weights {r['params']['shipped']}\nbest on tune {r['params']['best']}"
                + "\n\n" + _group_table(r["results"]["group"]))

    emit(args, report, render)

def _group_table(group: dict) -> str:
    rows = [(label, m["injections"], m["known_leaks"], m["any_leaks"], m["own_kept"]) for label, m in group.items()]
    return ("group chat: each member's secrets asked about with each member about to speak (goal: 0 leaks)\n"
            + table(["speaker: knowledge filter", "injections", "leaks (known section)", "leaks (anywhere)",
                     "own secret kept"], rows))


if __name__ == "__main__":
    main()
