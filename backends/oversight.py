"""What an operator sees of foresail on Kubernetes, and how they stop it, on the scaled object itself.

- Events: every decision that changes the job and every failure is a Kubernetes Event on the scaled object
  (the Deployment or FlinkDeployment), so `kubectl describe` shows it beside the HPA-style history:
  reason `SuccessfulRescale` (Normal) with the rule and the reasons, `FailedRescale`, `LoopError`,
  `Paused`, `ConflictingAutoscaler` (Warning).
- Pause: the annotation `foresail.io/paused: "true"` on the scaled object stops foresail acting at once
  (`kubectl annotate deployment flink-taskmanager foresail.io/paused=true`); removing it resumes.
- Refusal: when a HorizontalPodAutoscaler targets the same object, or the Flink operator's own autoscaler
  is enabled on the FlinkDeployment (`job.autoscaler.enabled: true`), two controllers would fight over the
  replicas: foresail refuses to act and says why, until the other one is gone.

Reading or posting here must never stop the loop: errors are logged and the last answer stands.
"""

from __future__ import annotations

import datetime as dt
import socket
import uuid

import structlog
from kubernetes import client

from backends.kubernetes import FLINK_GROUP, FLINK_PLURAL, FLINK_VERSION
from backends.retry import described
from config.backends import KubernetesConfig

PAUSE_ANNOTATION = "foresail.io/paused"
OPERATOR_AUTOSCALER_KEY = "job.autoscaler.enabled"
TRUE = ("true", "1", "yes", "on")


class Oversight:
    """Pause and conflict checks on the scaled object, and Events about it."""

    def __init__(self, api: client.ApiClient, settings: KubernetesConfig, log: object | None = None) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.autoscaling = client.AutoscalingV2Api(api)
        self.settings = settings
        self.namespace, self.name = settings.namespace, settings.name
        if settings.resource == "deployment":
            self.kind, self.api_version = "Deployment", "apps/v1"
        else:
            self.kind, self.api_version = "FlinkDeployment", f"{FLINK_GROUP}/{FLINK_VERSION}"
        self.uid: str | None = None
        self.instance = socket.gethostname()
        self.log = log or structlog.get_logger("foresail.oversight")
        self._last_block: str | None = None

    # ---- may foresail act? ------------------------------------------------------------------------
    def blocked(self) -> str | None:
        """Why foresail must not act now (paused, another autoscaler), or None. An unreadable object is
        not a block: the target's own calls then fail and say so."""
        try:
            reason = self._why_blocked()
        except Exception as error:
            self.log.warning("oversight-read-failed", error=described(error))
            return self._last_block
        if reason != self._last_block:  # one Event per change, not one per loop
            if reason is not None:
                event = "Paused" if reason.startswith("paused") else "ConflictingAutoscaler"
                self.event(event, reason, warning=True)
            elif self._last_block is not None:
                self.event("Resumed", "foresail acts again: " + self._last_block + " no longer holds")
        self._last_block = reason
        return reason

    def _why_blocked(self) -> str | None:
        obj = self._read()
        metadata = obj.get("metadata") or {}
        self.uid = metadata.get("uid") or self.uid
        annotations = metadata.get("annotations") or {}
        if str(annotations.get(PAUSE_ANNOTATION, "")).lower() in TRUE:
            return f"paused by the annotation {PAUSE_ANNOTATION} on {self.kind} {self.namespace}/{self.name}"
        if self.kind == "FlinkDeployment":
            flink_conf = (obj.get("spec") or {}).get("flinkConfiguration") or {}
            if str(flink_conf.get(OPERATOR_AUTOSCALER_KEY, "")).lower() in TRUE:
                return (
                    f"the Flink operator's autoscaler ({OPERATOR_AUTOSCALER_KEY}) scales FlinkDeployment "
                    f"{self.namespace}/{self.name}: disable it or foresail"
                )
        for hpa in self._autoscalers():
            ref = hpa.spec.scale_target_ref
            if ref.kind == self.kind and ref.name == self.name:
                return (
                    f"HorizontalPodAutoscaler {self.namespace}/{hpa.metadata.name} scales {self.kind} "
                    f"{self.name}: delete it or stop foresail"
                )
        return None

    def _autoscalers(self) -> list:
        try:
            return self.autoscaling.list_namespaced_horizontal_pod_autoscaler(
                self.namespace, _request_timeout=self.settings.request_timeout_s
            ).items
        except client.ApiException as error:
            if error.status == 404:  # none was ever created (an API server without autoscaling/v2 objects)
                return []
            raise

    def _read(self) -> dict:
        if self.kind == "Deployment":
            deployment = self.apps.read_namespaced_deployment(
                self.name, self.namespace, _request_timeout=self.settings.request_timeout_s
            )
            return self.apps.api_client.sanitize_for_serialization(deployment)
        return self.custom.get_namespaced_custom_object(
            FLINK_GROUP,
            FLINK_VERSION,
            self.namespace,
            FLINK_PLURAL,
            self.name,
            _request_timeout=self.settings.request_timeout_s,
        )

    # ---- events -----------------------------------------------------------------------------------
    def event(self, reason: str, message: str, warning: bool = False) -> None:
        """A core/v1 Event on the scaled object (what `kubectl describe` lists); failures only logged."""
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                name=f"{self.name}.{uuid.uuid4().hex[:16]}", namespace=self.namespace
            ),
            involved_object=client.V1ObjectReference(
                kind=self.kind,
                name=self.name,
                namespace=self.namespace,
                api_version=self.api_version,
                uid=self.uid,
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component="foresail", host=self.instance),
            reporting_component="foresail",
            reporting_instance=self.instance,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.core.create_namespaced_event(
                self.namespace, body, _request_timeout=self.settings.request_timeout_s
            )
        except Exception as error:
            self.log.warning("event-failed", reason=reason, error=described(error))

    def iteration(
        self,
        decision: object | None,
        executed: bool,
        errors: dict[str, str],
        recommendation: str | None = None,
    ) -> None:
        """The Events of one iteration: the change it made (with its rule), the one it only recommended
        (recommend-only, dry run; blocked is said once, by its own Event), or why a change failed."""
        if decision is not None and executed:
            reasons = "; ".join(getattr(decision, "reasons", ()) or ())
            memory = (
                f", managed memory {decision.target_managed_mb:.0f} MB"
                if getattr(decision, "changes_memory", False)
                else ""
            )
            self.event(
                "SuccessfulRescale",
                f"New size: {decision.target_scaleout}{memory}; rule: {decision.rule}"
                + (f"; reason: {reasons}" if reasons else ""),
            )
        if recommendation is not None and self._last_block is None:
            self.event("RecommendedRescale", recommendation)
        for phase, error in errors.items():
            reason = "FailedRescale" if phase == "execute" else "LoopError"
            self.event(reason, f"{phase}: {error}", warning=True)
