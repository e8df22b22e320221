"""The `foresail plan-capacity` command (registered by daemon/cli.py): plan a job's slots and memory on a
testbed before deployment, or (`plan-capacity fit`) fit released StreamBed measurements."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from daemon.interrupts import deferred_in_finalizers

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
    from config.yaml_file import read_bounded
    from planning.released_fit import fit_released
    from planning.streambed_results import MAX_MEMORY_MB, ResultsError, parse_results

    if not (math.isfinite(args.target_rate) and args.target_rate > 0):
        return _fail(f"--target-rate must be a rate > 0, got {args.target_rate:g}")
    if any(not (math.isfinite(m) and 0 < m <= MAX_MEMORY_MB) for m in args.memory):
        return _fail(f"--memory: every level must be a size in (0, {MAX_MEMORY_MB:g}] MB")
    try:
        data = read_bounded(args.results, MAX_RESULTS_BYTES)  # /dev/zero read until memory ran out
    except OSError as error:
        return _fail(f"cannot read {args.results}: {error.strerror or error}")
    except ValueError as error:
        return _fail(f"{args.results}: {error}: not StreamBed's results")
    try:
        observations = parse_results(data.decode("utf-8"), str(args.results))
        result = fit_released(observations, args.model, args.target_rate, args.memory)
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
    problem = _plan_argument_problem(args)
    if problem is not None:
        return _fail(problem)
    with _stop_on_signals():
        try:
            return _plan_checked(args)
        except _Stopped as stopped:
            return _fail(_stopped_message(stopped, args), 128 + stopped.signum)
        except OSError as error:
            return _fail(_one_line(error), EXIT_FAILURE)


def _plan_checked(args: argparse.Namespace) -> int:
    """The arguments checked against the config and this machine, then the run under OUT's lock."""
    from config.load import load_config, with_overrides
    from planning.explorer import ExplorerSettings

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
    if args.testbed == "local-flink" and (problem := _machine_problem(args, memories)) is not None:
        return _fail(problem)
    lock = _lock_out(args.out)
    if lock is None:
        return _fail(f"--out {args.out}: another plan-capacity run is using the directory", EXIT_FAILURE)
    with lock:
        return _plan_locked(args, config, explorer)


def _plan_locked(args: argparse.Namespace, config, explorer) -> int:
    from daemon.build import knowledge_settings, memory_levels
    from daemon.lifecycle import open_store
    from daemon.plan_output import seed_knowledge, write_deployment, write_plan, write_plot
    from mape.knowledge_store import StoreBusy
    from planning.estimator import EstimateError, EstimatorSettings
    from planning.flink_testbed import FlinkTestbedError
    from planning.plan import PlanError, make_plan

    timings = args.timings or ("short" if args.testbed == "local-flink" else "paper")
    estimator = EstimatorSettings(**SHORT_TIMINGS_S) if timings == "short" else EstimatorSettings()
    store = args.knowledge or args.out / "knowledge.db"
    try:  # a store another daemon holds, or that is no store, is said before any measurement
        if args.knowledge is not None or store.exists():
            open_store(store).close()
    except (StoreBusy, OSError) as error:
        return _fail(str(error), EXIT_FAILURE)
    try:
        testbed, topology, max_slots = _testbed(args, config)
    except (ValueError, RuntimeError, OSError) as error:
        return _fail(f"{_one_line(error)}{_earlier_outputs_moved(args)}", EXIT_FAILURE)
    kept = ""
    try:
        if args.budget_max is not None and args.budget_max > max_slots:  # a usage error: nothing moved
            return _fail(
                f"--budget-max {args.budget_max} is above the testbed's largest deployment ({max_slots} slots)"
            )
        kept = _earlier_outputs_moved(args)
        plan = make_plan(
            testbed,
            args.target_rate,
            explorer,
            estimator,
            max_slots=max_slots,
            progress=_progress,
            key_census=args.testbed == "twin" and args.key_census is not False,
        )
    except (PlanError, FlinkTestbedError, EstimateError) as error:
        return _fail(f"{error}{kept}", EXIT_FAILURE)
    finally:
        getattr(testbed, "close", lambda: None)()
    extra = {"testbed": args.testbed, "topology": topology, "timings": timings}
    max_scaleout = max(config.scaling.max_scaleout, plan.slots)
    paths: list[Path] = []
    try:
        paths.append(write_plan(plan, args.out, extra))
        paths.append(write_deployment(plan, config.memory.process_base_mb, args.out))
        paths.append(write_plot(plan, args.out))
        seeded = seed_knowledge(
            plan,
            store,
            knowledge_settings(config),
            max_scaleout,
            memory_levels(config),
        )
    except (OSError, StoreBusy) as error:
        return _fail(f"the plan was made but not all written: {error}", EXIT_FAILURE)
    except _Stopped as stopped:  # the files written stay: say which, and that the store may lack seeds
        stopped.written = tuple(paths)
        raise
    if plan.slots > config.scaling.max_scaleout:
        print(
            f"warning: the plan needs {plan.slots} TaskManagers but scaling.max_scaleout is "
            f"{config.scaling.max_scaleout}: raise it, or the daemon caps the job below the target",
            file=sys.stderr,
        )
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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOCK_FILE = ".plan-capacity.lock"


