"""RecoveryTracker on synthetic rescales whose downtime and recovery are known by construction."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from recovery.normal import NormalBehaviour
from recovery.tracker import ObservedRecovery, RecoveryTracker
from tests.recovery.synthetic import batches, rescale_run

RESCALE_S = 100


def trained_normal(times: np.ndarray, workload: np.ndarray, throughput: np.ndarray) -> NormalBehaviour:
    normal = NormalBehaviour()
    before = times < RESCALE_S
    normal.update(workload[before], throughput[before])
    return normal


def watch(
    run: tuple[np.ndarray, np.ndarray, np.ndarray],
    batch_size: int = 60,
    normal: NormalBehaviour | None = None,
    target_s: float = 600.0,
    **settings,
) -> ObservedRecovery | None:
    tracker = RecoveryTracker(normal or trained_normal(*run), **settings)
    tracker.start(RESCALE_S, "out", predicted_recovery_s=40.0, target_s=target_s)
    for batch in batches(*run, size=batch_size):
        observed = tracker.feed(*batch)
        if observed is not None:
            assert not tracker.active
            return observed
    return None


@pytest.mark.parametrize("batch_size", [1, 7, 60, 400])
def test_finds_the_constructed_downtime_and_recovery_whatever_the_batches(batch_size):
    observed = watch(rescale_run(), batch_size)
    assert observed == ObservedRecovery(
        rescale_s=100.0,
        direction="out",
        downtime_s=12.0,  # zero throughput during 100..111, processing again at 112
        recovery_s=36.0,  # catch-up at 1500 rps during 112..135, normal from 136
        predicted_s=40.0,
        target_s=600.0,
        within_target=True,
        recovered=True,
    )


def test_nan_throughput_while_down_counts_as_nothing_processed():
    times, workload, throughput = rescale_run()
    throughput[(times >= 100) & (times < 112)] = np.nan
    observed = watch((times, workload, throughput), normal=trained_normal(*rescale_run()))
    assert observed is not None
    assert (observed.downtime_s, observed.recovery_s) == (12.0, 36.0)


def test_downtime_ends_after_the_last_stop_when_the_job_restarts_twice():
    times, workload, throughput = rescale_run(down_s=12)
    throughput[(times >= 104) & (times < 106)] = 300.0  # a brief start, then a second restart
    observed = watch((times, workload, throughput))
    assert observed is not None
    assert observed.downtime_s == 12.0


def test_a_catch_up_sweeping_through_the_band_is_not_a_recovery():
    times, workload, throughput = rescale_run()
    sweep = (times >= 112) & (times < 115)  # three seconds near the workload while ramping up
    throughput[sweep] = 1000.0
    assert watch((times, workload, throughput)).recovery_s == 36.0
    assert watch((times, workload, throughput), settle_samples=3).recovery_s == 12.0  # why settle exists


def test_a_late_recovery_is_observed_but_not_within_target():
    observed = watch(rescale_run(), target_s=30.0)
    assert observed.recovered and observed.recovery_s == 36.0
    assert not observed.within_target


def test_times_out_unrecovered_at_the_first_sample_past_the_deadline():
    times, workload, throughput = rescale_run(catch_up_s=1000)  # never catches up in this run
    tracker = RecoveryTracker(trained_normal(times, workload, throughput), timeout_s=60.0)
    tracker.start(RESCALE_S, "in", predicted_recovery_s=20.0, target_s=30.0)
    until = times < 160
    assert tracker.feed(times[until], workload[until], throughput[until]) is None
    observed = tracker.feed(times[~until], workload[~until], throughput[~until])
    assert observed is not None
    assert not observed.recovered and not observed.within_target
    assert math.isnan(observed.recovery_s)
    assert observed.downtime_s == 12.0  # processing did resume; it just never caught up
    assert tracker.last_fed_s == 159.0


def test_default_timeout_is_three_targets():
    times, workload, throughput = rescale_run(catch_up_s=1000)
    tracker = RecoveryTracker(trained_normal(times, workload, throughput))
    tracker.start(RESCALE_S, "out", predicted_recovery_s=20.0, target_s=50.0)
    assert tracker.feed(times[times < 250], workload[times < 250], throughput[times < 250]) is None
    assert tracker.feed(np.array([250.0]), np.array([1000.0]), np.array([1500.0])).recovered is False


def test_expire_closes_a_watch_whose_samples_stopped_coming():
    tracker = RecoveryTracker(NormalBehaviour(), timeout_s=60.0)
    tracker.start(RESCALE_S, "out", predicted_recovery_s=20.0, target_s=30.0)
    assert tracker.expire(159.0) is None
    observed = tracker.expire(160.0)
    assert observed is not None and not observed.recovered
    assert math.isnan(observed.downtime_s)  # no sample showed the stop


def test_untrained_model_falls_back_to_ten_percent_of_the_workload():
    times, workload, throughput = rescale_run()
    throughput[times >= 136] = 950.0  # normal again at 5% below the workload
    few = NormalBehaviour()
    few.update(workload[:5], throughput[:5])
    assert not few.trained
    assert watch((times, workload, throughput), normal=few).recovery_s == 36.0
    throughput[times >= 136] = 880.0  # 12% below: still anomalous under the fallback
    assert watch((times, workload, throughput), normal=few) is None


def test_a_band_never_narrower_than_two_percent_of_the_workload():
    times, workload, throughput = rescale_run(noise_rps=0.0)  # std 0 before the rescale
    throughput[times >= 136] += np.where(times[times >= 136] % 2 == 0, 15.0, -15.0)  # 1.5% noise after
    assert watch((times, workload, throughput)).recovery_s == 36.0


def test_wider_k_accepts_what_k_one_rejects():
    times, workload, throughput = rescale_run(noise_rps=50.0)  # std ≈ 50 before the rescale
    throughput[times >= 136] = 920.0  # diff 80 after: beyond 1 std (and 2% = 20), within 2 std
    assert watch((times, workload, throughput), k_std=1.0) is None
    assert watch((times, workload, throughput), k_std=2.0).recovery_s == 36.0


def test_samples_before_the_rescale_and_repeated_samples_are_skipped():
    run = rescale_run()
    tracker = RecoveryTracker(trained_normal(*run))
    tracker.start(RESCALE_S, "out", predicted_recovery_s=40.0, target_s=600.0)
    first = tuple(s[:120] for s in run)
    assert tracker.feed(*first) is None
    assert tracker.feed(*first) is None  # the same window again changes nothing
    observed = tracker.feed(*(s[110:] for s in run))  # overlapping window
    assert (observed.downtime_s, observed.recovery_s) == (12.0, 36.0)


def test_round_trip_mid_watch_resumes_where_it_stopped():
    run = rescale_run()
    normal = trained_normal(*run)
    tracker = RecoveryTracker(normal)
    tracker.start(RESCALE_S, "out", predicted_recovery_s=40.0, target_s=600.0)
    assert tracker.feed(*(s[:120] for s in run)) is None  # mid catch-up
    state = json.loads(json.dumps(tracker.to_dict()))
    resumed = RecoveryTracker.from_dict(state, NormalBehaviour.from_dict(normal.to_dict()))
    observed = resumed.feed(*(s[120:] for s in run))
    assert observed == watch(run)
    assert RecoveryTracker(normal).to_dict() is None
