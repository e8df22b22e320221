"""The evaluation report's evidence tables, against the twin's ground truth."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from config.schema import Config
from daemon.build import make_twin
from daemon.report import equal_service_section, saturated_cpu
from simulator.twin import Twin
from tests.daemon.equal_service_data import found, result


def _expected_saturated_cpu(n: int) -> float:
    """Mean CPU of n fresh workers whose job runs at its true capacity: each worker uses its share of the
    load on the CPU line from idle to saturation (the hottest one at saturation)."""
    sized = make_twin(Config.model_validate({"twin": {"workload": "builtin:sine", "seed": 0}})).twin
    params = replace(sized.params, worker_capacity_rps=sized.worker_capacity_rps)
    twin = Twin(np.full(10, 1.0), params, parallelism=n, seed=0)
    used = twin.load.cpu_per_record * twin.true_capacity_rps()  # share of a core at capacity
    assert used.max() == pytest.approx(1.0)
    return float(np.mean(params.idle_cpu + (params.saturation_cpu - params.idle_cpu) * used))


@pytest.mark.parametrize("n", [4, 12, 18])
def test_saturated_cpu_is_measured_on_saturated_deployments_at_every_scaleout(n):
    # the table used to let the twin size its workers from the flat-out input itself, so from 11 workers
    # up the deployment carried that input and the table showed a half-idle job (0.52 at 18 workers)
    measured = saturated_cpu("builtin:sine", 0, [n])[n]
    assert measured == pytest.approx(_expected_saturated_cpu(n), abs=0.03)


def test_the_equal_service_section_says_when_it_was_not_measured_and_how_it_was_when_it_was():
    assert "Not measured for this page" in equal_service_section(None)
    data = result(129_600.0, found("static", 12, "static-12", 259_200.0, 0.0))
    measured = {
        "command": "python benchmarks/equal_service.py",
        "wall_s": 1800,
        "load": "1.9",
        "results": [data],
    }
    text = equal_service_section(measured)
    assert "over seeds 0, 1, 2" in text and "30 min wall, load average 1.9" in text
    assert (
        "| WordCount (sine) | static-12 | workers 12 | 259,200 | 2.00 | 0 | 0.0 | never scales: static-like (one scale-out 100% of the time) |"
        in text
    )
