"""The `foresail export-history` and `foresail retrain` subcommands (registered by daemon/cli.py).

Light on imports: the CLI builds its parser at every start, so pyspark and the model libraries are
imported only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from forecasting.spark.arguments import add_retrain_arguments

EXIT_OK, EXIT_FAILURE = 0, 1


def add_commands(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export-history",
        help="pull the input-rate history from Prometheus (in chunks) into Parquet by job and day",
    )
    export.add_argument(
        "--config", type=Path, help="YAML config: prometheus.url/query_input_rate, forecast.*"
    )
    export.add_argument("--since", required=True, help="start: '28d', '12h', ISO-8601 or epoch seconds")
    export.add_argument("--until", default=None, help="end (default: now); same forms as --since")
    export.add_argument("--out", type=Path, required=True, help="Parquet dataset directory (appended to)")
    export.add_argument(
        "--step-s", type=float, default=None, help="sample step (default: forecast.resolution_s)"
    )
    export.add_argument("--query", default=None, help="PromQL (default: prometheus.query_input_rate)")
    export.add_argument("--url", default=None, help="Prometheus base URL (default: prometheus.url)")
    export.add_argument("--job", default=None, help="job name of the series (default: forecast.registry_job)")
    export.add_argument("--job-label", default=None, help="label naming the job of each series (many jobs)")
    export.set_defaults(handler=_export_history)

    retrain = commands.add_parser(
        "retrain", help="retrain the forecasters on a long history with Spark; publish to the model registry"
    )
    add_retrain_arguments(retrain)
    retrain.add_argument("--config", type=Path, help="YAML config: the models match its forecast section")
    retrain.set_defaults(handler=_retrain)


def _export_history(args: argparse.Namespace) -> int:
    from backends.prometheus import PrometheusClient
    from config.load import load_config
    from forecasting.history import ExportError, export_history, parse_time, write_history

    config = load_config(args.config)
    prometheus = config.prometheus
    if args.url:
        prometheus = prometheus.model_copy(update={"url": args.url})
    now_s = time.time()
    start_s, end_s = parse_time(args.since, now_s), parse_time(args.until or "0s", now_s)
    step_s = args.step_s or config.forecast.resolution_s
    job = args.job or getattr(config.forecast, "registry_job", None)
    query = args.query or prometheus.query_input_rate
    try:
        frame = export_history(
            PrometheusClient(prometheus), query, start_s, end_s, step_s, job, args.job_label
        )
    except ExportError as error:
        print(f"export-history: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as error:  # connection refused, HTTP error answers, timeouts
        print(f"export-history: Prometheus query failed: {error}", file=sys.stderr)
        return EXIT_FAILURE
    rows = write_history(frame, args.out)
    jobs = sorted(frame["job"].unique()) if rows else []
    print(f"{rows} samples of {len(jobs)} job(s) {jobs} at {step_s:g} s written to {args.out}")
    return EXIT_OK


def _retrain(args: argparse.Namespace) -> int:
    from forecasting.spark.job import base_settings, run

    return run(args, base_settings(args.config))
