"""The `foresail plan-capacity` command (registered by daemon/cli.py): plan a job's slots and memory on a
testbed before deployment, or (`plan-capacity fit`) fit released StreamBed measurements."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def add_commands(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan-capacity",
        help="plan slots, memory per slot and per-vertex parallelism for a target rate from small testbed "
        "runs (StreamBed); 'plan-capacity fit' fits released measurements",
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
    return _fail("planning on a testbed: not wired yet")
