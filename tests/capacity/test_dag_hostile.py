"""capacity/dag.py and mape/skew.py against readings and stores that cannot be true: each is left out (one
warning), never learned, raised or held for good."""

from __future__ import annotations

import math

import numpy as np
import pytest
from structlog.testing import capture_logs

from capacity.dag import DagModel, DagSettings
from capacity.key_groups import key_group_loads
from capacity.subtask_windows import subtask_windows
from mape.skew import SkewKnowledge, VertexSkew
from messages.types import JobEdge, JobGraph, JobVertex, SubtaskSeries
from tests.capacity.test_dag import T, chain, learn, series


def with_out(subtask: SubtaskSeries, records_out_rps: float) -> SubtaskSeries:
    """The subtask reading `records_out_rps` out in every sample."""
    return SubtaskSeries(**{**subtask.__dict__, "records_out_rps": np.full(T.shape, records_out_rps)})


def steady(model: DagModel, windows: int = 5) -> None:
    """Windows of a chain source(1) -> join(2) whose join emits what it receives (selectivity 1)."""
    for _ in range(windows):
        learn(
            model,
            chain(1, 2),
            [series("v0", 0, 400.0, 0.4)] + [series("v1", i, 200.0, 0.4) for i in range(2)],
        )


# ---- defect 1: records out ------------------------------------------------------------------------
@pytest.mark.parametrize("records_out", [1e15, -1000.0])
def test_records_out_outside_the_rate_range_is_no_sample(records_out):
    graph = chain(2)
    even = [with_out(series("v0", i, 100.0, 0.25), records_out if i == 0 else 100.0) for i in range(2)]
    uneven = [
        even[0],
        SubtaskSeries(**{k: v[:-1] if isinstance(v, np.ndarray) else v for k, v in even[1].__dict__.items()}),
    ]
    for subtasks in (even, uneven):  # stacked and one by one (capacity/rows.py)
        windows = subtask_windows(subtasks, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
        assert math.isnan(windows[0].records_out_rps) and windows[1].records_out_rps == 100.0


def test_a_window_of_a_subtask_without_records_out_does_not_pull_the_selectivity():
    model = DagModel()
    steady(model)
    damaged = with_out(series("v1", 0, 200.0, 0.4), -1e3)
    learn(model, chain(1, 2), [series("v0", 0, 400.0, 0.4), damaged, series("v1", 1, 200.0, 0.4)])
    assert model.selectivity("v1") == pytest.approx(1.0)


def test_one_window_of_records_out_orders_of_magnitude_off_is_not_learned_and_said_once():
    """5e8 records/s out of one join subtask (under the rate limit) sent every vertex to its max
    parallelism for 59 loops."""
    model = DagModel()
    steady(model)
    bad = [
        series("v0", 0, 400.0, 0.4),
        with_out(series("v1", 0, 200.0, 0.4), 5e8),
        series("v1", 1, 200.0, 0.4),
    ]
    with capture_logs() as events:
        learn(model, chain(1, 2), bad)
        learn(model, chain(1, 2), bad)
    assert model.selectivity("v1") == pytest.approx(1.0)
    assert [e["event"] for e in events] == ["dag-selectivity-window-left-out"]


def test_a_first_window_above_the_selectivity_cap_is_not_learned_but_a_real_one_is():
    model = DagModel()
    learn(
        model,
        chain(1, 2),
        [series("v0", 0, 400.0, 0.4)] + [series("v1", i, 200.0, 0.4, out_ratio=5e3) for i in range(2)],
    )
    assert math.isnan(model.selectivity("v1"))
    learn(
        model,
        chain(1, 2),
        [series("v0", 0, 400.0, 0.4)] + [series("v1", i, 200.0, 0.4, out_ratio=20.0) for i in range(2)],
    )
    assert model.selectivity("v1") == pytest.approx(20.0)  # a flatMap into words


def _windows_of_selectivity(model: DagModel, ratios: list[float]) -> list[float]:
    """The join's selectivity after each window of a chain source(1) -> join(2) emitting `ratios`."""
    seen = []
    for ratio in ratios:
        learn(
            model,
            chain(1, 2),
            [series("v0", 0, 400.0, 0.4)] + [series("v1", i, 200.0, 0.4, out_ratio=ratio) for i in range(2)],
        )
        seen.append(model.selectivity("v1"))
    return seen


def test_an_operator_whose_selectivity_jumped_for_good_is_learned_afresh_after_five_windows():
    """A redeployed flatMap emitting 200 records per record (the job knew 1): left out as damage at first,
    then learned from the five windows that agree, said once."""
    model = DagModel()
    steady(model)
    with capture_logs() as events:
        seen = _windows_of_selectivity(model, [200.0] * 5 + [210.0])
    assert seen[:4] == [pytest.approx(1.0)] * 4
    assert seen[4] == pytest.approx(200.0) and seen[5] == pytest.approx(200.0, rel=0.05)
    assert [e["event"] for e in events] == ["dag-selectivity-window-left-out", "dag-selectivity-relearned"]


def test_erratic_or_interrupted_jumps_are_never_learned():
    """Readings beyond the jump that disagree with one another (×2 apart and more), or whose run a
    plausible window breaks, are damage: the selectivity known stays."""
    model = DagModel()
    steady(model)
    assert _windows_of_selectivity(model, [150.0, 600.0] * 4)[-1] == pytest.approx(1.0)
    seen = _windows_of_selectivity(model, [200.0] * 4 + [1.0] + [200.0] * 4)
    assert seen[-1] == pytest.approx(1.0, rel=0.01)


# ---- defects 2 and 3: the stored model ------------------------------------------------------------
def stored() -> tuple[DagModel, dict]:
    graph = chain(1, 2, keyed=(1,))
    model = DagModel(DagSettings(min_points=3))
    for p in (2, 3):
        learn(
            model,
            chain(1, p, keyed=(1,)),
            [series("v0", 0, 900.0, 0.97)] + [series("v1", i, 300.0 + 50 * i, 0.5) for i in range(p)],
        )
    learn(
        model,
        graph,
        [series("v0", 0, 900.0, 0.97)] + [series("v1", i, 300.0 + 50 * i, 0.5) for i in range(2)],
    )
    return model, model.to_dict()


def capacities(model: DagModel) -> dict[int, float]:
    return model.estimate(chain(1, 2, keyed=(1,)), [], 2, 4).per_scaleout_rps


@pytest.mark.parametrize(
    "damage",
    [
        {"2": [0.2, 0.3, 0.5]},  # 3 shares at parallelism 2
        {"2": [0.5, None]},  # a null: NaN
        {"2": [1.5, -0.5]},
        {"x": [0.5, 0.5]},
    ],
)
def test_a_stored_share_row_that_is_no_share_of_its_parallelism_is_dropped_with_one_warning(damage):
    model, data = stored()
    data["vertices"]["v1"]["shares_seen"].update(damage)
    with capture_logs() as events:
        restored = DagModel.from_dict(data, model.settings)
    assert [e["event"] for e in events] == ["dag-store-implausible-entries-dropped"]
    assert capacities(restored)  # no ValueError, and the model still learns and saves a fit row
    learn(
        restored,
        chain(1, 2, keyed=(1,)),
        [series("v0", 0, 900.0, 0.97)] + [series("v1", i, 300.0, 0.5) for i in range(2)],
    )
    assert np.isfinite(restored.to_dict()["vertices"]["v1"]["shares_seen"]["2"]).all()


@pytest.mark.parametrize("loads", [[0.5, 0.5], [math.nan] * 128, [-1.0] * 128, "hot"])
def test_stored_key_loads_that_are_no_loads_of_the_key_groups_are_dropped(loads):
    model, data = stored()
    data["vertices"]["v1"]["key_loads"] = loads
    restored = DagModel.from_dict(data, model.settings)
    assert restored.vertices["v1"].key_loads is None
    assert all(math.isfinite(c) for c in capacities(restored).values())


@pytest.mark.parametrize("bad", [np.array([0.2, 0.3, 0.4, 0.1]), np.array([0.5, np.nan, 0.5])])
def test_key_group_loads_leave_out_a_row_that_is_no_share_of_its_parallelism(bad):
    rows = {2: np.array([0.4, 0.6]), 4: np.array([0.2, 0.2, 0.3, 0.3])}
    assert key_group_loads(128, {**rows, 3: bad}, 4) == pytest.approx(key_group_loads(128, rows, 4))


@pytest.mark.parametrize("saturated", [1e300, math.inf, -5.0, 0.0, "fast"])
def test_a_stored_rate_that_is_no_rate_is_dropped(saturated):
    """Every stored saturated rate at 1e300 kept the job at one worker for good."""
    model, data = stored()
    for row in data["rates"]:
        row[5] = saturated
    restored = DagModel.from_dict(data, model.settings)
    assert model.saturated and not restored.saturated and not restored.rates


@pytest.mark.parametrize(
    "field, value", [("mean_y", 1e300), ("mean_x", -3.0), ("m2_x", math.nan), ("n", -2), ("c_xy", math.inf)]
)
def test_stored_regression_sums_no_window_can_give_are_dropped(field, value):
    model, data = stored()
    data["rates"][0][3][field] = value
    restored = DagModel.from_dict(data, model.settings)
    assert len(restored.rates) == len(model.rates) - 1


def test_a_stored_placement_that_is_no_taskmanager_drops_its_rate():
    model, data = stored()
    data["rates"][0][4] = 7
    assert len(DagModel.from_dict(data, model.settings).rates) == len(model.rates) - 1


@pytest.mark.parametrize("records", [(1.0, -1.0), (1.0, math.inf), (1.0, 1e7), (1e300, 1e300), ("a", 1.0)])
def test_stored_selectivity_sums_no_window_can_give_are_forgotten(records):
    model, data = stored()
    data["vertices"]["v1"]["records_in"], data["vertices"]["v1"]["records_out"] = records
    restored = DagModel.from_dict(data, model.settings)
    assert math.isnan(restored.selectivity("v1")) and math.isfinite(model.selectivity("v1"))


# ---- defect 4: the skew store ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "damage",
    [
        {"windows_over": "3"},
        {"parallelism": 2.5},
        {"hot_group_share": "high"},
        {"windows_over": -1},
        {"max_parallelism": 0},
    ],
)
def test_a_skew_entry_of_the_wrong_type_is_dropped_with_one_warning(damage):
    good = VertexSkew("join", 4, 128, 1.5, 1.4, 5, 0.3, 0.01)
    with capture_logs() as events:
        state = SkewKnowledge.from_dict({"v1": {**good.to_dict(), **damage}, "v2": good.to_dict()})
    assert [e["event"] for e in events] == ["skew-store-entries-dropped"]
    assert state.vertices == {"v2": good} and state.persistent() == [good]


