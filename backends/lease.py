"""Leader election with a `coordination.k8s.io/v1` Lease, so two daemon replicas never both act.

The algorithm of client-go's leaderelection: the holder renews `renewTime` every `renew_period_s`; another
replica takes the Lease only once the record (holder, renewTime, transitions) has not changed for
`lease_duration_s` *as measured by its own monotonic clock*, so clock skew between nodes cannot make two
leaders. Writes carry the resourceVersion read just before, so of two replicas racing for an expired
Lease the API server accepts one and answers 409 to the other. A leader that cannot renew for
`lease_duration_s` stops acting on its own, before another replica can take over.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backends.retry import described

ABSENT = ("", "no Lease", None)
"""The record of a Lease that does not exist (deleted while held, or never created)."""


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _micro_time(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Holds (or waits for) one Lease; `is_leader()` is what the execute side asks before acting."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float,
        renew_period_s: float,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        log: structlog.typing.FilteringBoundLogger | None = None,
        request_timeout_s: float = 5.0,
    ) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_period_s = renew_period_s
        self.request_timeout_s = request_timeout_s
        self._wall, self._monotonic = wall, monotonic
        self.log = log or structlog.get_logger("foresail.leader")
        self._leader = False
        self._renewed_at = -math.inf
        self._observed: tuple | None = None
        self._observed_at = -math.inf
        self._last_holder: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- state ----------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Held and renewed within the lease duration (a leader cut off from the API server expires)."""
        return self._leader and self._monotonic() - self._renewed_at < self.lease_duration_s

    # ---- one round (the background thread calls it; tests call it directly) ---------------------
    def try_acquire_or_renew(self) -> bool:
        with self._lock:
            was_leader = self.is_leader()
            try:
                leader = self._round()
            except ApiException as error:
                if error.status == 409:  # another replica wrote first: it leads
                    leader = False
                else:  # keep what we hold until it expires (`is_leader` counts from the last renewal)
                    self.log.warning("lease-error", lease=self.name, status=error.status, reason=error.reason)
                    leader = was_leader
            except Exception as error:  # the API server is unreachable: likewise
                self.log.warning("lease-error", lease=self.name, error=described(error))
                leader = was_leader
            if not leader:
                self._leader = False
            if self.is_leader() != was_leader:
                self.log.info(
                    "leader-acquired" if self.is_leader() else "leader-lost",
                    lease=self.name,
                    identity=self.identity,
                )
            return self.is_leader()

    def _round(self) -> bool:
        now_wall, now = self._wall(), self._monotonic()
        try:
            lease = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.request_timeout_s
            )
        except ApiException as error:
            if error.status != 404:
                raise
            if self._unchanged_for_s(ABSENT) < self._absent_wait_s():
                return False
            self._create(now_wall)
            self._won(now)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, str(spec.renew_time), spec.lease_transitions)
        unchanged_s = self._unchanged_for_s(record)
        if spec.holder_identity:
            self._last_holder = spec.holder_identity
        duration = spec.lease_duration_seconds
        if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
            duration = self.lease_duration_s  # a duration of -5 s handed the Lease over at once
        held_by_other = bool(spec.holder_identity) and spec.holder_identity != self.identity
        if held_by_other and unchanged_s < duration:
            return False
        ours = spec.holder_identity == self.identity
        body = {
            "metadata": {"resourceVersion": lease.metadata.resource_version}
            if lease.metadata and lease.metadata.resource_version
            else {},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.lease_duration_s),
                "renewTime": _micro_time(now_wall),
                "acquireTime": _micro_time(now_wall)
                if not ours or spec.acquire_time is None
                else spec.acquire_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "leaseTransitions": (spec.lease_transitions or 0) + (0 if ours else 1),
            },
        }
        self.coordination.patch_namespaced_lease(
            self.name,
            self.namespace,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=self.request_timeout_s,
        )
        self._won(now)
        return True

    def _unchanged_for_s(self, record: tuple) -> float:
        """How long `record` has been what the Lease reads. A change is dated when its read returned (now),
        not when it was sent: a renewal landing while a slow read was on its way must not look older."""
        read_at = self._monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, read_at
        return read_at - self._observed_at

    def _absent_wait_s(self) -> float:
        """How long a missing Lease must stay missing before this replica creates it: at once when it never
        saw another holder (a first start), else a lease duration (the holder may not have noticed yet)."""
        return self.lease_duration_s if self._last_holder not in (None, self.identity) else 0.0

    def _create(self, now_wall: float) -> None:
        self.coordination.create_namespaced_lease(
            self.namespace,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": math.ceil(self.lease_duration_s),
                    "acquireTime": _micro_time(now_wall),
                    "renewTime": _micro_time(now_wall),
                    "leaseTransitions": 0,
                },
            },
            _request_timeout=self.request_timeout_s,
        )

    def _won(self, now: float) -> None:
        self._leader, self._renewed_at = True, now

    # ---- background renewal ---------------------------------------------------------------------
    def start(self) -> None:
        """Try at once, then every `renew_period_s` on a daemon thread (never on the loop's thread)."""
        self.try_acquire_or_renew()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.renew_period_s):
            self.try_acquire_or_renew()

    def stop(self, release: bool = True) -> None:
        """Stop renewing; a leader hands the Lease back (empty holder) so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.request_timeout_s + 1)
        with self._lock:
            if release and self.is_leader():
                try:
                    self._release()
                except Exception as error:
                    self.log.warning("lease-release-failed", error=described(error))
            self._leader = False

    def _release(self) -> None:
        """Empty the holder of a Lease this replica still holds, conditional on the version read: another
        replica's Lease (taken over meanwhile, or created after a deletion) is left alone."""
        lease = self.coordination.read_namespaced_lease(
            self.name, self.namespace, _request_timeout=self.request_timeout_s
        )
        if lease.spec is None or lease.spec.holder_identity != self.identity:
            self.log.info("lease-not-ours", lease=self.name, holder=lease.spec and lease.spec.holder_identity)
            return
        version = lease.metadata.resource_version if lease.metadata else None
        self.coordination.patch_namespaced_lease(
            self.name,
            self.namespace,
            {
                "metadata": {"resourceVersion": version} if version else {},
                "spec": {"holderIdentity": "", "leaseDurationSeconds": 1},
            },
            _content_type="application/merge-patch+json",
            _request_timeout=self.request_timeout_s,
        )
        self.log.info("leader-released", lease=self.name, identity=self.identity)
