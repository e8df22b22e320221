"""Read StreamBed's released search results (`data/streambed/*.csv`): one testbed measurement a row.

`;`-separated, no header, quoted fields: column 1 the per-operator parallelism (`name;parallelism|…`,
empty for the single-task run), column 4 the memory (MB per 16-slot TaskManager), column 14 the measured
MST. Slots = the sum of the parallelisms; a single-task run has one slot per non-source operator, which
is the number of operators the other rows list.
"""

from __future__ import annotations

import csv
import io
import math

from config.schema import FLINK_MAX_PARALLELISM
from planning.surrogate import Observation

_PARALLELISM, _MEMORY, _MST = 1, 4, 14


class ResultsError(ValueError):
    """A results file that does not read as StreamBed's: one line saying where."""


def parse_results(text: str, where: str = "results") -> list[Observation]:
    """The measurements in file order."""
    try:
        rows = [r for r in csv.reader(io.StringIO(text), delimiter=";") if r]
    except csv.Error as error:  # a field over the csv module's limit, a NUL in a quoted one
        raise ResultsError(f"{where}: not StreamBed's results ({error})") from error
    if not rows:
        raise ResultsError(f"{where}: no measurements")
    parsed: list[tuple[list[int] | None, float, float]] = []
    for line, row in enumerate(rows, start=1):
        if len(row) <= _MST:
            raise ResultsError(f"{where} row {line}: {len(row)} columns, expected at least {_MST + 1}")
        try:
            parallelism = (
                [int(entry.rsplit(";", 1)[1]) for entry in row[_PARALLELISM].split("|")]
                if row[_PARALLELISM]
                else None
            )
            memory_mb, mst_rps = float(row[_MEMORY]), float(row[_MST])
        except (ValueError, IndexError) as error:
            raise ResultsError(f"{where} row {line}: not a StreamBed measurement ({error})") from error
        problem = _implausible(parallelism, memory_mb, mst_rps)
        if problem is not None:
            raise ResultsError(f"{where} row {line}: {problem}")
        parsed.append((parallelism, memory_mb, mst_rps))
    operators = {len(p) for p, _, _ in parsed if p is not None}
    if not operators:
        raise ResultsError(f"{where}: no row lists its operators' parallelism (single-task rows alone)")
    if len(operators) != 1:
        raise ResultsError(f"{where}: rows disagree on the number of operators ({sorted(operators)})")
    single_task = operators.pop()
    return [Observation(sum(p) if p is not None else single_task, memory, mst) for p, memory, mst in parsed]


MAX_MST_RPS = 1e12
"""Far above any measured job (StreamBed's largest: ~10^7 events/s): beyond it a value is damage."""


MAX_MEMORY_MB = 1e9
"""A petabyte: beyond any testbed (1e300 overflowed the fit's Gram matrix, and its SVD never returned)."""


def _implausible(parallelism: list[int] | None, memory_mb: float, mst_rps: float) -> str | None:
    if parallelism is not None and min(parallelism, default=1) < 1:
        return f"a parallelism below 1 ({parallelism})"
    if (
        parallelism is not None and max(parallelism, default=1) > FLINK_MAX_PARALLELISM
    ):  # 400 nines overflowed
        return f"an operator's parallelism above Flink's {FLINK_MAX_PARALLELISM}"
    if not (math.isfinite(memory_mb) and 0 < memory_mb <= MAX_MEMORY_MB):
        return f"memory must be a size in (0, {MAX_MEMORY_MB:g}] MB, got {memory_mb:g}"
    if not (math.isfinite(mst_rps) and 0 <= mst_rps <= MAX_MST_RPS):
        return f"MST must be a rate in [0, {MAX_MST_RPS:g}] events/s, got {mst_rps:g}"
    return None
