"""Shared helpers for the benchmark scripts in this folder (not a benchmark itself).

Each script is run as `python bench/NAME.py [--quick] [--json]`: it works in a temporary data directory,
prints a small table (or, with --json, the same figures as one JSON object) and never judges its timings.
Progress messages go to stderr so that `--json` output on stdout stays parseable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Self

try:
    import curator
except ImportError:  # running from a checkout that is not installed: use the checkout itself
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import curator


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a much smaller run (seconds), used by the smoke test")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object instead of a table")
    parser.add_argument("--seed", type=int, default=1234, help="seed for the random op mix (default 1234)")
    if extra:
        extra(parser)
    return parser.parse_args()


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "curator": getattr(curator, "__version__", "?"),
    }


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def now() -> float:
    return time.perf_counter()


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def latency_summary(seconds: Sequence[float]) -> dict:
    """p50/p95/p99/max/mean in milliseconds."""
    return {
        "p50_ms": ms(percentile(seconds, 50)),
        "p95_ms": ms(percentile(seconds, 95)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds)),
        "mean_ms": ms(sum(seconds) / len(seconds)),
    }


def dir_size_mb(path: Path) -> float:
    """Size of every file under `path` (the SQLite database and its -wal/-shm files), in MB."""
    total = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    return round(total / 1e6, 3)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 100:
            return f"{value:,.1f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain fixed-width table: first column left-aligned, the others right-aligned."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        pairs = enumerate(zip(values, widths, strict=True))
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in pairs)

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def emit(args: argparse.Namespace, report: dict, render: Callable[[dict], str]) -> None:
    """Print the report: JSON with --json, otherwise the human-readable rendering."""
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        env = report["env"]
        print(f"# {report['benchmark']}{' (--quick)' if report['quick'] else ''}: "
              f"Python {env['python']}, SQLite {env['sqlite']}, {env['cpus']} CPUs, {env['platform']}")
        print(render(report))


class TempMemory:
    """`curator.open` on a fresh temporary data directory, removed again on exit."""

    def __init__(self, prefix: str = "curator-bench-", store: str | None = None):
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.path = Path(self._tmp.name)
        self.memory = curator.open(self.path, store=store)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.memory.close()
        self._tmp.cleanup()