class _Stopped(BaseException):
    """A signal stopped the run: raised where the run is, so every `finally` (the testbed's close) runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.written: tuple[Path, ...] = ()
        """Outputs written before the stop (it came while the store was seeded)."""


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT, SIGTERM and SIGHUP raise `_Stopped` once, later ones are ignored: a SIGTERM used to leave
    the testbed's cluster running, a Ctrl-C printed a traceback, a second one another inside the close.
    After a stop they stay ignored (the command is ending: a late Ctrl-C must not print a traceback)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ignore(*_: object) -> None:
        pass

    def stop(signum: int, _: FrameType | None) -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, ignore)
        raise _Stopped(signum)

    handler = deferred_in_finalizers(stop)  # raised in a finalizer, the stop would be dropped
    previous = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is handler:  # not stopped: the caller's handlers again
            for number, saved in previous.items():
                signal.signal(number, saved)


def _stopped_message(stopped: _Stopped, args: argparse.Namespace) -> str:
    signum = stopped.signum
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    if stopped.written:
        names = ", ".join(p.name for p in stopped.written)
        return f"{what} while seeding the knowledge store: {names} written, the store not (or in part)"
    if args.testbed == "local-flink":
        return f"{what}; the testbed cluster was stopped, no plan was written"
    return f"{what}; no plan was written"


def _lock_out(out: Path):
    """An exclusive lock on OUT for the run (None: another run holds it): two runs on one directory
    shared its testbed deployments and killed each other's Flink processes."""
    lock = (out / LOCK_FILE).open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _earlier_outputs_moved(args: argparse.Namespace) -> str:
    """Moves an earlier run's outputs aside as this run starts; where they went, for its failure line."""
    previous = _move_earlier_outputs(args.out, args.knowledge is None)
    return f" (the earlier run's outputs are in {previous})" if previous else ""


def _move_earlier_outputs(out: Path, own_store: bool) -> Path | None:
    """An earlier run's outputs (and its store in OUT) go to OUT/previous/ as a run starts: a run that
    fails must not leave them looking like its result, and a user may still want them."""
    names = list(OUTPUT_FILES)
    if own_store:
        names += sorted(p.name for p in out.glob("knowledge.db*") if not p.name.endswith(".lock"))
    earlier = [out / name for name in names if (out / name).exists()]
    if not earlier:
        return None
    previous = out / PREVIOUS
    shutil.rmtree(previous, ignore_errors=True)
    previous.mkdir()
    for path in earlier:
        os.replace(path, previous / path.name)
    return previous


def _one_line(error: Exception) -> str:
    if isinstance(error, OSError):
        return f"{error.strerror or error}: {error.filename}"
    return str(error)


def _machine_problem(args: argparse.Namespace, memories: tuple[float, ...]) -> str | None:
    """A budget this machine cannot hold (a TaskManager per slot at the largest memory profile, beside
    the JobManager): 63 TaskManagers of 1,118 MB once started on a 23 GB machine."""
    from planning.flink_testbed import JOBMANAGER_MB, PROCESS_BASE_MB, available_memory_mb, largest_deployment

    available = available_memory_mb()
    largest = largest_deployment(PROCESS_BASE_MB, max(memories), available)
    if args.budget_max <= largest:
        return None
    taskmanager = PROCESS_BASE_MB + max(memories)
    return (
        f"--budget-max {args.budget_max}: local-flink runs a {taskmanager:,.0f} MB TaskManager per slot "
        f"(memory profile {max(memories):g} MB) beside a {JOBMANAGER_MB:,.0f} MB JobManager, and this "
        f"machine has {available:,.0f} MB available: at most {largest} slots"
    )


def _plan_argument_problem(args: argparse.Namespace) -> str | None:
    if args.target_rate is None or args.out is None:
        return "--target-rate and --out are required (or use 'plan-capacity fit')"
    if not (math.isfinite(args.target_rate) and args.target_rate > 0):
        return f"--target-rate must be a rate > 0, got {args.target_rate:g}"
    if args.key_census and args.testbed == "local-flink":
        return "--key-census needs a testbed that deploys one subtask per key group; local-flink cannot"
    try:  # a name too long for the filesystem raises from is_dir and realpath alike
        return _paths_problem(args)
    except OSError as error:
        return f"{error.filename or args.knowledge}: {error.strerror or error}"


def _paths_problem(args: argparse.Namespace) -> str | None:
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
    previous = os.path.realpath(args.out / PREVIOUS)
    if os.path.commonpath([knowledge, previous]) == previous:
        return f"--knowledge {args.knowledge}: inside {args.out / PREVIOUS}, which each run replaces"
    return None


def _progress(estimate) -> None:
    print(
        f"  measured {estimate.slots} slots at {estimate.memory_mb:g} MB: MST {estimate.mst_rps:,.0f} "
        f"({len(estimate.tests)} tests, {estimate.testbed_s:.0f} s of testbed time)",
        file=sys.stderr,
    )


OUTPUT_FILES = ("plan.json", "deployment.yaml", "surrogate.png")
PREVIOUS = "previous"
"""Under --out: the earlier run's outputs, replaced by each run."""
MAX_RESULTS_BYTES = 64 * 1024**2
"""The largest --results file read (StreamBed's released measurements are a few KB)."""
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
    if not home or not (Path(home) / "bin" / "taskmanager.sh").is_file() or not _flink_dist(Path(home)):
        raise ValueError(
            f"local-flink: no Flink distribution at {home!r} (bin/taskmanager.sh and lib/flink-dist*.jar; "
            "set local_flink.flink_home or FLINK_HOME)"
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


def _flink_dist(home: Path) -> bool:
    return any((home / "lib").glob("flink-dist*.jar"))


def twin_testbed(config):
    """The twin the daemon would run for this config (same topology, state profile, hardware and pods),
    as a testbed: its worker speed is fixed from the config's trace so every deployment is the same job."""
    from dataclasses import replace

    from daemon.build import make_twin
    from planning.twin_testbed import TwinTestbed

    twin = make_twin(config).twin
    params = replace(twin.params, worker_capacity_rps=twin.worker_capacity_rps)
    return TwinTestbed(twin.topology, params, seed=config.twin.seed)
