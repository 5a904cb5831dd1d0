"""The served API against its own OpenAPI document, with schemathesis, offline.

`curator serve`'s app runs on loopback (a temporary data directory, a scripted extraction model, a fake upstream
model for the proxy); schemathesis reads `/openapi.json` and runs its phases on every operation: examples, coverage
(boundary and invalid values), fuzzing (generated valid and invalid requests) and stateful sequences (create, then
read, then delete ...). Its checks: no 5xx; every status code, content type, header and response body as the document
says; a request that breaks the document refused with a 4xx; the `Allow` of a 405 listing the documented methods;
a deleted resource gone. Left out: `positive_data_acceptance` (a request the document allows must succeed), since the
API has rules a JSON schema cannot say (a schema document must be a valid schema, recall needs a query or turns, a
tail window starts at a stored floor, an id must be addressable), which it refuses with a 4xx and says why.

    python bench/schemathesis_api.py [--max-examples 25] [--seed 1]

Prints the operations tested, the test cases generated and the failures per check; exits 1 when there is any.
`tests/test_openapi_conformance.py` runs it with few examples.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # st_harness: the fake upstream model

CHECKS_LEFT_OUT = ("positive_data_acceptance", "ignored_auth")  # see the docstring; no token: no auth to ignore


def schemathesis_exe() -> list[str]:
    exe = Path(sys.executable).with_name("schemathesis")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "schemathesis.cli"]


def run(max_examples: int = 25, seed: int = 1, workers: int = 1) -> dict:
    """One schemathesis run against a freshly served app; returns its JSON report's figures."""
    import st_harness

    import curator
    from curator.service.server import ServiceConfig, create_app
    from curator.service.server.runner import ThreadedServer
    from curator.testing.scripted import scripted_model

    upstream = st_harness.Upstream()
    with tempfile.TemporaryDirectory(prefix="curator-schemathesis-") as folder:
        data = Path(folder) / "data"
        data.mkdir()
        (data / "config.yaml").write_text("embedding: {provider: local, model: use-m3}\n")  # a light embedder
        memory = curator.open(data)
        memory.create_chat("c", "default")
        app = create_app(memory, ServiceConfig(model=scripted_model(), upstream=upstream.url))
        report = Path(folder) / "report.json"
        try:
            with ThreadedServer(app) as server:
                began = time.perf_counter()
                proc = subprocess.run([
                    *schemathesis_exe(), "run", f"{server.url}/openapi.json", "--max-examples", str(max_examples),
                    "--seed", str(seed), "--workers", str(workers), "--checks", "all", "--exclude-checks",
                    ",".join(CHECKS_LEFT_OUT), "-H", "X-Curator-Client: schemathesis", "--no-color",
                    "--report", "json", "--report-json-path", str(report)], capture_output=True, text=True,
                    timeout=1800, cwd=folder)  # its cache folder (.schemathesis) goes with the temporary folder
                seconds = time.perf_counter() - began
        finally:
            upstream.close()
            memory.close()
        if not report.exists():
            raise RuntimeError(f"schemathesis wrote no report (exit {proc.returncode}): {proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        data_ = json.loads(report.read_text())
    failures = {f"{f['code']} {f['title']}": {"count": f["count"], "operations": f["operations"]}
                for f in data_["failures"]}
    return {"schemathesis": data_["schemathesis_version"], "seed": seed, "max_examples": max_examples,
            "operations": data_["operations"]["tested"], "operations_total": data_["operations"]["total"],
            "test_cases": data_["test_cases"]["generated"], "failures": failures,
            "server_errors": sum(v["count"] for k, v in failures.items() if k.startswith("ST101")),
            "errors": data_["errors"], "phases": {k: v["status"] for k, v in data_["phases"].items()},
            "checks_left_out": list(CHECKS_LEFT_OUT), "seconds": round(seconds, 1),
            "output": proc.stdout[-4000:] if failures or data_["errors"] else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-examples", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run(args.max_examples, args.seed)
    print(f"schemathesis {result['schemathesis']} (seed {result['seed']}, {result['max_examples']} examples per "
          f"operation): {result['operations']}/{result['operations_total']} operations, {result['test_cases']} test "
          f"cases in {result['seconds']} s; phases {result['phases']}")
    print(f"  5xx answers: {result['server_errors']}; schema errors: {len(result['errors'])}; failed checks: "
          + (", ".join(f"{k}: {v['count']} ({', '.join(v['operations'][:3])})" for k, v in result["failures"].items())
             or "none"))
    print(f"  checks left out: {', '.join(result['checks_left_out'])}")
    if result["output"]:
        print(result["output"])
    return 1 if result["failures"] or result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
