"""StreamBed's Resource Explorer: which (slots, memory per slot) points to measure on the testbed, and the
surrogate that extrapolates from them.

The four corners of the search space bootstrap the measurements (plus the middle slot count when there
is one memory level: a two-parameter model needs three points for a leave-one-out score). Bayesian
optimization (scikit-optimize: a Gaussian process with expected improvement) then picks each next point,
its cost being the lowest leave-one-out RMSE among the candidate models once that point is measured. It
stops after at least `min_extra` points when the RMSE rises by more than `stop_increase` between two
measurements, or at `max_measurements`. The model that, fitted on the low-slot half, best predicts the
high-slot half is kept, refitted on everything.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from planning.estimator import Estimate
from planning.surrogate import MODELS, Observation, Surrogate, fit, loo_rmse, select_model

MAX_MEASUREMENTS = 1_000
"""More testbed runs than any budget has points to measure (10**21 ran until killed)."""
MAX_SLOT_MEMORY_MB = 1_048_576.0
"""A terabyte per slot: beyond it a memory profile is a typo (1e308 wrote a 300-digit `Mi` request)."""


@dataclass(frozen=True)
class ExplorerSettings:
    min_slots: int = 1
    max_slots: int = 8
    memory_mb: tuple[float, ...] = (158.0,)
    min_extra: int = 3
    max_measurements: int = 20
    stop_increase: float = 0.10
    seed: int = 0
    models: tuple[str, ...] = MODELS

    def __post_init__(self) -> None:
        if not 1 <= self.min_slots < self.max_slots:
            raise ValueError(f"need 1 <= min slots < max slots, got {self.min_slots} and {self.max_slots}")
        if not self.memory_mb or any(not 1 <= m <= MAX_SLOT_MEMORY_MB for m in self.memory_mb):
            raise ValueError(f"memory profiles must be sizes in [1, {MAX_SLOT_MEMORY_MB:.0f}] MB per slot")
        if not 4 <= self.max_measurements <= MAX_MEASUREMENTS or self.min_extra < 0:
            raise ValueError(f"max_measurements must lie in [4, {MAX_MEASUREMENTS}] and min_extra >= 0")


@dataclass(frozen=True)
class Exploration:
    estimates: tuple[Estimate, ...]
    """Every testbed measurement, in the order taken."""
    rmse_history: tuple[float, ...]
    """The cost (lowest leave-one-out RMSE) after each measurement from the bootstrap on."""
    selection_rmse: dict[str, float]
    """Per model: RMSE on the high-slot half when fitted on the low-slot half."""
    surrogate: Surrogate
    stopped_because: str

    @property
    def observations(self) -> tuple[Observation, ...]:
        return tuple(Observation(e.slots, e.memory_mb, e.mst_rps) for e in self.estimates)


def lowest_loo_rmse(observations: list[Observation], models: tuple[str, ...]) -> float:
    """Equation 9 of the paper: the best candidate model's leave-one-out RMSE (inf: too few points)."""
    scores = []
    for model in models:
        try:
            scores.append(loo_rmse(model, observations))
        except ValueError:
            continue
    return min(scores, default=math.inf)


def bootstrap_points(settings: ExplorerSettings) -> list[tuple[int, float]]:
    low, high = settings.min_slots, settings.max_slots
    memories = sorted(set(settings.memory_mb))
    if len(memories) == 1:
        return [(low, memories[0]), ((low + high) // 2, memories[0]), (high, memories[0])]
    return [(s, m) for s in (low, high) for m in (memories[0], memories[-1])]


def explore(measure: Callable[[int, float], Estimate], settings: ExplorerSettings) -> Exploration:
    """Run the exploration; `measure(slots, memory_mb)` is one Capacity Estimator run on the testbed."""
    from skopt import Optimizer
    from skopt.space import Categorical, Integer

    memories = sorted(set(settings.memory_mb))
    dimensions = [Integer(settings.min_slots, settings.max_slots, name="slots")]
    if len(memories) > 1:
        dimensions.append(Categorical(memories, name="memory_mb"))
    corners = bootstrap_points(settings)
    optimizer = Optimizer(
        dimensions,
        base_estimator="GP",
        acq_func="EI",
        acq_optimizer="sampling",  # the space is a few dozen points: sampling covers it, L-BFGS is waste
        n_initial_points=len(corners),
        random_state=settings.seed % 2**32,  # skopt's (numpy's) seeds stop at 2**32 - 1
    )
    estimates: list[Estimate] = []
    history: list[float] = []
    extra = 0
    stopped = f"reached {settings.max_measurements} measurements"
    points = list(corners)
    while len(estimates) < settings.max_measurements:
        if points:
            slots, memory = points.pop(0)
        else:
            with warnings.catch_warnings():  # "already evaluated": a repeat is allowed (noisy testbeds)
                warnings.simplefilter("ignore")
                asked = optimizer.ask()
            slots, memory = int(asked[0]), float(asked[1]) if len(memories) > 1 else memories[0]
            extra += 1
        estimates.append(measure(slots, memory))
        observations = [Observation(e.slots, e.memory_mb, e.mst_rps) for e in estimates]
        cost = lowest_loo_rmse(observations, settings.models)
        x = [slots, memory] if len(memories) > 1 else [slots]
        if len(estimates) >= len(corners):
            if len(estimates) == len(corners):
                bootstrapped = [[e.slots, e.memory_mb] if len(memories) > 1 else [e.slots] for e in estimates]
                optimizer.tell(bootstrapped, [_finite(cost)] * len(bootstrapped))
            else:
                optimizer.tell(x, _finite(cost))
            history.append(cost)
        if (
            extra >= settings.min_extra
            and len(history) >= 2
            and history[-1] > (1 + settings.stop_increase) * history[-2]
        ):
            stopped = f"the leave-one-out RMSE rose by more than {settings.stop_increase:.0%}"
            break
    observations = [Observation(e.slots, e.memory_mb, e.mst_rps) for e in estimates]
    selection = select_model(observations, settings.models)
    model = min(selection, key=selection.__getitem__)
    return Exploration(tuple(estimates), tuple(history), selection, fit(model, observations), stopped)


def _finite(cost: float) -> float:
    return cost if math.isfinite(cost) else 1e18
