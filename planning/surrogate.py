"""StreamBed's surrogate models of capacity: MST = a·g(memory per slot) + b·g(slots) + c with g the
identity ('lin'), log1p ('log') or the square root ('sqrt'), fitted by ordinary least squares, scored
by leave-one-out error, chosen by how well the low-slot half predicts the high-slot half, and inverted
(the fewest slots whose prediction reaches a rate, which the planner asks at 110% of the requested one).
Pure functions: no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "lin": lambda x: np.asarray(x, dtype=float),
    "log": np.log1p,
    "sqrt": np.sqrt,
}
MODELS = tuple(TRANSFORMS)


@dataclass(frozen=True)
class Observation:
    """One measured configuration: slots, memory per slot and its maximal sustainable throughput."""

    slots: int
    memory_mb: float
    mst_rps: float


@dataclass(frozen=True)
class Surrogate:
    """A fitted model; `uses_memory` is False when every observation had the same memory (then a = 0)."""

    model: str
    a: float
    b: float
    c: float
    uses_memory: bool
    residual_sd_rps: float
    """Standard deviation of the residuals (n − parameters degrees of freedom; 0 when none are left)."""
    inverse_gram: tuple[tuple[float, ...], ...]
    """(XᵀX)⁻¹ of the fit, for the standard error of a prediction."""

    def _row(self, slots: float, memory_mb: float) -> np.ndarray:
        g = TRANSFORMS[self.model]
        row = [float(g(np.array(slots))), 1.0]
        return np.array([float(g(np.array(memory_mb))), *row] if self.uses_memory else row)

    def predict(self, slots: float, memory_mb: float) -> float:
        g = TRANSFORMS[self.model]
        return float(self.a * g(np.array(memory_mb)) + self.b * g(np.array(slots)) + self.c)

    def prediction_sd_rps(self, slots: float, memory_mb: float) -> float:
        """Standard error of a new measurement at this point (the OLS prediction interval's)."""
        x = self._row(slots, memory_mb)
        leverage = float(x @ np.array(self.inverse_gram) @ x)
        return self.residual_sd_rps * math.sqrt(1.0 + max(leverage, 0.0))

    def slots_for(
        self, rate_rps: float, memory_mb: float, min_slots: int = 1, max_slots: int = 100_000
    ) -> int | None:
        """The fewest slots ≥ min_slots whose predicted MST reaches `rate_rps`; None if none up to max_slots."""
        for slots in range(min_slots, max_slots + 1):
            if self.predict(slots, memory_mb) >= rate_rps:
                return slots
        return None


def fit(model: str, observations: Sequence[Observation]) -> Surrogate:
    """Least squares on the observations (memory term left out when the memory never varies)."""
    if model not in TRANSFORMS:
        raise ValueError(f"unknown surrogate model {model!r}: use one of {', '.join(MODELS)}")
    g = TRANSFORMS[model]
    slots = np.array([o.slots for o in observations], dtype=float)
    memory = np.array([o.memory_mb for o in observations], dtype=float)
    mst = np.array([o.mst_rps for o in observations], dtype=float)
    uses_memory = len(np.unique(memory)) > 1
    columns = [g(memory)] if uses_memory else []
    x = np.column_stack([*columns, g(slots), np.ones(len(slots))])
    if len(observations) < x.shape[1]:
        raise ValueError(f"{model}: {len(observations)} observations cannot fit {x.shape[1]} parameters")
    if len(np.unique(slots)) < 2:  # the slots column is a multiple of the constant: any slope fits
        raise ValueError(
            f"{model}: every measurement is at {slots[0]:g} slots: how the rate grows with slots is unknown"
        )
    coefficients, *_ = np.linalg.lstsq(x, mst, rcond=None)
    residuals = mst - x @ coefficients
    dof = len(mst) - x.shape[1]
    sd = float(math.sqrt(residuals @ residuals / dof)) if dof > 0 else 0.0
    inverse_gram = np.linalg.pinv(x.T @ x)
    a = float(coefficients[0]) if uses_memory else 0.0
    b, c = (float(v) for v in coefficients[-2:])
    return Surrogate(model, a, b, c, uses_memory, sd, tuple(tuple(float(v) for v in r) for r in inverse_gram))


def loo_errors(model: str, observations: Sequence[Observation]) -> np.ndarray:
    """Each observation's absolute error when the model is fitted on all the others."""
    errors = []
    for i, held_out in enumerate(observations):
        rest = [o for j, o in enumerate(observations) if j != i]
        surrogate = fit(model, rest)
        errors.append(abs(surrogate.predict(held_out.slots, held_out.memory_mb) - held_out.mst_rps))
    return np.array(errors)


def loo_rmse(model: str, observations: Sequence[Observation]) -> float:
    return float(np.sqrt(np.mean(loo_errors(model, observations) ** 2)))


def best_prefix(model: str, observations: Sequence[Observation], shortest: int = 5, longest: int = 20) -> int:
    """How many of the first observations (in measurement order) give the lowest leave-one-out mean
    absolute error: how Table III's number of runs comes out of the released measurements."""
    longest = min(longest, len(observations))
    if shortest > longest:
        raise ValueError(f"need at least {shortest} observations, got {len(observations)}")
    scores, problem = {}, None
    for n in range(shortest, longest + 1):
        try:  # a prefix whose leave-one-out fits cannot all be made (one slot count left) is skipped
            scores[n] = float(np.mean(loo_errors(model, observations[:n])))
        except ValueError as error:
            problem = error
    if not scores:
        raise problem
    return min(scores, key=scores.__getitem__)


def select_model(observations: Sequence[Observation], models: Sequence[str] = MODELS) -> dict[str, float]:
    """Per model, the RMSE on the half of the observations with the most slots when fitted on the other
    half (StreamBed's model selection: which model extrapolates best). The caller keeps the lowest."""
    ordered = sorted(observations, key=lambda o: (o.slots, o.memory_mb))
    half = len(ordered) // 2
    low, high = ordered[:half], ordered[half:]
    scores = {}
    for model in models:
        try:
            surrogate = fit(model, low)
        except ValueError:
            scores[model] = math.inf  # too few low points for this model's parameters
            continue
        errors = [surrogate.predict(o.slots, o.memory_mb) - o.mst_rps for o in high]
        scores[model] = float(np.sqrt(np.mean(np.square(errors))))
    if not any(map(math.isfinite, scores.values())):  # the low half fits no model: best left-one-out fit
        scores = {model: _loo_rmse_or_inf(model, observations) for model in models}
    return scores


def _loo_rmse_or_inf(model: str, observations: Sequence[Observation]) -> float:
    try:
        return loo_rmse(model, observations)
    except ValueError:
        return math.inf
