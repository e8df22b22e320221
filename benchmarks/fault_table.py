"""The fault table: every case of the fault suite (tests/faults) by category, with what the daemon did.

    python benchmarks/fault_table.py [--quick]

Runs the suite with FORESAIL_FAULT_LOG set (each case records its observed outcome, see
tests/faults/conftest.py) and prints, per category: cases, held (a safe outcome: the loop held, a clear
one-line error, a bounded failure, or the knowledge resumed), crashed, lost, unbounded (a hang or a spin),
scaled on bad data and tracebacks. Then the trace loader's cost on hostile files (a 10-million-line trace,
a two-line trace spanning 1e9 seconds) in a child process: wall time and peak memory. `--quick` skips the
kill -9 loop (the `slow` case).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAFE = ("held", "clear-error", "bounded", "resumed")
COLUMNS = ("crashed", "lost", "unbounded", "scaled-on-bad-data", "traceback")


def run_suite(quick: bool) -> tuple[list[dict], str]:
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "faults.jsonl"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/faults"]
        if quick:
            command += ["-m", "not slow"]
        result = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "FORESAIL_FAULT_LOG": str(log), "PYTHONPATH": str(REPO)},
        )
        lines = log.read_text().splitlines() if log.exists() else []
    output = result.stdout.strip().splitlines() or ["(no output)"]
    failed = [line for line in output if line.startswith(("FAILED", "ERROR"))]
    return [json.loads(line) for line in lines], "\n".join([output[-1], *failed])


def table(cases: list[dict]) -> str:
    by_category: dict[str, Counter] = defaultdict(Counter)
    for case in cases:
        by_category[case["category"]][case["outcome"]] += 1
    header = ("category", "cases", "held", "crashed", "lost", "unbounded", "scaled on bad data", "tracebacks")
    rows = [header, tuple("---" for _ in header)]
    total: Counter = Counter()
    for category, outcomes in sorted(by_category.items()):
        total.update(outcomes)
        rows.append(_row(category, outcomes))
    rows.append(_row("**all**", total))
    return "\n".join("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)


def _row(name: str, outcomes: Counter) -> tuple:
    return (
        name,
        sum(outcomes.values()),
        sum(outcomes[o] for o in SAFE),
        *(outcomes[c] for c in COLUMNS),
    )


def hostile_traces() -> list[tuple[str, float, float, str]]:
    """(file, wall s, MB the load added to the process's peak, first line of its answer) per hostile trace
    (the peak after the imports is the baseline: the `simulator` package imports the whole controller)."""
    results = []
    with tempfile.TemporaryDirectory() as directory:
        files = {
            "10M lines": Path(directory) / "ten_million.csv",
            "2 lines, 1e9 s apart": Path(directory) / "gap.csv",
        }
        with files["10M lines"].open("w") as handle:
            handle.write("second|count\n")
            chunk = 100_000
            for start in range(0, 10_000_000, chunk):
                handle.write("".join(f"{i}|1000\n" for i in range(start, start + chunk)))
        files["2 lines, 1e9 s apart"].write_text("second|count\n0|5\n1000000000|6\n")
        probe = (
            "import resource, sys, time\n"
            "from simulator.workload import load_trace\n"
            "imported_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
            "started = time.perf_counter()\n"
            "try:\n    load_trace(sys.argv[1]); answer = 'loaded'\n"
            "except ValueError as error:\n    answer = str(error).splitlines()[0]\n"
            "print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - imported_mb)\n"
            "print(answer)\n"
        )
        for name, path in files.items():
            out = subprocess.run(
                [sys.executable, "-c", probe, str(path)],
                cwd=REPO,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            ).stdout.splitlines()
            wall_s, peak_mb = (float(x) for x in out[0].split())
            results.append((name, wall_s, peak_mb, out[1].replace(str(path), "<file>")))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the kill -9 loop")
    args = parser.parse_args()
    started = time.perf_counter()
    cases, summary = run_suite(args.quick)
    print(f"fault suite (tests/faults): {summary}; {time.perf_counter() - started:.0f} s\n")
    print(table(cases))
    print("\n| hostile trace | load time s | peak MB above imports | answer |\n| --- | --- | --- | --- |")
    for name, wall_s, peak_mb, answer in hostile_traces():
        print(f"| {name} | {wall_s:.2f} | {peak_mb:.0f} | {answer} |")
    return 0 if all(c["outcome"] in SAFE for c in cases) else 1


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
