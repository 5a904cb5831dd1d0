"""Cold start: what a fresh process pays before its first answer (issue 33), in CPU seconds of that process.

- one-shot commands: `--help`, `chats`, `show`, and the cheap errors (a file that is no chat, ingest without a
  model, recall or show of a missing chat, `serve` on a busy port), on a data directory holding the example chat;
- `curator serve`: CPU when `/api/v1/health` first answers (it listens before its app loads) and when the first
  real request (`GET /api/v1/chats`) is answered;
- the first recall in a fresh process on chats of 10k and 100k nodes (built as bench/recall_latency.py builds
  them: random vectors, real BM25 text, a message per event): the `recall()` call alone, and the whole process
  (`curator recall` from the shell), next to the same process doing a bare query (embed the query, one Chroma
  query of 20 through chromadb's client), to the floor (embed the query, search both of the chat's collections
  through Chroma's Rust bindings as recall's first searches do: what any recall of this design pays) and to the
  whole recall state loaded first (`Recaller(full_after=0)`: what every first recall did before, reading and
  tokenizing every node), all in the same run. The first recall of a chat whose lexicon
  snapshot is not saved yet (it is made then, once), and the first after 20 live turns committed by another
  process (the snapshot followed by what changed) are timed too. The injections of the cold and the whole state
  are compared (equal; tests/test_cold_recall.py checks it on every feature).

Each figure is the min and median over `--repeat` fresh processes after one unmeasured run, with Python's bytecode
cached as an installed package has it (this machine sets PYTHONDONTWRITEBYTECODE; the children get a cache folder
of their own). The machine's load matters: CPU seconds less than wall time, but contention still shows.

    python bench/cold_start.py [--quick] [--json] [--sizes 10000,100000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import http.client
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, environment, parse_args, progress, table
from recall_latency import NAMES, PLACES, VERBS, build_chat, sentence

import curator
from curator.paths import example_file
from curator.store.messages import Message

# the installed command (as a user runs it), else the module
CURATOR = ([str(Path(sys.executable).with_name("curator"))] if Path(sys.executable).with_name("curator").exists()
           else [sys.executable, "-m", "curator"])
# The first recall in a fresh process, in that process: `how` is cold (the default), whole (the whole state first:
# the path before) or bare (embed the query and one Chroma query: the floor any recall pays).
FIRST_RECALL = r"""
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
data, chat, query, how = sys.argv[1:5]
import curator
started = cpu()
memory = curator.open(data)
opened = cpu()
if how == "whole":  # as `Memory.recall` makes its recaller, with the whole state loaded at the first recall
    from curator.recall.engine import Recaller
    memory._core._recaller = Recaller(memory.store, memory.settings, memory.index, full_after=0)
if how == "bare":
    vector = memory.index.function.embedder.embed_queries([query])[0]
    memory.index._collection(chat).query(query_embeddings=[vector], n_results=20, include=["distances"])
    text = ""
elif how == "floor":  # what any recall of this design pays: one e5 pass, both collections through the Rust bindings
    from curator.vectors.search import NODES, SOURCES
    index = memory.index
    vector = index.function.embedder.embed_queries([query])[0]
    for kind in (NODES, SOURCES):
        assert index.direct.query(index.collection_name(chat, kind), vector, 20), "the direct reader did not answer"
    text = ""
else:
    text = memory.recall(chat, query).text
