"""Baseline names carry their main knob, so that a sweep is a list of names on `simulate` and `compare`."""

from __future__ import annotations

import pytest

from config.load import ConfigError, parse_config
from config.policy_names import BaselineName, baseline_name, parse_baseline
from config.schema import Config
from daemon.build import make_policy
from simulator.baselines import Ds2Policy, FlinkOperatorPolicy, HpaPolicy, StaticPolicy


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("hpa-65", BaselineName("hpa", 65.0)),
        ("hpa-62.5", BaselineName("hpa", 62.5)),
        ("static", BaselineName("static", None)),
        ("static-7", BaselineName("static", 7.0)),
        ("flink-operator", BaselineName("flink-operator", None)),
        ("flink-operator-u0.6", BaselineName("flink-operator", 0.6)),
        ("ds2", BaselineName("ds2", None)),
        ("ds2-r1.2", BaselineName("ds2", 1.2)),
        ("foresail", None),
        ("reactive", None),
        ("hpa", None),  # an HPA always names its target
        ("static-7.5", None),
        ("ds2-1.2", None),
    ],
)
def test_a_baseline_name_gives_its_family_and_knob(name, parsed):
    assert parse_baseline(name) == parsed


@pytest.mark.parametrize("family,knob", [("static", 7), ("hpa", 65), ("flink-operator", 0.6), ("ds2", 1.2)])
def test_baseline_name_is_the_inverse_of_parsing(family, knob):
    assert parse_baseline(baseline_name(family, knob)) == BaselineName(family, float(knob))


def test_the_knob_in_the_name_reaches_the_policy_and_overrides_the_baselines_section():
    def policy(name: str, **baselines):
        return make_policy(Config.model_validate({"scaling": {"policy": name}, "baselines": baselines}))

    hpa = policy("hpa-65")
    assert isinstance(hpa, HpaPolicy) and hpa.target_utilization == pytest.approx(0.65)
    static = policy("static-7", static_scaleout=12)
    assert isinstance(static, StaticPolicy) and (static.scaleout, static.name) == (7, "static-7")
    assert policy("static", static_scaleout=9).scaleout == 9
    operator = policy("flink-operator-u0.6", operator_target_utilization=0.7)
    assert isinstance(operator, FlinkOperatorPolicy) and operator.settings.target_utilization == 0.6
    assert policy("flink-operator", operator_target_utilization=0.5).settings.target_utilization == 0.5
    ds2 = policy("ds2-r1.2", ds2_target_ratio=1.0)
    assert isinstance(ds2, Ds2Policy) and (ds2.target_ratio, ds2.name) == (1.2, "ds2-r1.2")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("magic", "unknown policy 'magic'"),
        ("hpa-0", "HPA target must be > 0"),
        ("static-0", "scale-out must be ≥ 1"),
        ("flink-operator-u1.5", "must lie in (0, 1]"),
        ("ds2-r0", "ratio must be > 0"),
    ],
)
def test_a_bad_policy_name_is_one_clear_line(name, message):
    with pytest.raises(ConfigError) as caught:
        parse_config({"scaling": {"policy": name}})
    (problem,) = caught.value.problems
    assert problem.startswith("scaling.policy: ") and message in problem


def test_a_static_scale_out_outside_the_scaling_bounds_is_refused_not_capped():
    """`static-19` ran at 18 (max_scaleout) and was reported as static-19."""
    with pytest.raises(ConfigError, match=r"'static-19' lies outside min_scaleout\.\.max_scaleout"):
        parse_config({"scaling": {"policy": "static-19"}})
    with pytest.raises(ConfigError, match="'static-2' lies outside"):
        parse_config({"scaling": {"policy": "static-2", "min_scaleout": 3}})
    assert (
        parse_config({"scaling": {"policy": "static-19", "max_scaleout": 19}}).scaling.policy == "static-19"
    )
