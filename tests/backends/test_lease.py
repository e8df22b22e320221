"""Leader election over a coordination.k8s.io Lease, against kmock (a Kubernetes API emulator over real
HTTP). Time is injected: each replica has its own monotonic clock, as on two nodes."""

from __future__ import annotations

import pytest
from kubernetes import client

from backends.lease import LeaseElector
from tests.backends.kube_emulator import KubeEmulator

NS = "flink"


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        yield emulator


def _replica(kube: KubeEmulator, identity: str, clock: Clock) -> LeaseElector:
    return LeaseElector(
        kube.api(), NS, "foresail-leader", identity, lease_duration_s=15, renew_period_s=5,
        wall=lambda: 1.8e9 + clock.now, monotonic=clock,
    )  # fmt: skip


def _lease(kube: KubeEmulator) -> client.V1Lease:
    return client.CoordinationV1Api(kube.api()).read_namespaced_lease("foresail-leader", NS)


def test_the_first_replica_takes_the_lease_and_the_second_stands_by(kube):
    a_clock, b_clock = Clock(), Clock(5000.0)
    a, b = _replica(kube, "a", a_clock), _replica(kube, "b", b_clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.is_leader() and not b.is_leader()
    assert _lease(kube).spec.holder_identity == "a"


def test_the_leader_renews_and_a_standby_waits_as_long_as_the_record_changes(kube):
    a_clock, b_clock = Clock(), Clock(5000.0)
    a, b = _replica(kube, "a", a_clock), _replica(kube, "b", b_clock)
    a.try_acquire_or_renew()
    first_renewal = _lease(kube).spec.renew_time
    for _ in range(6):  # 60 s of renewals, every 10 s of both clocks: longer than a lease duration
        a_clock.now += 10
        b_clock.now += 10
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert _lease(kube).spec.renew_time > first_renewal
    assert _lease(kube).spec.lease_transitions == 0


def test_a_standby_takes_over_once_the_leader_stopped_renewing_for_a_lease_duration(kube):
    a_clock, b_clock = Clock(), Clock(5000.0)
    a, b = _replica(kube, "a", a_clock), _replica(kube, "b", b_clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    b_clock.now += 14  # a is silent, but not for a whole lease duration yet (by b's own clock)
    assert not b.try_acquire_or_renew()
    b_clock.now += 2
    assert b.try_acquire_or_renew()
    assert _lease(kube).spec.holder_identity == "b" and _lease(kube).spec.lease_transitions == 1
    a_clock.now += 16  # a comes back: it sees b's fresh record and stops acting
    assert not a.try_acquire_or_renew()
    assert not a.is_leader()


def test_a_leader_cut_off_from_the_api_server_stops_acting_before_another_can_take_over(kube):
    clock = Clock()
    a = _replica(kube, "a", clock)
    assert a.try_acquire_or_renew()
    kube.fail("GET", "/leases/", *[503] * 10)
    clock.now += 10
    assert a.try_acquire_or_renew()  # renewal failed, but the lease it holds is still valid
    clock.now += 6  # 16 s since the last successful renewal > 15 s
    assert not a.is_leader()


def test_losing_a_write_race_is_not_leadership(kube):
    a_clock, b_clock = Clock(), Clock()
    a, b = _replica(kube, "a", a_clock), _replica(kube, "b", b_clock)
    a.try_acquire_or_renew()
    a.stop(release=False)
    b.try_acquire_or_renew()
    b_clock.now += 16
    kube.fail("PATCH", "/leases/", 409)  # the API server's answer when another replica wrote first
    assert not b.try_acquire_or_renew()
    assert _lease(kube).spec.holder_identity in ("a", "b")  # the emulator applied it anyway; b does not act
    assert not b.is_leader()


def test_a_stopping_leader_hands_the_lease_back_so_the_standby_takes_over_at_once(kube):
    a, b = _replica(kube, "a", Clock()), _replica(kube, "b", Clock())
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.stop(release=True)
    assert not a.is_leader()
    assert b.try_acquire_or_renew()
    assert _lease(kube).spec.holder_identity == "b"
