"""The Memory Curator extension in the real SillyTavern 1.12.6, driven in Debian's chromium through Playwright.

SillyTavern talks to a chat model on loopback (Chat Completion, Custom OpenAI-compatible); the extension is installed
with SillyTavern's own "Install extension" (a git clone of a local repository) and talks to `curator serve` (started
with `--allow-origin` SillyTavern's origin), which has no model configured: extraction uses the model the extension
names, SillyTavern's connection, so every LLM call crosses the wire and is counted there. The session: open a
character, chat 10 turns, swipe to a new reply and back, edit a message 8 floors back, branch at floor 5 and chat in
the branch, switch between the branch and its parent, start a new chat and rename it, a group chat of two characters
(the second card carries a schema), delete a chat (and its memory, as the extension offers), then turn the named
model off and see SillyTavern say that the new chat's memory is not being written.

Asserted: each chat's commit log (one extraction commit per reply floor, the branch's copied from its parent up to
floor 5) and graph (equal to a fresh ingest of the chat as SillyTavern holds it), the extraction calls (one per
reply; the replies after an edit once more; none for swiping back, opening a branch, switching back or renaming),
the memory block in the
prompts SillyTavern sent, the speaker of each group reply, the recall card and the embedded panel in the drawer.

Needs node + npm, SillyTavern's tarball, chromium and git (skipped with the reason otherwise; `.ci/run` installs
them). Runs on the SQLite pass only: the store engine is covered by tests/test_fork.py and test_frontends_api.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest

import curator
from curator.service.server import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy
from curator.service.server.runner import ThreadedServer
from curator.settings import ModelProfile, Settings
from curator.store.messages import Message
from curator.testing import one_event
from curator.testing.scripted import graph_signature, reply_text

import st_browser
import st_harness

pytestmark = [pytest.mark.skipif(st_browser.missing() is not None, reason=st_browser.missing() or ""),
              pytest.mark.engine("sqlite", reason="drives a browser; the store engines are covered by test_fork.py "
                                                  "and test_frontends_api.py")]
EILEEN = {"name": "Eileen", "first_mes": reply_text(0)}
MIRA = {"name": "Mira", "first_mes": "Mira went to the market and found a map.",
        "extensions": {"memory_curator": {"schema": "bme"}}}
GROUP = {"name": "Road", "members": ["Eileen.png", "Mira.png"], "activation_strategy": 1}  # list order: both answer


class Calls:
    """The model's requests, by kind: SillyTavern's generations, memory's extractions and its maintenance
    (consolidation, synopses, compression: on by default)."""

    def __init__(self, upstream):
        self.upstream = upstream

    def kinds(self) -> dict[str, int]:
        counts = {"generate": 0, "extract": 0, "maintain": 0}
        for body in self.upstream.requests:
            tools = body.get("tools") or []
            kind = "generate" if not tools else "maintain" if tools[0]["function"]["name"] == "answer" else "extract"
            counts[kind] += 1
        return counts


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    work = tmp_path_factory.mktemp("st-extension")
    saved = {k: os.environ.pop(k) for k in ("CURATOR_MODEL", "CURATOR_BASE_URL", "CURATOR_API_KEY") if k in os.environ}
    upstream = st_harness.Upstream(tools=one_event)
    tavern = st_harness.SillyTavern(work / "st")
    (work / "st").mkdir()
    memory = curator.open(work / "data")
    try:
        tavern.start()
        app = create_app(memory, ServiceConfig(site=SitePolicy(allowed_origins=(tavern.url,))))
        with ThreadedServer(app) as server, sync_playwright() as playwright:
            ui = st_browser.Tavern(tavern, upstream.url, server.url)
            ui.prepare([EILEEN, MIRA], [GROUP])
            browser = playwright.chromium.launch(executable_path=str(st_browser.CHROMIUM), args=st_browser.ARGS)
            ui.open(browser)
            yield ui, server, memory, upstream, work
            ui.close()
            browser.close()
    finally:
        tavern.stop()
        upstream.close()
        memory.close()
        os.environ.update(saved)


def settle(server, memory, chat):
    st_harness.settle(server.url, memory, chat)


def st_messages(ui) -> list[Message]:
    """The open chat as SillyTavern holds it, as memory's floors."""
    return [Message("user" if m["is_user"] else "system" if m["is_system"] else "assistant", m["name"] or "", m["mes"])
            for m in ui.chat()]


def fresh_graph(work, schema: str, messages: list[Message]):
    """The graph a fresh ingest of `messages` builds, with the same model (another instance of it)."""
    model = st_harness.Upstream(tools=one_event)
    try:
        with curator.open(work / f"fresh-{time.monotonic_ns()}") as fresh:
            fresh.settings = Settings(profiles={"default": ModelProfile(model=st_browser.MODEL, base_url=model.url)})
            fresh.create_chat("c", schema)
            fresh.sync("c", messages, extract=True)
            return graph_signature(fresh, "c"), [c.anchor_floor for c in fresh.store.commits("c")
                                                 if c.origin == "extract"]
    finally:
        model.close()


