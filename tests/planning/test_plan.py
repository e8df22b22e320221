"""The Resource Explorer and the plan on testbeds whose MST curve is known."""

import math
from itertools import pairwise

import pytest

from planning.estimator import Estimate, EstimatorSettings
from planning.explorer import ExplorerSettings, bootstrap_points, explore
from planning.plan import PlanError, make_plan
from planning.testbed import PhaseReading
from tests.planning.fakes import CurveTestbed

FAST = EstimatorSettings(warmup_s=10, cooldown_s=1, ramp_s=1, observe_s=5, sensitivity=0.002, max_tests=20)


def linear(slots, memory_mb):
    return 1000.0 * slots + 0.5 * memory_mb + 200.0


def test_corners_bootstrap_then_bo_points_stay_in_the_budget():
    settings = ExplorerSettings(
        min_slots=2, max_slots=6, memory_mb=(512.0, 1024.0, 2048.0), max_measurements=9
    )
    assert bootstrap_points(settings) == [(2, 512.0), (2, 2048.0), (6, 512.0), (6, 2048.0)]
    testbed = CurveTestbed(linear)
    plan = make_plan(testbed, 30_000.0, settings, FAST)
    assert testbed.deployments[:4] == bootstrap_points(settings)
    assert all(2 <= s <= 6 and m in (512.0, 1024.0, 2048.0) for s, m in testbed.deployments)
    assert 4 + settings.min_extra <= len(plan.exploration.estimates) <= 9


def test_a_linear_job_is_planned_by_the_inverted_linear_model():
    settings = ExplorerSettings(max_slots=8, memory_mb=(512.0, 2048.0), max_measurements=8)
    plan = make_plan(CurveTestbed(linear), 50_000.0, settings, FAST)
    assert plan.model == "lin"
    # 110% of 50,000 at the best memory (2048 MB): 1000·s + 1024 + 200 >= 55,000
    assert (plan.slots, plan.memory_mb) == (math.ceil((55_000 - 1224) / 1000), 2048.0)
    assert plan.predicted_mst_rps == pytest.approx(linear(plan.slots, 2048.0), rel=0.01)
    assert plan.task_managers == plan.slots


def test_a_square_root_job_selects_the_sqrt_model():
    def curve(slots, memory_mb):
        return 10_000.0 * math.sqrt(slots)

    settings = ExplorerSettings(max_slots=16, memory_mb=(512.0,), max_measurements=10)
    plan = make_plan(CurveTestbed(curve), 60_000.0, settings, FAST)
    assert plan.model == "sqrt"
    truth = math.ceil((66_000 / 10_000) ** 2)
    assert abs(plan.slots - truth) <= 1
    assert plan.exploration.selection_rmse["sqrt"] < plan.exploration.selection_rmse["lin"]


def _measured(wild_at: int | None):
    """A `measure` whose MSTs lie on a line with a little noise, but for measurement `wild_at` (1-based),
    far off it: the leave-one-out RMSE jumps there."""
    calls = []

    def measure(slots: int, memory_mb: float) -> Estimate:
        calls.append(slots)
        mst = 1000.0 * slots * (1.0 + 0.01 * (len(calls) % 3))
        if len(calls) == wild_at:
            mst *= 3.0
        return Estimate(slots, memory_mb, mst, (), PhaseReading(mst, mst, 0.0, 0.0), 0.0)

    return measure


@pytest.mark.parametrize("wild_at", [4, 5, 7])
def test_the_explorer_stops_at_the_rise_but_only_after_three_points_beyond_the_corners(wild_at):
    """Three corners (one memory profile), then at least `min_extra` = 3 chosen points before the rule may
    stop the search: a rise at the 4th or 5th measurement does not stop it, one at the 7th (the 4th extra)
    does, there and then."""
    settings = ExplorerSettings(max_slots=8, memory_mb=(512.0,), max_measurements=12)
    exploration = explore(_measured(wild_at), settings)
    stopped_at_rise = exploration.stopped_because.startswith("the leave-one-out RMSE rose")
    if wild_at == 7:
        assert stopped_at_rise and len(exploration.estimates) == 7
    else:
        assert len(exploration.estimates) >= 3 + 3
    history = exploration.rmse_history
    # no rise > 10 % went unnoticed once three extra points were in (history[k]: after the k-th extra)
    assert all(b <= 1.1 * a for a, b in pairwise(history[2:-1]))


