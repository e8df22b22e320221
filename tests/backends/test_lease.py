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


def test_a_renewal_seen_by_a_slow_read_is_dated_when_the_read_returned():
    """b's read leaves at 1004, a renews at 1008, the read returns at 1009: dated 1004, b took over at
    1019.5 while a still led until 1023. A fake API (the timing of one read cannot be staged on kmock)."""
    clock = Clock(1000.0)
    renewal = {"at": 1000.0}

    class Coordination:
        def read_namespaced_lease(self, name, namespace, _request_timeout=None):
            if clock.now == 1004.0:
                clock.now, renewal["at"] = 1009.0, 1008.0  # a renews while this read is on its way
            spec = client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15, lease_transitions=0)
            spec.renew_time = renewal["at"]
            return client.V1Lease(metadata=client.V1ObjectMeta(resource_version="1"), spec=spec)

        def patch_namespaced_lease(self, *args, **kwargs):
            return None

    b = LeaseElector(client.ApiClient(), NS, "l", "b", 15, 5, wall=lambda: 1.8e9 + clock.now, monotonic=clock)
    b.coordination = Coordination()
    assert not b.try_acquire_or_renew()  # 1000: a holds it
    clock.now = 1004.0
    assert not b.try_acquire_or_renew()  # returns at 1009 with a's renewal of 1008
    clock.now = 1019.5
    assert not b.try_acquire_or_renew(), "a's renewal is 10.5 s old by b's clock, not 15.5"
    clock.now = 1024.5
    assert b.try_acquire_or_renew()


def test_a_lease_read_without_a_version_is_taken_over_and_released_with_plain_writes():
    """An API server (or proxy) that answers without metadata or resourceVersion: the replica cannot
    make its writes conditional, so it writes them plainly instead of failing on the missing field. A fake
    API: kmock always sets a version."""
    clock, patches = Clock(), []
    holder = {"name": "a"}

    class Coordination:
        def read_namespaced_lease(self, name, namespace, _request_timeout=None):
            spec = client.V1LeaseSpec(holder_identity=holder["name"], lease_duration_seconds=15)
            spec.renew_time, spec.lease_transitions = 1000.0, 0
            return client.V1Lease(metadata=None, spec=spec)

        def patch_namespaced_lease(self, name, namespace, body, **kwargs):
            patches.append(body)
            holder["name"] = body["spec"]["holderIdentity"]

    b = LeaseElector(client.ApiClient(), NS, "l", "b", 15, 5, wall=lambda: 1.8e9 + clock.now, monotonic=clock)
    b.coordination = Coordination()
    assert not b.try_acquire_or_renew()
    clock.now += 16
    assert b.try_acquire_or_renew() and b.is_leader()
    assert patches[-1]["metadata"] == {} and patches[-1]["spec"]["leaseTransitions"] == 1
    b.stop(release=True)
    assert patches[-1] == {"metadata": {}, "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}
    assert not b.is_leader()


def test_a_lease_deleted_under_its_holder_is_recreated_after_a_lease_duration_and_kept(kube):
    """b re-created it at once while a still led; a, stopping, then blanked b's Lease for a third."""
    a_clock, b_clock = Clock(), Clock(5000.0)
    a, b = _replica(kube, "a", a_clock), _replica(kube, "b", b_clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    client.CoordinationV1Api(kube.api()).delete_namespaced_lease("foresail-leader", NS)
    assert not b.try_acquire_or_renew() and a.is_leader()  # a does not know yet: b must not lead now
    b_clock.now += 16
    assert b.try_acquire_or_renew() and _lease(kube).spec.holder_identity == "b"
    a.stop(release=True)  # a still believes it leads (its lease duration has not run out)
    assert _lease(kube).spec.holder_identity == "b"


@pytest.mark.parametrize("duration", [-5, 0])
def test_a_lease_duration_that_is_no_duration_gives_no_instant_takeover(kube, duration):
    client.CoordinationV1Api(kube.api()).create_namespaced_lease(
        NS,
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "foresail-leader", "namespace": NS},
         "spec": {"holderIdentity": "x", "leaseDurationSeconds": duration, "leaseTransitions": 0}},
    )  # fmt: skip
    clock = Clock()
    b = _replica(kube, "b", clock)
    assert not b.try_acquire_or_renew()
    clock.now += 2
    assert not b.try_acquire_or_renew(), "the configured 15 s stand in for a duration of -5 or 0"
    clock.now += 14
    assert b.try_acquire_or_renew()


def test_an_error_with_a_many_line_message_is_logged_on_one_line():
    """The Kubernetes client's and pydantic's exceptions carry many lines; the log keeps the first."""
    logged = []

    class Log:
        def warning(self, event, **fields):
            logged.append((event, fields))

        info = warning

    class Coordination:
        def read_namespaced_lease(self, name, namespace, _request_timeout=None):
            raise ValueError(
                "2 validation errors for V1Lease\nspec.renewTime\n  invalid datetime" + "x" * 500
            )

    clock = Clock()
    b = LeaseElector(client.ApiClient(), NS, "l", "b", 15, 5, wall=lambda: 1.8e9, monotonic=clock, log=Log())
    b.coordination = Coordination()
    assert not b.try_acquire_or_renew()
    [(event, fields)] = logged
    assert event == "lease-error"
    assert fields["error"] == "ValueError: 2 validation errors for V1Lease"