# ---- live windows that are plausible but awkward (a review of the model on live data) ------------------
_T = np.arange(5.0, 65.0, 5.0)


def _series(vertex: str, index: int, records_per_busy_s: float, reads: bool = True) -> SubtaskSeries:
    busy = np.linspace(0.3, 0.9, len(_T))
    records = records_per_busy_s * busy
    records_in = records if reads else np.zeros_like(_T)  # Flink reports no records in for a source
    return SubtaskSeries(vertex, index, f"tm-{index}", _T, records_in, records, busy * 1000, 0 * busy,
                         1000 - busy * 1000)  # fmt: skip


def test_a_state_bound_vertex_fitted_with_a_negative_constant_is_not_predicted_infinite():
    """1 / rate = a + b / p fitted on 1,000 and 2,100 records per busy second (state-bound, 5% noise) gave
    a < 0: the cost reached 0 near p = 22, predicted at 1e20 records/s, then fell back to 44,800 at 23."""
    model = DagModel()
    for p, rate in ((1, 1000.0), (2, 2100.0)):
        graph = JobGraph((JobVertex("op", "Source: sessions", p, 128),))
        series = [_series("op", i, rate) for i in range(p)]
        model.learn(graph, subtask_windows(series, graph, 3600.0, 60.0, 0.0))
    capacities = model.estimate(graph, subtask_windows(series, graph, 3600.0, 60.0, 0.0), 2, 24)
    per_scaleout = [capacities.per_scaleout_rps[n] for n in range(2, 25)]
    assert all(np.isfinite(per_scaleout)) and per_scaleout == sorted(per_scaleout)
    assert per_scaleout[-1] <= 1000.0 * 24**2 * 1.1  # at most what all-state work would carry


