"""Wall time and outcome of `foresail simulate` on the three shared 6-hour traces.

Usage: python benchmarks/simulate_speed.py [--policy NAME (default foresail)] [--seed N] [--json]
The figures go to stdout (a table, or JSON with --json); warnings to stderr.
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import json
import sys
from pathlib import Path

from config.schema import Config
from daemon.logs import configure_logging
from daemon.simulate import simulate

TRACES = Path(__file__).resolve().parents[1] / "data" / "daedalus" / "workloads"
FIELDS = (
    "wall_time_s",
    "avg_workers",
    "rescales",
    "seconds_over_slo",
    "p95_latency_s",
    "backlog_end_records",
    "capacity_estimate_error_pct",
)


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="foresail")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure_logging("warning", "console", sys.stderr)  # the figures alone on stdout
    results = {}
    for trace in sorted(TRACES.glob("*.csv")):
        config = Config.model_validate(
            {
                "twin": {"workload": str(trace), "seed": args.seed},
                "scaling": {"policy": args.policy},
                "knowledge": {"path": ":memory:"},
            }
        )
        summary = simulate(config)
        results[trace.stem] = {k: summary[k] for k in FIELDS}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    widths = [len(f) + 2 for f in FIELDS]
    print(f"{'trace':<26}" + "".join(f"{f:>{w}}" for f, w in zip(FIELDS, widths, strict=True)))
    for name, row in results.items():
        cells = (f"{row[f]:.2f}" if isinstance(row[f], float) else str(row[f]) for f in FIELDS)
        print(f"{name:<26}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))


if __name__ == "__main__":
    main()
