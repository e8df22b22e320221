"""`foresail compare`: several policies × seeds on one trace, side by side, with the oracle floor.

Runs go to a process pool (the twin and loop are single-threaded; one process per core). Output:
`summary.json` (every run's summary, mean ± sd per policy, the derived ratios, the target check),
`table.md` (Markdown tables) and the PNG plots of `daemon.plots`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from config.load import ConfigError, parse_config
from config.schema import Config
from daemon.logs import configure_logging
from daemon.simulate import simulate
from forecasting.blas import limit_blas_threads
from simulator.baselines import ORACLE

HEADLINE = (
    ("avg_workers", "avg workers"),
    ("worker_seconds_vs_static", "worker-s / static"),
    ("gap_to_oracle_pct", "gap to oracle %"),
    ("seconds_over_slo", "s over SLO"),
    ("seconds_over_slo_after_restart", "of them after a restart"),
    ("p95_latency_s", "p95 latency s"),
    ("mean_latency_s", "mean latency s"),
    ("rescales", "rescales"),
    ("downtime_s", "downtime s"),
)
NOT_METRICS = {"policy", "workload", "seed", "series"}


@dataclass
class Comparison:
    """Runs of one trace: `runs[policy]` is one summary per seed (with "series" when kept)."""

    workload: str
    seeds: list[int]
    runs: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def policies(self) -> list[str]:
        return list(self.runs)


def run_comparison(
    config: Config,
    policies: Sequence[str],
    seeds: int,
    jobs: int | None = None,
    keep_series: bool = True,
    on_run: Callable[[str, dict, int, int], None] | None = None,
) -> Comparison:
    """Every policy (the oracle is implied: it is every run's floor) on seeds twin.seed .. twin.seed+seeds-1.

    A policy may name its capacity model after a colon (`foresail:job`, `foresail:dag`) so that the two
    models run side by side; the runs are reported under that name. `on_run(spec, summary, done, total)`
    sees each run as its result arrives (in task order), for a progress line."""
    policies = [p for p in dict.fromkeys(policies) if p != ORACLE]
    seed_list = [config.twin.seed + i for i in range(seeds)]
    base = config.model_dump()
    tasks = []
    for spec in policies:
        policy, _, model = spec.partition(":")
        for seed in seed_list:
            data = {
                **base,
                "twin": {**base["twin"], "seed": seed},
                "scaling": {**base["scaling"], "policy": policy},
                "capacity": {**base["capacity"], **({"model": model} if model else {})},
            }
            data["knowledge"] = {**base["knowledge"], "path": ":memory:"}
            tasks.append((spec, data, keep_series))
    for _, data, _ in tasks:  # fail fast, in this process, on a bad policy name or knob
        parse_config(data, "compare")
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    results = []
    with _pool(workers) as pool:
        summaries = map(_run, tasks) if pool is None else pool.map(_run, tasks)
        for (spec, _, _), summary in zip(tasks, summaries, strict=True):
            results.append(summary)
            if on_run is not None:
                on_run(spec, summary, len(results), len(tasks))
    comparison = Comparison(config.twin.workload, seed_list)
    for (spec, _, _), summary in zip(tasks, results, strict=True):
        comparison.runs.setdefault(spec, []).append(summary)
    return comparison


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """A process pool for more than one worker (None: run here). On Ctrl-C the workers, which ignore it,
    are stopped at once instead of finishing their runs, and the interrupt goes on to the caller."""
    if workers == 1:
        yield None
        return
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_quiet_logs)
    stopped = False
    try:
        yield pool
    except KeyboardInterrupt:
        stopped = True
        processes = list(pool._processes.values())  # no public way to stop a running task (3.11)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise WorkersStopped from None
    finally:
        if not stopped:
            pool.shutdown(wait=True)


class WorkersStopped(KeyboardInterrupt):
    """Ctrl-C stopped the worker processes in their runs. One stopped while sending its result leaves the
    pool's reader thread waiting for the rest for good (a compare in CI hung 120 s, then for good, on
    its `shutdown(wait=True)`): the process must end without joining the pool's threads (`os._exit`)."""


def _quiet_logs() -> None:
    """Worker processes report only warnings (on stderr): the summaries are the output. Ctrl-C reaches
    the whole process group: the parent alone handles it (see `_pool`), so no worker prints a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging("warning", "console", sys.stderr)
    limit_blas_threads()


def _run(task: tuple[str, dict, bool]) -> dict:
    _, data, keep_series = task
    return simulate(parse_config(data, "compare"), keep_series=keep_series)


# ------------------------------------------------------------------------------------------- aggregation
def per_run_metrics(comparison: Comparison, static_scaleout: int) -> dict[str, list[dict[str, float]]]:
    """Every numeric metric of each run plus the derived ones; the oracle as its own row."""
    static_by_seed = {r["seed"]: r["worker_seconds"] for r in comparison.runs.get("static", [])}
    rows: dict[str, list[dict[str, float]]] = {}
    for policy, runs in comparison.runs.items():
        for run in runs:
            metrics = {k: float(v) for k, v in run.items() if k not in NOT_METRICS and _is_number(v)}
            static_ws = static_by_seed.get(run["seed"], static_scaleout * run["duration_s"])
            metrics["worker_seconds_vs_static"] = run["worker_seconds"] / static_ws
            metrics["gap_to_oracle_pct"] = 100 * (run["avg_workers"] / run["floor_avg_workers"] - 1)
            rows.setdefault(policy, []).append(metrics)
    first = next(iter(comparison.runs.values()), [])
    for run in first:  # the floor depends on the seed (skew, speeds), not on the policy
        static_ws = static_by_seed.get(run["seed"], static_scaleout * run["duration_s"])
        floor = run["floor_avg_workers"]
        rows.setdefault(ORACLE, []).append(
            {
                "avg_workers": floor,
                "worker_seconds": floor * run["duration_s"],
                "worker_seconds_vs_static": floor * run["duration_s"] / static_ws,
                "gap_to_oracle_pct": 0.0,
                "rescales": 0.0,
                "downtime_s": 0.0,
            }
        )
    return rows


def aggregate(rows: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Mean and sample sd over seeds of every metric (None where no seed has a value)."""
    result: dict[str, dict[str, dict[str, float | None]]] = {}
    for policy, runs in rows.items():
        names = dict.fromkeys(name for run in runs for name in run)
        stats = {}
        for name in names:
            values = [run[name] for run in runs if name in run and math.isfinite(run[name])]
            mean = float(np.mean(values)) if values else None
            sd = float(np.std(values, ddof=1)) if len(values) > 1 else (0.0 if values else None)
            stats[name] = {"mean": mean, "sd": sd, "n": len(values)}
        result[policy] = stats
    return result


