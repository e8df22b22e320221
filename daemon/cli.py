"""The `foresail` command line: run the daemon, simulate a trace, compare policies, check a config file."""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split
import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from config.advice import notes
from config.load import ConfigError, load_config, render_example, with_overrides
from config.schema import Config
from daemon.finite_json import finite
from daemon.interrupts import interruptible

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a program whose reader left."""
MAX_SEEDS = 1_000


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = _argument_problem(args)
    if problem is not None:
        print(f"foresail {args.command or 'run'}: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    limit_blas_threads()
    try:
        with interruptible():
            code = args.handler(args)
        sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not as a traceback at exit
        return code
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG
    except BrokenPipeError:  # nobody reads the output any more: nothing to say, and nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # Ctrl-C: the user knows why it stopped, a traceback says nothing more
        print(f"foresail {args.command or 'run'}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def with_config_errors(command: Callable[[], int]) -> int:
    """`command()`, a usage or config error as one line and exit 2 (for the benchmark scripts' mains)."""
    try:
        return command()
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_CONFIG


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="foresail", description="Proactive autoscaler for Flink jobs.")
    parser.add_argument("--version", action="version", version=f"foresail {_version()}")
    commands = parser.add_subparsers(dest="command")
    parser.set_defaults(handler=_run)

    run = commands.add_parser("run", help="run the daemon (default: on the built-in digital twin)")
    run.add_argument("--config", type=Path, help="YAML config file (default: built-in defaults)")
    run.add_argument("--speedup", type=float, help="twin: virtual seconds per wall second (0 = flat out)")
    run.add_argument("--iterations", type=int, help="stop after this many iterations")
    run.add_argument("--knowledge", help="knowledge store path (overrides knowledge.path)")
    _add_model_arguments(run)
    _add_objective_arguments(run)
    run.add_argument(
        "--fresh",
        action="store_true",
        help="delete the knowledge store (and its snapshot) and empty the --audit-log file first: start afresh",
    )
    run.add_argument(
        "--audit-log",
        help="where the JSON audit events go ('-': stdout; default stdout, or on the twin in a terminal "
        "foresail-audit.jsonl beside the knowledge store)",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="decide and log, change nothing (target.recommend_only)"
    )
    run.set_defaults(handler=_run)

    simulate = commands.add_parser("simulate", help="run a whole trace on the twin and print a summary")
    simulate.add_argument(
        "--workload",
        required=True,
        help="'second|count' trace file, 'builtin:sine' or 'shape:NAME' (simulator/shapes.py)",
    )
    simulate.add_argument("--policy", default=None, help="plan policy (default: scaling.policy)")
    simulate.add_argument("--seed", type=int, default=None, help="twin seed (default: twin.seed)")
    simulate.add_argument(
        "--job-profile",
        default=None,
        help="state profile of the simulated job: stateless, read-heavy, write-heavy, update-heavy "
        "(default: twin.job_profile)",
    )
    simulate.add_argument("--config", type=Path, help="YAML config file")
    simulate.add_argument("--json", action="store_true", help="print one JSON object")
    simulate.add_argument("--audit-log", type=Path, help="write the per-iteration audit log here")
    _add_model_arguments(simulate)
    _add_objective_arguments(simulate)
    simulate.set_defaults(handler=_simulate)

    compare = commands.add_parser(
        "compare",
        help="several policies × seeds on one trace (summary.json, table.md and plots) or on a suite of "
        "loads (suite.md, suite.json)",
    )
    loads = compare.add_mutually_exclusive_group(required=True)
    loads.add_argument("--workload", help="'second|count' trace file, 'builtin:sine' or 'shape:NAME'")
    loads.add_argument(
        "--suite",
        help="a whole family of loads, one table: shared, development, held-out, family (both) or all",
    )
    compare.add_argument(
        "--policies",
        default="foresail,hpa-80,hpa-85,static",
        help="comma-separated policies (default: foresail,hpa-80,hpa-85,static); the oracle floor is always "
        "reported",
    )
    compare.add_argument(
        "--seeds",
        type=int,
        default=3,
        help=f"twin seeds twin.seed .. twin.seed+N-1 (default 3, at most {MAX_SEEDS})",
    )
    compare.add_argument("--out", type=Path, required=True, help="output directory")
    compare.add_argument("--jobs", type=int, default=None, help="parallel runs (default: one per core)")
    compare.add_argument("--config", type=Path, help="YAML config file (the base of every run)")
    _add_model_arguments(compare)
    _add_objective_arguments(compare)
    compare.set_defaults(handler=_compare)

    check = commands.add_parser(
        "check-config",
        help="validate a config file (exit 2 when invalid); with real backends, also check that Prometheus "
        "answers and the target exists (exit 1 when not)",
    )
    check.add_argument("file", type=Path)
    check.add_argument("--no-connect", action="store_true", help="only validate the file, contact nothing")
    check.set_defaults(handler=_check_config)

    from daemon.retrain_commands import add_commands as add_retraining_commands

    add_retraining_commands(commands)  # export-history, retrain

    from daemon.plan_commands import add_commands as add_planning_commands

    add_planning_commands(commands)  # plan-capacity

    example = commands.add_parser("config-example", help="print the annotated default config")
    example.set_defaults(handler=lambda _args: print(render_example(), end="") or EXIT_OK)
    return parser


