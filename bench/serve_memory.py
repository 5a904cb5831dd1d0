"""The memory of a long-running `curator serve`: its RSS over many recalls (issue 33: flat within 5% after warm-up).

`curator serve` runs on loopback over a data directory holding the example chat (its hand-checked graph and its
60 floors); one client recalls through the HTTP API (`POST /api/v1/chats/{id}/recall`) with a different query each
time (words drawn from the chat, and now and then the recent turns as `turns`, as the SillyTavern extension sends
them), so the query caches keep turning over as they would in a long session. After `--warm` recalls, the RSS of
the service process (VmRSS from /proc) is read every `--every` recalls; the report gives the RSS after warm-up, the
last one, the highest, and the change, and the CPU seconds per recall.

    python bench/serve_memory.py [--quick] [--json] [--recalls 10000] [--warm 1000] [--every 1000]
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from _common import emit, environment, parse_args, progress, table

import curator
from curator.paths import example_file

CLIENT = {"x-curator-client": "bench"}


def rss_mb(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return round(int(found[1]) / 1024, 1) if found else float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--recalls", type=int, default=10_000, help="recalls measured after warm-up (default 10000)"),
        p.add_argument("--warm", type=int, default=1000, help="recalls before the first reading (default 1000)"),
        p.add_argument("--every", type=int, default=1000, help="recalls between readings (default 1000)")))
    recalls, warm, every = (300, 100, 50) if args.quick else (args.recalls, args.warm, args.every)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="curator-rss-"))
    proc = None
    try:
        with curator.open(tmp) as memory:
            memory.import_("road", example_file("lantern_road.graph.json"))
            memory.load_chat_file("road", example_file("lantern_road.jsonl"))
            messages = memory.store.messages("road")
        words = sorted({w.strip('.,!?"*—') for m in messages for w in m.text.split() if len(w) > 3})
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CURATOR_")}
        proc = subprocess.Popen([sys.executable, "-m", "curator", "--data", str(tmp), "serve", "--port", str(port),
                                 "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/api/v1/chats/road/recall"
        readings: list[dict] = []
        with httpx2.Client(headers=CLIENT, timeout=120) as http:
            while True:  # the app loads behind the early health answer: wait for a real one
                try:
                    if "worker" in http.get(f"http://127.0.0.1:{port}/api/v1/health").json():
                        break
                except httpx2.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit(proc.stderr.read().decode())
                time.sleep(0.05)
            progress(f"{warm:,} recalls to warm up, then {recalls:,} measured (RSS every {every:,})")
            started_cpu = None
            for n in range(warm + recalls + 1):
                if n >= warm and (n - warm) % every == 0:
                    readings.append({"recalls": n - warm, "rss_mb": rss_mb(proc.pid), "cpu_s": cpu_s(proc.pid)})
                    if started_cpu is None:
                        started_cpu = readings[-1]["cpu_s"]
                    progress(f"  after {n - warm:,}: RSS {readings[-1]['rss_mb']} MB")
                if n == warm + recalls:
                    break
                query = " ".join(rng.sample(words, rng.randint(2, 8)))
                body: dict = {"query": query}
                if n % 4 == 0:  # the recent turns too, as the SillyTavern extension sends them
                    at = rng.randrange(1, len(messages))
                    body["turns"] = [{"role": m.role, "name": m.name, "text": m.text}
                                     for m in messages[max(0, at - 4):at + 1]]
                answer = http.post(url, json=body)
                if answer.status_code != 200:
                    raise SystemExit(f"recall {n}: {answer.status_code} {answer.text[:300]}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
    first, last = readings[0], readings[-1]
    peak = max(r["rss_mb"] for r in readings)
    report = {"benchmark": "serve_memory", "quick": args.quick, "env": environment(),
              "params": {"recalls": recalls, "warm": warm, "every": every, "load": os.getloadavg()},
              "results": {"readings": readings, "after_warm_up_mb": first["rss_mb"], "last_mb": last["rss_mb"],
                          "peak_mb": peak, "change_pct": round(100 * (last["rss_mb"] / first["rss_mb"] - 1), 2),
                          "peak_over_warm_pct": round(100 * (peak / first["rss_mb"] - 1), 2),
                          "cpu_ms_per_recall": round(1000 * (last["cpu_s"] - first["cpu_s"]) / max(1, recalls), 2)}}

    def render(r: dict) -> str:
        res = r["results"]
        return (table(["recalls after warm-up", "RSS MB", "service CPU-s"],
                      [(x["recalls"], x["rss_mb"], x["cpu_s"]) for x in res["readings"]])
                + f"\nRSS after {r['params']['warm']:,} warm-up recalls {res['after_warm_up_mb']} MB, after "
                  f"{r['params']['recalls']:,} more {res['last_mb']} MB ({res['change_pct']:+.2f}%), highest "
                  f"{res['peak_mb']} MB ({res['peak_over_warm_pct']:+.2f}%); {res['cpu_ms_per_recall']} ms of the "
                  f"service's CPU per recall (HTTP included); load "
                  f"{', '.join(f'{x:.2f}' for x in r['params']['load'])}")

    emit(args, report, render)


if __name__ == "__main__":
    main()
