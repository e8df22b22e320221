"""What a planner that sees the load perfectly, but only a horizon ahead, reaches: workers ÷ the oracle and
rescales per hour, when every rescale is priced at a number of worker-seconds.

Per load, the twin's true capacities give the fewest workers each second needs (the oracle floor's
`oracle_workers`); a plan holds one scale-out per 60 s step, at least what the step's busiest second
needs. Every step, a dynamic programme over the next `horizon` steps picks the step's scale-out that
minimises worker-seconds + price × rescales over that window, and the step is taken (receding horizon,
as a model-predictive controller would run with a perfect forecast). Restart downtime and catch-up are
left out, so the figures are bounds: no planner with that horizon and that price does better. They say
how much of issue 16's gap (workers ≤ 1.15× the oracle at ≤ 3 rescales/h) a planner that prices
rescales over the horizon can close, and where only a longer view of the load could.

Usage: python benchmarks/horizon_bound.py [--loads sine,ysb,traffic,shape:spikes] [--horizons-min 5,15,60]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from perfect_forecast import on_load

from config.load import load_config
from daemon.build import make_twin
from simulator.baselines import oracle_workers

STEP_S = 60


def step_needs(load: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Per second and per whole step, the fewest workers the load needs; the largest scale-out."""
    twin = make_twin(on_load(load_config(None), load, 0)).twin
    per_second = oracle_workers(twin, twin.trace_rps)
    steps = len(per_second) // STEP_S
    per_second = per_second[: steps * STEP_S]
    return per_second, per_second.reshape(steps, STEP_S).max(axis=1), twin.max_parallelism


def first_step(needs: np.ndarray, current: int, price_ws: float, max_n: int) -> int:
    """The scale-out for needs[0] of the cheapest schedule over `needs`, starting from `current`.

    cost_to_go[n]: the least cost of the steps after this one, arriving at n (each may first rescale)."""
    scaleouts = np.arange(1, max_n + 1)
    cost_to_go = np.zeros(max_n)
    for need in needs[:0:-1]:
        held = np.where(scaleouts >= need, scaleouts * STEP_S, np.inf) + cost_to_go
        cost_to_go = np.minimum(held, held.min() + price_ws)
    now = np.where(scaleouts >= needs[0], scaleouts * STEP_S, np.inf) + cost_to_go
    return int(scaleouts[np.argmin(now + price_ws * (scaleouts != current))])


def receding(needs: np.ndarray, horizon_steps: int, price_ws: float, max_n: int) -> tuple[float, int]:
    """Mean workers and rescales of the receding-horizon plan (starting at the largest scale-out)."""
    scaleout, worker_steps, rescales = max_n, 0, 0
    for step in range(len(needs)):
        chosen = first_step(needs[step : step + horizon_steps], scaleout, price_ws, max_n)
        rescales += chosen != scaleout
        scaleout = chosen
        worker_steps += scaleout
    return worker_steps / len(needs), rescales


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="sine,ysb,traffic,shape:daily-fast,shape:spikes")
    parser.add_argument("--horizons-min", default="5,15,60", help="horizons; the whole run is added")
    parser.add_argument("--prices-ws", default="0,600,1800,3600", help="worker-seconds per rescale")
    args = parser.parse_args()
    horizons = [int(h) for h in args.horizons_min.split(",")] + [math.inf]
    prices = [float(p) for p in args.prices_ws.split(",")]
    print("| load | price (worker-s) | " + " | ".join(_horizon_name(h) for h in horizons) + " |")
    print("|---|---:|" + "---:|" * len(horizons))
    for load in (name.strip() for name in args.loads.split(",") if name.strip()):
        per_second, needs, max_n = step_needs(load)
        floor, hours = float(per_second.mean()), len(per_second) / 3600
        for price in prices:
            cells = []
            for horizon in horizons:
                steps = len(needs) if math.isinf(horizon) else max(1, round(horizon * 60 / STEP_S))
                workers, rescales = receding(needs, steps, price, max_n)
                cells.append(f"{workers / floor:.2f}× / {rescales / hours:.1f}/h")
            print(f"| {load} | {price:.0f} | " + " | ".join(cells) + " |", flush=True)


def _horizon_name(minutes: float) -> str:
    return "whole run" if math.isinf(minutes) else f"{minutes:g} min ahead"


if __name__ == "__main__":
    main()
