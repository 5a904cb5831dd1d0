"""What the proxy adds to a generation: per-request overhead (sync + recall + forward) and time to the first
streamed token, each against a direct call to the same upstream in the same run.

A chat model on loopback (`tests/st_harness.py`'s `Upstream`: it answers at once, or streams its reply in 9-character
chunks) stands behind `curator serve`'s app on loopback, with the scripted extraction model. The chat grows turn by
turn: each turn sends the whole chat plus a new user message once through the proxy and once straight to the
upstream (same body); every other turn streams, timing the complete answer and the first content chunk. The first
turn (the embedder loads) is not timed. Extraction of each new reply is waited for between turns (untimed), so the
figures are the request path only. `--sillytavern` also runs `tests/test_sillytavern.py` (needs node/npm and
SillyTavern's source) and prints its extraction calls per turn.

    python bench/proxy_overhead.py [--quick] [--json] [--turns 40] [--sillytavern]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from _common import TempMemory, emit, environment, latency_summary, now, parse_args, progress, table

import httpx2

from curator.testing.scripted import reply_text, scripted_model
from curator.service.server import ServiceConfig, create_app
from curator.service.server.runner import ThreadedServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from st_harness import Upstream  # noqa: E402


def _settle(http: httpx2.Client, chat: str) -> None:
    for _ in range(3000):
        jobs = http.get("/api/v1/jobs", params={"chat": chat}).json()["jobs"]
        if all(j["state"] not in ("queued", "running") for j in jobs):
            return
        time.sleep(0.02)


def _timed(http: httpx2.Client, url: str, body: dict) -> tuple[float, float | None, str]:
    """(seconds to the complete answer, seconds to the first content chunk when streamed, the text)."""
    started = now()
    if not body.get("stream"):
        answer = http.post(url, json=body)
        answer.raise_for_status()
        return now() - started, None, answer.json()["choices"][0]["message"]["content"]
    first, text = None, []
    with http.stream("POST", url, json=body) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if line.startswith("data:") and '"content"' in line:
                if first is None:
                    first = now() - started
                text.append(line)
    return now() - started, first, "".join(text)


def _sillytavern() -> str | None:
    tests = Path(__file__).resolve().parent.parent / "tests" / "test_sillytavern.py"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(tests)],
                         capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in run.stdout.splitlines() if "extraction calls" in ln), None)
    return line or (run.stdout.strip().splitlines() or ["no output"])[-1]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (p.add_argument("--turns", type=int, default=40),
                                                          p.add_argument("--sillytavern", action="store_true")))
    turns = 9 if args.quick else args.turns + 1
    upstream = Upstream()
    timings: dict[str, list[float]] = {k: [] for k in ("proxy", "direct", "proxy_stream", "direct_stream",
                                                       "proxy_first", "direct_first")}
    with TempMemory() as temp, \
            ThreadedServer(create_app(temp.memory, ServiceConfig(model=scripted_model(), upstream=upstream.url))) \
            as server, httpx2.Client(base_url=server.url, timeout=120) as http:
        proxy_url, direct_url = f"{server.url}/v1/chats/bench/chat/completions", upstream.url + "/chat/completions"
        chat = [{"role": "system", "content": "You are the narrator of a long story."}]
        for turn in range(turns):
            floor = 2 * turn + 1
            chat.append({"role": "user", "content": f"What happens next? (turn {turn})"})
            stream = turn % 2 == 1  # every other turn streamed
            body = {"model": "story", "messages": chat, "stream": stream}
            # the proxy's call first: its answer becomes the chat's next floor (as a front end would send it)
            upstream.queue += [[reply_text(floor)], [reply_text(floor)]]
            total, first, _ = _timed(http, proxy_url, body)
            timings["proxy_stream" if stream else "proxy"].append(total)
            if first is not None:
                timings["proxy_first"].append(first)
            total, first, _ = _timed(http, direct_url, body)
            timings["direct_stream" if stream else "direct"].append(total)
            if first is not None:
                timings["direct_first"].append(first)
            _settle(http, "bench")
            if turn == 0:  # the first request loads the embedder and warms the caches: not timed
                for values in timings.values():
                    values.clear()
            chat.append({"role": "assistant", "content": reply_text(floor)})
            progress(f"turn {turn + 1}/{turns}")
    upstream.close()
    overhead = [p - d for p, d in zip(timings["proxy"] + timings["proxy_stream"],
                                      timings["direct"] + timings["direct_stream"], strict=True)]
    report = {"benchmark": "proxy_overhead", "quick": args.quick, "env": environment(), "turns": turns,
              "requests": {k: latency_summary(v) for k, v in timings.items()},
              "overhead": latency_summary(overhead)}
    if args.sillytavern:
        progress("running tests/test_sillytavern.py ...")
        report["sillytavern"] = _sillytavern()

    def render(r: dict) -> str:
        rows = [(name, s["p50_ms"], s["p95_ms"], s["max_ms"]) for name, s in r["requests"].items()]
        rows.append(("overhead (proxy - direct, same turn)", r["overhead"]["p50_ms"], r["overhead"]["p95_ms"],
                     r["overhead"]["max_ms"]))
        text = f"{r['turns'] - 1} timed turns (chat grows to {2 * r['turns']} floors; every other turn streamed)\n"
        text += table(["request", "p50 ms", "p95 ms", "max ms"], rows)
        if "sillytavern" in r:
            text += f"\n{r['sillytavern']}"
        return text

    emit(args, report, render)


if __name__ == "__main__":
    main()
