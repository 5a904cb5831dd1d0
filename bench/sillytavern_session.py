"""The Memory Curator extension in the real SillyTavern 1.12.6 (Debian's chromium, driven by Playwright) over a
scripted role-play session: LLM calls per reply, the time the extension adds to each generation (against the same
generations with the extension off, in the same run), and the memory of each chat afterwards.

SillyTavern's chat model is on loopback (`tests/st_harness.py`'s `Upstream`, answering after `--delay` seconds, at
once by default); `curator serve`'s app has no model configured, so extraction uses the one the extension names
(SillyTavern's connection, the same loopback model, which answers extraction requests with one event: curator's
`one_event`). The timed part alternates turns between two characters' chats, one with the extension on and one with
it off (switching chats between turns, untimed); a generation is timed in the page from GENERATION_STARTED to the
reply's MESSAGE_RECEIVED, what the user waits for (the extension's sync + recall before the request is in it; the
sync after the reply, off the user's path, is not). Then the rest of the session of
tests/test_sillytavern_extension.py: an edit 8 floors back, a branch at floor 5 with a turn, back to the parent, a
new chat with a turn, a group of two with a turn. Needs node/npm, SillyTavern's tarball, chromium and git.

    python bench/sillytavern_session.py [--quick] [--json] [--turns 20] [--delay 0.0]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import emit, environment, latency_summary, parse_args, progress, table

import curator
from curator.service.server import ServiceConfig, create_app
from curator.service.server.request_guard import SitePolicy
from curator.service.server.runner import ThreadedServer
from curator.store.forks import fork_of
from curator.testing import one_event
from curator.testing.scripted import reply_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import st_browser  # noqa: E402
import st_harness  # noqa: E402

TIMER = """() => {
    const { eventSource, eventTypes } = SillyTavern.getContext();
    window.__bench = { runs: [], t0: null };
    eventSource.makeFirst(eventTypes.GENERATION_STARTED, (type, options, dryRun) => {
        if (!dryRun && type !== 'quiet') window.__bench.t0 = performance.now();
    });
    eventSource.makeLast(eventTypes.MESSAGE_RECEIVED, () => {
        if (window.__bench.t0 !== null) {
            window.__bench.runs.push(performance.now() - window.__bench.t0);
            window.__bench.t0 = null;
        }
    });
}"""


def extraction_calls(upstream) -> int:
    return sum(1 for r in upstream.requests if r.get("tools") and r["tools"][0]["function"]["name"] != "answer")


def main() -> None:
    def extra(parser):
        parser.add_argument("--turns", type=int, default=20, help="timed turns per chat (default 20)")
        parser.add_argument("--delay", type=float, default=0.0, help="the chat model's answer time, seconds")

    args = parse_args(__doc__.split("\n")[0], extra)
    why = st_browser.missing()
    if why:
        raise SystemExit(f"cannot run: {why}")
    turns = 4 if args.quick else args.turns
    for name in ("CURATOR_MODEL", "CURATOR_BASE_URL", "CURATOR_API_KEY"):
        os.environ.pop(name, None)
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="curator-st-bench-"))
    upstream = st_harness.Upstream(delay=args.delay, tools=one_event)
    tavern = st_harness.SillyTavern(work / "st")
    (work / "st").mkdir()
    memory = curator.open(work / "data")
    try:
        progress("starting SillyTavern ...")
        tavern.start()
        app = create_app(memory, ServiceConfig(site=SitePolicy(allowed_origins=(tavern.url,))))
        with ThreadedServer(app) as server, sync_playwright() as playwright:
            ui = st_browser.Tavern(tavern, upstream.url, server.url)
            ui.prepare([{"name": "Eileen", "first_mes": reply_text(0)}, {"name": "Tobin", "first_mes": reply_text(0)},
                        {"name": "Mira", "first_mes": "Mira went to the market and found a map."}],
                       [{"name": "Road", "members": ["Eileen.png", "Mira.png"], "activation_strategy": 1}])
            browser = playwright.chromium.launch(executable_path=str(st_browser.CHROMIUM), args=st_browser.ARGS)
            ui.open(browser)
            report = session(ui, server, memory, upstream, turns)
            ui.close()
            browser.close()
    finally:
        tavern.stop()
        upstream.close()
        memory.close()
        shutil.rmtree(work, ignore_errors=True)
    report = {"benchmark": "sillytavern_session", "quick": args.quick, "env": environment(),
              "params": {"turns": turns, "delay_s": args.delay, "sillytavern": st_harness.VERSION}, "results": report}
    emit(args, report, render)


def _set_enabled(ui, on: bool) -> None:
    ui.page.evaluate(f"window.__memoryCurator.settings().enabled = {'true' if on else 'false'}")


def session(ui, server, memory, upstream, turns: int) -> dict:
    def settle(chat):
        st_harness.settle(server.url, memory, chat)

    ui.page.evaluate(TIMER)
    chats = {}
    _set_enabled(ui, False)
    ui.switch_character("Tobin", bound=False)  # the chat without the extension
    _set_enabled(ui, True)
    on = ui.switch_character("Eileen")
    chats["main"] = on["chat"]
    timed = {"on": [], "off": []}
    progress(f"{turns} timed turns in each chat ...")
    for turn in range(turns):
        for mode in ("on", "off"):
            _set_enabled(ui, mode == "on")  # switch to the chat of this mode (untimed)
            ui.switch_character("Eileen" if mode == "on" else "Tobin", bound=mode == "on")
            upstream.queue.append([reply_text(2 * turn + 2)])
            ui.send(f"What happens next? ({turn})")
            if mode == "on":
                settle(chats["main"])
            if turn:  # the first turn loads the embedder: not timed (as in bench/proxy_overhead.py)
                timed[mode].append(ui.page.evaluate("window.__bench.runs.at(-1)") / 1000.0)
    _set_enabled(ui, True)
    ui.switch_character("Eileen")
    server_ms = [e["ms"] for e in ui.page.evaluate("window.__memoryCurator.client.events(window.__memoryCurator."
                                                   "state.chat)")["events"] if e["event"] == "generation_started"]
    progress("the rest of the session: an edit, a branch, a new chat, a group ...")
    floors = len(ui.chat())
    edited = max(0, floors - 9)  # 8 floors back from the last
    redone = sum(1 for f, m in enumerate(ui.chat()) if f >= edited and not m["is_user"] and not m["is_system"])
    ui.edit(edited, "Tobin went to the chapel and found a candle.")
    settle(chats["main"])
    branch = ui.branch(5)
    chats["branch"] = branch["chat"]
    upstream.queue.append([reply_text(7, variant=3)])
    ui.send("Let us take the other road.")
    settle(chats["branch"])
    ui.back_to_parent()
    new = ui.new_chat()
    chats["new"] = new["chat"]
    upstream.queue.append([reply_text(2, variant=4)])
    ui.send("Where are we now?")
    settle(chats["new"])
    group = ui.open_group("Road")
    chats["group"] = group["chat"]
    upstream.queue += [[reply_text(4)], ["Mira went to the harbour and found a rope."]]
    ui.send("Who goes first?", replies=2)
    settle(chats["group"])
    per_chat = {}
    replies = 0
    shared = 0  # replies a fork copied from its parent (no call)
    for name, chat in chats.items():
        stats = memory.graph(chat).stats()
        messages = memory.store.messages(chat)
        reply_floors = sum(1 for m in messages if m.role == "assistant" and m.text.strip())
        replies += reply_floors
        fork = fork_of(memory.store, chat)
        if fork is not None:
            shared += sum(1 for m in messages[:fork["floor"] + 1] if m.role == "assistant" and m.text.strip())
        usage = memory.usage(chat)["usage"]
        per_chat[name] = {"chat": chat, "floors": len(messages), "replies": reply_floors,
                          "commits": len(memory.store.commits(chat)), "nodes_active": stats["nodes_active"],
                          "edges": stats["edges"], "llm_calls": usage["total"]["calls"],
                          "tokens": usage["total"]["input_tokens"] + usage["total"]["output_tokens"]}
    calls = extraction_calls(upstream)
    added = statistics.median(timed["on"]) - statistics.median(timed["off"])
    return {"generation_with_extension": latency_summary(timed["on"]),
            "generation_without": latency_summary(timed["off"]),
            "added_p50_ms": round(added * 1000, 1),
            "server_generation_started_ms": latency_summary([m / 1000 for m in server_ms]) if server_ms else None,
            "extraction_calls": calls, "maintenance_calls": sum(
                1 for r in upstream.requests if r.get("tools") and r["tools"][0]["function"]["name"] == "answer"),
            "replies_in_memory": replies, "replies_copied_by_forks": shared, "replies_extracted_again": redone,
            "calls_per_new_reply": round((calls - redone) / max(1, replies - shared), 3), "chats": per_chat}


def render(report: dict) -> str:
    r = report["results"]
    on, off = r["generation_with_extension"], r["generation_without"]
    lines = [table(["generation (GENERATION_STARTED -> reply shown)", "p50 ms", "p95 ms", "mean ms"],
                   [("extension on", on["p50_ms"], on["p95_ms"], on["mean_ms"]),
                    ("extension off", off["p50_ms"], off["p95_ms"], off["mean_ms"])]),
             f"time added per generation (p50 on - p50 off): {r['added_p50_ms']} ms; the service's part "
             f"(sync + recall of generation_started): p50 {(r['server_generation_started_ms'] or {}).get('p50_ms')} ms",
             f"extraction calls {r['extraction_calls']}: {r['replies_in_memory']} replies in memory, of which "
             f"{r['replies_copied_by_forks']} a branch copied (no call), and {r['replies_extracted_again']} replies "
             f"extracted again after the edit 8 floors back: {r['calls_per_new_reply']} calls per new reply; "
             f"maintenance calls (consolidation, synopses, compression) {r['maintenance_calls']}", "",
             table(["chat", "floors", "replies", "commits", "active nodes", "edges", "LLM calls", "tokens"],
                   [(name, c["floors"], c["replies"], c["commits"], c["nodes_active"], c["edges"], c["llm_calls"],
                     c["tokens"]) for name, c in r["chats"].items()])]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
