"""What every daemon run does at its start and its end, whichever backends it drives."""

from __future__ import annotations

import sys
from pathlib import Path

from config.schema import Config
from mape.knowledge import Knowledge, KnowledgeStore


def open_store(path: str | Path, decision_history: int = 10_000) -> KnowledgeStore:
    """The knowledge store; a damaged one it had to move aside is also said on the console (the audit log
    may be a file nobody reads at the start)."""
    store = KnowledgeStore(path, decision_history)
    if store.damaged:
        print(f"foresail: {store.damaged}", file=sys.stderr)
    return store


def log_started(log: object, config: Config, knowledge: Knowledge, **details: object) -> None:
    """The 'daemon-started' event: what runs, and from which iteration it resumes."""
    log.info(
        "daemon-started",
        target_kind=config.target.kind,
        policy=config.scaling.policy,
        knowledge=config.knowledge.path,
        resumed_iteration=knowledge.iteration,
        **details,
    )


def save_and_close(log: object, store: KnowledgeStore, knowledge: Knowledge, iterations: int) -> None:
    """Stop background work, persist the knowledge a last time, close the store, log 'daemon-stopped'."""
    knowledge.close()
    store.save(knowledge, None)
    store.close()
    log.info("daemon-stopped", iterations=iterations, knowledge_iteration=knowledge.iteration)


def audit_names(config: Config) -> dict[str, str]:
    """The job and the target every audit event names (several daemons log into one place)."""
    kind = config.target.kind
    if kind == "prometheus+kubernetes":
        k8s = config.kubernetes
        target = f"{k8s.resource}/{k8s.namespace}/{k8s.name}"
        default_job = k8s.name
    elif kind == "prometheus+local-flink":
        target, default_job = f"local-flink/{config.local_flink.rest_url}", "local-flink"
    else:
        target, default_job = "twin", str(config.twin.workload)
    return {"job": getattr(config.forecast, "registry_job", None) or default_job, "target": target}
