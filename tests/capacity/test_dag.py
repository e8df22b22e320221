"""capacity/dag.py: true processing rates per subtask, key-group shares, DS2's walk, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capacity.dag import DagModel, DagSettings
from capacity.key_groups import key_group_owner
from capacity.subtask_windows import subtask_windows
from messages.types import JobEdge, JobGraph, JobVertex, SubtaskSeries

T = np.arange(5.0, 65.0, 5.0)  # one loop window of 12 samples


def chain(*parallelism: int, keyed: tuple[int, ...] = (), max_parallelism: int = 128) -> JobGraph:
    """v0 -> v1 -> ... with HASH edges into the vertices listed in `keyed`."""
    vertices = tuple(JobVertex(f"v{i}", f"op{i}", p, max_parallelism) for i, p in enumerate(parallelism))
    edges = tuple(
        JobEdge(f"v{i - 1}", f"v{i}", "HASH" if i in keyed else "REBALANCE")
        for i in range(1, len(parallelism))
    )
    return JobGraph(vertices, edges)


def series(
    vertex: str, index: int, records_in, busy_share, out_ratio: float = 1.0, backpressured_share: float = 0.0
) -> SubtaskSeries:
    records_in = np.broadcast_to(np.asarray(records_in, dtype=float), T.shape)
    busy = np.broadcast_to(np.asarray(busy_share, dtype=float), T.shape) * 1000.0
    backpressured = np.minimum(backpressured_share * 1000.0, 1000.0 - busy)
    return SubtaskSeries(
        vertex,
        index,
        f"tm-{index}",
        T,
        records_in,
        records_in * out_ratio,
        busy,
        backpressured,
        1000.0 - busy - backpressured,
    )


def on(taskmanager: str, subtask: SubtaskSeries) -> SubtaskSeries:
    return SubtaskSeries(**{**subtask.__dict__, "taskmanager_id": taskmanager})


def learn(model: DagModel, graph: JobGraph, subtasks: list[SubtaskSeries]) -> list:
    windows = subtask_windows(subtasks, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    model.learn(graph, windows)
    return windows


def test_true_rate_is_the_line_at_full_busy_time_so_a_fixed_overhead_does_not_bias_it():
    # 800 records per busy second, plus 50 ms/s of timers: busy = 0.05 + records / 800
    records = np.linspace(100.0, 500.0, len(T))
    model = DagModel()
    learn(model, chain(1), [series("v0", 0, records, 0.05 + records / 800.0)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(800.0 * 0.95, rel=1e-9)
    plain_ratio = records.mean() / (0.05 + records / 800.0).mean()  # DS2's records / busy time
    assert plain_ratio < 0.95 * 760.0  # the ratio is biased low by the overhead's share


def test_without_busy_spread_the_rate_is_records_per_busy_second():
    model = DagModel()
    learn(model, chain(1), [series("v0", 0, 300.0, 0.5)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(600.0)


def test_a_light_load_borrows_the_vertex_overhead_from_its_determined_lines():
    # 800 records per busy second plus 50 ms/s of timers: subtask 0 sees a spread and determines its line;
    # subtask 1 only ever sees 60 records/s (busy 0.125), whose plain ratio would say 480
    graph = chain(2)
    records = np.linspace(100.0, 500.0, len(T))
    model = DagModel()
    learn(model, graph, [series("v0", 0, records, 0.05 + records / 800.0), series("v0", 1, 60.0, 0.125)])
    assert model.subtask_rate_rps("v0", 2, 1) == pytest.approx(800.0 * 0.95, rel=1e-9)


def test_a_light_loads_ratio_stands_in_only_where_no_better_rate_is_known():
    # 40 ms/s of busy time at 8 records/s: timers may be most of it, so 200 records per busy second is weak
    model = DagModel()
    learn(model, chain(1), [series("v0", 0, 8.0, 0.04)])
    assert model.vertex_rates(chain(1), "v0", 1)[0][0] == pytest.approx(200.0)  # nothing better: used
    learn(model, chain(2), [series("v0", i, 400.0, 0.5) for i in range(2)])  # 800 at parallelism 2
    rates, kind = model.vertex_rates(chain(1), "v0", 1)
    assert (rates[0], kind) == (pytest.approx(800.0), "nearest")


def test_a_vertex_known_only_from_light_loads_extrapolates_from_its_highest_bound():
    # a source that is never busy: 12 subtasks at 32 records/s on 5 ms/s of timers (ratio 6,400), then 2
    # subtasks at 4,000 records/s on 20 ms/s (ratio 200,000). Both are lower bounds of its rate; the
    # nearest one (12) must not make 8 or 12 subtasks carry less than 2 did.
    model = DagModel()
    learn(model, chain(12), [series("v0", i, 32.0, 0.005) for i in range(12)])
    learn(model, chain(2), [series("v0", i, 4_000.0, 0.02) for i in range(2)])
    for parallelism, kind in ((8, "nearest"), (12, "observed"), (1, "nearest")):
        rates, got = model.vertex_rates(chain(parallelism), "v0", parallelism)
        assert got == kind and rates == pytest.approx(np.full(parallelism, 200_000.0))
    capacity, _ = model.vertex_capacity_rps(chain(12), "v0", 12, 1.0)
    assert capacity == pytest.approx(12 * 200_000.0, rel=1e-4)
    # a strong rate anywhere ends it: the nearest parallelism seen decides again
    learn(model, chain(3), [series("v0", i, 900.0, 0.5) for i in range(3)])
    assert model.vertex_rates(chain(4), "v0", 4)[0] == pytest.approx(np.full(4, 1_800.0))


def test_samples_of_subtasks_that_no_longer_exist_are_dropped():
    graph = chain(2)  # the vertex runs at 2 now; subtask 2 is left over from a deployment at 3
    subtasks = [series("v0", i, 100.0, 0.25) for i in range(2)] + [series("v0", 2, 999.0, 0.99)]
    windows = subtask_windows(subtasks, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    assert sorted(w.subtask_index for w in windows) == [0, 1]


def test_warm_up_and_gaps_are_not_learned():
    records = np.where(T < 30, np.nan, 200.0)
    windows = subtask_windows(
        [series("v0", 0, records, 0.5)], chain(1), uptime_s=40.0, now_s=60.0, warmup_s=0.0
    )
    assert windows[0].stats.n == int(np.sum(T >= 30))
    windows = subtask_windows(
        [series("v0", 0, 200.0, 0.5)], chain(1), uptime_s=40.0, now_s=60.0, warmup_s=30.0
    )
    assert windows[0].stats.n == 3  # restarted at 20 s: only the samples at 50, 55 and 60 s are past 30 s


def test_keyed_skew_seen_at_one_parallelism_predicts_the_shares_at_another():
    # 8 key groups; loads per group: subtask 0 of 2 holds groups 0-3 (70 % of the records)
    graph = chain(1, 2, keyed=(1,), max_parallelism=8)
    model = DagModel()
    learn(
        model,
        graph,
        [series("v0", 0, 1000.0, 0.1)]
        + [series("v1", i, r, r / 1000.0) for i, r in enumerate((700.0, 300.0))],
    )
    np.testing.assert_allclose(model.shares(graph, "v1", 2), [0.7, 0.3])
    # at 4 the hot range is cut: what it carries above the typical group (the other range's, 0.075) may be one
    # key group, so the subtask that would then carry most gets it: 2 · 0.075 + 4 · 0.1
    np.testing.assert_allclose(model.shares(graph, "v1", 4), [0.55, 0.15, 0.15, 0.15])
    capacity, _ = model.vertex_capacity_rps(graph, "v1", 4, input_ratio=1.0)
    assert capacity == pytest.approx(1000.0 / 0.55)  # the subtask that may hold the hot key binds
    # the hot subtask limits the vertex: 1000 rps per subtask / 0.7 of the source rate
    capacity, source = model.vertex_capacity_rps(graph, "v1", 2, input_ratio=1.0)
    assert (capacity, source) == (pytest.approx(1000.0 / 0.7), "observed")


def test_key_group_owner_is_flinks_range_assignment():
    np.testing.assert_array_equal(key_group_owner(8, 3), [0, 0, 0, 1, 1, 1, 2, 2])


def test_ds2_walk_from_the_source_rate_gives_each_vertex_its_parallelism():
    # wordcount: source -> tokenizer (8 words per line) -> count (500 words per busy second per subtask)
    graph = chain(1, 2, 4)
    model = DagModel()
    learn(
        model,
        graph,
        [series("v0", 0, 1000.0, 0.1)]
        + [series("v1", i, 500.0, 0.25, out_ratio=8.0) for i in range(2)]
        + [series("v2", i, 2000.0, 1.0) for i in range(4)],  # saturated: busy all the time
    )
    assert model.input_ratios(graph) == {"v0": 1.0, "v1": 1.0, "v2": pytest.approx(8.0)}
    # 2,000 lines/s -> 16,000 words/s -> 8 count subtasks of 2,000 words/s; the tokenizer needs 1
    assert model.needed_parallelism(graph, "v2", 2000.0) == 8
    assert model.needed_parallelism(graph, "v1", 2000.0) == 1
    estimate = model.estimate(graph, [], current=4, max_scaleout=8)
    assert estimate.bottleneck_id == "v2" and estimate.per_scaleout_rps[4] == pytest.approx(1000.0)
    assert estimate.sources[8] == "extrapolated"  # no vertex ever ran at 8


def test_a_parallelism_never_run_takes_the_binding_subtasks_rate_of_the_one_seen():
    graph = chain(1, 3)  # a rebalanced vertex: every subtask gets a third, the slowest one binds
    model = DagModel()
    subtasks = [series("v1", i, 300.0, 300.0 / rate) for i, rate in enumerate((900.0, 800.0, 1000.0))]
    learn(model, graph, [series("v0", 0, 900.0, 0.1), *subtasks])
    assert model.vertex_rates(graph, "v1", 5) == (pytest.approx([800.0] * 5), "nearest")
    assert model.vertex_rates(graph, "v1", 3)[1] == "observed"


def test_nothing_learned_means_unknown_not_a_guess():
    graph = chain(1, 2)
    model = DagModel()
    assert model.estimate(graph, [], current=2, max_scaleout=4).per_scaleout_rps == {}
    assert model.needed_parallelism(graph, "v1", 100.0) is None
    assert math.isnan(model.selectivity("v1"))


def test_state_round_trip_keeps_every_rate_and_key_load():
    graph = chain(1, 3, keyed=(1,))
    model = DagModel(DagSettings(min_points=3))
    learn(model, graph, [series("v0", 0, 900.0, 0.3)] + [series("v1", i, 300.0 + i, 0.5) for i in range(3)])
    restored = DagModel.from_dict(model.to_dict(), model.settings)
    for n in (1, 2, 3, 5):
        assert (
            restored.estimate(graph, [], 3, n).per_scaleout_rps
            == model.estimate(graph, [], 3, n).per_scaleout_rps
        )


def test_a_damaged_store_row_naming_no_subtask_is_left_out():
    """A stored parallelism of -5 sized an array at every later analysis and held the loop for good."""
    graph = chain(1, 3, keyed=(1,))
    model = DagModel(DagSettings(min_points=3))
    learn(model, graph, [series("v0", 0, 900.0, 0.3)] + [series("v1", i, 300.0 + i, 0.5) for i in range(3)])
    data = model.to_dict()
    good = DagModel.from_dict(data, model.settings).estimate(graph, [], 3, 4).per_scaleout_rps
    poisoned = [row.copy() for row in data["rates"]]
    poisoned[0][1], poisoned[1][2] = -5, 7  # a negative parallelism, a subtask index past it
    damaged = DagModel.from_dict({**data, "rates": data["rates"] + poisoned}, model.settings)
    assert set(damaged.rates) == set(model.rates)
    assert damaged.estimate(graph, [], 3, 4).per_scaleout_rps == good


def test_a_subtask_back_on_another_taskmanager_learns_its_own_line():
    graph = chain(1)
    model = DagModel()
    learn(model, graph, [series("v0", 0, 300.0, 0.5)])  # 600 rps per busy second on tm-0
    learn(model, graph, [on("tm-new", series("v0", 0, 300.0, 0.25))])  # a faster pod
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(1200.0)


def test_a_parallelism_seen_before_is_predicted_on_the_taskmanagers_of_today():
    model = DagModel()
    learn(model, chain(3), [on(tm, series("v0", i, 500.0, 0.5)) for i, tm in enumerate("abc")])
    # back at 2: tm-b left for a slower tm-d (5%: hardware, not state), tm-c is gone
    today = chain(2)
    learn(model, today, [on("a", series("v0", 0, 500.0, 0.5)), on("d", series("v0", 1, 475.0, 0.5))])
    rates, kind = model.vertex_rates(today, "v0", 3)
    # index 0 kept its TaskManager; index 1 runs on tm-d now; index 2's TaskManager is gone: the binding one
    assert (rates, kind) == (pytest.approx([1000.0, 950.0, 950.0]), "observed")


def test_implausible_busy_times_are_gaps_not_rates():
    busy = np.where(np.arange(len(T)) % 2 == 0, 0.5, 7.0)  # every other sample claims 7 s of work per second
    model = DagModel()
    learn(model, chain(1), [series("v0", 0, 300.0, busy)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(600.0)


def test_a_cost_that_grows_with_the_state_held_is_extrapolated_in_one_over_parallelism():
    # cost per record 1 ms + 8 ms / p (the keys a subtask holds shrink as 1 / p)
    model = DagModel()
    for p in (2, 4):
        rate = 1000.0 / (1.0 + 8.0 / p)
        learn(model, chain(p), [series("v0", i, rate / 2, 0.5) for i in range(p)])
    for p in (1, 8, 16):
        assert model.vertex_rates(chain(1), "v0", p)[0] == pytest.approx([1000.0 / (1.0 + 8.0 / p)] * p)


def test_rates_that_differ_only_by_hardware_are_not_extrapolated():
    model = DagModel()
    for p, rate in ((2, 1000.0), (4, 1040.0)):  # 4% apart: TaskManager speeds, not state
        learn(model, chain(p), [series("v0", i, rate / 2, 0.5) for i in range(p)])
    assert model.vertex_rates(chain(1), "v0", 12)[0] == pytest.approx([1040.0] * 12)


def test_a_source_counts_what_it_emits_as_its_input():
    # Flink reports no records in for a source task: the walk must still start from its output
    graph = chain(1, 2)
    source = series("v0", 0, 0.0, 0.1)
    source = SubtaskSeries(**{**source.__dict__, "records_out_rps": np.full(len(T), 800.0)})
    model = DagModel()
    learn(model, graph, [source, series("v1", 0, 400.0, 0.5), series("v1", 1, 400.0, 0.5)])
    assert model.input_ratios(graph) == {"v0": 1.0, "v1": pytest.approx(1.0)}
    assert model.estimate(graph, [], current=2, max_scaleout=2).per_scaleout_rps[2] == pytest.approx(1600.0)


def test_a_window_at_full_busy_time_shows_the_rate_the_line_misses():
    # lighter windows suggest 600 records per busy second (contention grows with load on a shared host);
    # saturated, the subtask does 719 records at 99.96% busy
    model = DagModel()
    records = np.linspace(100.0, 400.0, len(T))
    learn(model, chain(1), [series("v0", 0, records, records / 600.0)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(600.0)
    learn(model, chain(1), [series("v0", 0, 719.0, 0.9996)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(719.0 / 0.9996)
    restored = DagModel.from_dict(model.to_dict())
    assert restored.subtask_rate_rps("v0", 1, 0) == pytest.approx(719.0 / 0.9996)


def test_a_busy_window_whose_upstream_is_not_held_back_is_not_a_saturated_one():
    # a restarted task's first minute: busy all the time at a trickle, its input neither idle nor backpressured
    model = DagModel()
    learn(model, chain(1, 1), [series("v0", 0, 225.0, 0.1), series("v1", 0, 225.0, 1.0)])
    assert "v1" not in {rid for rid, _, _ in model.saturated}
    held_back = DagModel()  # the same window with the source backpressured: the vertex cannot keep up
    learn(
        held_back,
        chain(1, 1),
        [series("v0", 0, 225.0, 0.1, backpressured_share=0.9), series("v1", 0, 225.0, 1.0)],
    )
    assert held_back.subtask_rate_rps("v1", 1, 0) == pytest.approx(225.0)


def test_a_saturated_reading_that_a_later_window_outcarries_is_dropped():
    # read saturated at 225 records/s; then the subtask carries 1,590 records/s at 28% busy, which no subtask
    # of rate 225 could: the reading, and the line through it, were wrong
    model = DagModel()
    upstream = series("v0", 0, 225.0, 0.1, backpressured_share=0.9)
    learn(model, chain(1, 1), [upstream, series("v1", 0, 225.0, 1.0)])
    assert model.subtask_rate_rps("v1", 1, 0) == pytest.approx(225.0)
    learn(model, chain(1, 1), [series("v0", 0, 1590.0, 0.3), series("v1", 0, 1590.0, 0.28)])
    assert model.subtask_rate_rps("v1", 1, 0) == pytest.approx(1590.0 / 0.28)


def test_a_rising_saturated_rate_follows_what_the_subtask_carries():
    # a load step: the first saturated windows average in the lighter minute before the step
    model = DagModel()
    for carried in (200.0, 400.0, 800.0, 1000.0):
        learn(model, chain(1), [series("v0", 0, carried, 1.0)])
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(1000.0)


def test_parallelisms_seen_together_locate_a_hot_key_group():
    # 8 key groups; group 3 alone carries half of the records, the rest is even. At 2 subtasks the hot
    # subtask's total is spread over its 4 groups; 3 subtasks cut the ranges elsewhere (0-2, 3-5, 6-7),
    # and both together isolate group 3, so the shares at 4 subtasks come out right (an even spread said 0.36)
    graph2, graph3 = chain(1, 2, keyed=(1,), max_parallelism=8), chain(1, 3, keyed=(1,), max_parallelism=8)
    loads = np.array([1, 1, 1, 7, 1, 1, 1, 1]) / 14.0
    model = DagModel()
    for graph, p in ((graph2, 2), (graph3, 3)):
        shares = np.bincount(key_group_owner(8, p), weights=loads, minlength=p)
        learn(
            model,
            graph,
            [series("v0", 0, 1000.0, 0.1)]
            + [series("v1", i, 1000.0 * share, share) for i, share in enumerate(shares)],
        )
    np.testing.assert_allclose(
        model.shares(graph2, "v1", 4), np.bincount(key_group_owner(8, 4), weights=loads), atol=0.02
    )


def test_a_contended_taskmanager_teaches_a_rate_only_above_the_one_known():
    graph = chain(1, 2)
    model = DagModel()
    learn(model, graph, [series("v0", 0, 600.0, 0.5), *(series("v1", i, 300.0, 0.5) for i in (0, 1))])
    assert model.subtask_rate_rps("v1", 2, 0) == pytest.approx(600.0)
    # tm-0's core saturates: its subtasks wait for it, busy all the time at a third of their rate
    waiting = [series("v0", 0, 400.0, 1.0), series("v1", 0, 200.0, 1.0), series("v1", 1, 450.0, 0.5)]
    windows = subtask_windows(waiting, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    model.learn(graph, windows, contended=frozenset({"tm-0"}))
    assert model.subtask_rate_rps("v1", 2, 0) == pytest.approx(600.0)  # the core's share: not learned
    assert model.subtask_rate_rps("v0", 1, 0) == pytest.approx(1200.0)
    assert model.subtask_rate_rps("v1", 2, 1) == pytest.approx(750.0)  # tm-1 is not contended
    # where nothing is known of the vertex yet, a contended window is still its first (low) estimate
    fresh = DagModel()
    fresh.learn(graph, windows, contended=frozenset({"tm-0"}))
    assert fresh.subtask_rate_rps("v1", 2, 0) == pytest.approx(200.0)
    # a smaller drop on a contended core is learned: the slot does carry less
    slower = [series("v1", 0, 240.0, 0.6), series("v1", 1, 450.0, 0.5)]
    windows = subtask_windows(slower, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    model.learn(graph, windows, contended=frozenset({"tm-0"}))
    assert model.subtask_rate_rps("v1", 2, 0) < 600.0


def test_a_rate_first_seen_on_a_contended_core_is_replaced_once_off_contention():
    graph = chain(1, 2)
    model = DagModel()

    def window(busy, records, contended: frozenset[str] = frozenset()) -> None:
        subtasks = [series("v0", 0, 600.0, 0.3), series("v1", 0, records, busy), series("v1", 1, 300.0, 0.5)]
        windows = subtask_windows(subtasks, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
        model.learn(graph, windows, contended)

    window(1.0, 200.0, frozenset({"tm-0"}))  # the core's share: the only reading so far
    assert model.subtask_rate_rps("v1", 2, 0) == pytest.approx(200.0)
    # the window after the contention ends straddles it: half its samples still wait for the core
    half = np.arange(len(T)) < len(T) // 2
    window(np.where(half, 1.0, 0.25), np.where(half, 200.0, 150.0))
    assert model.subtask_rate_rps("v1", 2, 0) < 300.0
    model = DagModel.from_dict(model.to_dict(), model.settings)  # a restart keeps it a bound
    window(0.25, 150.0)  # off contention throughout: the subtask's own rate
    assert model.subtask_rate_rps("v1", 2, 0) == pytest.approx(600.0)


def seeded(*seeds) -> DagModel:
    model = DagModel()
    model.seed(seeds)
    return DagModel.from_dict(model.to_dict())  # pending seeds are knowledge too: they persist


def test_seeds_give_every_vertex_its_rate_before_any_window():
    from capacity.dag import VertexSeed

    graph = chain(2, 2, 2)  # op0 -> op1 (×8 records) -> op2
    model = seeded(
        VertexSeed("op0", {}, 1.0),  # a source that reports no busy time: its input ratio only
        VertexSeed("op1", {1: 1000.0, 4: 1000.0}, 1.0),
        VertexSeed("op2", {1: 4000.0, 4: 4000.0}, 8.0),
    )
    learn(model, graph, [])
    assert model.selectivity("v1") == pytest.approx(8.0)
    estimate = model.estimate(graph, [], 2, 4)
    # op1 carries 1,000 source rps per subtask, op2 4,000 / 8 = 500: op2 binds at every scale-out
    assert estimate.per_scaleout_rps == pytest.approx({n: 500.0 * n for n in range(1, 5)})
    assert estimate.bottleneck_id == "v2" and estimate.sources[4] == "observed"
    assert not model.seeds


def test_a_vertex_seen_before_keeps_its_own_rates_and_an_unknown_name_stays_pending():
    from capacity.dag import VertexSeed

    graph = chain(1)
    model = DagModel()
    learn(model, graph, [series("v0", 0, 300.0, 0.5)])  # 600 rps per busy second
    model.seed([VertexSeed("op0", {1: 99.0, 2: 99.0}, 1.0), VertexSeed("elsewhere", {1: 5.0}, 1.0)])
    learn(model, graph, [series("v0", 0, 300.0, 0.5)])
    assert model.vertex_rates(graph, "v0", 2) == (pytest.approx([600.0, 600.0]), "nearest")
    assert set(model.seeds) == {"elsewhere"}


def test_seeds_that_miss_a_vertex_of_the_graph_belong_to_another_job_and_are_not_adopted():
    """A plan of another job sharing the source's and the sink's names: the middle vertex would be
    unknown, and an unknown vertex bounds nothing."""
    from capacity.dag import VertexSeed

    graph = chain(2, 2, 2)
    model = seeded(VertexSeed("op0", {1: 1e6}, 1.0), VertexSeed("op2", {1: 1e6}, 1.0))
    learn(model, graph, [])
    assert model.estimate(graph, [], 2, 4).per_scaleout_rps == {}
    assert set(model.seeds) == {"op0", "op2"}


def test_the_first_window_replaces_a_seeded_rate_there_and_leaves_the_others():
    from capacity.dag import VertexSeed

    graph = chain(2)
    model = seeded(VertexSeed("op0", {2: 700.0, 8: 650.0}, 1.0))
    learn(model, graph, [series("v0", i, 450.0, 0.5) for i in range(2)])  # 900 here, on real TaskManagers
    assert model.vertex_rates(graph, "v0", 2) == (pytest.approx([900.0, 900.0]), "observed")
    assert model.vertex_rates(graph, "v0", 8) == (pytest.approx([650.0] * 8), "observed")


def test_seeded_subtask_shares_give_a_keyed_vertex_its_skew():
    from capacity.dag import VertexSeed

    graph = chain(1, 2, keyed=(1,), max_parallelism=4)
    hot = VertexSeed("op1", {2: 1000.0}, 1.0, key_groups=4, shares={4: (0.55, 0.15, 0.15, 0.15)})
    model = seeded(VertexSeed("op0", {}, 1.0), hot)
    learn(model, graph, [])
    assert model.shares(graph, "v1", 2) == pytest.approx([0.7, 0.3])
    assert model.estimate(graph, [], 2, 2).per_scaleout_rps[2] == pytest.approx(1000.0 / 0.7)
