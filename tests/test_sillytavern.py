"""SillyTavern 1.12.6 itself in front of the proxy: its backend, driven the way its web UI drives it, through a
20-turn chat with every names behaviour, trimming, a stop string, impersonate, a quiet prompt, continue,
regenerate, swipe back, several choices, context trimming, an edit and a delete.

Needs `node` and `npm` (Debian: `apt-get install -y nodejs npm`; `.ci/run` installs them) and SillyTavern's
source tarball (`../shared/sillytavern/`, or $CURATOR_SILLYTAVERN); skipped with the reason otherwise. Its npm
dependencies come from the registry the first time and from a cache folder after that
($CURATOR_SILLYTAVERN_CACHE, default ~/.cache/memory-curator). Prints the extraction calls per turn.
"""

from __future__ import annotations

import re

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import curator
from curator.testing.scripted import graph_signature, reply_text
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer
from curator.service.proxy_match import same_floor
from curator.store.messages import Message

import st_harness
from st_harness import CHAR, USER, Front, SillyTavern, Upstream

pytestmark = pytest.mark.skipif(st_harness.missing() is not None, reason=st_harness.missing() or "")

CHAT = "st-road"
_FOUND = re.compile(r"(\w+) went to ([\w ]+?) and found ([^.#]+)(?: #(\d+))?\.")


def story_model(calls: list[int]) -> FunctionModel:
    """An extraction model that reads what happened in the newest reply, not how it is formatted: one event
    naming each "X went to Y and found Z" in it, the person's sheet and the place's state."""

    def answer(messages, info: AgentInfo) -> ModelResponse:
        prompt = messages[0].parts[-1].content
        focus = prompt.split("## Newest reply", 1)[1]
        calls.append(int(focus.split("[floor ", 1)[1].split("]", 1)[0]))
        tool = info.output_tools[0]
        active = set(tool.parameters_json_schema.get("properties", {}))
        found = _FOUND.findall(focus)
        summary = "; ".join(f"{who} went to {place} and found {thing.strip()}" for who, place, thing, _ in found)
        record: dict = {"event": [{"ref": "e", "summary": summary or "nothing happened"}]}
        if found and "character_sheet" in active:
            record["character_sheet"] = [{"ref": "c", "name": found[-1][0], "inventory": found[-1][2].strip()}]
            record["links"] = [{"source": "c", "relation": "involved_in", "target": "e"}]
        if found and "location_state" in active:
            record["location_state"] = [{"ref": "p", "name": found[-1][1], "resources": found[-1][2].strip()}]
            record.setdefault("links", []).append({"source": "e", "relation": "occurred_at", "target": "p"})
        return ModelResponse(parts=[ToolCallPart(tool.name, {k: v for k, v in record.items() if k in active})])

    return FunctionModel(answer, model_name="story")


@pytest.fixture(scope="module")
def sillytavern(tmp_path_factory):
    tavern = SillyTavern(tmp_path_factory.mktemp("sillytavern"))
    try:
        tavern.start()
    except Exception:
        tavern.stop()
        raise
    yield tavern
    tavern.stop()


def settle(server, chat=CHAT):
    """Wait until the chat's background extraction is done (a user reads the reply meanwhile)."""
    st_harness.settle(server.url, server.server.config.app.state.service.memory, chat)


def raw(floor: int, variant: int = 0, style: int = 0) -> str:
    """What the model answers for the reply at `floor`: the story sentence, in one of the ways models wrap it."""
    text = reply_text(floor, variant)
    return [f"{text}", f"\n{text}\n", f"{CHAR}: {text}", f"  {text}\n{USER}: And then?", f"{text}\n\n"][style % 5]


def test_sillytavern_through_the_proxy(sillytavern, tmp_path):
    calls: list[int] = []
    upstream = Upstream(chunk_delay=0.005)
    memory = curator.open(tmp_path / "data")
    app = create_app(memory, ServiceConfig(model=story_model(calls), upstream=upstream.url))
    try:
        with ThreadedServer(app) as server, sillytavern.session() as session:
            _run_chat(server, session, memory, upstream, calls, tmp_path)
            _status_check_and_errors(server, session, upstream)
    finally:
        upstream.close()
        memory.close()