def reply_floors(messages: list[Message]) -> list[int]:
    return [f for f, m in enumerate(messages) if m.role == "assistant" and m.text.strip()]


def extraction_log(memory, chat) -> list[int]:
    return sorted(c.anchor_floor for c in memory.store.commits(chat) if c.origin == "extract")


def assert_exact(ui, server, memory, work, chat, schema="default"):
    """The chat's memory is exactly what SillyTavern's chat makes: one extraction commit per reply, and the graph
    of a fresh ingest."""
    settle(server, memory, chat)
    messages = st_messages(ui)
    assert [m.text for m in memory.store.messages(chat)] == [m.text for m in messages]
    assert extraction_log(memory, chat) == reply_floors(messages)
    graph, fresh_log = fresh_graph(work, schema, messages)
    assert fresh_log == reply_floors(messages)
    assert graph_signature(memory, chat) == graph
    assert memory.chat(chat).schema.name == schema


def test_a_role_play_session_in_sillytavern(session):
    ui, server, memory, upstream, work = session
    calls = Calls(upstream)
    spent = []  # (step, extraction calls) for the printed summary

    def step(name, expected_extractions, action):
        before = calls.kinds()
        result = action()
        if isinstance(result, dict) and result.get("chat"):
            settle(server, memory, result["chat"])
        ui.idle()
        after = calls.kinds()
        used = after["extract"] - before["extract"]
        spent.append((name, used, after["maintain"] - before["maintain"]))
        assert used == expected_extractions, (name, before, after)
        return result

    # a character: SillyTavern starts a chat with her greeting; its memory chat is made and the greeting extracted
    main = step("open Eileen", 1, lambda: ui.select_character("Eileen"))
    assert main["action"] == "created"

    # 10 turns: one extraction per reply, and the memory goes into the prompt SillyTavern sends
    for turn in range(10):
        upstream.queue.append([reply_text(2 * turn + 2)])
        step(f"turn {turn + 1}", 1, lambda turn=turn: ui.send(f"What happens next? ({turn})") or main)
    generations = [r for r in upstream.requests if not r.get("tools")]
    prompt = json.dumps(generations[-1]["messages"])
    assert "[Memory" in prompt and "Summary 10" in prompt  # the block, after the story string
    assert len(ui.chat()) == 21
    assert_exact(ui, server, memory, work, main["chat"])
    card = ui.page.evaluate("window.__memoryCurator.client.card(window.__memoryCurator.state.chat, 20)")
    assert card["reply_floor"] == 20 and card["speaker_requested"] == "Eileen"
    assert any(card["text"].strip() == m["content"].strip() for m in generations[-1]["messages"])  # what was sent

    # a swipe: a new reply for the last message (one call), the old one's memory shelved; swiping back restores it
    upstream.queue.append([reply_text(20, variant=5)])
    step("swipe to a new reply", 1, lambda: ui.swipe("right") or main)
    step("swipe back", 0, lambda: ui.swipe("left") or main)
    assert_exact(ui, server, memory, work, main["chat"])

    # an edit 8 floors back (floor 12): memory rolls back from there and the 5 replies from there are extracted again
    step("edit floor 12", 5, lambda: ui.edit(12, "Tobin went to the chapel and found a candle.") or main)
    events = ui.page.evaluate("window.__memoryCurator.client.events(window.__memoryCurator.state.chat)")["events"]
    assert any(e["event"] == "message_edited" and e["dirty_floor"] == 12 for e in events)
    assert_exact(ui, server, memory, work, main["chat"])
    parent_log = [(c.id, c.anchor_floor, c.origin, c.ops) for c in memory.store.commits(main["chat"])]
    parent_graph = graph_signature(memory, main["chat"])

    # a branch at floor 5: its own memory, a copy of the parent's up to floor 5, made with no model call
    branch = step("branch at floor 5", 0, lambda: ui.branch(5))
    assert branch["action"] == "forked" and branch["chat"] != main["chat"]
    assert [(c.anchor_floor, c.origin, c.ops) for c in memory.store.commits(branch["chat"])] == \
        [(a, o, ops) for _, a, o, ops in parent_log if a <= 5]
    upstream.queue.append([reply_text(7, variant=3)])
    step("a turn in the branch", 1, lambda: ui.send("Let us take the other road.") or branch)
    assert_exact(ui, server, memory, work, branch["chat"])
    branch_graph = graph_signature(memory, branch["chat"])

    # back to the parent and to the branch again: each finds its own memory as it was, with no model call
    back = step("back to the parent", 0, ui.back_to_parent)
    assert back["chat"] == main["chat"] and back["action"] == "bound"
    assert [(c.id, c.anchor_floor, c.origin, c.ops) for c in memory.store.commits(main["chat"])] == parent_log
    assert graph_signature(memory, main["chat"]) == parent_graph
    again = step("to the branch again", 0, lambda: ui.open_chat(branch["file"]))
    assert again["chat"] == branch["chat"] and graph_signature(memory, branch["chat"]) == branch_graph

    # a new chat with the same character: a memory chat of its own
    new = step("start a new chat", 1, ui.new_chat)
    assert new["action"] == "created" and new["chat"] not in (main["chat"], branch["chat"])
    upstream.queue.append([reply_text(2, variant=4)])
    step("a turn in the new chat", 1, lambda: ui.send("Where are we now?") or new)
    assert_exact(ui, server, memory, work, new["chat"])
    renamed = step("rename the new chat", 0, lambda: ui.rename("The other road"))
    assert renamed["chat"] == new["chat"] and renamed["action"] == "renamed"

    # a group of two: both greet, both answer each message; each reply's recall is for the one about to speak;
    # Mira's card carries the `bme` schema, so the group's memory uses it
    group = step("open the group", 2, lambda: ui.open_group("Road"))
    assert group["action"] == "created" and memory.chat(group["chat"]).schema.name == "bme"
    upstream.queue += [[reply_text(4)], ["Mira went to the harbour and found a rope."]]
    step("a group turn", 2, lambda: ui.send("Who goes first?", replies=2) or group)
    assert_exact(ui, server, memory, work, group["chat"], schema="bme")
    events = ui.page.evaluate("window.__memoryCurator.client.events(window.__memoryCurator.state.chat)")["events"]
    speakers = [e["speaker"] for e in reversed(events) if e["event"] == "generation_started"]
    assert speakers == ["Eileen", "Mira"]

    # the drawer: the recall card of the last reply, and the memory panel embedded (framed only for this origin)
    ui.page.evaluate("$(\"#chat .mes:last .mc_card_button\").trigger('click')")
    ui.page.wait_for_function("document.querySelector('#memory_curator_drawer .mc-card-head')")
    assert "for Mira" in ui.page.inner_text("#memory_curator_drawer .mc-card-head")
    ui.page.click("#memory_curator_drawer .mc-tabs [data-tab='panel']")
    ui.page.wait_for_selector("#memory_curator_drawer iframe.mc-frame")
    ui.page.wait_for_function("[...document.querySelectorAll('iframe.mc-frame')].length === 1")
    panel = ui.page.frame_locator("#memory_curator_drawer iframe.mc-frame").owner.element_handle().content_frame()
    panel.wait_for_function("window.__panel && window.__panel.ready")
    assert panel.eval_on_selector("#chat-select", "s => s.value") == group["chat"]
    assert "active nodes" in panel.inner_text("#tab-overview")
    ui.page.click("#memory_curator_drawer .mc-tabs [data-tab='status']")
    ui.page.wait_for_selector("#memory_curator_drawer [data-state='ok']")
    status = ui.page.inner_text("#memory_curator_drawer .mc-body")
    assert "Memory is being written" in status and "for Eileen" in status and "null" not in status
    ui.page.screenshot(path=str(work / "drawer.png"))
    ui.page.click("#memory_curator_drawer .mc-close")

    # deleting a chat in SillyTavern asks whether its memory goes too: yes
    ui.page.evaluate("window.__memoryCurator.settings().ask_on_delete = true")
    ui.select_character("Eileen")  # her current chat: the renamed one
    assert ui.page.evaluate("SillyTavern.getContext().getCurrentChatId()") == "The other road"
    ui.delete_chat(keep_memory=False)
    ui.page.wait_for_function("document.querySelector('#toast-container') && "
                              "document.querySelector('#toast-container').innerText.includes('Its memory was deleted')")
    assert not memory.store.has_chat(new["chat"]) and memory.store.has_chat(main["chat"])

    # no model named and none configured: SillyTavern says this chat's memory is not being written
    ui.page.evaluate("window.__memoryCurator.settings().model_source = 'none'")
    ui.select_character("Mira")
    ui.page.wait_for_selector("#toast-container .toast-warning:has-text('Memory is not being written')")
    assert ui.page.evaluate("window.__memoryCurator.state.extraction.state") == "no_model"

    assert ui.page.errors == []
    total = calls.kinds()
    print(f"\nSillyTavern {st_harness.VERSION} + the extension in chromium: "
          + ", ".join(f"{name}: {extract}" + (f" (+{maintain} maintenance)" if maintain else "")
                      for name, extract, maintain in spent)
          + f"\ngenerations {total['generate']}, extraction calls {total['extract']}, "
            f"maintenance calls {total['maintain']}")
