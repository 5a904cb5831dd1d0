"""Service load: many HTTP clients syncing and recalling on many chats at once, against `curator serve`.

`curator serve` runs on loopback as 1 and then as 2 processes (`--workers`), over one store (PostgreSQL: a
throwaway cluster unless --store names one) and one Chroma server (`chroma run`), each run on a store of its own; its
extraction model is a fake OpenAI-compatible endpoint in
this process (one event per step, no sleep), so the figures are the service's own cost. Each client owns a
share of one chat (the clients of a chat take turns, like the tabs of one front end) and loops: change the chat
(85% a new turn, 10% a swipe of the last reply, 5% an edit of one of the last 10 floors), sync it as a tail
window from the first changed floor, then recall for the last user message. Re-extraction runs as the service's
jobs meanwhile. At the end, once every job is done, each chat is checked: stored messages equal the client's
chat, every due reply is extracted exactly once (no lost or duplicated commit), and the event of each extracted
reply was made from its current text (no stale memory after an edit or swipe); its commit log, replayed from
nothing, gives exactly its graph (no interleaved commits; recall's access counts, kept outside the log, aside). The
service's CPU
seconds (all its processes, from /proc) are reported next to wall-clock throughput.

    python bench/service_load.py [--quick] [--json] [--clients 50] [--chats 20] [--seconds 60] [--processes 1,2]
        [--job-threads 8] [--store auto|sqlite|postgresql://...]
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx2
from _common import emit, environment, latency_summary, parse_args, progress, table

import curator
from curator.testing.scripted import reply_text
from curator.testing import FakeOpenAI


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChatState:
    """The client side of one chat: its messages, and a lock so its clients take turns changing it."""

    def __init__(self, chat_id: str):
        self.id, self.messages, self.lock, self.turns = chat_id, [], threading.Lock(), 0


def change(chat: ChatState, rng: random.Random) -> tuple[int, str]:
    """Change the chat one step; returns the first changed floor and what was done."""
    roll = rng.random()
    replies = [i for i, m in enumerate(chat.messages) if m["role"] == "assistant"]
    if roll < 0.10 and replies:
        last = len(chat.messages) - 1
        variant = chat.messages[last]["swipe_id"] + 1
        chat.messages[last] = dict(chat.messages[last], text=reply_text(last, variant % 3), swipe_id=variant)
        return last, "swipe"
    if roll < 0.15 and len(chat.messages) > 10:
        floor = rng.randrange(len(chat.messages) - 10, len(chat.messages))
        chat.messages[floor] = dict(chat.messages[floor], text=chat.messages[floor]["text"] + " (edited)")
        return floor, "edit"
    start = len(chat.messages)
    chat.turns += 1
    chat.messages.append({"role": "user", "name": "User", "text": f"What happens next? (turn {chat.turns})",
                          "swipe_id": 0})
    chat.messages.append({"role": "assistant", "name": "Narrator", "text": reply_text(start + 1), "swipe_id": 0})
    return start, "turn"


def client_loop(url: str, chat: ChatState, seed: int, deadline: float, stats: dict, guard: threading.Lock) -> None:
    rng = random.Random(seed)
    with httpx2.Client(base_url=url, timeout=60) as http:
        while time.monotonic() < deadline:
            with chat.lock:
                start, kind = change(chat, rng)
                window = [dict(m, floor=start + i) for i, m in enumerate(chat.messages[start:])]
                began = time.perf_counter()
                answer = http.post(f"/chats/{chat.id}/sync",
                                   json={"messages": window, "start": start, "allow_rollback": True})
                sync_s = time.perf_counter() - began
                user_floor = max(i for i, m in enumerate(chat.messages) if m["role"] == "user")
                query = chat.messages[user_floor]["text"]
            ok = answer.status_code == 200
            body = answer.json() if ok else {}
            began = time.perf_counter()
            recalled = http.post(f"/chats/{chat.id}/recall", json={"query": query, "user_floor": user_floor})
            recall_s = time.perf_counter() - began
            with guard:
                stats["sync"].append(sync_s)
                stats["recall"].append(recall_s)
                stats["kinds"][kind] = stats["kinds"].get(kind, 0) + 1
                stats["restored"] += len(body.get("restored", []))
                stats["reverted"] += len(body.get("reverted", []))
                for response in (answer, recalled):
                    if response.status_code != 200:
                        stats["errors"].append(f"{response.status_code}: {response.text[:200]}")


def wait_for_jobs(url: str, chats: list[ChatState], timeout: float) -> tuple[dict, int, int]:
    """Wait until no job is active and nothing is due; returns the job states and how many floors were still due
    with no job to extract them when the jobs first ran out (should be 0: those would be lost without a nudge)."""
    states: dict[str, int] = {}
    left_due = None
    with httpx2.Client(base_url=url, timeout=60) as http:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = http.get("/jobs", params={"limit": 1000}).json()["jobs"]
            if not any(j["state"] in ("queued", "running") for j in jobs):
                due = {c.id: http.post(f"/chats/{c.id}/sync", json={"messages": [], "start": len(c.messages),
                                                                      "extract": False}).json()["due"] for c in chats}
                if left_due is None:
                    left_due = sum(len(d) for d in due.values())
                if not any(due.values()):
                    break
                for chat_id in (c for c, d in due.items() if d):
                    http.post(f"/chats/{chat_id}/extract", json={})
            time.sleep(0.1)
        listed = http.get("/jobs", params={"limit": 1000}).json()["jobs"]
        for j in listed:
            states[j["state"]] = states.get(j["state"], 0) + 1
    return states, left_due or 0, len({j["worker"] for j in listed if j["worker"]})


def check(data: Path, store: str, chats: list[ChatState]) -> dict:
    """Lost, duplicated or stale commits, stored chats that differ from the clients' chats, and interleaved
    commits: a chat's commit log, replayed from nothing, must give exactly its graph."""
    found = {"lost": 0, "duplicated": 0, "stale": 0, "chat_mismatch": 0, "extract_commits": 0, "interleaved": 0}
    with curator.open(data, store=store) as memory:
        for chat in chats:
            stored = memory.store.messages(chat.id)
            if [(m.role, m.text, m.swipe_id) for m in stored] != \
                    [(m["role"], m["text"], m["swipe_id"]) for m in chat.messages]:
                found["chat_mismatch"] += 1
            replies = [i for i, m in enumerate(stored) if m.role == "assistant" and m.text.strip()]
            commits = [c for c in memory.store.commits(chat.id) if c.origin == "extract"]
            anchors = [c.anchor_floor for c in commits]
            found["extract_commits"] += len(anchors)
            found["duplicated"] += len(anchors) - len(set(anchors))
            found["lost"] += len(set(replies) - set(anchors))
            for c in commits:
                summary = next((op["fields"].get("summary", "") for op in c.ops if op["op"] == "create_node"), "")
                if stored[c.anchor_floor].text[:60] not in summary:
                    found["stale"] += 1
            before = _replayable(memory.graph(chat.id).snapshot())
            memory.store.rebuild_projection(chat.id)  # replay the log from nothing
            found["interleaved"] += int(_replayable(memory.graph(chat.id).snapshot()) != before)
    return found


