"""Which rule holds the workers foresail runs above what the load needs: attribution from the audit log.

One run of the twin (job granularity) on a load, with the shipped forecast or with the trace's true future
swapped in (`--perfect`, as benchmarks/perfect_forecast.py does). Per iteration the excess is the running
scale-out minus the fewest workers whose estimated capacity carries the window's peak input, credited to
the rule that decided the iteration; and how often `only-if-necessary` (Daedalus's window after a
rescale) held back a scale-in that the horizon's forecast maximum allowed. Diagnostic only.

Usage: python benchmarks/excess_workers.py [--load sine|shape:NAME] [--seed 0] [--perfect] [--config FILE]
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from perfect_forecast import foresight, on_load

from config.load import load_config, with_overrides
from daemon.logs import configure_logging
from daemon.report import TRACES
from daemon.simulate import simulate


def fewest_carrying(capacities: dict[str, float | None], rate_rps: float, otherwise: int) -> int:
    """The smallest scale-out whose estimated capacity exceeds `rate_rps`."""
    return min((int(n) for n, c in capacities.items() if c and c > rate_rps), default=otherwise)


def attribute(events: list[dict]) -> tuple[int, Counter, Counter, int, float]:
    """Iterations, excess workers per rule, iterations per rule, and the `only-if-necessary` iterations that
    held back a scale-in the horizon allowed with the workers they held."""
    excess, count, held, held_workers, n = Counter(), Counter(), 0, 0.0, 0
    for event in events:
        decision, capacities = event.get("decision"), event.get("capacity_rps") or {}
        if not decision or not capacities:
            continue
        n += 1
        current, rule = decision["current_scaleout"], decision["rule"]
        inputs = event["inputs"]
        excess[rule] += current - fewest_carrying(capacities, inputs["workload_max_rps"], current)
        count[rule] += 1
        if rule != "only-if-necessary":
            continue
        horizon = max((event.get("forecast") or {}).get("horizon_max_rps") or 0.0, inputs["workload_avg_rps"])
        allowed = fewest_carrying(capacities, horizon, current)
        if allowed < current:
            held += 1
            held_workers += current - allowed
    return n, excess, count, held, held_workers


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--load", default="sine", help=f"a shared trace ({', '.join(sorted(TRACES))}) or shape:NAME"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--perfect", action="store_true", help="the trace's true future as the forecast")
    parser.add_argument("--config", type=Path, help="base config (default: the shipped defaults)")
    args = parser.parse_args()
    configure_logging("warning", "console", sys.stderr)
    config = on_load(
        with_overrides(load_config(args.config), "knowledge", path=":memory:"), args.load, args.seed
    )
    with tempfile.TemporaryDirectory() as scratch, foresight(config, args.perfect):
        audit = Path(scratch) / "audit.jsonl"
        summary = simulate(config, audit_path=audit)
        events = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
    n, excess, count, held, held_workers = attribute(events)
    print(
        f"{args.load}, seed {args.seed}, {'perfect' if args.perfect else 'shipped'} forecast: "
        f"{summary['avg_workers']:.2f} workers, oracle {summary['floor_avg_workers']:.2f}; "
        f"{sum(excess.values()) / n:.2f} above the fewest that carry each window's peak"
    )
    print("| rule | iterations | workers above, per iteration of the run |")
    print("|---|---:|---:|")
    for rule, workers in excess.most_common():
        print(f"| {rule} | {count[rule]} | {workers / n:+.2f} |")
    print(
        f"only-if-necessary held back a scale-in the horizon allowed in {held} of {n} iterations: "
        f"{held_workers / n:.2f} workers per iteration of the run"
    )


if __name__ == "__main__":
    main()
