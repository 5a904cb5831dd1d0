"""Smoke test for the benchmark scripts in bench/: each runs with `--quick --json` and prints the figures it
promises. No timing is judged here; the scripts only have to run and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

pytestmark = pytest.mark.skipif(not BENCH.is_dir(), reason="no bench/ folder (installed-only layout)")

TOP_KEYS = {"benchmark", "quick", "env", "params", "results"}

RESULT_KEYS = {
    "chroma_calls": {"rows"},
    "commit_throughput": {
        "commits", "ops", "total_s", "commits_per_s", "ops_per_s", "latency", "first_10pct_p50_ms",
        "last_10pct_p50_ms", "parse_only_ms_per_commit", "graph", "db_mb",
    },
    "rollback_scaling": {"sizes"},
    "export_import": {
        "build_s", "export_graph_ms", "dumps_ms", "write_ms", "file_mb", "export_total_ms", "read_graph_file_ms",
        "read_timed_out", "read_breakdown_ms", "read_scaling", "read_growth_exponent", "import_graph_ms",
        "import_ops", "source", "imported", "file_nodes", "file_edges", "same_counts", "same_content",
    },
}
RESULT_KEYS["ingest_overhead"] = {"replies", "failed", "seconds", "replies_per_s", "step", "model", "overhead",
                                  "nodes_active", "edges", "commits"}
RESULT_KEYS["index_commit_overhead"] = {"link", "link_cpu", "move", "move_cpu", "reply", "reply_cpu", "rollback",
                                        "rollback_cpu", "nodes_active"}
RESULT_KEYS["curator_tools"] = {"tools", "compaction"}
RESULT_KEYS["maintenance"] = {"compression", "consolidation"}
RESULT_KEYS["fork_cost"] = {"parent_bytes", "parent_index_ms", "forks"}
LATENCY_KEYS = {"p50_ms", "p95_ms", "p99_ms", "max_ms", "mean_ms"}
ROLLBACK_ROW_KEYS = {
    "size", "built_commits", "truncated", "build_s", "build_commits_per_s", "rollback_ms", "rollback_ms_runs",
    "rollback_ms_median", "rollback_ms_min", "ratio_to_smallest", "reverted_per_run", "noop_rollback_ms",
    "commits_after", "nodes_after", "nodes_expected",
}
COUNT_KEYS = {"nodes", "nodes_active", "nodes_archived", "edges"}


def run_quick(name: str, *extra: str) -> dict:
    script = BENCH / f"{name}.py"
    if not script.is_file():
        pytest.skip(f"{script} is missing")
    # The timeout only guards against a hang; it is not a performance check.
    proc = subprocess.run([sys.executable, str(script), "--quick", "--json", *extra], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout)
    assert TOP_KEYS <= report.keys()
    assert report["benchmark"] == name
    assert report["quick"] is True
    missing = RESULT_KEYS[name] - report["results"].keys()
    assert not missing, f"{name}: missing result keys {sorted(missing)}"
    return report


def test_commit_throughput_quick():
    results = run_quick("commit_throughput")["results"]
    assert LATENCY_KEYS <= results["latency"].keys()
    assert {"nodes_active", "nodes_archived", "edges", "commits"} <= results["graph"].keys()


def test_rollback_scaling_quick():
    report = run_quick("rollback_scaling")
    rows = report["results"]["sizes"]
    assert [row["size"] for row in rows] == report["params"]["sizes"]
    for row in rows:
        missing = ROLLBACK_ROW_KEYS - row.keys()
        assert not missing, f"rollback_scaling row {row.get('size')}: missing keys {sorted(missing)}"


def test_export_import_quick():
    results = run_quick("export_import")["results"]
    assert COUNT_KEYS <= results["source"].keys()
    assert COUNT_KEYS <= results["imported"].keys()
    for row in results["read_scaling"]:
        assert {"nodes", "edges", "mb", "parse_graph_ms"} <= row.keys()


def test_ingest_overhead_quick():
    results = run_quick("ingest_overhead")["results"]
    assert results["failed"] is False and results["replies"] == 50 and results["commits"] == 50
    for part in ("step", "model", "overhead"):
        assert LATENCY_KEYS <= results[part].keys()


def test_ingest_overhead_with_the_index_and_a_stub_embedder_quick():
    report = run_quick("ingest_overhead", "--index", "--model", "stub")
    results = report["results"]
    assert report["params"]["model"] == "stub" and results["failed"] is False and results["commits"] == 50
    assert results["texts_embedded_per_reply"] >= 2  # the new event and its messages


def test_index_commit_overhead_quick():
    report = run_quick("index_commit_overhead")
    results = report["results"]
    assert results["nodes_active"] == 2000 + 5  # every reply was rolled back again; the 5 kept replies stay
    assert report["params"]["staged_at_flush"] > 0
    for part in ("link_cpu", "move_cpu", "reply_cpu", "rollback_cpu", "kept reply_cpu", "flush_cpu"):
        assert LATENCY_KEYS <= results[part].keys()


def test_chroma_calls_quick():
    (row,) = run_quick("chroma_calls")["results"]["rows"]
    assert row["size"] == 1000
    for call in ("upsert", "update", "delete", "query20", "query50", "query200"):
        cpu, wall = row[call]
        assert cpu > 0 and wall > 0


def test_curator_tools_quick():
    results = run_quick("curator_tools")["results"]
    tools, compaction = results["tools"], results["compaction"]
    assert LATENCY_KEYS <= tools["per_call"].keys() and LATENCY_KEYS <= tools["workspace_open"].keys()
    assert tools["tool_calls_per_run"] == 13 and "memory_keyword_search" in tools["per_tool_mean_ms"]
    assert compaction["commits"] >= 1 and compaction["top_level"] >= 2
    assert sum(level["active"] + level["archived"] for level in compaction["levels"][:1]) == compaction["leaves"]


def test_maintenance_quick():
    results = run_quick("maintenance")["results"]
    compression, consolidation = results["compression"], results["consolidation"]
    assert compression["ok"] and compression["llm_calls"] == compression["summaries"] > 0
    assert compression["nodes_archived"] > 0 and consolidation["steps"] == 20
    assert consolidation["llm_calls"] >= consolidation["gate_opened"] > 0
    assert LATENCY_KEYS <= consolidation["per_step"].keys()


RESULT_KEYS["service_load"] = {"runs"}
SERVICE_LOAD_KEYS = {"processes", "requests", "requests_per_s", "service_cpu_s", "syncs", "recalls", "errors", "sync",
                     "recall", "jobs", "job_workers", "due_without_job", "lost", "duplicated", "stale", "interleaved",
                     "chat_mismatch", "extract_commits"}


def test_service_load_quick():
    """The short version of the load run, against 1 and against 2 service processes over one store and one Chroma
    server: several clients on a few chats, no error, no lost, duplicated, stale or interleaved commit, every stored
    chat equal to its client's."""
    runs = run_quick("service_load")["results"]["runs"]
    assert set(runs) == {"1", "2"}
    for results in runs.values():
        assert SERVICE_LOAD_KEYS <= results.keys()
        assert results["errors"] == 0, (results["error_samples"], results.get("server_errors"))
        assert results["syncs"] > 0 and results["recalls"] == results["syncs"]
        assert results["lost"] == results["duplicated"] == results["stale"] == results["chat_mismatch"] == 0
        assert results["interleaved"] == 0
        assert results["due_without_job"] == 0 and set(results["jobs"]) == {"done"}
        assert LATENCY_KEYS <= results["sync"].keys()


