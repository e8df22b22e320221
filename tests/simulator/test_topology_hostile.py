"""Topologies the vertex bounds allow but whose sum leaves the twin no capacity: refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.deployment import Deployment
from simulator.topology import Topology, TopologyError
from simulator.twin import Twin


def chain(**knobs: float) -> dict:
    count = int(knobs.pop("vertices"))
    vertices = [{"name": "v0", **knobs}]
    vertices += [{"name": f"v{i}", "inputs": [f"v{i - 1}"], **knobs} for i in range(1, count)]
    return {"name": "chain", "vertices": vertices}


def test_overhead_cpu_adding_up_to_a_whole_core_is_refused():
    with pytest.raises(ValidationError, match=r"overhead_cpu add up to 1\.2 cores"):
        Topology.model_validate(chain(vertices=3, overhead_cpu=0.4))
    assert Topology.model_validate(chain(vertices=3, overhead_cpu=0.3))


def test_selectivities_whose_product_overflows_are_refused():
    with pytest.raises(ValidationError, match="infinitely many records"):
        Topology.model_validate(chain(vertices=80, selectivity=1e4))
    assert max(Topology.model_validate(chain(vertices=30, selectivity=1e4)).input_ratios) == pytest.approx(
        1e116
    )


def test_a_twin_without_capacity_is_a_topology_error_not_a_division_by_zero(monkeypatch):
    monkeypatch.setattr(Deployment, "reference_capacity_rps", lambda self, n: 0.0)
    with pytest.raises(TopologyError, match="no worker size can carry the trace"):
        Twin(np.full(10, 5000.0))
