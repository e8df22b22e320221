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


def test_a_chain_whose_costs_leave_no_finite_worker_size_is_refused():
    """77 vertices of cost and selectivity 1e4 each validate, but size workers of infinite capacity: one
    worker carried any load."""
    topology = Topology.model_validate(chain(vertices=77, cost=1e4, selectivity=1e4))
    with pytest.raises(TopologyError, match="no worker size can carry the trace"):
        Twin(np.full(10, 5000.0), topology=topology)


def test_a_graph_larger_than_any_job_is_refused():
    """12,000 vertices took 6.6 GB: the twin's bookkeeping grows with the square of the vertices."""
    with pytest.raises(ValidationError, match="at most 1000 items"):
        Topology.model_validate(chain(vertices=1001))


def test_a_fractional_rate_arrives_in_whole_records_that_add_up_to_the_trace():
    """Rounding each second alone made 1.5 records/s arrive at 2 (+33%) and 2.5 at 2 (-20%)."""
    for rate in (0.6, 1.5, 2.5):
        trace = np.r_[5.0, np.full(299, rate)]
        twin = Twin(trace, parallelism=1)
        twin.advance_to(300.0)
        assert abs(twin.history.view("arrivals").sum() - trace.sum()) <= 0.5


def test_the_oracle_stops_at_the_smallest_max_parallelism_of_the_graph():
    """A vertex of max parallelism 64 under the twin's 128: scoring asked the twin for 65 and crashed."""
    from simulator.baselines.oracle import oracle_workers

    graph = {"name": "mp", "vertices": [{"name": "src"}, {"name": "count", "inputs": ["src"], "ship": "HASH",
             "num_keys": 680, "max_parallelism": 64}]}  # fmt: skip
    twin = Twin(np.full(10, 5000.0), topology=Topology.model_validate(graph))
    assert twin.max_parallelism == 64
    assert oracle_workers(twin, np.array([0.0, 1e12])).tolist() == [1, 64]
