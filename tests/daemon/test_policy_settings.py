"""The plan's scale-in settings, its only-if-necessary window and its surge drain reach the policy the
daemon builds, at either granularity."""

from __future__ import annotations

import pytest

from config.load import parse_config
from daemon.build import make_policy
from mape.proactive import ProactivePolicy
from mape.vertex_plan import VertexPolicy


def _plan(scaling: dict) -> ProactivePolicy | VertexPolicy:
    built = make_policy(parse_config({"scaling": scaling}, "test"))
    return getattr(built, "cpu", built)  # the memory levels wrap the CPU plan


@pytest.mark.parametrize("policy", ["foresail", "foresail-cpu-only"])
@pytest.mark.parametrize("granularity", ["job", "vertex"])
def test_the_scale_in_limit_and_the_rescale_budget_reach_the_plan(policy, granularity):
    chosen = {"policy": policy, "granularity": granularity}
    plan = _plan(chosen | {"max_scale_in_share": 0.6, "max_rescales_per_h": 3})
    assert isinstance(plan, VertexPolicy if granularity == "vertex" else ProactivePolicy)
    assert (plan.max_scale_in_share, plan.max_rescales_per_h) == (0.6, 3)
    unset = _plan(chosen)
    assert (unset.max_scale_in_share, unset.max_rescales_per_h) == (None, None)


@pytest.mark.parametrize("granularity, default_s", [("job", 1_800.0), ("vertex", 600.0)])
def test_the_only_if_necessary_window_follows_the_granularity_unless_set(granularity, default_s):
    """A reactive-mode rescale restarts the job, a per-vertex one pauses it ~3 s: the default window differs."""
    chosen = {"policy": "foresail", "granularity": granularity}
    assert _plan(chosen).necessary_window_s == default_s
    assert _plan(chosen | {"necessary_window_s": 900}).necessary_window_s == 900.0
    assert _plan(chosen | {"necessary_window_s": 0}).necessary_window_s == 0.0


@pytest.mark.parametrize("granularity, default_s", [("job", 60.0), ("vertex", 120.0)])
def test_the_surge_drain_follows_the_granularity_unless_set(granularity, default_s):
    """A surge's reactive-mode restart leaves ~45 s of records to drain, a per-vertex pause ~3 s."""
    chosen = {"policy": "foresail", "granularity": granularity}
    assert _plan(chosen).surge_drain_s == default_s
    assert _plan(chosen | {"surge_drain_s": 90}).surge_drain_s == 90.0


def test_a_surge_whose_load_holds_is_held_daedalus_s_window_at_job_granularity():
    assert _plan({"policy": "foresail"}).surge_level_window_s == 600.0
    # never longer than the window itself
    assert _plan({"policy": "foresail", "necessary_window_s": 300}).surge_level_window_s == 300.0
