"""StreamBed's Capacity Estimator: the maximal sustainable throughput (MST) of one configuration by
controlled rate injection.

A warm-up at full rate fills the buffers and the state first; then every measurement is a cooldown at a
low rate (the job drains what the last test left), an injection at the test rate whose first part is not
measured (the job settles), and an observation. The cooldown is extended, a cooldown at a time, until the
pending records are within what the next test may grow by (at most `max_drain_s`): a fixed cooldown
shorter than the drain left the warm-up's backlog under the first tests (on real Flink with 3 s cooldowns,
thousands of records), and a test run on a draining backlog measures the drain, not the rate.

A test passes when the source achieved ≥ 99% of the injected rate and the pending records did not grow
(by more than what the same 1% allows). The test rate doubles until the first failure, then bisects
between the last pass and the last failure until the next rate is within 1% of the last one, or the count
runs out. The MST is the highest passed rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from planning.testbed import Phase, PhaseReading, Testbed


@dataclass(frozen=True)
class EstimatorSettings:
    """Timings and thresholds (defaults: the paper's runs of q1, q2, q11: 120 s warm-up, 75 s a test)."""

    warmup_s: float = 120.0
    cooldown_s: float = 15.0
    ramp_s: float = 30.0
    observe_s: float = 30.0
    cooldown_share: float = 0.01
    """Cooldown rate as a share of the rate the warm-up achieved."""
    pass_share: float = 0.99
    sensitivity: float = 0.01
    """Stop when the next rate is within this share of the last one."""
    max_tests: int = 12
    max_drain_s: float = 600.0
    """Longest a cooldown is extended while the last test's backlog drains."""

    def __post_init__(self) -> None:
        if min(self.warmup_s, self.observe_s) <= 0 or min(self.cooldown_s, self.ramp_s) < 0:
            raise ValueError("estimator timings must be > 0 (warm-up, observation) and >= 0 (others)")
        if not 0 < self.pass_share <= 1 or not 0 < self.sensitivity < 1 or self.max_tests < 1:
            raise ValueError("pass_share in (0, 1], sensitivity in (0, 1) and max_tests >= 1 required")


@dataclass(frozen=True)
class Test:
    rate_rps: float
    passed: bool
    reading: PhaseReading


@dataclass(frozen=True)
class Estimate:
    slots: int
    memory_mb: float
    mst_rps: float
    """Highest passed rate (0 when none passed)."""
    tests: tuple[Test, ...]
    warmup: PhaseReading
    testbed_s: float
    """Seconds of testbed time the estimate took."""

    @property
    def final(self) -> PhaseReading:
        """The last passed test's observation (its per-vertex metrics feed the Configuration Optimizer),
        or the warm-up's when none passed."""
        passed = [t.reading for t in self.tests if t.passed]
        return passed[-1] if passed else self.warmup


class EstimateError(RuntimeError):
    """The testbed's job carried nothing: no rate can be estimated on it (one line saying so)."""


def passed(reading: PhaseReading, settings: EstimatorSettings, observe_s: float) -> bool:
    """The achieved rate reaches pass_share of the injected one and the pending records did not grow."""
    return (
        reading.achieved_rps >= settings.pass_share * reading.injected_rps
        and reading.pending_end - reading.pending_start
        <= _allowed_growth(reading.injected_rps, settings, observe_s)
    )


def _allowed_growth(rate_rps: float, settings: EstimatorSettings, observe_s: float) -> float:
    """The pending records a test at `rate_rps` may gain: what the same 1% shortfall would leave."""
    return (1 - settings.pass_share) * rate_rps * observe_s


def _cool_down(testbed: Testbed, rate_rps: float, drained_records: float, s: EstimatorSettings) -> float:
    """Cooldowns at `rate_rps` until at most `drained_records` are pending (or `max_drain_s` passed); the
    seconds spent."""
    spent_s = 0.0
    while s.cooldown_s > 0:
        (reading,) = testbed.run([Phase(rate_rps, s.cooldown_s)])
        spent_s += s.cooldown_s
        if reading.pending_end <= drained_records or spent_s >= s.max_drain_s:
            break
    return spent_s


def estimate_mst(
    testbed: Testbed, slots: int, memory_mb: float, settings: EstimatorSettings | None = None
) -> Estimate:
    s = settings or EstimatorSettings()
    testbed.deploy(slots, memory_mb)
    (warmup,) = testbed.run([Phase(testbed.max_rate_rps, s.warmup_s)])
    if not warmup.achieved_rps > 0:  # every test would wait out its cooldowns for a drain that never comes
        raise EstimateError(
            f"the job processed no record in the {s.warmup_s:g} s warm-up at {testbed.max_rate_rps:,.0f} "
            f"records/s on {slots} slots (achieved {warmup.achieved_rps:g}): see the testbed's logs"
        )
    testbed_s = s.warmup_s
    cooldown_rps = s.cooldown_share * warmup.achieved_rps
    rate = max(warmup.achieved_rps / 2, 1.0)  # a job at full rate carries about its MST: start below it
    best, failed_at = 0.0, None
    tests: list[Test] = []
    while len(tests) < s.max_tests:
        testbed_s += _cool_down(testbed, cooldown_rps, _allowed_growth(rate, s, s.observe_s), s)
        readings = testbed.run([Phase(rate, s.ramp_s), Phase(rate, s.observe_s)])
        testbed_s += s.ramp_s + s.observe_s
        ok = passed(readings[-1], s, s.observe_s)
        tests.append(Test(rate, ok, readings[-1]))
        if ok:
            best = max(best, rate)
        else:
            failed_at = rate if failed_at is None else min(failed_at, rate)
        following = 2 * rate if failed_at is None else (best + failed_at) / 2
        if failed_at is not None and abs(following - rate) <= s.sensitivity * rate:
            break
        rate = following
    return Estimate(slots, memory_mb, best, tuple(tests), warmup, testbed_s)