RESULT_KEYS["history_sync"] = {"first_ingest_s", "scenarios"}


def test_history_sync_quick():
    rows = run_quick("history_sync")["results"]["scenarios"]
    assert [r["scenario"] for r in rows] == ["edit", "delete", "swipe", "swipe back", "edit user + append"]
    assert all(r["equals_fresh_ingest"] for r in rows)
    assert rows[3]["restored"] == 1 and rows[3]["model_calls"] == 0  # the swipe back costs no model call


RESULT_KEYS["store_engines"] = {"overhead", "commits", "recall"}


def test_store_engines_quick(postgres_server):
    """Both engines in one run: the run's PostgreSQL server, or a throwaway cluster the script starts itself."""
    from pg_cluster import binaries

    if postgres_server is None and binaries() is None:
        pytest.skip("no PostgreSQL server or binaries (apt-get install postgresql)")
    results = run_quick("store_engines", *(["--pg", postgres_server] if postgres_server else []))["results"]
    assert {row["engine"] for row in results["commits"]} == {"sqlite", "postgresql"}
    assert {row["engine"] for row in results["recall"]} == {"sqlite", "postgresql"}
    assert all(row["commits_per_s"] > 0 and row["rollback_ms_median"] > 0 for row in results["commits"])
    assert {row["statement"] for row in results["overhead"]} == {"upsert", "select by key"}


def test_fork_cost_quick():
    forks = run_quick("fork_cost")["results"]["forks"]
    assert [f["floor"] for f in forks] == [3, 19, 35, 39]
    for fork in forks:  # copy-on-write would skip the commit rows, never more
        assert fork["bytes_cow"] + fork["commit_bytes"] == fork["bytes_copied_log"]
        assert fork["copied_log_ms"] >= fork["cow_ms"]


# The three cold-start benches (issue 33). Their children drop CURATOR_* from the environment (each measures a fresh
# process on the default SQLite store), so on the PostgreSQL run the parent's store and the children's would differ:
# the SQLite run covers them.
cold_start_bench = pytest.mark.engine("sqlite", reason="the bench's child processes run on SQLite by design")
RESULT_KEYS["cold_start"] = {"commands", "serve", "first_recall"}
SPREAD_KEYS = {"min_s", "median_s", "runs"}


