"""A daemon that starts from a `plan-capacity`-seeded knowledge store against a cold start, on the twin,
over the first hour of the shared traces.

Per trace: the first hour is the workload; the plan targets its peak (budgets 1..--budget-max slots on
the twin testbed of the same config, with the key-group census as `plan-capacity` runs it there) and
seeds a store with its capacity per scale-out; the daemon then runs the hour twice from the same initial
scale-out, cold (empty store) and seeded. Issue 14's target: seeded ≤ 1/3 of the cold start's seconds
over the SLO at no more worker-seconds.

The store holds both the plan's capacity per scale-out and its testbed's true rate of every vertex
(planning/seeds.py); `--granularity vertex` runs the daemon on per-vertex parallelism, where the vertex
rates are what it plans with.

Usage: python benchmarks/plan_seeded_start.py [--initial-scaleout 4,12] [--budget-max 8] [--topology T]
  [--granularity job|vertex] [--job-profile read-heavy --memory-profiles 158,316,632,1264]
"""

from __future__ import annotations

from forecasting.blas import limit_blas_threads  # first: one BLAS thread for every library loaded later

# isort: split

import argparse
import sys
import tempfile
from pathlib import Path

from config.schema import Config
from daemon.build import knowledge_settings, memory_levels
from daemon.logs import configure_logging
from daemon.plan_commands import twin_testbed
from daemon.plan_output import seed_knowledge
from daemon.simulate import simulate
from planning.explorer import ExplorerSettings
from planning.plan import make_plan

TRACES = Path(__file__).resolve().parents[1] / "data" / "daedalus" / "workloads"
HOUR_S = 3600
MB_S_PER_GB_H = 1024 * 3600


def first_hour(name: str, directory: Path) -> tuple[Path, float]:
    lines = (TRACES / name).read_text().splitlines()
    path = directory / f"{Path(name).stem}_1h.csv"
    path.write_text("\n".join(lines[: 1 + HOUR_S]) + "\n")
    return path, max(float(line.split("|")[1]) for line in lines[1 : 1 + HOUR_S])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--initial-scaleout", default="4,12")
    parser.add_argument("--budget-max", type=int, default=8)
    parser.add_argument("--topology", default="single")
    parser.add_argument("--granularity", choices=("job", "vertex"), default="job")
    parser.add_argument("--job-profile", default="stateless", help="the twin's job profile (memory levels)")
    parser.add_argument(
        "--memory-profiles",
        default="",
        help="managed MB per slot the testbed explores, comma-separated (default memory.base_mb)",
    )
    args = parser.parse_args()
    profiles = args.memory_profiles.split(",") if args.memory_profiles else ()
    memories = tuple(map(float, profiles)) or (Config().memory.base_mb,)
    limit_blas_threads()
    configure_logging("warning", "console", sys.stderr)
    print(
        "| trace | initial | planned slots × MB | cold s over SLO | seeded s over SLO | ratio | cold worker-s | "
        "seeded worker-s | cold / seeded managed GB-h |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for trace in sorted(p.name for p in TRACES.glob("*.csv")):
            workload, peak = first_hour(trace, directory)
            for initial in (int(n) for n in args.initial_scaleout.split(",")):
                config = Config.model_validate(
                    {
                        "twin": {
                            "workload": str(workload),
                            "initial_scaleout": initial,
                            "topology": args.topology,
                            "job_profile": args.job_profile,
                        },
                        "scaling": {"granularity": args.granularity},
                    }
                )
                testbed = twin_testbed(config)
                explorer = ExplorerSettings(
                    max_slots=args.budget_max, memory_mb=memories, seed=config.twin.seed
                )
                plan = make_plan(testbed, peak, explorer, max_slots=testbed.max_slots, key_census=True)
                store = directory / f"{trace}-{initial}.sqlite"
                seed_knowledge(
                    plan,
                    store,
                    knowledge_settings(config),
                    config.scaling.max_scaleout,
                    memory_levels(config),
                )
                cold = simulate(config)
                seeded = simulate(config, store_path=str(store))
                c, s = cold["seconds_over_slo"], seeded["seconds_over_slo"]
                managed = " / ".join(
                    f"{run['managed_memory_mb_seconds'] / MB_S_PER_GB_H:.1f}" for run in (cold, seeded)
                )
                print(
                    f"| {trace} | {initial} | {plan.slots} × {plan.memory_mb:g} | {c} | {s} | {_ratio(s, c)} | "
                    f"{cold['worker_seconds']} | {seeded['worker_seconds']} | {managed} |",
                    flush=True,
                )


def _ratio(value: float, cold: float) -> str:
    return f"{value / cold:.2f}" if cold else "–"


if __name__ == "__main__":
    main()
