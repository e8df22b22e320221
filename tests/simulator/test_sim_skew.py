"""Key skew: Flink's key-group assignment and the CPU spread it produces at twelve workers."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.calibration import throughput_share_cov, worker_mean_cpu
from simulator.params import TwinParams
from simulator.skew import key_group_counts, operator_index_for_key_group, subtask_shares
from simulator.twin import Twin
from tests.conftest import SHARED_DATA

METRICS = SHARED_DATA / "metrics"


def flink_key_group_range(max_parallelism: int, parallelism: int, index: int) -> range:
    """KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, transcribed from Flink."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


@pytest.mark.parametrize("max_parallelism", [128, 200])
def test_key_groups_go_to_the_subtask_flink_would_pick(max_parallelism):
    groups = np.arange(max_parallelism)
    for parallelism in range(1, max_parallelism + 1):
        owners = operator_index_for_key_group(groups, parallelism, max_parallelism)
        for index in range(parallelism):
            assert list(groups[owners == index]) == list(
                flink_key_group_range(max_parallelism, parallelism, index)
            )


def test_twelve_subtasks_of_128_key_groups_own_ten_or_eleven_groups():
    owners = operator_index_for_key_group(np.arange(128), 12, 128)
    sizes = np.bincount(owners)
    assert sorted(sizes.tolist()) == [10] * 4 + [11] * 8  # 4*10 + 8*11 = 128
    assert operator_index_for_key_group(10, 12, 128) == 0 and operator_index_for_key_group(11, 12, 128) == 1


def test_shares_add_up_and_follow_the_key_counts():
    counts = key_group_counts(680, 128, np.random.default_rng(0))
    assert counts.sum() == 680
    for n in (1, 5, 12, 128):
        shares = subtask_shares(counts, n)
        assert len(shares) == n and shares.sum() == pytest.approx(1.0, abs=1e-12) and (shares >= 0).all()
    np.testing.assert_allclose(subtask_shares(counts, 128), counts / 680)


def saturated_run(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean CPU and throughput per worker at n=12 with twice the job's capacity offered."""
    probe = Twin(np.ones(10), TwinParams(worker_capacity_rps=40_000.0), parallelism=12, seed=seed)
    offered = np.full(400, 2 * probe.true_capacity_rps())
    twin = Twin(offered, TwinParams(worker_capacity_rps=40_000.0), parallelism=12, seed=seed)
    twin.advance_to(400)
    return twin.history.view("cpu")[100:, :12].mean(axis=0), twin.history.view("throughput")[100:, :12].mean(
        axis=0
    )


def test_cpu_spread_at_saturation_resembles_the_recorded_skew_run(recorded_metrics):
    assert recorded_metrics.resolve() == METRICS.resolve()
    recorded_cpu = worker_mean_cpu(METRICS / "data_skew_cpu_12.csv")
    recorded_cov = throughput_share_cov(METRICS / "data_skew_throughput_12.csv")
    hottest, coolest, covs = [], [], []
    for seed in range(15):
        cpu, throughput = saturated_run(seed)
        hottest.append(cpu.max())
        coolest.append(cpu.min())
        covs.append(throughput.std() / throughput.mean())
    # the hottest worker saturates, like the recorded 0.98; the others spread down towards ~0.67
    assert np.median(hottest) == pytest.approx(recorded_cpu.max(), abs=0.04)
    assert np.median(coolest) == pytest.approx(recorded_cpu.min(), abs=0.08)
    assert np.median(covs) == pytest.approx(recorded_cov, abs=0.03)
