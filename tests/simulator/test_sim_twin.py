"""Behaviour of the twin's ground truth: flow of records, restarts, latency, sizing, workers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.params import TwinParams
from simulator.twin import Twin
from simulator.workload import builtin_sine
from tests.simulator.twin_helpers import constant, quiet


# ------------------------------------------------------------------ determinism
def _busy_run(seed: int) -> Twin:
    twin = Twin(builtin_sine(3000, seed=1), TwinParams(failure_rate_per_hour=6.0), parallelism=6, seed=seed)
    for t_s, n in ((300, 9), (900, 4), (1500, 12), (2200, 7)):
        twin.scale_to(n, t_s)
    twin.advance_to(3000)
    return twin


def test_same_seed_gives_identical_runs():
    a, b = _busy_run(seed=7), _busy_run(seed=7)
    np.testing.assert_array_equal(a.history.view("cpu"), b.history.view("cpu"))
    np.testing.assert_array_equal(a.history.view("processed"), b.history.view("processed"))
    np.testing.assert_array_equal(a.latency.histogram, b.latency.histogram)
    assert a.restarts == b.restarts
    assert a.true_capacity_rps() == b.true_capacity_rps()


def test_different_seeds_give_different_runs():
    a, b = _busy_run(seed=7), _busy_run(seed=8)
    assert a.true_capacity_rps() != b.true_capacity_rps()  # other key hashing and worker speeds
    assert not np.array_equal(a.history.view("cpu"), b.history.view("cpu"), equal_nan=True)


# ------------------------------------------------------------------ conservation
actions = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=40),  # seconds after the previous action
        st.sampled_from(["scale", "fail"]),
        st.integers(min_value=1, max_value=6),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    rates=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=20),
    plan=actions,
    seed=st.integers(min_value=0, max_value=3),
)
def test_no_record_is_ever_dropped(rates, plan, seed):
    trace = np.repeat(np.asarray(rates, dtype=float), 15)
    twin = Twin(
        trace, quiet(failure_rate_per_hour=30.0, scale_out_downtime_sd_s=4.0), parallelism=2, seed=seed
    )

    def check() -> None:
        arrived = int(trace[: int(twin.now_s)].sum())
        assert twin.records_in == arrived
        assert twin.records_in == twin.records_processed + twin.unprocessed_records
        assert twin.backlog_records >= twin.unprocessed_records >= 0
        assert twin.records_processed_total >= twin.records_processed

    t_s = 0
    for gap_s, kind, n in plan:
        t_s += gap_s
        if kind == "scale":
            twin.scale_to(n, t_s)
        else:
            twin.inject_failure(t_s)
        check()
    twin.scale_to(6, t_s + 1)
    twin.advance_to(t_s + 1 + len(trace) + 600)  # 6 workers drain any backlog once the trace has ended
    check()
    assert twin.backlog_records == 0
    assert twin.records_processed == twin.records_in
    assert int(twin.latency.histogram.sum()) == twin.records_processed_total


# ------------------------------------------------------------------ flow below and above capacity
def test_below_capacity_no_backlog_and_base_latency():
    twin = Twin(constant(600, 900), quiet(), parallelism=1)
    twin.advance_to(900)
    assert twin.history.view("lag_at").max() == 0
    assert np.all(twin.history.view("processed") == 600)
    assert twin.latency.summary() == {"mean_latency_s": 0.5, "p95_latency_s": 0.5, "max_latency_s": 0.5}
    assert np.all(twin.history.view("worst_latency_s") == 0.5)
    assert twin.seconds_over_slo(30.0) == 0


@pytest.mark.parametrize("capacity_rps", [1000.0, 1000.4])
def test_above_capacity_backlog_grows_by_the_excess(capacity_rps):
    twin = Twin(constant(1500, 2000), quiet(worker_capacity_rps=capacity_rps), parallelism=1)
    for t_s in (1, 10, 500, 2000):
        twin.advance_to(t_s)
        assert twin.backlog_records == pytest.approx(1500 * t_s - capacity_rps * t_s, abs=1.0)
    # FIFO: the record processed last arrived when the job had processed as much as it has now
    oldest_arrival_s = int(twin.records_processed // 1500)
    assert twin.history.view("worst_latency_s")[-1] == pytest.approx(1999 - oldest_arrival_s + 0.5, abs=1)


def test_job_capacity_is_set_by_the_hottest_worker():
    probe = Twin(constant(1, 10), TwinParams(worker_capacity_rps=1000.0), parallelism=12, seed=3)
    capacity_rps = probe.true_capacity_rps()
    for factor, backlog_expected in ((0.99, False), (1.01, True)):
        twin = Twin(
            constant(factor * capacity_rps, 600),
            TwinParams(worker_capacity_rps=1000.0),
            parallelism=12,
            seed=3,
        )
        twin.advance_to(600)
        assert (twin.backlog_records > 0) is backlog_expected
    # at saturation the hottest worker processes exactly its capacity, the others less
    assert twin.backlog_records == pytest.approx(0.01 * capacity_rps * 600, rel=0.01)
    per_worker = twin.history.view("throughput")[-1, :12]
    capacities = twin.worker_capacities_rps()
    assert np.max(per_worker / capacities) == pytest.approx(1.0, rel=1e-3)
    assert np.min(per_worker / capacities) < 0.9


def test_cpu_follows_the_linear_throughput_relation():
    twin = Twin(constant(400, 120), quiet(), parallelism=1)
    twin.advance_to(120)
    p = twin.params
    expected_cpu = p.idle_cpu + (p.saturation_cpu - p.idle_cpu) * 400 / 1000
    np.testing.assert_allclose(twin.history.view("cpu")[:, 0], expected_cpu)


# ------------------------------------------------------------------ restarts, checkpoints, latency
def test_downtime_latency_is_downtime_plus_checkpoint_age_plus_base():
    # 100 records/s; checkpoints at 10, 20; scale-out at 25 stops the job for 30 s and rolls back to 20.
    twin = Twin(constant(100, 60), quiet(worker_capacity_rps=10_000.0), parallelism=1)
    twin.scale_to(2, 25)
    twin.advance_to(60)
    worst = twin.history.view("worst_latency_s")
    assert not twin.history.view("running")[25:55].any()
    assert twin.history.view("running")[55]
    assert worst[55] == 30 + (25 - 20) + 0.5  # oldest replayed record arrived at 20, processed at 55
    assert worst[54] == 54 - 20 + 0.5  # while down: age of the oldest waiting record
    assert twin.seconds_over_slo(30.0) == 6  # seconds 50..55
    # histogram by hand: seconds 0..24, 56..59 and 55's own records at delay 0; arrivals 20..54 wait till 55
    expected = np.zeros(36, dtype=np.int64)
    expected[0] = 100 * (25 + 4 + 1)
    expected[1:36] = 100
    np.testing.assert_array_equal(twin.latency.histogram, expected)
    assert twin.latency.summary()["mean_latency_s"] == pytest.approx((100 * sum(range(1, 36))) / 6500 + 0.5)


def test_seconds_over_slo_are_split_into_those_a_restart_began_and_the_rest():
    # 1 worker of 1000 rps under 1500 rps: the oldest waiting record passes 30 s at about 90 s, while the
    # job runs; the scale-out at 100 that ends that episode does not make it a restart's. A scale-out at 400
    # from a quiet job stops it for 30 s, and the records waiting through the stop pass 30 s: a restart's.
    trace = np.concatenate([constant(1500, 100), constant(200, 500)])
    twin = Twin(trace, quiet(), parallelism=1)
    twin.advance_to(100)
    twin.scale_to(2, 100)
    twin.advance_to(400)
    twin.scale_to(3, 400)
    twin.advance_to(600)
    over = twin.history.view("worst_latency_s") > 30.0
    stopped = ~twin.history.view("running")
    assert stopped[100:130].all() and over[95:135].all()  # one episode through the stop
    assert over[400:].any()
    assert twin.seconds_over_slo_after_restart(30.0) == over[400:].sum()
    assert twin.seconds_over_slo(30.0) == over.sum()


def test_rollback_replays_records_and_counts_them_again():
    twin = Twin(constant(100, 200), quiet(worker_capacity_rps=10_000.0), parallelism=2)
    twin.inject_failure(37)  # last checkpoint at 30: records of 30..36 are processed again
    twin.advance_to(200)
    assert twin.records_processed_total - twin.records_processed == 700
    assert int(twin.latency.histogram.sum()) == twin.records_in + 700
    assert twin.records_processed == twin.records_in
    assert twin.restarts == 1 and twin.rescales == 0


def test_failure_at_a_checkpoint_replays_nothing():
    twin = Twin(constant(100, 200), quiet(worker_capacity_rps=10_000.0), parallelism=2)
    twin.inject_failure(40)
    twin.advance_to(200)
    assert twin.records_processed_total == twin.records_processed == twin.records_in


@pytest.mark.parametrize("at_checkpoint", [False, True])
def test_a_scale_out_replays_nothing_when_flink_rescales_at_a_checkpoint(at_checkpoint: bool):
    """Flink >= 2.0 (FLIP-461) restarts an added TaskManager's rescale from a checkpoint that just
    completed; a scale-in is a failover from the last periodic checkpoint on every version."""
    params = quiet(worker_capacity_rps=10_000.0, scale_out_at_checkpoint=at_checkpoint)
    twin = Twin(constant(100, 300), params, parallelism=2)
    twin.scale_to(3, 37)  # last periodic checkpoint at 30
    twin.advance_to(150)
    replayed_out = twin.records_processed_total - twin.records_processed
    assert replayed_out == (0 if at_checkpoint else 700)
    twin.scale_to(2, 163)  # the run resumed at 67: its last checkpoint at 157
    twin.advance_to(300)
    assert twin.records_processed_total - twin.records_processed - replayed_out == 600
    assert twin.records_processed == twin.records_in


def test_rescale_during_downtime_restarts_the_downtime():
    twin = Twin(constant(100, 300), quiet(), parallelism=2)
    twin.scale_to(3, 13)  # scale-out: down 13..42, rolled back to checkpoint 10
    twin.scale_to(1, 20)  # scale-in during the downtime: down again for 15 s from 20
    twin.advance_to(34)
    assert not twin.running and twin.parallelism == 1
    twin.advance_to(35)
    assert twin.running and twin.uptime_s == 0
    assert twin.history.view("run_start_at")[34] == -1
    twin.advance_to(300)
    assert twin.records_processed_total - twin.records_processed == 300  # 10..12 replayed once
    assert twin.rescales == 2 and twin.restarts == 2


def test_same_parallelism_is_a_no_op():
    twin = Twin(constant(100, 100), quiet(), parallelism=3)
    twin.scale_to(3, 50)
    assert twin.running and twin.rescales == 0 and twin.restarts == 0 and twin.uptime_s == 50


def test_downtimes_are_drawn_around_thirty_and_fifteen_seconds():
    twin = Twin(constant(10, 60_000), TwinParams(worker_capacity_rps=1000.0), parallelism=1, seed=5)
    for k in range(300):
        twin.scale_to(2 if k % 2 == 0 else 1, 100 * (k + 1))
    twin.advance_to(100 * 301)
    running = twin.history.view("running")[100:]
    downtimes = np.array([int((~running[i * 100 : (i + 1) * 100]).sum()) for i in range(300)])
    scale_out, scale_in = downtimes[0::2], downtimes[1::2]
    assert scale_out.mean() == pytest.approx(30, abs=1.2) and scale_out.std() == pytest.approx(5, abs=1)
    assert scale_in.mean() == pytest.approx(15, abs=0.7) and scale_in.std() == pytest.approx(3, abs=0.7)
    assert downtimes.min() >= 5


def test_random_failures_follow_the_configured_rate():
    twin = Twin(constant(10, 36_000), quiet(failure_rate_per_hour=20.0), parallelism=1, seed=2)
    twin.advance_to(36_000)
    running_hours = (36_000 - twin.downtime_s) / 3600
    expected = 20.0 * running_hours
    assert abs(twin.restarts - expected) < 4 * np.sqrt(expected)
    assert 15 * (twin.restarts - 1) < twin.downtime_s <= 15 * twin.restarts  # the last may be cut off
    assert twin.parallelism == 1 and twin.rescales == 0


# ------------------------------------------------------------------ workers
def test_new_pods_get_new_ids_and_scale_in_removes_the_newest():
    twin = Twin(constant(10, 1000), TwinParams(worker_capacity_rps=1000.0), parallelism=4)
    assert twin.worker_ids == ("tm-0001", "tm-0002", "tm-0003", "tm-0004")
    twin.scale_to(6, 100)
    assert twin.worker_ids[-2:] == ("tm-0005", "tm-0006")
    twin.scale_to(3, 200)
    assert twin.worker_ids == ("tm-0001", "tm-0002", "tm-0003")
    predicted_rps = twin.true_capacity_rps_for(5)
    twin.scale_to(5, 300)
    assert twin.worker_ids == ("tm-0001", "tm-0002", "tm-0003", "tm-0007", "tm-0008")
    assert twin.true_capacity_rps() == predicted_rps


@pytest.mark.parametrize("n", [1, 3, 12, 17])
def test_true_capacity_for_n_is_the_capacity_after_rescaling_to_n(n):
    twin = Twin(builtin_sine(600), parallelism=7, seed=11)
    predicted_rps = twin.true_capacity_rps_for(n)
    twin.scale_to(n, 10)
    assert twin.true_capacity_rps() == predicted_rps


def test_worker_seconds_count_every_existing_worker_also_while_down():
    twin = Twin(constant(10, 400), quiet(), parallelism=2)
    twin.scale_to(5, 100)
    twin.advance_to(200)
    assert twin.worker_seconds == 2 * 100 + 5 * 100
    assert twin.downtime_s == 30


def test_parallelism_is_validated():
    twin = Twin(constant(10, 100), quiet(), parallelism=2)
    for bad in (0, -1, 129, 2.5):
        with pytest.raises(ValueError):
            twin.scale_to(bad, 10)
    twin.advance_to(50)
    with pytest.raises(ValueError):
        twin.scale_to(3, 40)  # the past
    with pytest.raises(ValueError):
        twin.advance_to(49)


# ------------------------------------------------------------------ sizing
def test_twelve_workers_carry_the_peak_plus_ten_percent_by_default():
    trace = builtin_sine(3600, seed=4)
    twin = Twin(trace, parallelism=12, seed=9)
    assert twin.reference_capacity_rps(12) == pytest.approx(1.10 * trace.max(), rel=1e-12)
    assert twin.true_capacity_rps() == pytest.approx(1.10 * trace.max(), rel=1e-12)


def test_sizing_options_override_the_default():
    trace = builtin_sine(3600, seed=4)
    twin = Twin(trace, TwinParams(headroom=0.25, reference_scaleout=8), parallelism=3)
    assert twin.reference_capacity_rps(8) == pytest.approx(1.25 * trace.max(), rel=1e-12)
    fixed = Twin(trace, TwinParams(worker_capacity_rps=5000.0, speed_cov=0.0), parallelism=1)
    assert fixed.true_capacity_rps() == 5000.0


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("num_keys", 0),
        ("cpu_noise_sd", -0.1),
        ("idle_cpu", 0.99),
        ("worker_capacity_rps", 0.0),
        ("headroom", -1),
    ],
)
def test_bad_knobs_are_rejected_by_name(knob, value):
    with pytest.raises(ValueError, match=knob):
        TwinParams(**{knob: value})


def test_bad_traces_are_rejected():
    for trace in (np.zeros(0), np.array([1.0, np.nan]), np.array([-1.0]), np.zeros((2, 2))):
        with pytest.raises(ValueError):
            Twin(trace, quiet())
    with pytest.raises(ValueError, match="peak"):
        Twin(np.zeros(10))  # nothing to size the workers from
    with pytest.raises(ValueError):
        Twin(np.ones(10), quiet(), parallelism=10**9)