def _add_model_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--topology",
        default=None,
        help="twin: the job graph, a shipped name (single, wordcount, ysb, session, io-sink, hot-key) or a "
        "YAML file (default: twin.topology)",
    )
    command.add_argument(
        "--capacity-model",
        choices=("dag", "job"),
        default=None,
        help="dag: per-vertex true rates and each TaskManager's core from busy time, where task metrics "
        "exist; job: per-worker CPU lines only (default: capacity.model)",
    )
    command.add_argument(
        "--granularity",
        choices=("job", "vertex"),
        default=None,
        help="job: reactive mode, every vertex at the job's scale-out; vertex: the adaptive scheduler, a "
        "parallelism per vertex (default: scaling.granularity)",
    )


def _add_objective_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--objective",
        choices=("recovery", "latency"),
        default=None,
        help="foresail plan objective (default: scaling.objective)",
    )
    command.add_argument(
        "--latency-target-ms",
        type=float,
        default=None,
        help="mean latency the 'latency' objective plans for (default: scaling.latency_target_ms)",
    )


def _with_models(config: Config, args: argparse.Namespace) -> Config:
    config = with_overrides(config, "twin", topology=getattr(args, "topology", None))
    config = with_overrides(
        config,
        "scaling",
        objective=getattr(args, "objective", None),
        latency_target_ms=getattr(args, "latency_target_ms", None),
        granularity=getattr(args, "granularity", None),
    )
    return with_overrides(config, "capacity", model=getattr(args, "capacity_model", None))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("foresail")
    except PackageNotFoundError:
        return "(not installed: run `pip install -e .`)"


def _argument_problem(args: argparse.Namespace) -> str | None:
    """The first argument that cannot mean what was asked (a run that would silently do nothing), or None."""
    iterations = getattr(args, "iterations", None)
    if iterations is not None and iterations < 1:
        return f"--iterations must be at least 1, got {iterations}"
    step_s = getattr(args, "step_s", None)
    if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
        return f"--step-s must be a number of seconds > 0, got {step_s:g}"
    if getattr(args, "since", None) is not None:
        from forecasting.history import parse_time

        now_s, times = time.time(), {}
        for name in ("since", "until"):
            text = getattr(args, name) or "0s"
            try:
                times[name] = parse_time(text, now_s)
            except (ValueError, OverflowError):
                return f"--{name}: not a time ('28d', '12h', ISO-8601 or epoch seconds): {text!r}"
        if not times["since"] < times["until"]:
            return f"--since ({args.since}) must lie before --until ({args.until or 'now'})"
    return None  # retrain's input errors: one line each from the job itself, and a bad row never aborts it


def _run(args: argparse.Namespace) -> int:
    from daemon.runtime import run_daemon

    config = load_config(getattr(args, "config", None))
    config = with_overrides(config, "twin", speedup=getattr(args, "speedup", None))
    config = with_overrides(config, "knowledge", path=getattr(args, "knowledge", None))
    config = _with_models(config, args)
    if getattr(args, "dry_run", False):
        config = with_overrides(config, "target", recommend_only=True)
    return run_daemon(
        config,
        max_iterations=getattr(args, "iterations", None),
        fresh=getattr(args, "fresh", False),
        audit_log=getattr(args, "audit_log", None),
    )


def _simulate(args: argparse.Namespace) -> int:
    from daemon.logs import configure_logging
    from daemon.simulate import simulate

    configure_logging("warning", "console", sys.stderr)  # stdout carries only the summary
    config = load_config(args.config)
    config = with_overrides(
        config, "twin", workload=args.workload, seed=args.seed, job_profile=args.job_profile
    )
    config = with_overrides(config, "scaling", policy=args.policy)
    config = with_overrides(config, "knowledge", path=":memory:")
    config = _with_models(config, args)
    if args.audit_log is not None:
        _check_audit_log(args.audit_log, config, args.config)
    summary = simulate(config, audit_path=args.audit_log)
    if args.json:
        print(json.dumps(finite(summary), allow_nan=False))
    else:
        width = max(len(k) for k in summary)
        for key, value in summary.items():
            print(f"{key:<{width}}  {value}")
    return EXIT_OK


