"""RecoveryTracker on a rescale recorded on a real Flink cluster (Daedalus data, YSB workload).

The recording: one sample per second of the workload (records/s into Kafka) and the job's total
throughput. The job stops where the throughput first drops to 0; it comes back with a short blip and a
second restart (reactive mode), then works off its backlog well above the workload and falls back to it.

What the data shows, computed from the two columns alone:
- recovered at the first second after the stop from which the throughput stays within 10% of the
  workload for a whole minute. Before the rescale the two series differ by several percent (they are
  offset in time, so their gap grows with the workload's slope); during the catch-up the throughput is
  20-30% above the workload, so 10% separates the two regimes.
- processing resumed at the first second with throughput after the last zero before that recovery.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from recovery.normal import NormalBehaviour
from recovery.tracker import ObservedRecovery, RecoveryTracker
from tests.conftest import read_columns
from tests.recovery.synthetic import batches

TOLERANCE = 0.10
HOLD_S = 60
K_RECORDED = 2.5


def read_times(path: Path) -> np.ndarray:
    with path.open(encoding="utf-8-sig") as handle:
        return np.array([float(row[0]) for row in list(csv.reader(handle))[1:] if row])


@pytest.fixture(scope="module")
def recorded(recorded_metrics: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    workload_file = recorded_metrics / "anomaly_detection_workload.csv"
    throughput_file = recorded_metrics / "anomaly_detect_throughput.csv"
    (workload,) = read_columns(workload_file).values()
    (throughput,) = read_columns(throughput_file).values()
    times = read_times(throughput_file)
    n = len(throughput)  # the workload file has one more trailing second
    assert np.array_equal(read_times(workload_file)[:n], times)
    return times, workload[:n], throughput


def stop_s(times: np.ndarray, throughput: np.ndarray) -> float:
    return float(times[np.flatnonzero(throughput == 0)[0]])


def reference(
    times: np.ndarray, workload: np.ndarray, throughput: np.ndarray, tolerance: float = TOLERANCE
) -> tuple[float, float]:
    """(downtime_s, recovery_s) after the stop as the data shows them, by the rules in the module doc."""
    stop = stop_s(times, throughput)
    close = np.abs(throughput - workload) <= tolerance * workload
    recovered_at = next(
        i for i in np.flatnonzero((times > stop) & (throughput > 0)) if close[i : i + HOLD_S].all()
    )
    last_zero = np.flatnonzero(throughput[:recovered_at] == 0)[-1]
    return float(times[last_zero + 1] - stop), float(times[recovered_at] - stop)


def observe(recorded, k_std: float) -> ObservedRecovery | None:
    """The tracker as the daemon runs it: normal model from the samples before the stop, then the
    samples after it in one-minute batches."""
    times, workload, throughput = recorded
    stop = stop_s(times, throughput)
    before = times < stop
    normal = NormalBehaviour()
    normal.update(workload[before], throughput[before])
    tracker = RecoveryTracker(normal, k_std=k_std, timeout_s=1800.0)
    tracker.start(stop, "out", predicted_recovery_s=np.nan, target_s=600.0)
    for batch in batches(times[~before], workload[~before], throughput[~before], size=60):
        observed = tracker.feed(*batch)
        if observed is not None:
            return observed
    return None


def test_reference_is_a_downtime_then_a_catch_up_and_does_not_hinge_on_the_tolerance(recorded):
    times, workload, throughput = recorded
    downtime_s, recovery_s = reference(*recorded)
    stop = stop_s(times, throughput)
    assert 0 < downtime_s < recovery_s < 300
    catch_up = (times >= stop + downtime_s) & (times < stop + recovery_s)
    assert (throughput[catch_up] / workload[catch_up]).max() > 1.2  # worked off a backlog first
    for tolerance in (0.08, 0.09):
        assert reference(*recorded, tolerance=tolerance) == (downtime_s, recovery_s)


def test_observed_recovery_matches_the_data_within_ten_seconds(recorded):
    downtime_s, recovery_s = reference(*recorded)
    observed = observe(recorded, K_RECORDED)
    assert observed is not None and observed.recovered
    assert abs(observed.recovery_s - recovery_s) <= 10
    assert abs(observed.downtime_s - downtime_s) <= 1


def test_why_k_is_wider_than_the_papers_one_on_this_recording(recorded):
    """The normal diff swings with the workload's slope (the series are offset in time); after the rescale
    the workload climbs faster than anywhere in the history, so its offset lies beyond one std of the
    history but within 2.5 std, while the catch-up lies beyond 2.5 std."""
    times, workload, throughput = recorded
    stop = stop_s(times, throughput)
    downtime_s, recovery_s = reference(*recorded)
    normal = NormalBehaviour()
    normal.update(workload[times < stop], throughput[times < stop])
    diff = workload - throughput
    settled = (times >= stop + recovery_s) & (times < stop + recovery_s + HOLD_S)
    catching_up = (times >= stop + downtime_s) & (times < stop + recovery_s)
    settled_k = np.abs(diff[settled] - normal.mean_rps) / normal.std_rps
    catch_up_k = np.abs(diff[catching_up] - normal.mean_rps) / normal.std_rps
    assert 1 < settled_k.max() < K_RECORDED
    assert np.quantile(catch_up_k, 0.75) > K_RECORDED
    with_paper_k = observe(recorded, 1.0)
    assert with_paper_k is not None and with_paper_k.recovery_s > recovery_s + 60  # reported far too late
