"""StreamBed on real local Flink: plan from testbed runs of 1–2 slots, then measure the MST at 3–4 slots
with the Capacity Estimator itself and print how far the plan's prediction was, and the wall time.

    python benchmarks/plan_capacity_flink.py [--sink-wait-us 4000] [--work 20000] [--check-slots 3 4]

The job is foresail's load job (jobs/TraceLoadJob.java, `--topology chain`: source → parse → keyed burn →
store). With a sink wait the store is the bottleneck (10^6 / wait records/s per subtask, little CPU), so
the capacity grows with the slots on this 2-core machine; with `--sink-wait-us 0` and a large `--work`
the keyed burn is CPU-bound and the machine's two cores cap every configuration past two slots (what a
plan from 1–2 slots cannot know). Needs Flink at $FLINK_HOME (scripts/test.sh installs it) and a JDK.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.standalone import build_load_job
from planning.estimator import EstimatorSettings, estimate_mst
from planning.explorer import ExplorerSettings
from planning.flink_testbed import FlinkTestbedSettings, LoadJob, LocalFlinkTestbed
from planning.plan import make_plan

DEFAULT_HOME = Path("/opt/foresail-stack/flink-2.3.0/pyflink")
MEMORY_MB = 64.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sink-wait-us", type=int, default=4000)
    parser.add_argument("--work", type=int, default=20000, help="hash rounds per record in burn")
    parser.add_argument("--plan-slots", type=int, default=2, help="largest testbed configuration")
    parser.add_argument("--check-slots", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/foresail-plan-flink"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    home = Path(os.environ.get("FLINK_HOME") or DEFAULT_HOME)
    build_load_job(home, args.workdir / "build")
    job = LoadJob(
        args=("--topology", "chain", "--sink-wait-us", str(args.sink_wait_us), "--work", str(args.work))
    )
    largest = max(args.check_slots)
    per_slot = 1e6 / args.sink_wait_us if args.sink_wait_us else None
    max_rate = 2.0 * largest * (per_slot or 2000.0)
    testbed = LocalFlinkTestbed(FlinkTestbedSettings(home, args.workdir, max_rate, job))
    estimator = EstimatorSettings(
        warmup_s=20, cooldown_s=5, ramp_s=5, observe_s=15, sensitivity=0.02, max_tests=8
    )
    explorer = ExplorerSettings(1, args.plan_slots, (MEMORY_MB,), min_extra=1, max_measurements=4)
    started = time.monotonic()
    try:
        plan = make_plan(
            testbed,
            0.9 * largest * (per_slot or 1000.0),
            explorer,
            estimator,
            progress=lambda e: print(f"  {e.slots} slot(s): MST {e.mst_rps:.0f} rps ({len(e.tests)} tests)"),
        )
        plan_s = time.monotonic() - started
        rows = []
        for slots in args.check_slots:
            measured = estimate_mst(testbed, slots, MEMORY_MB, estimator)
            predicted = plan.predict_rps(slots, MEMORY_MB)
            rows.append(
                (slots, predicted, measured.mst_rps, (predicted - measured.mst_rps) / measured.mst_rps)
            )
            print(f"  {slots} slots measured: MST {measured.mst_rps:.0f} rps")
    finally:
        testbed.close()
    total_s = time.monotonic() - started
    print(
        f"\njob: {' '.join(job.args)}; model {plan.model}; planned {plan.slots} slots for {plan.target_rate_rps:.0f} rps"
    )
    print(
        f"plan from 1–{args.plan_slots} slots: {len(plan.exploration.estimates)} measurements, {plan_s:.0f} s"
    )
    print("slots | predicted MST | measured MST | error | sink's capacity")
    for slots, predicted, measured, error in rows:
        reference = f"{slots * per_slot:.0f}" if per_slot else "-"
        print(f"{slots} | {predicted:.0f} | {measured:.0f} | {error:+.1%} | {reference}")
    print(f"wall time {total_s:.0f} s")
    if args.json:
        figures = {
            "job": list(job.args),
            "model": plan.model,
            "plan_measurements": [(e.slots, e.mst_rps) for e in plan.exploration.estimates],
            "checks": [dict(zip(("slots", "predicted", "measured", "error"), r, strict=True)) for r in rows],
            "plan_s": plan_s,
            "wall_s": total_s,
        }
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
