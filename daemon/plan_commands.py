"""The `foresail plan-capacity` command (registered by daemon/cli.py): plan a job's slots and memory on a
testbed before deployment, or (`plan-capacity fit`) fit released StreamBed measurements."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def add_commands(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan-capacity",
        help="plan slots, memory per slot and per-vertex parallelism for a target rate from small testbed "
        "runs (StreamBed); 'plan-capacity fit' fits released measurements",
    )
    plan.add_argument("--topology", help="twin: the job graph (shipped name or YAML; default twin.topology)")
    plan.add_argument("--target-rate", type=float, help="the rate the job must carry (records/s)")
    plan.add_argument(
        "--testbed",
        choices=("twin", "local-flink"),
        default="twin",
        help="where to measure: the twin, or the load job on Flink processes of this machine "
        "(local_flink.flink_home or FLINK_HOME; JDK needed to build the job)",
    )
    plan.add_argument(
        "--load-job-args",
        default="--topology chain",
        help="local-flink: arguments of the load job (jobs/TraceLoadJob.java; default '--topology chain')",
    )
    plan.add_argument(
        "--max-rate",
        type=float,
        help="local-flink: the warm-up's full rate (records/s; default twice the target rate)",
    )
    plan.add_argument(
        "--timings",
        choices=("paper", "short"),
        help="estimator timings: the paper's (120 s warm-up, 75 s a test) or short ones (20 s, 25 s); "
        "default paper on the twin, short on local-flink",
    )
    plan.add_argument(
        "--budget-max", type=int, default=8, help="most slots a testbed run may use (default 8)"
    )
    plan.add_argument("--budget-min", type=int, default=1, help="fewest slots a testbed run uses (default 1)")
    plan.add_argument(
        "--memory-profiles",
        type=float,
        nargs="+",
        help="managed memory per slot to explore (MB; default memory.base_mb)",
    )
    plan.add_argument("--max-measurements", type=int, default=20, help="testbed measurements at most (20)")
    plan.add_argument(
        "--key-census",
        action=argparse.BooleanOptionalAction,
        help="after the runs, one low-rate run at the key-group parallelism that measures every key group's "
        "load (default: on with the twin; local-flink runs one-slot TaskManagers and cannot)",
    )
    plan.add_argument("--config", type=Path, help="YAML config (twin, memory and knowledge sections)")
    plan.add_argument("--out", type=Path, help="output directory: plan.json, deployment.yaml, surrogate.png")
    plan.add_argument(
        "--knowledge",
        type=Path,
        help="knowledge store to seed (default: OUT/knowledge.db; start the daemon with --knowledge on it)",
    )
    plan.set_defaults(handler=_plan)
    modes = plan.add_subparsers(dest="plan_mode")
    fit = modes.add_parser("fit", help="fit a StreamBed results file and print the planned slots per memory")
    fit.add_argument("--results", type=Path, required=True, help="StreamBed search-results CSV")
    fit.add_argument("--model", choices=("lin", "log", "sqrt"), required=True, help="surrogate model")
    fit.add_argument("--target-rate", type=float, required=True, help="requested rate (events/s)")
    fit.add_argument(
        "--memory", type=float, nargs="+", required=True, help="memory levels (MB per TaskManager)"
    )
    fit.add_argument("--json", action="store_true", help="print one JSON object")
    fit.set_defaults(handler=_fit)


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"foresail plan-capacity: {message}", file=sys.stderr)
    return code


def _fit(args: argparse.Namespace) -> int:
    from planning.released_fit import fit_released
    from planning.streambed_results import ResultsError, parse_results

    if not (math.isfinite(args.target_rate) and args.target_rate > 0):
        return _fail(f"--target-rate must be a rate > 0, got {args.target_rate:g}")
    if any(not (math.isfinite(m) and m > 0) for m in args.memory):
        return _fail("--memory: every level must be a size > 0 (MB)")
    try:
        observations = parse_results(args.results.read_text(encoding="utf-8"), str(args.results))
        result = fit_released(observations, args.model, args.target_rate, args.memory)
    except OSError as error:
        return _fail(f"cannot read {args.results}: {error.strerror or error}")
    except UnicodeDecodeError:
        return _fail(f"{args.results}: not a text file (StreamBed's results are ';'-separated text)")
    except (ResultsError, ValueError) as error:
        return _fail(str(error))
    s = result.surrogate
    if args.json:
        print(
            json.dumps(
                {
                    "model": args.model,
                    "runs": result.runs,
                    "measurements": len(observations),
                    "a": s.a,
                    "b": s.b,
                    "c": s.c,
                    "slots": {f"{m:g}": t for m, t in result.slots.items()},
                }
            )
        )
        return EXIT_OK
    print(f"model {args.model} fitted on the first {result.runs} of {len(observations)} measurements")
    print(f"fitted a, b, c: {s.a:.4g}, {s.b:.4g}, {s.c:.4g}")
    print(f"slots for 110% of {args.target_rate:g} events/s:")
    print("memory_mb  slots")
    for memory, slots in result.slots.items():
        print(f"{memory:<9g}  {'–' if slots is None else slots}")
    return EXIT_OK


def _plan(args: argparse.Namespace) -> int:
    from config.load import load_config, with_overrides
    from daemon.build import knowledge_settings, memory_levels
    from daemon.lifecycle import open_store
    from daemon.plan_output import seed_knowledge, write_deployment, write_plan, write_plot
    from mape.knowledge import StoreBusy
    from planning.estimator import EstimatorSettings
    from planning.explorer import ExplorerSettings
    from planning.flink_testbed import FlinkTestbedError
    from planning.plan import PlanError, make_plan

    problem = _plan_argument_problem(args)
    if problem is not None:
        return _fail(problem)
    config = load_config(args.config)
    config = with_overrides(config, "twin", topology=args.topology)
    memories = tuple(args.memory_profiles or (config.memory.base_mb,))
    try:
        explorer = ExplorerSettings(
            min_slots=args.budget_min,
            max_slots=args.budget_max,
            memory_mb=memories,
            max_measurements=args.max_measurements,
            seed=config.twin.seed,
        )
    except ValueError as error:
        return _fail(str(error))
    timings = args.timings or ("short" if args.testbed == "local-flink" else "paper")
    estimator = EstimatorSettings(**SHORT_TIMINGS_S) if timings == "short" else EstimatorSettings()
    try:  # a store another daemon holds, or that is no store, is said before any measurement
        open_store(args.knowledge or args.out / "knowledge.db").close()
    except (StoreBusy, OSError) as error:
        return _fail(str(error), EXIT_FAILURE)
    try:
        testbed, topology, max_slots = _testbed(args, config)
    except (ValueError, RuntimeError) as error:
        return _fail(str(error), EXIT_FAILURE)
    try:
        if args.budget_max is not None and args.budget_max > max_slots:
            return _fail(
                f"--budget-max {args.budget_max} is above the testbed's largest deployment ({max_slots} slots)"
            )
        plan = make_plan(
            testbed,
            args.target_rate,
            explorer,
            estimator,
            max_slots=max_slots,
            progress=_progress,
            key_census=args.testbed == "twin" and args.key_census is not False,
        )
    except (PlanError, FlinkTestbedError) as error:
        return _fail(str(error), EXIT_FAILURE)
    finally:
        getattr(testbed, "close", lambda: None)()
    extra = {"testbed": args.testbed, "topology": topology, "timings": timings}
    store = args.knowledge or args.out / "knowledge.db"
    max_scaleout = max(config.scaling.max_scaleout, plan.slots)
    try:
        paths = [
            write_plan(plan, args.out, extra),
            write_deployment(plan, config.memory.process_base_mb, args.out),
            write_plot(plan, args.out),
        ]
        seeded = seed_knowledge(
            plan,
            store,
            knowledge_settings(config),
            max_scaleout,
            memory_levels(config),
            args.knowledge is None,
        )
    except (OSError, StoreBusy) as error:
        return _fail(f"the plan was made but not all written: {error}", EXIT_FAILURE)
    print(
        f"plan: {plan.slots} slots of {plan.memory_mb:g} MB ({plan.task_managers} TaskManagers) for "
        f"{args.target_rate:,.0f} records/s; predicted MST {plan.predicted_mst_rps:,.0f} "
        f"± {plan.predicted_mst_sd_rps:,.0f} ({plan.model}, {len(plan.exploration.estimates)} measurements)"
    )
    if args.testbed == "twin" and args.key_census is not False and plan.census is None:
        print(
            f"key-group census not run: no keyed vertex, or more key groups than the testbed's {max_slots} "
            "slots (the skew model bounds what the runs' key-group ranges hide)",
            file=sys.stderr,
        )
    for path in paths:
        print(f"wrote {path}")
    levels = f", memory levels {', '.join(map(str, seeded.levels))}" if seeded.levels else ""
    print(
        f"seeded {store}: capacity of scale-outs 1..{max_scaleout} ({seeded.scaleouts} new{levels}), "
        f"true rates of {seeded.vertices} vertices, CPU per busy second from {seeded.core_points} tests"
    )
    return EXIT_OK


def _plan_argument_problem(args: argparse.Namespace) -> str | None:
    if args.target_rate is None or args.out is None:
        return "--target-rate and --out are required (or use 'plan-capacity fit')"
    if not (math.isfinite(args.target_rate) and args.target_rate > 0):
        return f"--target-rate must be a rate > 0, got {args.target_rate:g}"
    if args.key_census and args.testbed == "local-flink":
        return "--key-census needs a testbed that deploys one subtask per key group; local-flink cannot"
    if args.knowledge is not None and args.knowledge.is_dir():
        return f"--knowledge {args.knowledge}: a directory; the knowledge store is a file"
    try:  # before any measurement: a plan that cannot be written is time lost
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"--out {args.out}: cannot create the directory: {error.strerror or error}"
    outputs = [args.out / name for name in OUTPUT_FILES]
    taken = next((path for path in outputs if path.is_dir()), None)
    if taken is not None:
        return f"--out {args.out}: {taken.name} is a directory there, where the plan writes a file"
    if not os.access(args.out, os.W_OK):
        return f"--out {args.out}: the directory is not writable"
    knowledge = os.path.realpath(args.knowledge or args.out / "knowledge.db")
    if knowledge in {os.path.realpath(path) for path in outputs}:
        return f"--knowledge {args.knowledge}: one of the plan's own output files"
    return None


def _progress(estimate) -> None:
    print(
        f"  measured {estimate.slots} slots at {estimate.memory_mb:g} MB: MST {estimate.mst_rps:,.0f} "
        f"({len(estimate.tests)} tests, {estimate.testbed_s:.0f} s of testbed time)",
        file=sys.stderr,
    )


OUTPUT_FILES = ("plan.json", "deployment.yaml", "surrogate.png")
MAX_PLANNED_SLOTS = 100_000
SHORT_TIMINGS_S = {"warmup_s": 20.0, "cooldown_s": 5.0, "ramp_s": 5.0, "observe_s": 15.0}
"""Estimator timings for a testbed run in minutes: a test is 25 s instead of 75 s."""


def _testbed(args: argparse.Namespace, config):
    """The testbed the arguments ask for, the name of the job it runs and the most slots a plan may
    take (the twin's max parallelism; unbounded on real Flink); raises ValueError or RuntimeError (the
    testbed's) with one line for the user."""
    if args.testbed == "twin":
        testbed = twin_testbed(config)
        return testbed, testbed.topology.name, testbed.max_slots
    import os
    import shlex

    from backends.standalone import LOAD_JOB_JAR, build_load_job
    from planning.flink_testbed import FlinkTestbedSettings, LoadJob, LocalFlinkTestbed

    home = config.local_flink.flink_home or os.environ.get("FLINK_HOME")
    if not home or not (Path(home) / "bin" / "taskmanager.sh").is_file():
        raise ValueError(
            f"local-flink: no Flink distribution at {home!r} (set local_flink.flink_home or FLINK_HOME)"
        )
    workdir = (args.out / "testbed").resolve()
    try:  # built afresh: a jar left by an older foresail lacks gauges the testbed reads
        build_load_job(Path(home), workdir / "build")
    except RuntimeError:
        if not (Path(home) / "usrlib" / LOAD_JOB_JAR).is_file():
            raise
    job_args = tuple(shlex.split(args.load_job_args))
    max_rate = args.max_rate if args.max_rate is not None else 2 * args.target_rate
    settings = FlinkTestbedSettings(Path(home), workdir, max_rate, LoadJob(args=job_args))
    return LocalFlinkTestbed(settings), f"load job {' '.join(job_args)}".strip(), MAX_PLANNED_SLOTS


def twin_testbed(config):
    """The twin the daemon would run for this config (same topology, state profile, hardware and pods),
    as a testbed: its worker speed is fixed from the config's trace so every deployment is the same job."""
    from dataclasses import replace

    from daemon.build import make_twin
    from planning.twin_testbed import TwinTestbed

    twin = make_twin(config).twin
    params = replace(twin.params, worker_capacity_rps=twin.worker_capacity_rps)
    return TwinTestbed(twin.topology, params, seed=config.twin.seed)