def _run_chat(server, session, memory, upstream, calls, tmp_path):
    front = Front(session, f"{server.url}/v1/chats/{CHAT}")
    expected = 0  # extraction calls the chat should cost: one per new reply (and per changed one)
    turns = new = redone = 0  # turns; new replies; replies extracted again because their text really changed

    def turn(user_text, answer, stream=False, names=None, kept=0, changed=0):
        """One exchange; `kept`: earlier replies first extracted now (a kept choice); `changed`: replies
        extracted again because they really changed (an edit)."""
        nonlocal expected, turns, new, redone
        if names:
            front.names = names
        upstream.queue.append([answer])
        front.send(user_text, stream)
        settle(server)
        expected += 1 + kept + changed
        new += 1 + kept
        redone += changed
        turns += 1
        check()

    def check():
        assert len(calls) == expected, (turns, calls)
        stored = memory.store.messages(CHAT)
        assert len(stored) == len(front.chat), (turns, [m.text for m in stored])

    def floor() -> int:  # the floor the next reply takes
        return len(front.chat) + 1

    # names behaviour "none", then the others; replies wrapped in whitespace, a `Char:` prefix, a stop tail
    for style in range(4):
        turn(f"What happens next? ({style})", raw(floor(), style=style), stream=style % 2 == 1)
    assert front.chat[-1]["mes"] == reply_text(7)  # the stop string cut the tail the model wrote
    turn("Go on.", raw(floor(), style=4), names="completion")  # `name` on every message
    turn("And?", raw(floor(), style=2), stream=True)
    turn("Then?", raw(floor(), style=3), names="content")  # `Name: ` in front of every message
    turn("Next.", raw(floor(), style=1), names="default")

    # impersonate and a quiet prompt (Summarize): answers that are not chat messages
    before = len(memory.store.messages(CHAT))
    upstream.queue.append([f"{USER}: I take the lantern and walk to the mill."])
    impersonated = front.impersonate()
    upstream.queue.append(["Eileen and Alex travel the road; Rowan found a lantern."])
    summary = front.quiet()
    settle(server)
    turns += 2
    assert impersonated and summary
    stored = memory.store.messages(CHAT)
    assert len(stored) == before and all(summary not in m.text and "walk to the mill" not in m.text for m in stored)
    check()
    # `/gen` with a prompt of the user's own (no marker): appended after the chat's usual instructions, not streamed
    upstream.queue.append(["The wind rises over the road."])
    weather = front.quiet("Describe the weather in one line.")
    settle(server)
    turns += 1
    assert weather and len(memory.store.messages(CHAT)) == before
    check()

    # continue: the answer extends the last reply, which is extracted again as a whole
    upstream.queue.append([" Then Mira went to the harbour and found a rope."])
    front.continue_()
    settle(server)
    expected += 1
    redone += 1
    turns += 1
    check()
    assert memory.store.messages(CHAT)[-1].text.endswith("found a rope.")

    # a reply stopped mid-stream: the UI keeps what it showed, which is extracted once (with the next turn's reply)
    upstream.queue.append([" ".join(reply_text(floor() + 2 * k) for k in range(6))])
    kept = front.stopped("Tell me everything.", after=70)
    settle(server)
    assert kept and len(kept) < 200
    turns += 1
    turn("Go on.", raw(floor(), style=1), kept=1)

    # regenerate, then swipe back to the first reply and write on: its memory comes back with no model call
    turn("Where now?", raw(floor(), style=3))
    upstream.queue.append([raw(len(front.chat) - 1, variant=1, style=1)])
    front.regenerate()
    settle(server)
    expected += 1
    new += 1
    turns += 1
    check()
    front.swipe_to(0)
    turn("Good. Onwards.", raw(floor(), style=2), stream=True)

    # several choices: nothing is stored until the next request shows the one the user kept
    upstream.queue.append([raw(floor(), style=0), raw(floor(), variant=2, style=1)])
    front.chat.append({"is_user": True, "name": USER, "mes": "Two ways?", "swipes": ["Two ways?"]})
    front.several(2, pick=1)
    settle(server)
    turns += 1
    assert len(calls) == expected and len(memory.store.messages(CHAT)) == len(front.chat) - 1  # not stored yet
    turn("That one.", raw(floor(), style=4), kept=1)  # the kept choice is extracted once, with the new reply

    # the context is full: SillyTavern sends only the newest messages
    front.max_history = 12
    turn("Further.", raw(floor(), style=3), stream=True)
    front.max_history = None

    # an edit of the reply before last (a real change: it and the reply after it are extracted again)
    edited = len(front.chat) - 3
    assert not front.chat[edited]["is_user"]
    front.chat[edited]["mes"] = "Tobin went to the chapel and found a candle."
    turn("Hm.", raw(floor(), style=0), changed=2)

    # a delete: the user removes the last exchange and writes something else
    del front.chat[-2:]
    turn("Let us rest.", raw(floor(), style=2), names="completion")
    turn("Morning comes.", raw(floor(), style=1), stream=True)

    print(f"\nSillyTavern {st_harness.VERSION}: {turns} turns, {len(calls)} extraction calls, "
          f"{len(calls) / turns:.2f} per turn; {new} new replies + {redone} really changed (a continue, an edit) "
          f"= {expected} expected; {(len(calls) - redone) / new:.2f} calls per new reply")
    assert turns == 23
    assert len(calls) == expected

    # the stored chat is SillyTavern's chat, and its memory is what a fresh ingest of that chat builds
    stored = memory.store.messages(CHAT)
    assert len(stored) == len(front.chat)
    assert all(same_floor(m, Message(m.role, m.name, f["mes"])) for m, f in zip(stored, front.chat))
    assert [m.text for m in stored[:-1]] == [f["mes"] for f in front.chat[:-1]]  # the client's copies
    final = [Message("user" if m["is_user"] else "assistant", m["name"], m["mes"]) for m in front.chat]
    with curator.open(tmp_path / "fresh") as fresh:
        fresh.create_chat(CHAT, "default")
        fresh.sync(CHAT, final, extract=True, model=story_model([]))
        assert graph_signature(memory, CHAT) == graph_signature(fresh, CHAT)

    # every sampler field SillyTavern sends reached the upstream; its "no key" placeholder did not
    sent = upstream.requests[-1]
    for key in ("top_k", "min_p", "repetition_penalty", "seed", "stop", "logit_bias", "n"):
        assert key in sent, key
    assert all(h.get("authorization") in (None, "") for h in upstream.headers)


