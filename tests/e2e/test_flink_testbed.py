"""The Capacity Estimator on real local Flink (planning/flink_testbed.py): the load job's chain with a sink
that waits 4 ms per record, so one slot carries at most 250 records/s whatever the machine's load (a
loaded machine wakes the wait late, so it can carry less: the sink's own true rate says how much); the
estimate must find what the sink carries, and the per-vertex readings must show it as the busy vertex.

The testbed starts its own cluster (its own ports) beside the session's; the job needs little CPU."""

from __future__ import annotations

import math
import os

import pytest

from planning.estimator import EstimatorSettings, estimate_mst, passed
from planning.flink_testbed import FlinkTestbedError, FlinkTestbedSettings, LoadJob, LocalFlinkTestbed
from planning.testbed import Phase
from tests.e2e.stack import compile_job, flink_home

SINK_WAIT_US = 4000
SINK_CAPACITY_RPS = 1e6 / SINK_WAIT_US
QUICK = EstimatorSettings(warmup_s=10, cooldown_s=3, ramp_s=4, observe_s=20, sensitivity=0.03, max_tests=8)
"""Short timings, but an observation long enough that the 1% growth a test may show (42 records at 210/s)
exceeds what moves by whole network buffers near saturation (2 x 16 of the job's 256-byte records); at
10 s a passing rate failed on 34 records."""


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("flink-testbed")
    home = flink_home()
    compile_job(home, workdir / "build")
    job = LoadJob(args=("--topology", "chain", "--sink-wait-us", str(SINK_WAIT_US), "--work", "20000"))
    bed = LocalFlinkTestbed(FlinkTestbedSettings(home, workdir, 4 * SINK_CAPACITY_RPS, job))
    yield bed
    bed.close()


def test_the_estimate_finds_the_sink_bound_capacity_of_one_slot(testbed):
    estimate = estimate_mst(testbed, 1, 64.0, QUICK)

    vertices = {v.name: v for v in estimate.final.vertices}
    store, burn = vertices["store: Writer"], vertices["burn"]
    searched = "; ".join(
        f"{t.rate_rps:.0f}/s {'pass' if t.passed else 'fail'} (achieved {t.reading.achieved_rps:.0f}, pending "
        f"{t.reading.pending_start:.0f} -> {t.reading.pending_end:.0f})"
        for t in estimate.tests
    )
    assert estimate.mst_rps == pytest.approx(store.true_rate_rps, rel=0.10), (
        f"the MST is what the sink carries; the search: {searched}"
    )
    assert 0.6 * SINK_CAPACITY_RPS < estimate.mst_rps < 1.1 * SINK_CAPACITY_RPS, searched
    assert any(not t.passed for t in estimate.tests), "the search must have seen a failing rate"
    failed = min(t.rate_rps for t in estimate.tests if not t.passed)
    assert failed > estimate.mst_rps
    assert list(vertices) == ["Source: trace", "parse", "burn", "store: Writer"]
    assert store.busyness > 0.8 > burn.busyness, "the waiting sink, not the burn, is the busy vertex"
    assert burn.key_groups == 128 and store.key_groups == 0, "keyed vertices are told apart by their edge"
    assert math.isnan(vertices["Source: trace"].busyness) or vertices["Source: trace"].busyness >= 0
    final = estimate.final
    cpu_cores = final.cpu_load * len(os.sched_getaffinity(0))  # the one TaskManager's cores in use
    assert 0 < cpu_cores < 0.5 * final.busy_per_taskmanager(1), (
        f"the waiting sink's busy seconds cost little CPU: {cpu_cores:.2f} cores for "
        f"{final.busy_per_taskmanager(1):.2f} busy seconds per second"
    )


def test_a_rate_above_capacity_fails_the_test_and_leaves_no_backlog_beyond_a_second(testbed):
    """The source abides by backpressure as StreamBed's do: it keeps at most a second of its rate pending
    and skips the rest, where it kept every due record before (each cooldown then waited for them)."""
    testbed.deploy(1, 64.0)
    calm_rps = 0.5 * SINK_CAPACITY_RPS
    # a phase's last read lands up to a metrics fetch after its boundary (0.1 s of the overload is 150
    # records, 19 records/s over the calm phase): the calm rate runs on for 2 s past the phase read
    calm, _, overload = testbed.run(
        [Phase(calm_rps, 8), Phase(calm_rps, 2), Phase(6 * SINK_CAPACITY_RPS, 10)]
    )

    assert calm.achieved_rps == pytest.approx(calm_rps, rel=0.1)
    assert calm.pending_end - calm.pending_start < SINK_CAPACITY_RPS
    store = {v.name: v for v in overload.vertices}["store: Writer"]
    assert store.input_rps < 1.1 * SINK_CAPACITY_RPS
    assert not passed(overload, QUICK, 10)
    # the network buffers fill with what the source could still emit (~3,000 records here) and count as
    # pending, and the source keeps a second of its rate: far from all that fell due beyond capacity
    excess = (overload.injected_rps - SINK_CAPACITY_RPS) * 10
    assert overload.pending_end < 0.5 * excess


def test_running_before_deploying_is_one_clear_error(tmp_path):
    bed = LocalFlinkTestbed(FlinkTestbedSettings(flink_home(), tmp_path, 100.0))
    with pytest.raises(FlinkTestbedError, match="deploy a configuration"):
        bed.run([Phase(10, 1)])
