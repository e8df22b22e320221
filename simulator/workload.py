"""Input workloads for the twin: recorded per-second traces and a built-in synthetic sine.

A workload is a plain float array of records/s, index = second since the trace's first row.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

from messages.types import MAX_RATE_RPS

SINE_MEAN_RPS = 32_500.0
"""Mean of the Daedalus WordCount trace `sine_60000_6h.csv` (range 5,000..60,000 records/s)."""
SINE_AMPLITUDE_RPS = 27_500.0
SINE_PERIODS = 2
"""The WordCount trace has two full periods (3 h each) in 6 h and starts at the mean, rising."""
MAX_SPAN_S = 31 * 86_400
"""Longest trace accepted (a month of seconds, 2.7 M rates, 21 MB): a longer one, or a gap that reaches
past it, is rejected at its line instead of allocating by the last second number."""
MAX_ROWS = MAX_SPAN_S + 1
"""Most data rows (seconds increase strictly, so the span bounds them too)."""


def load_trace(
    path: str | Path,
    max_span_s: int = MAX_SPAN_S,
    max_rows: int = MAX_ROWS,
    max_rate_rps: float = MAX_RATE_RPS,
) -> np.ndarray:
    """Read a `second|count` trace (pipe-separated, header line) into per-second rates.

    Missing seconds hold the previous value, as a rate gauge would. Raises ValueError naming the line of
    the first malformed row, so a broken file never silently becomes a wrong experiment; rows are read
    one at a time and the file is rejected at the first one past the limits (span, rows, rate), so no
    file can make it allocate more than the limits allow.
    """
    path = Path(path)
    seconds, counts = array("q"), array("d")
    with path.open(encoding="utf-8-sig", errors="replace") as lines:
        header = lines.readline(1024)
        _check_header(path, header)
        for line_no, line in enumerate(lines, start=2):
            if not line.strip():
                continue
            second, count = _parse_row(path, line_no, line)
            if seconds and second <= seconds[-1]:
                raise ValueError(
                    f"{path}:{line_no}: second {second} does not increase (previous {seconds[-1]})"
                )
            if seconds and second - seconds[0] > max_span_s:
                raise ValueError(
                    f"{path}:{line_no}: second {second} lies {second - seconds[0]} s after the first row; "
                    f"a trace may span at most {max_span_s} s"
                )
            if count > max_rate_rps:
                raise ValueError(f"{path}:{line_no}: count {count:g} above the maximum {max_rate_rps:g}/s")
            if len(seconds) >= max_rows:
                raise ValueError(f"{path}:{line_no}: more than {max_rows} data rows")
            seconds.append(second)
            counts.append(count)
    if not seconds:
        raise ValueError(f"{path}: no data rows after the header")
    if max(counts) < 1:  # 5e-324 is above 0 and sized workers of zero capacity
        raise ValueError(
            f"{path}: every count is below 1 record/s; the twin sizes its workers from the trace's peak"
        )
    offsets = np.asarray(seconds, dtype=np.int64) - seconds[0]
    rates = np.empty(int(offsets[-1]) + 1, dtype=float)
    # Each row's value holds until the next row: fill [offset_i, offset_{i+1}) with value i.
    rates[:] = np.repeat(np.asarray(counts), np.diff(np.append(offsets, offsets[-1] + 1)))
    return rates


def _check_header(path: Path, header: str) -> None:
    parts = header.strip().split("|")
    if len(parts) != 2 or parts[0].strip().lower() != "second":
        raise ValueError(f"{path}:1: expected a header 'second|<name>', got {header.strip()!r}")


def _parse_row(path: Path, line_no: int, line: str) -> tuple[int, float]:
    parts = line.strip().split("|")
    if len(parts) != 2:
        raise ValueError(f"{path}:{line_no}: expected 'second|count', got {line.strip()[:80]!r}")
    try:
        second = int(parts[0])
        count = float(parts[1])
    except ValueError:
        raise ValueError(f"{path}:{line_no}: not numbers: {line.strip()[:80]!r}") from None
    if not 0 <= second < 2**53 or not math.isfinite(count) or count < 0:
        raise ValueError(f"{path}:{line_no}: need second >= 0 and a finite count >= 0: {line.strip()!r}")
    return second, count


def builtin_sine(
    duration_s: int = 21_600,
    seed: int = 0,
    *,
    mean_rps: float = SINE_MEAN_RPS,
    amplitude_rps: float = SINE_AMPLITUDE_RPS,
    periods: float = SINE_PERIODS,
    noise_sd_rps: float | None = None,
) -> np.ndarray:
    """A WordCount-like sine (two periods, 5k..60k records/s) with small Gaussian noise.

    Stands in for the recorded trace where the data is not installed. Default noise: 1 % of the mean.
    """
    if duration_s < 1:
        raise ValueError(f"duration_s must be >= 1, got {duration_s}")
    noise = 0.01 * mean_rps if noise_sd_rps is None else noise_sd_rps
    t = np.arange(duration_s, dtype=float)
    rates = mean_rps + amplitude_rps * np.sin(2 * np.pi * periods * t / duration_s)
    rates += np.random.default_rng(seed).normal(0.0, noise, size=duration_s)
    return np.clip(rates, 0.0, None)