def _status_check_and_errors(server, session, upstream):
    # SillyTavern's Connect button: its status check lists the upstream's models through the proxy
    status = session.post("/api/backends/chat-completions/status",
                          json={"chat_completion_source": "custom", "custom_url": f"{server.url}/v1/chats/{CHAT}",
                                "custom_include_headers": ""}).json()
    assert status.get("data", [{}])[0].get("id") == "story-model", status
    # no chat id: SillyTavern shows the proxy's message, which says what to set
    front = Front(session, f"{server.url}/v1")
    answer = session.post("/api/backends/chat-completions/generate",
                          json={"messages": front.prompt() + [{"role": "user", "content": "Hi"}],
                                "model": "story-model", "chat_completion_source": "custom",
                                "custom_url": f"{server.url}/v1", "stream": False}).json()
    assert "no chat id" in answer["error"]["message"] and "/v1/chats/<chat id>" in answer["error"]["message"], answer
    # the header recipe names the chat instead
    upstream.queue.append([reply_text(1)])
    by_header = Front(session, f"{server.url}/v1", headers={"X-Curator-Chat": "st-header"})
    by_header.send("Hello there.")
    settle(server, "st-header")
    assert by_header.chat[-1]["mes"] == reply_text(1)
    # the upstream is down: SillyTavern shows what failed and what to check, not "Unknown error occurred"
    app = server.server.config.app
    working, app.state.proxy.upstream = app.state.proxy.upstream, f"http://127.0.0.1:{st_harness.free_port()}/v1"
    try:
        down = session.post("/api/backends/chat-completions/generate",
                            json={"messages": by_header.prompt(), "model": "story-model", "stream": False,
                                  "chat_completion_source": "custom", "custom_url": f"{server.url}/v1/chats/st-x"})
    finally:
        app.state.proxy.upstream = working
    message = down.json()["error"]["message"]
    assert "could not be reached" in message and "127.0.0.1" in message, message
    # a new chat started under the stored chat's id would replace it: refused, and SillyTavern shows a message that
    # names its own setting and the header (it drops the hint); streamed or not, nothing reaches the model
    other = Front(session, f"{server.url}/v1/chats/{CHAT}")
    other.chat.append({"is_user": True, "name": USER, "mes": "A new story begins.", "swipes": []})
    sent = len(upstream.requests)
    for stream in (False, True):
        refused = session.post("/api/backends/chat-completions/generate", json={
            "messages": other.prompt(), "model": "story-model", "stream": stream, "chat_completion_source": "custom",
            "custom_url": f"{server.url}/v1/chats/{CHAT}"})
        message = (refused.json() if not stream else __import__("json").loads(refused.text))["error"]["message"]
        assert "share no floor" in message and "Include Request Headers" in message, message
        assert "X-Curator-Allow-Rollback: true" in message and "/v1/chats/<another id>" in message, message
    assert len(upstream.requests) == sent
    # with the header (Additional Parameters > Include Request Headers) it goes through, and is undoable
    upstream.queue.append([reply_text(1)])
    meant = Front(session, f"{server.url}/v1/chats/{CHAT}", headers={"X-Curator-Allow-Rollback": "true"})
    meant.send("A new story begins.")
    settle(server)
    memory = app.state.service.memory
    assert [m.text for m in memory.store.messages(CHAT)] == ["A new story begins.", reply_text(1)]
    assert memory.trash(CHAT)[0].reason == "proxy"