def test_the_explorer_runs_to_its_cap_when_the_rmse_never_rises():
    settings = ExplorerSettings(max_slots=8, memory_mb=(512.0,), max_measurements=9)
    exploration = explore(_measured(None), settings)
    assert exploration.stopped_because == "reached 9 measurements" and len(exploration.estimates) == 9


def test_a_rate_the_surrogate_never_reaches_is_one_clear_error():
    settings = ExplorerSettings(max_slots=4, memory_mb=(512.0,), max_measurements=4)
    with pytest.raises(
        PlanError, match=r"never reaches 5,500 .* the most it predicts is [0-9],[0-9]{3} at [0-9]+ slots$"
    ):
        make_plan(CurveTestbed(lambda s, m: 1000.0), 5000.0, settings, FAST, max_slots=64)


def test_the_smallest_testbed_run_does_not_bound_the_plan():
    """Runs of 2..6 slots; the target needs one slot (--budget-min read as the plan's floor planned 2)."""
    settings = ExplorerSettings(min_slots=2, max_slots=6, memory_mb=(512.0,), max_measurements=6)
    plan = make_plan(CurveTestbed(linear), 1000.0, settings, FAST)
    assert plan.slots == 1


def test_model_selection_falls_back_to_leave_one_out_when_the_low_half_fits_no_model():
    """The low half all at one slot count: every model scored infinity there, and the first won by the
    order of a dictionary."""
    from planning.surrogate import Observation, select_model

    points = [Observation(s, m, 1000.0 * s + 0.5 * m) for s in (1, 4) for m in (158.0, 316.0, 632.0)]
    scores = select_model(points)
    assert all(math.isfinite(v) for v in scores.values())
    assert min(scores, key=scores.__getitem__) == "lin"


def test_no_census_where_the_key_groups_outnumber_the_testbeds_slots():
    """A keyed vertex of 1,024 key groups on the twin's 128 slots crashed after all the runs."""
    from types import SimpleNamespace

    from planning.census import take_census

    class NoDeploy:
        def deploy(self, slots, memory_mb):
            raise AssertionError(f"deployed {slots} slots")

    keyed = SimpleNamespace(
        mst_rps=5000.0, final=SimpleNamespace(vertices=[SimpleNamespace(key_groups=1024)])
    )
    assert take_census(NoDeploy(), [keyed], 512.0, FAST, max_slots=128) is None


def test_a_rate_beyond_reach_reads_in_a_few_digits():
    """1e308 records/s was written out in 300 digits."""
    settings = ExplorerSettings(max_slots=4, memory_mb=(512.0,), max_measurements=4)
    with pytest.raises(PlanError, match=r"never reaches 1.1e\+308 records/s"):
        make_plan(CurveTestbed(linear), 1e308, settings, FAST)


class KeyedCurveTestbed(CurveTestbed):
    """A job whose second vertex is keyed over 128 key groups (its max parallelism)."""

    def run(self, phases):
        from dataclasses import replace

        from planning.testbed import VertexReading

        slots = self.deployments[-1][0]
        return [
            replace(r, vertices=(VertexReading("source", r.achieved_rps, 0.1, slots),
                                 VertexReading("count", r.achieved_rps, 0.5, slots, key_groups=128)))
            for r in super().run(phases)
        ]  # fmt: skip


def test_a_keyed_job_is_planned_within_its_max_parallelism():
    """On real Flink the plan's bound is 100,000 slots: a target the job could not carry was searched for
    through all of them (about 33 hours) where no slot beyond the key groups runs a subtask more."""
    settings = ExplorerSettings(max_slots=4, memory_mb=(512.0,), max_measurements=4)
    testbed = KeyedCurveTestbed(lambda s, m: 1000.0 * math.sqrt(s))
    with pytest.raises(PlanError, match="within 128 slots"):
        make_plan(testbed, 1e6, settings, FAST, max_slots=100_000, skew_quantile=None)
