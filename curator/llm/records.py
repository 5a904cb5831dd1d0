"""What LLM calls cost: one record per call and totals over calls. Plain data, kept apart from the model code so
that recall and ingest can count costs without importing pydantic_ai."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CallRecord:
    """One model request: what it cost and how long it took."""

    task: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    ok: bool = True
    error: str | None = None


@dataclass
class Usage:
    """Totals over some calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    failed_calls: int = 0

    def add(self, record: CallRecord) -> None:
        self.calls += 1
        self.input_tokens += record.input_tokens
        self.output_tokens += record.output_tokens
        self.latency_ms += record.latency_ms
        self.failed_calls += 0 if record.ok else 1

    def merge(self, other: Usage) -> Usage:
        """Add another total into this one (returns self)."""
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.latency_ms += other.latency_ms
        self.failed_calls += other.failed_calls
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "latency_ms": round(self.latency_ms, 1), "failed_calls": self.failed_calls}


@dataclass
class LLMTrace:
    """Collects the call records of one operation."""

    records: list[CallRecord] = field(default_factory=list)

    def __call__(self, record: CallRecord) -> None:
        self.records.append(record)

    def usage(self) -> Usage:
        total = Usage()
        for record in self.records:
            total.add(record)
        return total
