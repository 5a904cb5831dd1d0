"""Building the vectors of a big chat from nothing with the default embedder, as `curator vectors rebuild` does it
(issue 33: a 100k-node chat in 10 minutes or less on this machine, with progress, resumable after Ctrl-C).

A chat of `--size` nodes is written as bench/recall_latency.py writes it (characters, places and events with a
message each), without vectors. `curator vectors rebuild --chat X` then runs as a user runs it, in its own process:
it is interrupted with SIGINT (Ctrl-C) once its bar passes `--stop-at` of the work, and run again, which goes on
from where it stopped; a third run must find nothing to do. The report gives the wall time and CPU seconds of each
run, what each embedded, the bar's last reading before the interrupt, and how long the interrupted one took to exit;
then the texts the interrupted run kept (their hashes saved in the store) and whether the run that went on embedded
exactly the rest of the work, every node indexed after it, and nothing left for the third.

    python bench/vector_build.py [--quick] [--json] [--size 100000] [--stop-at 0.3] [--keep DIR]
"""

from __future__ import annotations

import os
import pty
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, environment, parse_args, progress, table
from recall_latency import write_nodes

import curator
from curator.store.vector_rows import all_hashes

CURATOR = ([str(Path(sys.executable).with_name("curator"))] if Path(sys.executable).with_name("curator").exists()
           else [sys.executable, "-m", "curator"])
BAR = re.compile(r"(\d+)/(\d+)")


def write_chat(data: Path, chat: str, size: int, seed: int) -> None:
    with curator.open(data) as memory:
        if chat not in memory.chats():
            write_nodes(memory, chat, size, random.Random(seed), per_commit=2000)


def kept_texts(data: Path, chat: str) -> int:
    """The texts (node documents and events' sources) whose vectors the store records as written: what a run that
    goes on must not embed again."""
    with curator.open(data) as memory:
        hashes = all_hashes(memory.store.conn, chat)
    return sum(content is not None for content, _, _ in hashes.values()) + sum(bool(s) for _, _, s in hashes.values())


