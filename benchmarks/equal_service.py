"""foresail against the reactive plan at equal service: how much headroom the reactive plan needs to keep
the SLO as well as foresail does, and what that costs in workers and rescales.

The reactive plan runs its workers up to their capacity and scales after the load arrived, so it uses
few workers and pays in latency (hours over the SLO on the shared traces). Comparing worker counts is
only fair at equal `seconds_over_slo`: this sweeps `scaling.reactive_headroom` (capacity ≥ (1 + h) × load,
a target utilization of 1 / (1 + h)) until the reactive plan is no worse than foresail on the SLO.

Usage: python benchmarks/equal_service.py [--traces sine,ysb,traffic] [--seeds 3] [--headrooms 0,0.1,...]
       [--jobs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecasting.blas import limit_blas_threads  # noqa: E402  first: one BLAS thread for every library loaded later

# isort: split
import numpy as np  # noqa: E402

from config.schema import Config  # noqa: E402
from daemon.compare import run_comparison  # noqa: E402
from daemon.report import TRACES, WORKLOADS  # noqa: E402

METRICS = ("avg_workers", "rescales", "seconds_over_slo")


def mean_metrics(runs: list[dict]) -> dict[str, float]:
    return {metric: float(np.mean([run[metric] for run in runs])) for metric in METRICS}


def sweep(trace: str, seeds: int, headrooms: list[float], jobs: int | None) -> dict:
    """foresail once, then reactive at growing headroom until it is no worse on the SLO."""
    base = {"twin": {"workload": str(WORKLOADS / TRACES[trace])}}
    foresail = mean_metrics(
        run_comparison(Config.model_validate(base), ["foresail"], seeds, jobs).runs["foresail"]
    )
    reactive = []
    for headroom in headrooms:
        config = Config.model_validate({**base, "scaling": {"reactive_headroom": headroom}})
        result = mean_metrics(run_comparison(config, ["reactive"], seeds, jobs).runs["reactive"])
        reactive.append({"headroom": headroom, **result})
        if result["seconds_over_slo"] <= foresail["seconds_over_slo"]:
            break
    matched = reactive[-1] if reactive[-1]["seconds_over_slo"] <= foresail["seconds_over_slo"] else None
    return {"trace": trace, "foresail": foresail, "reactive": reactive, "reactive_at_equal_service": matched}


def main() -> None:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--headrooms", default="0,0.1,0.2,0.3,0.4,0.5,0.75,1.0")
    parser.add_argument("--jobs", type=int, default=None, help="parallel runs (default: one per core)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    headrooms = [float(h) for h in args.headrooms.split(",")]
    results = [sweep(t.strip(), args.seeds, headrooms, args.jobs) for t in args.traces.split(",")]
    if args.json:
        print(json.dumps(results))
        return
    print(f"Mean over {args.seeds} seed(s) per row.\n")
    print("| trace | policy | avg workers | rescales | s over SLO |")
    print("|---|---|---:|---:|---:|")
    for result in results:
        rows = [("foresail", result["foresail"])]
        rows += [(f"reactive, headroom {r['headroom']:g}", r) for r in result["reactive"]]
        for name, row in rows:
            print(
                f"| {result['trace']} | {name} | {row['avg_workers']:.2f} | {row['rescales']:.1f} | "
                f"{row['seconds_over_slo']:,.0f} |"
            )


if __name__ == "__main__":
    main()