done = cpu()
memory.close()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork+exec (it would be the bench's own peak)
hwm = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
print(json.dumps({"first_s": done - opened, "process_s": done, "rss_mb": hwm / 1024, "text": text}))
"""


def child_env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CURATOR_") and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache), "COLUMNS": "200"}


def cpu_of(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, proc


def spread(values: list[float]) -> dict:
    values = sorted(values)
    return {"min_s": round(values[0], 3), "median_s": round(values[len(values) // 2], 3), "runs": len(values)}


def commands(data: Path, repeat: int, env: dict) -> list[dict]:
    """The one-shot commands and cheap errors: CPU of the whole process."""
    not_a_chat = data.parent / "notes.txt"
    not_a_chat.write_text("hello\n", encoding="utf-8")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = str(holder.getsockname()[1])
        cases = [("--help", ["--help"], 0), ("chats", ["chats"], 0), ("show", ["show", "--chat", "road"], 0),
                 ("error: a file that is no chat", ["ingest", str(not_a_chat), "--chat", "x"], 1),
                 ("error: ingest without a model",
                  ["ingest", str(example_file("lantern_road.jsonl")), "--chat", "x"], 1),
                 ("error: recall of a missing chat", ["recall", "--chat", "nope", "--query", "who"], 1),
                 ("error: show of a missing chat", ["show", "--chat", "nope"], 1),
                 ("error: serve on a busy port", ["serve", "--port", busy], 1)]
        rows = []
        for name, argv, code in cases:
            cmd = [*CURATOR, "--data", str(data), *argv]
            cpu_of(cmd, env)  # unmeasured: bytecode cached, files in the page cache
            runs = []
            for _ in range(repeat):
                seconds, proc = cpu_of(cmd, env)
                if proc.returncode != code:
                    raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
                runs.append(seconds)
            rows.append({"case": name, **spread(runs)})
    return rows


def serve_start(data: Path, repeat: int, env: dict) -> dict:
    """CPU of `curator serve` when health first answers, and when the first real request is answered."""
    health, first, ready = [], [], []
    for attempt in range(repeat + 1):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen([*CURATOR, "--data", str(data), "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            answer = _poll(port, "/api/v1/health", proc)
            at_health = _cpu_of_pid(proc.pid)
            _poll(port, "/api/v1/chats", proc)
            at_first = _cpu_of_pid(proc.pid)
        finally:
            proc.terminate()
            proc.wait(60)
        if attempt:  # the first run is unmeasured
            health.append(at_health)
            first.append(at_first)
            ready.append(json.loads(answer).get("ready", True))
    return {"health": spread(health), "first_request": spread(first),
            "health_before_the_app_loaded": sum(1 for r in ready if r is False)}


def _poll(port: int, path: str, proc: subprocess.Popen) -> str:
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read().decode()
            if response.status == 200:
                return body
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"serve exited {proc.returncode}: {proc.stderr.read().decode()}")
        time.sleep(0.005)


def _cpu_of_pid(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build(data: Path, sizes: list[int], seed: int) -> None:
    rng = random.Random(seed)
    with curator.open(data) as memory:
        dims = (memory.index.function.embedder.embed_queries(["x"]).shape[1],) * 2
        for size in sizes:
            chat = f"one-{size}"
            if chat in memory.chats():
                continue
            progress(f"building a chat of {size:,} nodes")
            build_chat(memory, chat, size, rng, dims)


def live_turns(data: Path, chat: str, size: int, turns: int, rng: random.Random) -> None:
    """What another process (the service) writes meanwhile: a message, an event and a character update a turn,
    each commit embedded as it lands (the service has its index open)."""
    with curator.open(data) as memory:
        memory.index  # noqa: B018 - open: every commit is followed by its sync
        floor = len(memory.store.messages(chat))  # the chat's next floors
        for turn in range(turns):
            text = sentence(rng, floor)
            memory.store.set_messages_from(chat, floor, [Message("assistant", rng.choice(NAMES), text)])
            memory.commit(chat, [{"op": "create_node", "id": f"turn{floor}", "type": "event", "title": f"Turn {floor}",
                                  "fields": {"summary": text}, "floor_from": floor, "floor_to": floor},
                                 {"op": "update_node", "id": f"c{10 * turn}", "set_fields": {"goal": text}}],
                          floor, "test")
            floor += 1


def first_recalls(data: Path, sizes: list[int], repeat: int, env: dict, seed: int) -> list[dict]:
    rng = random.Random(seed)
    queries = [f"What did {rng.choice(NAMES)} {rng.choice(VERBS)} at {rng.choice(PLACES)}?" for _ in range(repeat + 1)]
    rows = []
    for size in sizes:
        chat = f"one-{size}"
        row: dict = {"case": f"{size:,} nodes"}

        def run(how: str, query: str) -> dict:
            seconds, proc = cpu_of([sys.executable, "-c", FIRST_RECALL, str(data), chat, query, how], env)
            if proc.returncode:
                raise SystemExit(proc.stderr)
            return json.loads(proc.stdout.strip().splitlines()[-1])

        progress(f"{chat}: the first recall with no lexicon snapshot saved")
        _drop_lexicon(data, chat)
        first_ever = run("cold", queries[0])
        row["no_snapshot_yet"] = {"first_s": round(first_ever["first_s"], 3)}
        progress(f"{chat}: first recalls, cold / whole / bare, {repeat} fresh processes each")
        found: dict[str, list[dict]] = {"cold": [], "whole": [], "bare": [], "floor": []}
        for query in queries[1:]:
            for how in found:
                found[how].append(run(how, query))
            same = found["cold"][-1]["text"] == found["whole"][-1]["text"]
            row.setdefault("same_injection", True)
            row["same_injection"] &= same
        for how, runs in found.items():
            row[how] = {"first": spread([r["first_s"] for r in runs]),
                        "process": spread([r["process_s"] for r in runs]),
                        "rss_mb": round(max(r["rss_mb"] for r in runs), 1)}
        row["ratio_cold_to_bare"] = round(row["cold"]["first"]["median_s"] / row["bare"]["first"]["median_s"], 2)
        row["ratio_cold_to_floor"] = round(row["cold"]["first"]["median_s"] / row["floor"]["first"]["median_s"], 2)
        row["ratio_whole_to_cold"] = round(row["whole"]["first"]["median_s"] / row["cold"]["first"]["median_s"], 2)
        cmd = [*CURATOR, "--data", str(data), "recall", "--chat", chat, "--query", queries[1], "--json"]
        cpu_of(cmd, env)
        row["cli_recall"] = spread([cpu_of(cmd, env)[0] for _ in range(repeat)])
        progress(f"{chat}: 20 live turns committed by another process, then a fresh process's first recall")
        live_turns(data, chat, size, 20, rng)
        row["after_20_turns"] = {"first_s": round(run("cold", queries[0])["first_s"], 3)}
        rows.append(row)
    return rows


def _drop_lexicon(data: Path, chat: str) -> None:
    with curator.open(data) as memory, memory.store.transaction() as conn:
        from curator.store.lexicon import drop_lexicon

        drop_lexicon(conn, chat)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--sizes", help="comma-separated chat sizes (default 10000,100000)"),
        p.add_argument("--repeat", type=int, help="measured fresh processes per figure (default 5; 2 with --quick)"),
        p.add_argument("--keep", help="build the chats in this folder and keep them for the next run")))
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([2000] if args.quick else [10_000, 100_000])
    repeat = args.repeat or (2 if args.quick else 5)
    tmp = Path(tempfile.mkdtemp(prefix="curator-cold-"))
    try:
        env = child_env(tmp / "pycache")
        small = tmp / "small"
        with curator.open(small) as memory:
            memory.import_("road", example_file("lantern_road.graph.json"))
        progress("one-shot commands and cheap errors")
        rows = commands(small, repeat, env)
        progress("curator serve: health, then the first request")
        serve = serve_start(small, repeat, env)
        data = Path(args.keep) if args.keep else tmp / "big"
        build(data, sizes, args.seed)
        recalls = first_recalls(data, sizes, repeat, env, args.seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"benchmark": "cold_start", "quick": args.quick, "env": environment(),
              "params": {"sizes": sizes, "repeat": repeat, "load": os.getloadavg()},
              "results": {"commands": rows, "serve": serve, "first_recall": recalls}}

    def render(r: dict) -> str:
        res = r["results"]
        out = [table(["command (whole process)", "CPU-s min", "median"],
                     [(c["case"], c["min_s"], c["median_s"]) for c in res["commands"]])]
        s = res["serve"]
        out.append(f"\ncurator serve: health answered at {s['health']['min_s']} / {s['health']['median_s']} CPU-s "
                   f"(min / median; {s['health_before_the_app_loaded']} of {s['health']['runs']} before the app "
                   f"had loaded), the first request at {s['first_request']['min_s']} / "
                   f"{s['first_request']['median_s']} CPU-s")
        lines = []
        for c in res["first_recall"]:
            lines.append((c["case"], c["no_snapshot_yet"]["first_s"], c["cold"]["first"]["median_s"],
                          c["whole"]["first"]["median_s"], c["bare"]["first"]["median_s"],
                          c["floor"]["first"]["median_s"], c["ratio_cold_to_bare"], c["ratio_cold_to_floor"],
                          c["ratio_whole_to_cold"], c["after_20_turns"]["first_s"], c["cold"]["process"]["median_s"],
                          c["cli_recall"]["median_s"], c["cold"]["rss_mb"], c["whole"]["rss_mb"],
                          "yes" if c["same_injection"] else "NO"))
        out.append("\nfirst recall in a fresh process, CPU-s (medians; the recall() call unless said):\n" + table(
            ["chat", "no snapshot yet", "cold", "whole state", "bare query", "floor", "cold/bare", "cold/floor",
             "whole/cold",
             "after 20 turns", "process (cold)", "curator recall", "RSS MB cold", "RSS MB whole", "same text"],
            lines))
        out.append(f"\nload average during the run: {', '.join(f'{x:.2f}' for x in r['params']['load'])}")
        return "\n".join(out)

    emit(args, report, render)


if __name__ == "__main__":
    main()