def _check_audit_log(path: Path, config: Config, config_file: Path | None) -> None:
    """Refuse an audit log that cannot be a new file or would overwrite an input of this very run."""
    if path.is_dir() or not path.parent.is_dir():
        raise ConfigError("command line", [f"--audit-log {path}: not a file in an existing directory"])
    inputs = {
        "the --config file": config_file,
        "the workload trace": Path(config.twin.workload),
        "the topology file": Path(config.twin.topology),
    }
    for what, input_path in inputs.items():
        if input_path is not None and path.exists() and input_path.is_file() and path.samefile(input_path):
            raise ConfigError("command line", [f"--audit-log {path}: is {what}; it would be overwritten"])


def _compare(args: argparse.Namespace) -> int:
    from daemon.build import load_workload, twin_topology
    from daemon.compare import WorkersStopped, run_comparison, write_outputs
    from daemon.logs import configure_logging
    from simulator.baselines import ORACLE

    configure_logging("warning", "console", sys.stderr)  # stdout carries only the table
    if not 1 <= args.seeds <= MAX_SEEDS:  # a billion built a config per run before any ran: out of memory
        raise ConfigError("command line", [f"--seeds: need 1 to {MAX_SEEDS}, got {args.seeds}"])
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError("command line", [f"--jobs: need at least 1, got {args.jobs}"])
    config = _with_models(load_config(args.config), args)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise ConfigError("command line", [f"--policies: name at least one policy, got {args.policies!r}"])
    if all(p == ORACLE for p in policies):
        raise ConfigError(
            "command line", ["--policies: the oracle is always reported; name at least one policy to run"]
        )
    twin_topology(config)  # a topology the scale-outs do not fit is a config error, before any run
    _check_writable(args.out)
    before = _files(args.out)
    try:
        if args.suite:
            return _compare_suite(config, args, policies)
        config = with_overrides(config, "twin", workload=args.workload)
        load_workload(config.twin.workload)  # a missing trace is a config error, before any run
        comparison = run_comparison(config, policies, args.seeds, args.jobs, on_run=_say_run_done)
        write_outputs(comparison, args.out, config.baselines.static_scaleout)
    except KeyboardInterrupt as interrupt:
        written = sorted(str(path) for path, stamp in _files(args.out).items() if before.get(path) != stamp)
        print(f"foresail compare: interrupted; written: {', '.join(written) or 'nothing'}", file=sys.stderr)
        if isinstance(interrupt, WorkersStopped):  # the pool's threads may never end: exit without them
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    print((args.out / "table.md").read_text(), end="")
    return EXIT_OK


def _check_writable(out: Path) -> None:
    """Create --out and a file in it now: results that cannot be written are time lost."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as error:
        raise ConfigError("command line", [f"--out {out}: {error.strerror or error}"]) from None


def _files(directory: Path) -> dict[Path, int]:
    """Each file in `directory` and when it was last written (to tell what an interrupted run wrote)."""
    return {path: path.stat().st_mtime_ns for path in directory.iterdir() if path.is_file()}


def _say_run_done(spec: str, summary: dict, done: int, total: int) -> None:
    print(
        f"foresail compare: run {done}/{total} done ({summary['workload']}, {spec}, seed {summary['seed']})",
        file=sys.stderr,
    )


def _compare_suite(config: Config, args: argparse.Namespace, policies: list[str]) -> int:
    from daemon.suite import run_and_write, suite_workloads

    try:
        workloads = suite_workloads(args.suite)
    except KeyError as error:
        raise ConfigError("command line", [f"--suite: {error.args[0]}"]) from None
    table = run_and_write(config, workloads, policies, args.seeds, args.jobs, args.out, on_run=_say_run_done)
    print(table, end="")
    return EXIT_OK


def _check_config(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    if config.target.kind == "twin":  # its topology and trace are files too: build it as `run` would
        from daemon.build import make_twin

        make_twin(config)
    print(f"{args.file}: OK (target {config.target.kind}, policy {config.scaling.policy})")
    for note in notes(config):
        print(f"  note: {note}")
    if config.target.kind == "twin" or args.no_connect:
        return EXIT_OK
    from backends.factory import check_connections, restart_note

    failed = False
    restart = restart_note(config)
    if restart is not None:
        print(f"  note: {restart}")
    for what, problem, required in check_connections(config):
        if problem is None:
            print(f"  {what}: OK")
        elif required:
            print(f"  {what}: FAILED: {problem}")
            failed = True
        else:
            print(f"  {what}: optional, the loop runs without it: {problem}")
    return EXIT_FAILURE if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