@pytest.mark.parametrize("rules_rps", [10.0, 0.0])
def test_two_sources_feed_a_join_what_they_read_together(rules_rps):
    """Each source counted 1 record per source record: a join of a 1,000 and a 10 rps stream received 2
    (its capacity halved, twice the workers); with the rules stream silent its NaN selectivity made the
    join unknown (50 times its capacity)."""
    graph = JobGraph(
        (JobVertex("main", "Source: events", 1, 128), JobVertex("rules", "Source: rules", 1, 128),
         JobVertex("join", "Enrich", 1, 128)),
        (JobEdge("main", "join", "HASH"), JobEdge("rules", "join", "BROADCAST")),
    )  # fmt: skip
    model = DagModel()
    main = np.linspace(400, 1000, len(_T))
    total = main + rules_rps
    zeros = np.zeros_like(_T)
    for _ in range(3):
        series = [
            SubtaskSeries("main", 0, "tm-0", _T, main, main, main / 100, zeros, 1000 - main / 100),
            SubtaskSeries("rules", 0, "tm-0", _T, zeros + rules_rps, zeros + rules_rps, zeros + 1, zeros, zeros + 999),
            SubtaskSeries("join", 0, "tm-0", _T, total, total, total / 2, zeros, 1000 - total / 2),
        ]  # fmt: skip
        model.learn(graph, subtask_windows(series, graph, 3600.0, 60.0, 0.0))
    ratio = model.input_ratios(graph)["join"]
    assert ratio == pytest.approx(1.0)
    assert model.vertex_capacity_rps(graph, "join", 1, ratio)[0] == pytest.approx(2000.0, rel=0.05)
