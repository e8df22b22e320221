"""`foresail compare --suite NAME`: a policy set over a whole family of loads, one table.

Suites: `shared` (the three recorded 6-hour traces), `development` and `held-out` (the load-shape family of
`simulator/shapes.py`, the part the policy may be tuned on and the part kept out of it), `family` (both) and
`all` (the shared traces and the family). Per load and policy the table gives what a user feels — seconds
over the SLO (and as a share of the load's duration), rescales per hour — and what it costs — average
workers against the oracle floor — and checks the targets of the issue "Hold the SLO on loads never seen
before": ≤ 1% of the seconds over the SLO, ≤ 1.15× the oracle's workers, ≤ 3 rescales per hour and no more
than the reactive policy's. Beside the oracle floor, the floor within that rescale budget
(`simulator/score.py`): how close to the oracle a policy that rescales ≤ 3 times an hour can come at all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from config.load import with_overrides
from config.schema import Config
from daemon.compare import Comparison, aggregate, output_errors, per_run_metrics, run_comparison
from daemon.report import TRACES, WORKLOADS
from simulator.baselines import ORACLE
from simulator.score import RESCALE_BUDGET_PER_H
from simulator.shapes import SUITES

MAX_SLO_SHARE = 0.01
MAX_ORACLE_RATIO = 1.15
MAX_RESCALES_PER_H = RESCALE_BUDGET_PER_H


def suite_workloads(name: str) -> dict[str, str]:
    """Label → workload spec of every load in suite `name`; KeyError naming the suites when unknown."""
    shared = {trace: str(WORKLOADS / file_name) for trace, file_name in TRACES.items()}
    suites = {"shared": shared, **{k: {s: f"shape:{s}" for s in v} for k, v in SUITES.items()}}
    suites["all"] = {**shared, **suites["family"]}
    if name not in suites:
        raise KeyError(f"no suite {name!r}; choose one of {', '.join(suites)}")
    if set(suites[name]) & set(shared) and not WORKLOADS.is_dir():
        raise KeyError(
            f"suite {name!r} replays the shared traces, which ship with a checkout (data/daedalus/workloads/), "
            "not with an installed foresail: run it from a checkout, or choose a suite of generated shapes"
        )
    return suites[name]


def run_suite(
    config: Config,
    workloads: dict[str, str],
    policies: Sequence[str],
    seeds: int,
    jobs: int | None = None,
    on_load: Callable[[dict[str, Comparison]], None] | None = None,
    on_run: Callable[[str, dict, int, int], None] | None = None,
) -> dict[str, Comparison]:
    """Every policy × seed on every load (each load's runs in parallel, as `compare` runs them);
    `on_load` sees the results so far after each load (a long suite writes its table as it goes), `on_run`
    each run (`run_comparison`)."""
    results: dict[str, Comparison] = {}
    for label, spec in workloads.items():
        results[label] = run_comparison(
            with_overrides(config, "twin", workload=spec), policies, seeds, jobs, False, on_run
        )
        if on_load is not None:
            on_load(results)
    return results


def run_and_write(
    config: Config,
    workloads: dict[str, str],
    policies: Sequence[str],
    seeds: int,
    jobs: int | None,
    out_dir: Path,
    on_run: Callable[[str, dict, int, int], None] | None = None,
) -> str:
    """`run_suite` with the table (suite.md, suite.json) rewritten after every load; returns the table."""
    static = config.baselines.static_scaleout

    def write(done: dict[str, Comparison]) -> str:
        return write_suite(suite_rows(done, static), seeds, out_dir)

    return write(run_suite(config, workloads, policies, seeds, jobs, on_load=write, on_run=on_run))


def suite_rows(results: dict[str, Comparison], static_scaleout: int) -> list[dict[str, object]]:
    """Per load and policy the mean over seeds of the suite's figures and the targets it meets."""
    rows = []
    for label, comparison in results.items():
        stats = aggregate(per_run_metrics(comparison, static_scaleout))
        first = next(iter(comparison.runs.values()))
        duration_s = float(first[0]["duration_s"])
        floor = stats[ORACLE]["avg_workers"]["mean"]
        budget_floor = stats[comparison.policies[0]]["floor_avg_workers_within_budget"]["mean"]
        reactive = stats.get("reactive", {}).get("rescales", {}).get("mean")
        for policy in comparison.policies:
            s = {k: v["mean"] for k, v in stats[policy].items()}
            slo_share = s["seconds_over_slo"] / duration_s
            per_h = s["rescales"] * 3600 / duration_s
            ratio = s["avg_workers"] / floor
            rows.append(
                {
                    "load": label,
                    "policy": policy,
                    "avg_workers": s["avg_workers"],
                    "oracle_avg_workers": floor,
                    "oracle_ratio": ratio,
                    "budget_floor_avg_workers": budget_floor,
                    "budget_floor_ratio": budget_floor / floor,
                    "seconds_over_slo": s["seconds_over_slo"],
                    "seconds_over_slo_after_restart": s.get("seconds_over_slo_after_restart", math.nan),
                    "slo_share": slo_share,
                    "rescales": s["rescales"],
                    "rescales_per_h": per_h,
                    "meets": {
                        "slo": slo_share <= MAX_SLO_SHARE,
                        "workers": ratio <= MAX_ORACLE_RATIO,
                        "rescales": per_h <= MAX_RESCALES_PER_H
                        and (reactive is None or s["rescales"] <= reactive),
                    },
                }
            )
    return rows


def suite_table(rows: list[dict[str, object]], seeds: int) -> str:
    """One Markdown table: a row per load and policy; ✗ marks a missed target."""

    def mark(ok: bool) -> str:
        return "" if ok else " ✗"

    lines = [
        f"Mean of {seeds} seed(s). Targets: ≤ {MAX_SLO_SHARE:.0%} of the seconds over the SLO, "
        f"≤ {MAX_ORACLE_RATIO:.2f}× the oracle's workers, ≤ {MAX_RESCALES_PER_H:g} rescales/h "
        "and no more than `reactive` (✗: missed). *Floor ≤ budget ÷ oracle*: the fewest workers of a schedule "
        f"that rescales ≤ {MAX_RESCALES_PER_H:g} times an hour, over the oracle's (above "
        f"{MAX_ORACLE_RATIO:.2f}: no policy within the rescale target can meet the workers target there).",
        "",
        f"| load | policy | avg workers | ÷ oracle | floor ≤ {MAX_RESCALES_PER_H:g}/h ÷ oracle | s over SLO "
        "| after a restart | % of time | rescales | per hour |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        meets = r["meets"]
        ratio = shown(r["oracle_ratio"], MAX_ORACLE_RATIO, 2)
        share = shown(100 * r["slo_share"], 100 * MAX_SLO_SHARE, 2)
        lines.append(
            f"| {r['load']} | {r['policy']} | {r['avg_workers']:.2f} | {ratio}{mark(meets['workers'])} "
            f"| {r['budget_floor_ratio']:.2f} | {r['seconds_over_slo']:.0f} "
            f"| {_whole(r.get('seconds_over_slo_after_restart'))} | {share}{mark(meets['slo'])} "
            f"| {r['rescales']:.1f} | {shown(r['rescales_per_h'], MAX_RESCALES_PER_H, 1)}{mark(meets['rescales'])} |"
        )
    return "\n".join(lines) + "\n"


def shown(value: float, limit: float, digits: int) -> str:
    """`value` to `digits` decimals, or as many more as it takes for the printed figure to lie on the side
    of `limit` it is on (1.1509 printed 1.15 beside a ✗ for '≤ 1.15')."""
    for shown_digits in range(digits, digits + 8):
        text = f"{value:.{shown_digits}f}"
        if (float(text) <= limit) == (value <= limit):
            return text
    return text


def _whole(value: object) -> str:
    """A mean rounded to a whole number; '-' where the runs did not report it."""
    return f"{value:.0f}" if isinstance(value, int | float) and math.isfinite(value) else "-"


def write_suite(rows: list[dict[str, object]], seeds: int, out_dir: Path) -> str:
    """suite.json and suite.md into out_dir; returns the table."""
    clean = [
        {k: v for k, v in r.items() if not (isinstance(v, float) and not math.isfinite(v))} for r in rows
    ]
    table = suite_table(rows, seeds)
    with output_errors(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "suite.json").write_text(json.dumps({"seeds": seeds, "rows": clean}, indent=2) + "\n")
        (out_dir / "suite.md").write_text(table)
    return table