def rebuild(data: Path, chat: str, env: dict, stop_at: float | None = None) -> dict:
    """`curator vectors rebuild --chat X --json`, in a process of its own; with `stop_at`, SIGINT once the bar
    passes that share of the work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    terminal, their_end = pty.openpty()  # the bar draws itself on a terminal, as a user sees it
    # SIGINT as a terminal gives it, whatever started the bench: a shell without job control starts its background
    # commands with SIGINT ignored, and Python then keeps it ignored (the Ctrl-C would be lost, and the run go on)
    proc = subprocess.Popen([*CURATOR, "--data", str(data), "vectors", "rebuild", "--chat", chat],
                            stdout=subprocess.PIPE, stderr=their_end, env={**env, "COLUMNS": "120"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(their_end)
    os.set_blocking(terminal, False)
    last, interrupted_at, buffer, rest = (0, 0), None, b"", b""
    while proc.poll() is None:
        try:
            chunk = os.read(terminal, 65536)
        except (BlockingIOError, OSError):
            chunk = b""
        buffer = (buffer + chunk)[-4096:]
        found = BAR.findall(buffer.decode("utf-8", "replace"))
        if found:
            last = tuple(map(int, found[-1]))
            if stop_at is not None and interrupted_at is None and last[1] and last[0] >= stop_at * last[1]:
                proc.send_signal(signal.SIGINT)
                interrupted_at = time.perf_counter()
                progress(f"  interrupted at {last[0]:,}/{last[1]:,}")
        time.sleep(0.2)
    out, _ = proc.communicate()
    try:
        rest = os.read(terminal, 65536)
    except OSError:
        pass
    os.close(terminal)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = (buffer + rest).decode("utf-8", "replace")
    found = BAR.findall(text)  # the bar's last drawing may come after the last poll (a run that ends quickly)
    if found:
        last = tuple(map(int, found[-1]))
    counts = re.search(r"(\d+) embedded, (\d+) updated, (\d+) deleted, (\d+) unchanged", out.decode())
    return {"exit": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
            "bar": list(last), "embedded": int(counts[1]) if counts else None,
            "unchanged": int(counts[4]) if counts else None,
            "exit_after_sigint_s": round(time.perf_counter() - interrupted_at, 2) if interrupted_at else None,
            "said": next((re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", line) for line in text.splitlines()
                          if "interrupted" in line), "")}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--size", type=int, default=100_000, help="nodes in the chat (default 100000)"),
        p.add_argument("--stop-at", type=float, default=0.3, help="share of the work before Ctrl-C (default 0.3)"),
        p.add_argument("--keep", help="write the chat in this folder and keep it (its vectors are dropped first)")))
    size = 1000 if args.quick else args.size
    tmp = Path(tempfile.mkdtemp(prefix="curator-build-"))
    data = Path(args.keep) if args.keep else tmp / "data"
    chat = f"build-{size}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CURATOR_") or k == "CURATOR_EMBED_THREADS"}
    try:
        progress(f"writing a chat of {size:,} nodes (no vectors)")
        write_chat(data, chat, size, args.seed)
        with curator.open(data) as memory:
            memory.index.drop(chat)
        runs = []
        progress("curator vectors rebuild, interrupted")
        runs.append({"run": f"first, Ctrl-C at {args.stop_at:.0%}", **rebuild(data, chat, env, args.stop_at)})
        runs[0]["kept"] = kept_texts(data, chat)
        progress("curator vectors rebuild again: goes on from there")
        runs.append({"run": "second (goes on)", **rebuild(data, chat, env)})
        progress("curator vectors rebuild a third time: nothing left")
        runs.append({"run": "third (nothing left)", **rebuild(data, chat, env)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total_wall = round(sum(r["wall_s"] for r in runs[:2]), 1)
    first, second, third = runs
    # the run that goes on embeds exactly what the interrupted one had not saved, and then every node is indexed
    resumed = {"exactly_the_rest": second["bar"][1] == first["bar"][1] - first["kept"] and first["kept"] > 0,
               "all_nodes": second["embedded"] is not None and second["embedded"] + second["unchanged"] == size,
               "nothing_left": third["exit"] == 0 and third["embedded"] == 0 and third["unchanged"] == size}
    report = {"benchmark": "vector_build", "quick": args.quick, "env": environment(),
              "params": {"size": size, "stop_at": args.stop_at, "load": os.getloadavg(),
                         "threads": os.environ.get("CURATOR_EMBED_THREADS", "default")},
              "results": {"runs": runs, "wall_s": total_wall, "cpu_s": round(sum(r["cpu_s"] for r in runs[:2]), 1),
                          "resumed": resumed}}

    def render(r: dict) -> str:
        res = r["results"]
        rows = [(x["run"], x["exit"], x["wall_s"], x["cpu_s"], f"{x['bar'][0]:,}/{x['bar'][1]:,}",
                 x["embedded"] if x["embedded"] is not None else "-", x["exit_after_sigint_s"] or "-")
                for x in res["runs"]]
        return (table(["run", "exit", "wall s", "CPU s", "bar", "nodes embedded", "exit after Ctrl-C s"], rows)
                + f"\n{r['params']['size']:,} nodes built in {res['wall_s']} s of wall time ({res['wall_s'] / 60:.1f} "
                  f"min), {res['cpu_s']} CPU-s, over the interrupted run and the one that went on; load "
                  f"{', '.join(f'{x:.2f}' for x in r['params']['load'])}"
                + (f"\nthe interrupted run said: {res['runs'][0]['said']}" if res["runs"][0]["said"] else "")
                + f"\nthe interrupted run kept {res['runs'][0]['kept']:,} of {res['runs'][0]['bar'][1]:,} texts; "
                  + ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'NO'}" for k, v in res["resumed"].items()))

    emit(args, report, render)


if __name__ == "__main__":
    main()