@cold_start_bench
def test_cold_start_quick():
    """One measured process per figure (--repeat 1) on the 2,000-node chat: every one-shot command and cheap error
    exits as expected (the bench stops otherwise), serve answers health before its app loads, and a fresh process's
    cold first recall gives the same injection as the whole state."""
    report = run_quick("cold_start", "--repeat", "1")
    results = report["results"]
    assert report["params"]["sizes"] == [2000] and report["params"]["repeat"] == 1
    assert [c["case"] for c in results["commands"]][:3] == ["--help", "chats", "show"]
    assert len(results["commands"]) == 8 and all(SPREAD_KEYS <= c.keys() for c in results["commands"])
    serve = results["serve"]
    assert SPREAD_KEYS <= serve["health"].keys() and SPREAD_KEYS <= serve["first_request"].keys()
    assert serve["health_before_the_app_loaded"] == 1  # it listens before the app loads
    (row,) = results["first_recall"]
    assert row["case"] == "2,000 nodes" and row["same_injection"] is True
    for how in ("cold", "whole", "bare", "floor"):
        assert SPREAD_KEYS <= row[how]["first"].keys() and SPREAD_KEYS <= row[how]["process"].keys()
        assert row[how]["rss_mb"] > 0
    assert {"no_snapshot_yet", "after_20_turns", "cli_recall", "ratio_cold_to_bare", "ratio_cold_to_floor",
            "ratio_whole_to_cold"} <= row.keys()


RESULT_KEYS["vector_build"] = {"runs", "wall_s", "cpu_s", "resumed"}


@cold_start_bench
def test_vector_build_quick():
    """`curator vectors rebuild` on a 1,000-node chat, interrupted by SIGINT at 30%: exit 130 with the message, the
    texts written so far kept, the next run embeds exactly the rest and the third finds nothing to do."""
    report = run_quick("vector_build")
    first, second, third = report["results"]["runs"]
    assert (first["exit"], second["exit"], third["exit"]) == (130, 0, 0)
    assert "interrupted" in first["said"] and first["exit_after_sigint_s"] is not None
    assert first["bar"][1] == 1000 + 800  # every node's text and every event's source
    assert 0 < first["kept"] < first["bar"][1]
    assert second["bar"] == [first["bar"][1] - first["kept"]] * 2
    assert 0 < second["embedded"] < 1000 and second["embedded"] + second["unchanged"] == 1000
    assert third["embedded"] == 0 and third["unchanged"] == 1000
    assert report["results"]["resumed"] == {"exactly_the_rest": True, "all_nodes": True, "nothing_left": True}


RESULT_KEYS["serve_memory"] = {"readings", "after_warm_up_mb", "last_mb", "peak_mb", "change_pct",
                               "peak_over_warm_pct", "cpu_ms_per_recall"}


@cold_start_bench
def test_serve_memory_quick():
    """`curator serve` answers 300 recalls after 100 of warm-up (the bench stops on any non-200), and the service's
    RSS and CPU are read every 50."""
    report = run_quick("serve_memory")
    results = report["results"]
    readings = results["readings"]
    assert [r["recalls"] for r in readings] == list(range(0, 301, 50))
    assert all(r["rss_mb"] > 0 for r in readings)  # NaN (no /proc reading) fails too
    assert all(a["cpu_s"] <= b["cpu_s"] for a, b in zip(readings, readings[1:]))
    assert results["after_warm_up_mb"] == readings[0]["rss_mb"] and results["last_mb"] == readings[-1]["rss_mb"]
    assert results["peak_mb"] == max(r["rss_mb"] for r in readings)
    assert results["cpu_ms_per_recall"] > 0


RESULT_KEYS["mirror_search"] = {"searches"}


@pytest.mark.once(reason="the in-memory vector search, the same on either engine")
def test_mirror_search_quick():
    """On e5 vectors of LoCoMo dev's texts (5,000 rows), the shipped search of a big copy (a projection first) finds
    nearly all of the exact k nearest, for recall's node and source searches."""
    import os

    data = Path(os.environ.get("CURATOR_LOCOMO_DEV") or ROOT.parent / "shared" / "data" / "locomo_dev.json")
    if not data.is_file():
        pytest.skip(f"the LoCoMo dev split is absent ({data}; set CURATOR_LOCOMO_DEV)")
    searches = run_quick("mirror_search")["results"]["searches"]
    assert [(s["k"], s["method"].split()[0]) for s in searches] == [
        (k, method) for k in (200, 100) for method in ("exact", "int8", "shipped")]
    assert all(s["cpu_ms"] > 0 for s in searches)
    assert all(s["found_of_exact"] >= (1.0 if s["method"].startswith("exact") else 0.98) for s in searches), searches