def _replayable(snapshot: dict) -> dict:
    """The graph as its commit log makes it: recall's access counts are bookkeeping outside the log."""
    return {"nodes": [{k: v for k, v in n.items() if k not in ("access_count", "last_access")}
                      for n in snapshot["nodes"]], "edges": snapshot["edges"]}


class Servers:
    """The PostgreSQL store (a throwaway cluster unless --store names one, SQLite with --store sqlite) and the
    one Chroma server every service process shares."""

    def __init__(self, tmp: Path, store: str):
        self.tmp, self.cluster, self.chroma = tmp, None, None
        if store == "auto":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            from pg_cluster import binaries, start

            if binaries() is None:
                progress("no PostgreSQL binaries here: the store is SQLite")
                store = "sqlite"
            else:
                progress("starting a throwaway PostgreSQL cluster ...")
                self.cluster = Path(tempfile.mkdtemp(prefix="curator-load-pg-"))
                store = start(self.cluster)
        self.store = store
        port = _free_port()
        exe = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
        self.chroma = subprocess.Popen([exe, "run", "--path", str(tmp / "chroma"), "--host", "127.0.0.1",
                                        "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.chroma_url = f"http://127.0.0.1:{port}"
        for _ in range(1200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)

    def fresh_store(self, name: str) -> str:
        """A store of its own for one run: a schema on PostgreSQL, the data directory's file on SQLite."""
        if self.store == "sqlite":
            return "sqlite"
        import psycopg

        with psycopg.connect(self.store, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            admin.execute(f"CREATE SCHEMA {name}")
        option = quote(f"-csearch_path={name}")
        return f"{self.store}{'&' if '?' in self.store else '?'}options={option}"

    def close(self) -> None:
        if self.chroma is not None:
            self.chroma.terminate()
            self.chroma.wait(timeout=60)
        if self.cluster is not None:
            from pg_cluster import stop

            stop(self.cluster)


def run_once(servers: Servers, tmp: Path, fake, processes: int, args, clients: int, chats_n: int,
             seconds: float) -> dict:
    data = tmp / f"data-{processes}"
    data.mkdir()
    (data / "config.yaml").write_text(f"vectors_url: {servers.chroma_url}\n")
    store = servers.fresh_store(f"load_{processes}")
    port = _free_port()
    exe = Path(sys.executable).with_name("curator")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "curator"]
    env = {**os.environ, "CURATOR_MODEL": "fake", "CURATOR_BASE_URL": fake.base_url, "CURATOR_API_KEY": "k"}
    env.pop("CURATOR_STORE", None)
    log = (tmp / f"serve-{processes}.log").open("wb")
    server = subprocess.Popen(cmd + ["--data", str(data), "--store", store, "serve", "--port", str(port),
                                     "--workers", str(processes), "--job-threads", str(args.job_threads)],
                              env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api/v1"
    calls_before = len(fake.requests)
    try:
        for _ in range(2400):
            try:
                if httpx2.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                time.sleep(0.05)
        chats = [ChatState(f"p{processes}-chat-{i:02d}") for i in range(chats_n)]
        for chat in chats:
            httpx2.post(url + "/chats", json={"id": chat.id}, timeout=60).raise_for_status()
        stats: dict = {"sync": [], "recall": [], "errors": [], "kinds": {}, "restored": 0, "reverted": 0}
        guard = threading.Lock()
        progress(f"{processes} process(es): {clients} clients on {chats_n} chats for {seconds:.0f} s ...")
        cpu_before = _cpu_of_group(server.pid)
        began = time.monotonic()
        deadline = began + seconds
        threads = [threading.Thread(target=client_loop, args=(url, chats[i % chats_n], args.seed + i, deadline,
                                                              stats, guard)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - began
        cpu_s = _cpu_of_group(server.pid) - cpu_before
        progress("waiting for extraction jobs to finish ...")
        settle_began = time.monotonic()
        jobs, left_due, workers = wait_for_jobs(url, chats, timeout=600)
        settle_s = time.monotonic() - settle_began
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
    log.close()
    found = check(data, store, chats)
    requests = len(stats["sync"]) + len(stats["recall"])
    # the service's own account of each error (its tracebacks), so a failed run says where, not only "500"
    server_errors = _tracebacks((tmp / f"serve-{processes}.log").read_text(errors="replace")) if stats["errors"] else []
    return {
        "processes": processes, "requests": requests, "requests_per_s": round(requests / elapsed, 1),
        "service_cpu_s": round(cpu_s, 2),
        "syncs": len(stats["sync"]), "recalls": len(stats["recall"]), "errors": len(stats["errors"]),
        "error_samples": stats["errors"][:5], "server_errors": server_errors[:3],
        "changes": stats["kinds"], "reverted_commits": stats["reverted"],
        "restored_from_shelf": stats["restored"], "sync": latency_summary(stats["sync"]),
        "recall": latency_summary(stats["recall"]), "settle_s": round(settle_s, 2), "jobs": jobs,
        "job_workers": workers, "due_without_job": left_due,
        "extraction_calls": len(fake.requests) - calls_before, **found,
    }


def _tracebacks(log: str) -> list[str]:
    """The tracebacks in a service log, each with the line before it (what failed)."""
    lines, found = log.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j].startswith(" ")), i)
            found.append("\n".join(lines[max(0, i - 1):end + 1]))
    return found


def _cpu_of_group(leader: int) -> float:
    """User + system CPU seconds of the service's processes so far (the supervisor and its workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == leader:  # process group id: the service was started in a session of its own
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--clients", type=int, default=50), p.add_argument("--chats", type=int, default=20),
        p.add_argument("--seconds", type=float, default=60.0),
        p.add_argument("--processes", default="1,2", help="service process counts to run, e.g. 1,2"),
        p.add_argument("--job-threads", type=int, default=8, help="job threads per service process"),
        p.add_argument("--store", default="auto", help="postgresql://... | sqlite | auto (a throwaway PostgreSQL "
                                                       "cluster when its binaries are installed)")))
    clients, chats_n, seconds = (6, 3, 4.0) if args.quick else (args.clients, args.chats, args.seconds)
    counts = [int(n) for n in args.processes.split(",")]
    with tempfile.TemporaryDirectory(prefix="curator-load-") as tmp, FakeOpenAI() as fake:
        servers = Servers(Path(tmp), args.store)
        try:
            runs = {str(n): run_once(servers, Path(tmp), fake, n, args, clients, chats_n, seconds) for n in counts}
        finally:
            servers.close()
        engine = "sqlite" if servers.store == "sqlite" else "postgresql"
    report = {
        "benchmark": "service_load", "quick": args.quick, "env": environment(),
        "params": {"clients": clients, "chats": chats_n, "seconds": seconds, "job_threads": args.job_threads,
                   "store": engine, "vectors": "chroma server", "processes": counts},
        "results": {"runs": runs},
    }
    emit(args, report, render)


def render(report: dict) -> str:
    p = report["params"]
    lines = [f"{p['clients']} clients, {p['chats']} chats, {p['seconds']:.0f} s per run; store {p['store']}, "
             f"vectors on one {p['vectors']}, {p['job_threads']} job threads per process"]
    for n, r in report["results"]["runs"].items():
        lines += [
            (f"\n{n} service process(es): {r['requests']} requests ({r['requests_per_s']}/s), {r['errors']} errors, "
             f"service CPU {r['service_cpu_s']} s; changes {r['changes']}"),
            table(["request", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"],
                  [(name, r[key + "s"], r[key]["p50_ms"], r[key]["p95_ms"], r[key]["p99_ms"], r[key]["max_ms"])
                   for name, key in (("sync", "sync"), ("recall", "recall"))]),
            (f"after the run: jobs {r['jobs']} by {r['job_workers']} worker(s), settled in {r['settle_s']} s; "
             f"{r['extract_commits']} extraction commits, {r['extraction_calls']} model calls, "
             f"{r['reverted_commits']} commits rolled back, {r['restored_from_shelf']} restored from the swipe shelf"),
            f"floors due with no job once the jobs ran out: {r['due_without_job']}",
            (f"lost {r['lost']}, duplicated {r['duplicated']}, stale {r['stale']}, interleaved {r['interleaved']}, "
             f"chats differing {r['chat_mismatch']}")]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
