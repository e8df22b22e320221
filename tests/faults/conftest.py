"""The fault suite's record: each case notes what it observed, for `benchmarks/fault_table.py`.

With FORESAIL_FAULT_LOG set, every `fault(...)` call appends one JSON line (category, case, outcome);
without it nothing is written. A case records its outcome before asserting it, so a failing case shows up
in the table as what it did (crashed, lost, unbounded, scaled), not as missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from backends.retry import allow_waiting

SAFE = ("held", "clear-error", "bounded", "resumed")
UNSAFE = ("crashed", "lost", "unbounded", "scaled-on-bad-data", "traceback")


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Callable[..., None]:
    def record(category: str, outcome: str, case: str | None = None) -> None:
        assert outcome in SAFE + UNSAFE, outcome
        path = os.environ.get("FORESAIL_FAULT_LOG")
        if path:
            line = {"category": category, "case": case or request.node.name, "outcome": outcome}
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

    return record


@pytest.fixture(autouse=True)
def _waits_allowed():
    """A test that simulates SIGTERM (stop_waiting) must not leave later waits interrupted."""
    allow_waiting()
    yield
    allow_waiting()
