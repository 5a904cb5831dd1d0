"""The served API keeps its own OpenAPI document: schemathesis (bench/schemathesis_api.py) runs its phases on every
operation of the app on loopback, offline, with few examples per operation (the bench script runs more). No 5xx, no
schema error, no failed check (status codes, content types, headers, response bodies, schema-violating requests
refused, the Allow of a 405, deleted resources gone)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

# the HTTP layer's contract, the same on either engine; CI runs it on the PostgreSQL run, the shorter of the two
pytestmark = pytest.mark.once(reason="the HTTP layer's contract")


def test_the_served_api_keeps_its_openapi_document():
    import schemathesis_api

    result = schemathesis_api.run(max_examples=3, seed=30)
    print(f"\nschemathesis {result['schemathesis']}: {result['operations']}/{result['operations_total']} operations, "
          f"{result['test_cases']} test cases, {result['server_errors']} answered 5xx, {len(result['errors'])} schema "
          f"errors, failed checks: {result['failures'] or 'none'} ({result['seconds']} s)")
    assert result["operations"] == result["operations_total"] >= 50
    assert result["errors"] == [] and result["failures"] == {}, result["output"]
    assert result["test_cases"] > 500
