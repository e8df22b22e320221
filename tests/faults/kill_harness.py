"""kill -9 at random points of the daemon's iterations, many times, checking the store after each kill.

Run as a script (`python -m tests.faults.kill_harness --kills 100 --seed 7 --dir DIR`): it imports the
daemon once, then forks one daemon after another (`foresail run` on the twin, flat out), each on the
same knowledge store, and SIGKILLs each at a seeded random moment. The fork spares every child the
import time, so a hundred kills take about a minute. After each kill it opens the store as a restarted
daemon would and checks that nothing was lost: every iteration the daemon logged (it logs after saving)
is in the store (optionally after deleting the `-wal` file, as a careless operator might): the store is
sound (nothing moved aside), the iteration count never went back, the saved state is one iteration's (the
newest decision belongs to the saved iteration, the twin's saved time is the loop's), and what was
learned is still there; its snapshot is sound, one iteration's too, and holds every iteration logged as
done. (It may lag the store by more than one: a kill between the store's commit and the snapshot's, then
a kill in the next daemon's first save, which copies the snapshot whole.) Prints one JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

CONFIG = """\
loop: {interval_s: 10}
forecast: {min_history_s: 1000000, max_history_s: 1000000}  # no ARIMA fit: short iterations
logging: {level: info}
server: {port: 0}
"""


def _child(config: Path, knowledge: Path, audit: Path) -> None:
    """The daemon, its audit events (each logged after its iteration was saved) into `audit`."""
    from daemon.cli import main

    os.dup2(os.open(audit, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)  # structlog flushes every event
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os._exit(main(["run", "--config", str(config), "--knowledge", str(knowledge)]))


def _inspect(knowledge: Path) -> dict:
    """What a restarted daemon finds: whether the file was sound, then the store as it loads it (a damaged
    one is moved aside and replaced by its snapshot, as at a daemon's start)."""
    from mape.knowledge_store import KnowledgeStore, _iteration, _read_only, _sound

    sound = _sound(knowledge)
    store = KnowledgeStore(knowledge)
    try:
        loaded = store.load()
        db = store._db
        state = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM state")}
        newest = db.execute("SELECT MAX(iteration) FROM decisions").fetchone()[0]
        snapshot = store.snapshot_path
        snapshot_iteration = snapshot_decision = None
        if snapshot.exists() and _sound(snapshot):
            snapshot_iteration, copy = _iteration(snapshot), _read_only(snapshot)
            snapshot_decision = copy.execute("SELECT MAX(iteration) FROM decisions").fetchone()[0]
            copy.close()
    finally:
        store.close()
    loop = state.get("loop", {})
    twin = state.get("attached:twin") or {}
    return {
        "sound": sound,
        "iteration": loaded.iteration,
        "snapshot_iteration": snapshot_iteration,
        "snapshot_decision_iteration": snapshot_decision,
        "last_time_s": loop.get("last_time_s"),
        "newest_decision_iteration": newest,
        "twin_t": twin.get("t"),
        # samples in the capacity lines, retired workers' included (a worker unseen for an hour is retired
        # into the pooled statistics, so the count of workers may shrink; what was learned may not)
        "samples_learned": loaded.capacity.retired_n
        + sum(k.stats.n for k in loaded.capacity.workers.values()),
    }


def _last_logged_iteration(audit: Path) -> int:
    last = 0
    for line in audit.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if event.get("event") == "iteration":
            last = max(last, int(event["iteration"]))
    return last


def run(kills: int, seed: int, directory: Path, max_delay_s: float, delete_wal_every: int = 0) -> dict:
    import daemon.cli
    import daemon.runtime  # noqa: F401

    directory.mkdir(parents=True, exist_ok=True)
    config, knowledge, audit = directory / "config.yaml", directory / "k.sqlite", directory / "audit.jsonl"
    config.write_text(CONFIG)
    rng = random.Random(seed)
    problems: list[str] = []
    damaged = 0
    previous = {"iteration": 0, "samples_learned": 0}
    iterations = []
    started = time.monotonic()
    for kill in range(kills):
        pid = os.fork()
        if pid == 0:
            _child(config, knowledge, audit)
        time.sleep(rng.uniform(0.05, max_delay_s))  # the random point of an iteration to kill at
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if not knowledge.exists():
            continue  # killed before the store was created
        if delete_wal_every and kill % delete_wal_every == 0:
            Path(f"{knowledge}-wal").unlink(missing_ok=True)  # an operator "cleaning up" after the crash
        found = _inspect(knowledge)
        iterations.append(found["iteration"])
        where = f"kill {kill + 1}"
        logged = _last_logged_iteration(audit)
        if found["iteration"] < logged:
            problems.append(
                f"{where}: iteration {logged} was logged as done, the store holds {found['iteration']}"
            )
        damaged += not found["sound"]
        if found["iteration"] < previous["iteration"]:
            problems.append(f"{where}: iteration went back {previous['iteration']} -> {found['iteration']}")
        if found["iteration"] and found["newest_decision_iteration"] != found["iteration"]:
            problems.append(
                f"{where}: decision of {found['newest_decision_iteration']}, state of {found['iteration']}"
            )
        if found["iteration"] and not logged <= (found["snapshot_iteration"] or 0) <= found["iteration"]:
            problems.append(
                f"{where}: snapshot of {found['snapshot_iteration']}, iteration {logged} logged as done, "
                f"store of {found['iteration']}"
            )
        if (
            found["snapshot_iteration"]
            and found["snapshot_decision_iteration"] != found["snapshot_iteration"]
        ):
            problems.append(
                f"{where}: snapshot's decision of {found['snapshot_decision_iteration']}, "
                f"its state of {found['snapshot_iteration']}"
            )
        if found["iteration"] and found["twin_t"] != found["last_time_s"]:
            problems.append(f"{where}: twin saved at {found['twin_t']} s, loop at {found['last_time_s']} s")
        if (
            found["samples_learned"] < previous["samples_learned"]
            and found["iteration"] >= previous["iteration"]
        ):
            problems.append(
                f"{where}: samples learned {previous['samples_learned']} -> {found['samples_learned']}"
            )
        previous = found
    return {
        "kills": kills,
        "seed": seed,
        "iterations_end": previous["iteration"],
        "kills_with_progress": sum(1 for a, b in zip([0, *iterations], iterations, strict=False) if b > a),
        "damaged_and_restored": damaged,
        "lost": len(problems),
        "problems": problems[:10],
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--max-delay-s", type=float, default=0.6)
    parser.add_argument("--delete-wal-every", type=int, default=0, help="after every Nth kill, delete -wal")
    args = parser.parse_args()
    print(json.dumps(run(args.kills, args.seed, args.dir, args.max_delay_s, args.delete_wal_every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
