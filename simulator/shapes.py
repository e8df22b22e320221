"""A family of load shapes the policy was not tuned on: surges, flash crowds, ramps, daily cycles, random
walks, spikes and noise from calm to bursty, each generated from a stated seed.

Every shape is a per-second rate array like a recorded trace; the twin sizes its workers from the peak
(12 workers carry it +10%, `TwinParams.headroom`), so only the shape's *form* matters, not its level. Each
shape starts with at least 40 minutes without an event, so the forecaster has the history it needs before
the first surprise (the shared traces give it the same).

The family is split in two: `DEVELOPMENT` shapes are the ones the policy may be tuned on, `HELD_OUT` ones are
looked at only to report (different seeds, event sizes and timings of the same kinds, and shapes of their
own: a sudden flash crowd, a slow daily cycle with a holiday, bursty noise). A workload spec
`shape:NAME` names one (`daemon/build.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

PEAK_RPS = 60_000.0
"""Every shape is scaled to this peak (the Daedalus sine trace's), so rates read like the shared traces'."""
QUIET_START_S = 2_400
"""No event before this second: the forecaster's first ARIMA fit waits for 30 minutes of history."""


@dataclass(frozen=True)
class Shape:
    """One member of the family: a generator kind, its parameters and the seed of its random draws."""

    name: str
    kind: str
    seed: int
    duration_s: int
    held_out: bool = False
    params: dict[str, float] = field(default_factory=dict)
    noise: str = "normal"

    def rates(self) -> np.ndarray:
        """The shape's per-second rates, peak `PEAK_RPS`, never below 1% of it."""
        rng = np.random.default_rng(self.seed)
        t = np.arange(self.duration_s, dtype=float)
        level = KINDS[self.kind](t, rng, **self.params)
        level = level * NOISES[self.noise](t, rng)
        level = np.clip(level, 0.01 * level.max(), None)
        return level * (PEAK_RPS / level.max())


# ------------------------------------------------------------------------------------------- kinds
def _step_surges(t: np.ndarray, rng: np.random.Generator, events: float = 4, base: float = 1.0) -> np.ndarray:
    """Flat base with `events` steps up: each ×1.5 to ×3 for 5 to 60 minutes, apart from one another."""
    level = np.full_like(t, base)
    start = QUIET_START_S
    for _ in range(int(events)):
        start += int(rng.uniform(1_200, 2_400))
        length = int(rng.uniform(300, 3_600))
        factor = rng.uniform(1.5, 3.0)
        level[start : start + length] *= factor
        start += length
    return level


def _flash_crowds(
    t: np.ndarray, rng: np.random.Generator, events: float = 2, build_up_s: float = 900, factor: float = 2.0
) -> np.ndarray:
    """Base load with crowds that double it for ~20 minutes: a linear build-up of `build_up_s` (30 s is a
    sudden one), the plateau, then a decay over 10 minutes."""
    level = np.ones_like(t)
    start = QUIET_START_S + int(rng.uniform(0, 1_200))
    for _ in range(int(events)):
        hold = rng.uniform(900, 1_500)
        up, down = float(build_up_s), 600.0
        x = t - start
        bump = np.interp(x, [0, up, up + hold, up + hold + down], [0, 1, 1, 0], left=0, right=0)
        level += (factor - 1) * bump
        start += int(up + hold + down + rng.uniform(2_400, 3_600))
    return level


def _ramps(t: np.ndarray, rng: np.random.Generator, low: float = 0.2, up_s: float = 5_400) -> np.ndarray:
    """Low, a linear ramp up over `up_s`, a plateau of an hour, a ramp down over half the ramp-up time."""
    a = QUIET_START_S + rng.uniform(0, 600)
    b = a + up_s
    c = b + 3_600
    d = c + up_s / 2
    return np.interp(t, [0, a, b, c, d, t[-1] + 1], [low, low, 1, 1, low, low])


def _daily(
    t: np.ndarray,
    rng: np.random.Generator,
    day_s: float = 2_400,
    weekend: float = 0.55,
    holiday: float = -1,
    night: float = 0.25,
) -> np.ndarray:
    """Days compressed to `day_s`: a night trough at `night` of the peak and a day peak (a business-hours
    bump, sharper than a sine); days 5 and 6 of each week (and day `holiday`) peak at `weekend` of it."""
    day = (t // day_s).astype(int)
    phase = (t % day_s) / day_s
    # a smooth daily hump: 0 at midnight, 1 in the early afternoon
    hump = np.clip(np.sin(np.pi * phase) ** 2 + 0.15 * np.sin(2 * np.pi * phase), 0, None)
    hump /= hump.max()
    scale = np.where((day % 7 >= 5) | (day == int(holiday)), weekend, 1.0)
    jitter = rng.uniform(0.9, 1.1, size=int(day.max()) + 1)[day]
    return night + (1 - night) * hump * scale * jitter


def _random_walk(
    t: np.ndarray, rng: np.random.Generator, step: float = 0.02, reversion: float = 0.002
) -> np.ndarray:
    """A mean-reverting walk in log space, one step every 10 s (load that drifts with no pattern)."""
    steps = len(t) // 10 + 1
    x = np.zeros(steps)
    shocks = rng.normal(0, step, size=steps)
    for i in range(1, steps):
        x[i] = x[i - 1] * (1 - reversion) + shocks[i]
    return np.exp(np.repeat(x, 10)[: len(t)])


def _spikes(
    t: np.ndarray, rng: np.random.Generator, every_s: float = 1_200, base: float = 0.45
) -> np.ndarray:
    """A slow wave at `base` of the peak with spikes of 1 to 3 minutes, ×1.5 to ×2.5, about every
    `every_s` (a retry storm, a batch upstream flushing)."""
    level = base * (1 + 0.2 * np.sin(2 * np.pi * t / 7_200))
    start = QUIET_START_S
    while True:
        start += int(rng.exponential(every_s)) + 120
        if start >= len(t):
            return level
        length = int(rng.uniform(60, 180))
        level[start : start + length] *= rng.uniform(1.5, 2.5)


def _wave(t: np.ndarray, rng: np.random.Generator, period_s: float = 7_200, low: float = 0.3) -> np.ndarray:
    """A plain sine between `low` and 1 (the carrier for the noise shapes)."""
    phase = rng.uniform(0, 2 * np.pi)
    return low + (1 - low) * (0.5 + 0.5 * np.sin(2 * np.pi * t / period_s + phase))


KINDS: dict[str, Callable[..., np.ndarray]] = {
    "step-surges": _step_surges,
    "flash-crowds": _flash_crowds,
    "ramps": _ramps,
    "daily": _daily,
    "random-walk": _random_walk,
    "spikes": _spikes,
    "wave": _wave,
}


# ------------------------------------------------------------------------------------------- noise
def _calm(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return 1 + rng.normal(0, 0.005, size=len(t))


def _normal(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """2% white noise, like the recorded traces' second-to-second jitter."""
    return 1 + rng.normal(0, 0.02, size=len(t))


def _bursty(t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Correlated noise (AR(1) over ~30 s, 8%) plus bursts of 10–60 s at +20–60%, a few per hour."""
    shocks = rng.normal(0, 0.08 * np.sqrt(1 - 0.967**2), size=len(t))
    ar = np.empty(len(t))
    ar[0] = 0.0
    for i in range(1, len(t)):
        ar[i] = 0.967 * ar[i - 1] + shocks[i]
    bursts = np.zeros(len(t))
    start = 0
    while True:
        start += int(rng.exponential(900))
        if start >= len(t):
            break
        bursts[start : start + int(rng.uniform(10, 60))] += rng.uniform(0.2, 0.6)
    return np.clip(1 + ar + bursts, 0.05, None)


NOISES: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "calm": _calm,
    "normal": _normal,
    "bursty": _bursty,
}


# ------------------------------------------------------------------------------------------- the family
HOURS = 3_600
DEVELOPMENT: tuple[Shape, ...] = (
    Shape("step-surges", "step-surges", seed=11, duration_s=4 * HOURS),
    Shape("flash-crowd-slow", "flash-crowds", seed=12, duration_s=4 * HOURS, params={"build_up_s": 900}),
    Shape("ramps", "ramps", seed=13, duration_s=4 * HOURS),
    Shape("daily-fast", "daily", seed=14, duration_s=7 * 2_400, params={"day_s": 2_400}),
    Shape("random-walk", "random-walk", seed=15, duration_s=4 * HOURS),
    Shape("spikes", "spikes", seed=16, duration_s=4 * HOURS),
    Shape("calm-wave", "wave", seed=17, duration_s=4 * HOURS, noise="calm"),
)
HELD_OUT: tuple[Shape, ...] = (
    Shape("step-surges-b", "step-surges", seed=21, duration_s=4 * HOURS, held_out=True),
    Shape(
        "flash-crowd-sudden",
        "flash-crowds",
        seed=22,
        duration_s=4 * HOURS,
        held_out=True,
        params={"build_up_s": 30},
    ),
    Shape(
        "daily-slow-holiday",
        "daily",
        seed=23,
        duration_s=3 * 7_200,
        held_out=True,
        params={"day_s": 7_200, "holiday": 1, "weekend": 0.5},
    ),
    Shape("daily-fast-b", "daily", seed=24, duration_s=6 * 3_000, held_out=True, params={"day_s": 3_000}),
    Shape("random-walk-b", "random-walk", seed=25, duration_s=4 * HOURS, held_out=True),
    Shape("spikes-b", "spikes", seed=26, duration_s=4 * HOURS, held_out=True, params={"every_s": 900}),
    Shape("bursty-wave", "wave", seed=27, duration_s=4 * HOURS, held_out=True, noise="bursty"),
)
FAMILY: dict[str, Shape] = {shape.name: shape for shape in (*DEVELOPMENT, *HELD_OUT)}
SUITES: dict[str, tuple[str, ...]] = {
    "development": tuple(s.name for s in DEVELOPMENT),
    "held-out": tuple(s.name for s in HELD_OUT),
    "family": tuple(FAMILY),
}
"""Named sets of shapes for `compare --suite` (the shared traces are the suite `shared`, kept by the
report module that knows their files)."""


def shape_rates(name: str) -> np.ndarray:
    """The rates of family member `name`; KeyError naming the members when there is none."""
    if name not in FAMILY:
        raise KeyError(f"no load shape {name!r}; the family has {', '.join(FAMILY)}")
    return FAMILY[name].rates()