def target_check(stats: dict[str, dict[str, dict]]) -> dict[str, object] | None:
    """Issue 4's target: foresail ≥ 50 % fewer worker-seconds than static, ≥ 25 % fewer than the better
    (cheaper) HPA, with seconds over the SLO no worse than that HPA. None if a run is missing."""
    hpas = [p for p in ("hpa-80", "hpa-85") if p in stats]
    if "foresail" not in stats or "static" not in stats or not hpas:
        return None

    def mean(policy: str, metric: str) -> float:
        return stats[policy][metric]["mean"]

    better = min(hpas, key=lambda p: mean(p, "worker_seconds"))
    ws = mean("foresail", "worker_seconds")
    vs_static = 1 - ws / mean("static", "worker_seconds")
    vs_hpa = 1 - ws / mean(better, "worker_seconds")
    slo, hpa_slo = mean("foresail", "seconds_over_slo"), mean(better, "seconds_over_slo")
    return {
        "saving_vs_static": vs_static,
        "better_hpa": better,
        "saving_vs_better_hpa": vs_hpa,
        "seconds_over_slo": slo,
        "better_hpa_seconds_over_slo": hpa_slo,
        "static_met": vs_static >= 0.5,
        "hpa_met": vs_hpa >= 0.25,
        "slo_met": slo <= hpa_slo,
        "met": vs_static >= 0.5 and vs_hpa >= 0.25 and slo <= hpa_slo,
    }


# ------------------------------------------------------------------------------------------- output
def fmt(stat: dict | None) -> str:
    """'mean ± sd' with a precision that suits the magnitude; '—' when there is no value."""
    if not stat or stat["mean"] is None:
        return "—"
    mean, sd = stat["mean"], stat["sd"] or 0.0
    digits = 0 if abs(mean) >= 100 or (mean == 0 and sd == 0) else 2 if abs(mean) >= 1 else 3
    text = f"{mean:,.{digits}f}"
    return text if stat["n"] < 2 else f"{text} ± {sd:,.{digits}f}"


def markdown_tables(stats: dict[str, dict[str, dict]], seeds: int) -> str:
    """A headline table (policies × key metrics) and the full table (every metric × policies)."""
    order = [p for p in stats if p != ORACLE] + [ORACLE]
    lines = [
        f"Mean ± sd over {seeds} seed(s). Oracle: per-second floor of the twin's ground truth (no policy).",
        "",
        "| policy | " + " | ".join(label for _, label in HEADLINE) + " |",
        "|---|" + "---:|" * len(HEADLINE),
    ]
    for policy in order:
        lines.append(f"| {policy} | " + " | ".join(fmt(stats[policy].get(k)) for k, _ in HEADLINE) + " |")
    metrics = list(dict.fromkeys(m for p in order if p != ORACLE for m in stats[p]))
    lines += ["", "| metric | " + " | ".join(order) + " |", "|---|" + "---:|" * len(order)]
    for metric in metrics:
        lines.append(f"| {metric} | " + " | ".join(fmt(stats[p].get(metric)) for p in order) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(comparison: Comparison, out_dir: Path, static_scaleout: int = 12) -> dict[str, object]:
    """summary.json, table.md and the plots into out_dir; returns the summary."""
    from daemon.plots import write_plots  # matplotlib only when plotting

    with output_errors(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    rows = per_run_metrics(comparison, static_scaleout)
    stats = aggregate(rows)
    summary = {
        "workload": comparison.workload,
        "seeds": comparison.seeds,
        "policies": comparison.policies,
        "stats": stats,
        "target": target_check(stats),
        "runs": {p: [_without_series(r) for r in runs] for p, runs in comparison.runs.items()},
    }
    with output_errors(out_dir):
        partial = out_dir / "summary.json.partial"  # replaced whole: a full disk leaves the last one
        partial.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
        partial.replace(out_dir / "summary.json")
        (out_dir / "table.md").write_text(markdown_tables(stats, len(comparison.seeds)))
        summary["plots"] = [str(p) for p in write_plots(comparison.runs, stats, out_dir)]
    return summary


@contextmanager
def output_errors(out_dir: Path) -> Iterator[None]:
    """A failed write (disk full, no permission) as a ConfigError naming the output folder: one line."""
    try:
        yield
    except OSError as error:
        raise ConfigError("output", [f"{out_dir}: cannot write: {error.strerror or error}"]) from None


def _without_series(run: dict) -> dict:
    return {
        k: v for k, v in run.items() if k != "series" and not (isinstance(v, float) and not math.isfinite(v))
    }


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
