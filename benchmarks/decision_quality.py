"""Decision quality: foresail beside the baselines and the oracle floor, on the shared 6-hour traces.

Usage:
  python benchmarks/decision_quality.py [--trace sine] [--policies foresail,hpa-80,...] [--seeds 3]
      prints the comparison table for one trace (a name from the shared workloads or a file);
  python benchmarks/decision_quality.py --report docs/evaluation.md
      runs every shared trace and writes the report with its tables and plots (docs/evaluation/);
  add --render-only to rewrite the report from the saved summaries without running again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecasting.blas import limit_blas_threads  # noqa: E402  first: one BLAS thread for every library loaded later

# isort: split

from config.load import ConfigError  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.build import load_workload  # noqa: E402
from daemon.cli import with_config_errors  # noqa: E402
from daemon.compare import markdown_tables, run_comparison, write_outputs  # noqa: E402
from daemon.report import PAPER_POLICIES, TRACES, WORKLOADS, write_report  # noqa: E402


def main() -> int:
    """Exit 2 with one line on a usage or config error (a missing trace, no saved runs to render)."""
    return with_config_errors(_main)


def _main() -> int:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="sine", help=f"one of {', '.join(TRACES)} or a trace file")
    parser.add_argument("--policies", default=",".join(PAPER_POLICIES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None, help="parallel runs (default: one per core)")
    parser.add_argument("--out", type=Path, help="also write summary.json, table.md and plots here")
    parser.add_argument("--report", type=Path, help="run every shared trace and write this report")
    parser.add_argument("--render-only", action="store_true", help="with --report: reuse saved summaries")
    args = parser.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for name, value in (("--seeds", args.seeds), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise ConfigError("command line", [f"{name}: need at least 1, got {value}"])
    if args.report:
        try:
            write_report(args.report, policies, args.seeds, args.jobs, rerun=not args.render_only)
        except FileNotFoundError as error:  # --render-only before any saved runs
            raise ConfigError("--report", [str(error)]) from None
        print(f"wrote {args.report}")
        return 0
    workload = str(WORKLOADS / TRACES[args.trace]) if args.trace in TRACES else args.trace
    config = Config.model_validate({"twin": {"workload": workload}})
    load_workload(workload)  # a missing trace: one line, before any run
    comparison = run_comparison(config, policies, args.seeds, args.jobs, keep_series=args.out is not None)
    if args.out:
        write_outputs(comparison, args.out)
    from daemon.compare import aggregate, per_run_metrics

    print(
        markdown_tables(aggregate(per_run_metrics(comparison, config.baselines.static_scaleout)), args.seeds)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
