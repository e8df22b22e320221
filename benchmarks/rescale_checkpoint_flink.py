"""How old is the checkpoint a reactive-mode rescale restores on real Flink 2.3? (recovery.scale_out_at_checkpoint)

Starts the local stack (reactive mode, 5 s checkpoints, the load job at a steady rate), adds a TaskManager,
later removes one, and reads the JobManager log: for each restart, the checkpoint it restored and how long
before the restart that checkpoint completed. With `jobmanager.adaptive-scheduler.rescale-trigger.max-delay`
at Flink's default (three checkpoint intervals) a scale-out waits for the next checkpoint (FLIP-461) and
restores one completed just before; `--max-delay 5s` (the tests' setting) can fire first. A scale-in is a
failover: it restores the last periodic checkpoint, 0..5 s old. Prints one line per restart and the wall time.

    python benchmarks/rescale_checkpoint_flink.py [--max-delay 5s] [--rate-rps 300]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.stack import FlinkStack, flink_home

_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
_COMPLETED = re.compile(_STAMP + r".*Completed checkpoint (\d+) ")
_CANCELLING = re.compile(_STAMP + r".*switched from state RUNNING to CANCELLING")
_RESTORED = re.compile(_STAMP + r".*Restoring job \S+ from Checkpoint (\d+) ")


def _time(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")


def restarts(log_lines: list[str]) -> list[tuple[int, float]]:
    """Per restart: (restored checkpoint, seconds from its completion to the job's cancelling)."""
    completed: dict[int, datetime] = {}
    stopped: datetime | None = None
    found = []
    for line in log_lines:
        if m := _COMPLETED.match(line):
            completed[int(m.group(2))] = _time(m.group(1))
        elif m := _CANCELLING.match(line):
            stopped = _time(m.group(1))
        elif (m := _RESTORED.match(line)) and stopped is not None:
            checkpoint = int(m.group(2))
            if checkpoint in completed:
                found.append((checkpoint, (stopped - completed[checkpoint]).total_seconds()))
            stopped = None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-delay", default=None, help="rescale-trigger.max-delay (default: Flink's)")
    parser.add_argument("--rate-rps", type=int, default=300)
    args = parser.parse_args()
    started = time.monotonic()
    conf = {"jobmanager.adaptive-scheduler.rescale-trigger.max-delay": args.max_delay}
    with tempfile.TemporaryDirectory() as workdir:
        stack = FlinkStack(Path(workdir), flink_home(), work=2000, initial_rps=args.rate_rps, conf=conf)
        try:
            stack.start(1)
            time.sleep(30)  # a benchmark, not a test: let checkpoints complete at the new rate
            stack.cluster.scale_to(2)
            stack.wait_parallelism(2, timeout_s=120)
            time.sleep(30)
            stack.cluster.scale_to(1)
            stack.wait_parallelism(1, timeout_s=120)
        finally:
            stack.stop()
        path = stack.state_dir / "jobmanager.log"
        log = path.read_text(errors="replace").splitlines() if path.is_file() else []
    labels = ("scale-out 1 -> 2", "scale-in 2 -> 1")
    for i, (checkpoint, age_s) in enumerate(restarts(log)):
        what = labels[i] if i < len(labels) else f"restart {i + 1}"
        print(f"{what}: restored checkpoint {checkpoint}, completed {age_s:.1f} s before the restart")
    print(f"max-delay {args.max_delay or 'default'}; wall {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
