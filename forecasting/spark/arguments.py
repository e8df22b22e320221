"""The options of the retraining job, shared by `foresail retrain` (daemon/retrain_commands.py) and the
spark-submit main (forecasting/spark/job.py)."""

from __future__ import annotations

import argparse


def add_retrain_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `foresail retrain` and of the spark-submit main."""
    parser.add_argument("--history", required=True, help="history: Parquet (file or directory) or CSV")
    parser.add_argument("--registry", required=True, help="model registry directory (created if absent)")
    parser.add_argument(
        "--master", default=None, help="local[*], spark://HOST:PORT, yarn… (default: spark-submit's)"
    )
    parser.add_argument("--format", choices=("auto", "parquet", "csv"), default="auto")
    parser.add_argument("--jobs", default=None, help="comma-separated job names (default: all)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--season-resolution-s", type=float, default=None)
    parser.add_argument("--backtest-s", type=float, default=None)
    parser.add_argument("--select-window-s", type=float, default=None)
    parser.add_argument("--min-history-s", type=float, default=None)
    parser.add_argument(
        "--executor-wait-s",
        type=float,
        default=None,
        help="give up when a cluster starts no executor within this long (default: 300)",
    )
