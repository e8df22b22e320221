"""Bytes the knowledge store writes per loop iteration, on a twin run with a durable store.

Usage: python benchmarks/store_writes.py [--workload builtin:sine] [--prefill-decisions N]
Counts the process's `write_bytes` (/proc/self/io: bytes sent to the storage layer, at page-dirtying
time) around every save and prints the mean per iteration over the run's second half (the model is in
the store), the store's and its snapshot's size and the day's total at a 60-s loop. The store starts
with N decisions as long as a run's (default 10,000: `knowledge.decision_history`, where a store of
months sits). Linux only.
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from config.schema import Config
from daemon.logs import configure_logging
from daemon.simulate import simulate
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision


def written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no write_bytes")


def prefill(path: Path, decisions: int) -> None:
    """A store holding `decisions` decisions from before the run, with reasons as long as a run's."""
    reasons = (
        "capacity(7) = 61234 rps, recovery 212 s",
        "average 48210 rps, forecast max 51022 (upper 55410)",
    )
    store = KnowledgeStore(path)
    with store._transaction(store._db, set()):
        for i in range(decisions):
            decision = Decision(-60.0 * (decisions - i), 7, 7, "only-if-necessary", reasons * 2)
            store._append(store._db, "decisions", 0, decision.time_s, decision.to_dict())
    store.close()


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="builtin:sine")
    parser.add_argument("--prefill-decisions", type=int, default=10_000)
    args = parser.parse_args()
    configure_logging("warning", "console", sys.stderr)
    saves = []
    save = KnowledgeStore.save

    def counted_save(store, *rest):
        before = written_bytes()
        save(store, *rest)
        saves.append(written_bytes() - before)

    KnowledgeStore.save = counted_save
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as folder:  # the working disk, not a tmpfs
        path = Path(folder) / "knowledge.sqlite"
        prefill(path, args.prefill_decisions)
        config = Config.model_validate(
            {"twin": {"workload": args.workload}, "knowledge": {"path": str(path)}}
        )
        simulate(config, store_path=str(path))
        store_mb, snapshot_mb = (Path(f"{path}{end}").stat().st_size / 1e6 for end in ("", ".snapshot"))
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
            model_mb = (db.execute("SELECT SUM(LENGTH(value)) FROM blobs").fetchone()[0] or 0) / 1e6
    per_iteration_mb = statistics.fmean(saves[len(saves) // 2 :]) / 1e6
    print(
        f"iterations {len(saves)}; store {store_mb:.2f} MB ({rows:,} decisions, the model {model_mb:.2f} MB)"
    )
    print(f"snapshot {snapshot_mb:.2f} MB")
    print(
        f"written per iteration: {per_iteration_mb:.2f} MB; a day at a 60-s loop: {per_iteration_mb * 1.44:.1f} GB"
    )


if __name__ == "__main__":
    main()
