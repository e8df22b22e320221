"""What an analysis extension (mape/extensions.py) keeps in the knowledge: the knowledge store saves it
without knowing the extension (a module of its own, so that the knowledge needs nothing of the hooks)."""

from __future__ import annotations

from typing import Protocol


class Record(Protocol):
    time_s: float

    def to_dict(self) -> dict: ...


class ExtensionState(Protocol):
    """An extension's part of the knowledge, saved as `to_dict()` under the extension's name."""

    new_records: list[Record]
    """This iteration's records: the store appends them to the table `<name>_decisions` in the iteration's
    transaction, then clears the list (`KnowledgeStore.records(name)` reads them back)."""

    def to_dict(self) -> dict: ...
