"""What every daemon run does at its start and its end, whichever backends it drives."""

from __future__ import annotations

from config.schema import Config
from mape.knowledge import Knowledge, KnowledgeStore


def log_started(log: object, config: Config, knowledge: Knowledge, **details: object) -> None:
    """The 'daemon-started' event: what runs, and from which iteration it resumes."""
    log.info(
        "daemon-started",
        target=config.target.kind,
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
