"""Job graphs: foresail with the per-vertex (DAG) model, with the job-level model, and the baselines, on
every shipped topology × the three shared traces.

Usage:
  python benchmarks/dag_evaluation.py [--topologies io-sink,ysb] [--traces sine] [--seeds 1]
      prints one table;
  python benchmarks/dag_evaluation.py --report docs/evaluation/dag.md
      runs everything and writes the report section (and docs/evaluation/dag/summary.json);
  add --render-only to rewrite the report from the saved summary, or --update to run only the given
  topologies × traces × policies again and replace their rows in the saved summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from config.load import parse_config  # noqa: E402
from config.schema import Config  # noqa: E402
from daemon.report import TRACES, WORKLOADS  # noqa: E402
from daemon.simulate import simulate  # noqa: E402
from forecasting.blas import limit_blas_threads  # noqa: E402
from simulator.topology import load_topology, shipped_topologies  # noqa: E402

POLICIES = ("foresail", "foresail:job", "hpa-80", "flink-operator", "ds2")
KEPT = (
    "avg_workers",
    "floor_avg_workers",
    "seconds_over_slo",
    "seconds_over_slo_after_restart",
    "duration_s",
    "rescales",
    "capacity_estimate_error_pct",
    "capacity_model_dag_share",
    "capacity_model_cores_share",
    "bottleneck_vertex",
    "true_bottleneck_vertex",
    "vertices",
    "wall_time_s",
)


def _run(task: tuple[str, str, str, int]) -> dict:
    topology, trace, spec, seed = task
    policy, _, model = spec.partition(":")
    data = {
        "twin": {"workload": str(WORKLOADS / TRACES[trace]), "topology": topology, "seed": seed},
        "scaling": {"policy": policy},
        "capacity": {"model": model or "dag"},
        "knowledge": {"path": ":memory:"},
    }
    summary = simulate(parse_config(data, "dag evaluation"))
    return {"topology": topology, "trace": trace, "policy": spec, "seed": seed} | {
        k: summary[k] for k in KEPT
    }


def run_all(
    topologies: list[str], traces: list[str], policies: list[str], seeds: int, jobs: int
) -> list[dict]:
    tasks = [(t, tr, p, s) for t in topologies for tr in traces for p in policies for s in range(seeds)]
    with ProcessPoolExecutor(max_workers=jobs, initializer=limit_blas_threads) as pool:
        results = []
        for done, result in enumerate(pool.map(_run, tasks), start=1):
            results.append(result)
            print(
                f"[{done}/{len(tasks)}] {result['topology']} × {result['trace']} × {result['policy']}: "
                f"{result['avg_workers']:.2f} workers, {result['seconds_over_slo']} s over SLO",
                file=sys.stderr,
                flush=True,
            )
    return results


def _policy_order(policy: str) -> int:
    return POLICIES.index(policy) if policy in POLICIES else len(POLICIES)


def _mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return float(np.mean(values)) if values else None


def _paired_spread(dag: list[dict], job: list[dict]) -> str:
    """', difference d ± its standard error' over the seeds both ran (a seed draws the twin's TaskManager
    speeds and the n-th restart's downtime alike for both models), so a gap within the seeds' spread reads
    as such; empty under two common seeds."""
    job_by_seed = {r["seed"]: r["seconds_over_slo"] for r in job}
    diffs = [r["seconds_over_slo"] - job_by_seed[r["seed"]] for r in dag if r["seed"] in job_by_seed]
    if len(diffs) < 2:
        return ""
    error = float(np.std(diffs, ddof=1) / np.sqrt(len(diffs)))
    return f", difference {np.mean(diffs):+.0f} ± {error:.0f} s over {len(diffs)} seeds"


def table(results: list[dict]) -> str:
    lines = [
        "| topology | trace | policy | seeds | avg workers | s over SLO (% of run) | after a restart | rescales "
        "| capacity error % | rates / cores bind | bottleneck (truth) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["topology"], r["trace"], r["policy"]) for r in results)
    for topology, trace, policy in keys:
        rows = [r for r in results if (r["topology"], r["trace"], r["policy"]) == (topology, trace, policy)]
        over = _mean(rows, "seconds_over_slo")
        duration = _mean(rows, "duration_s")
        error = _mean(rows, "capacity_estimate_error_pct")
        restarted = _mean(rows, "seconds_over_slo_after_restart")
        rates, cores = _mean(rows, "capacity_model_dag_share"), _mean(rows, "capacity_model_cores_share")
        binds = "-" if rates is None else f"{rates:.0%} / {cores or 0.0:.0%}"
        named = rows[0]["bottleneck_vertex"] or "-"
        lines.append(
            f"| {topology} | {trace} | {policy} | {len(rows)} | {_mean(rows, 'avg_workers'):.2f} | {over:.0f} "
            f"({100 * over / duration:.2f}%) | {'-' if restarted is None else f'{restarted:.0f}'} | "
            f"{_mean(rows, 'rescales'):.1f} | "
            f"{'-' if error is None else f'{error:.2f}'} | {binds} | "
            f"{named} ({rows[0]['true_bottleneck_vertex']}) |"
        )
    return "\n".join(lines)


def verdicts(results: list[dict]) -> list[str]:
    """Per topology × trace: the done-when checks of the DAG model against the job-level model (means over
    the seeds)."""
    lines = []
    for topology, trace in dict.fromkeys((r["topology"], r["trace"]) for r in results):
        cell = [r for r in results if (r["topology"], r["trace"]) == (topology, trace)]
        dag = [r for r in cell if r["policy"] == "foresail"]
        job = [r for r in cell if r["policy"] == "foresail:job"]
        if not dag or not job:
            continue
        error, job_error = (
            _mean(dag, "capacity_estimate_error_pct"),
            _mean(job, "capacity_estimate_error_pct"),
        )
        over, job_over = _mean(dag, "seconds_over_slo"), _mean(job, "seconds_over_slo")
        share = over / _mean(dag, "duration_s")
        error_ok = error is not None and error <= 3.0
        lines.append(
            f"- {topology} × {trace}: capacity error {_percent(error)} ({'≤' if error_ok else '>'} 3%), seconds over "
            f"SLO {over:.0f} ({share:.2%}{', ≤ 1%' if share <= 0.01 else ', > 1%'}) with the DAG model vs "
            f"{job_over:.0f} with the job-level model ({'no worse' if over <= job_over else 'WORSE'}"
            f"{_paired_spread(dag, job)}), at "
            f"{_mean(dag, 'avg_workers'):.2f} vs {_mean(job, 'avg_workers'):.2f} workers; job-level capacity "
            f"error {_percent(job_error)}"
        )
    return lines


def _percent(value: float | None) -> str:
    """A capacity error; '-' where no loop estimated one (a trace too short)."""
    return "-" if value is None else f"{value:.2f}%"


def write_report(path: Path, results: list[dict]) -> None:
    topologies = dict.fromkeys(r["topology"] for r in results)
    described = "\n".join(f"- **{t}**: {load_topology(t).description}" for t in topologies)
    seeds = {
        p: len({r["seed"] for r in results if r["policy"] == p})
        for p in dict.fromkeys(r["policy"] for r in results)
    }
    seeds_text = ", ".join(f"{p} {n}" for p, n in seeds.items())
    path.write_text(
        "# Job graphs: the per-vertex model against the job-level model\n\n"
        "Generated by `python benchmarks/dag_evaluation.py --report docs/evaluation/dag.md` "
        f"(seeds per cell: {seeds_text}; every topology sized so that 12 workers carry the "
        "trace's peak + 10%).\n\n"
        f"{described}\n\n"
        "`foresail` runs with `capacity.model: dag` (the default: per-vertex true rates and each TaskManager's "
        "core, from busy time, capacity/cores.py), `foresail:job` with the per-worker CPU lines alone. "
        "*Capacity error*: median over loops of |estimated − true| / true capacity at the current scale-out. "
        "*Rates / cores bind*: share of loops in which a vertex's true rate, or a TaskManager's core, bounds "
        "the current capacity (the rest: the CPU lines, until the rates are known). *Bottleneck*: the vertex the "
        "analysis named most often, and in brackets the twin's truth ('cpu' = a TaskManager's core binds "
        "before any one vertex is busy all the time). *After a restart*: the seconds over the SLO in episodes "
        "a restart began (the job stood still at their first second or in the SLO's seconds before); the rest "
        "began while the job ran behind its load.\n\n"
        f"{table(results)}\n\n## Checks\n\n" + "\n".join(verdicts(results)) + "\n",
        encoding="utf-8",
    )


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default=",".join(shipped_topologies()))
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--report", type=Path, help="write the report here (and its summary.json beside)")
    parser.add_argument("--render-only", action="store_true", help="with --report: reuse the saved summary")
    parser.add_argument("--update", action="store_true", help="with --report: replace the rerun rows only")
    args = parser.parse_args()
    Config.model_validate({})  # the defaults parse
    split = [x.strip() for x in args.topologies.split(",") if x.strip()]
    summary_path = args.report.with_suffix("") / "summary.json" if args.report else None
    if args.render_only and summary_path:
        results = json.loads(summary_path.read_text())
    else:
        traces = [x.strip() for x in args.traces.split(",") if x.strip()]
        policies = [x.strip() for x in args.policies.split(",") if x.strip()]
        results = run_all(split, traces, policies, args.seeds, args.jobs)
        if args.update and summary_path and summary_path.is_file():
            rerun = {(r["topology"], r["trace"], r["policy"]) for r in results}
            kept = [
                r
                for r in json.loads(summary_path.read_text())
                if (r["topology"], r["trace"], r["policy"]) not in rerun
            ]
            results = sorted(
                kept + results, key=lambda r: (r["topology"], r["trace"], _policy_order(r["policy"]))
            )
    if args.report:
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(results, indent=1))
        write_report(args.report, results)
        print(f"wrote {args.report}")
    print(table(results))
    print("\n".join(verdicts(results)))


if __name__ == "__main__":
    main()
