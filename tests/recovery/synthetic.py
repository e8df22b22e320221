"""A synthetic rescale whose downtime and catch-up are known by construction."""

from __future__ import annotations

import numpy as np


def rescale_run(
    *,
    rescale_s: int = 100,
    down_s: int = 12,
    catch_up_s: int = 24,
    workload_rps: float = 1000.0,
    catch_up_rps: float = 1500.0,
    noise_rps: float = 10.0,
    end_s: int = 400,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sample per second: a constant workload; throughput = workload ∓ noise (alternating), except
    zero during [rescale, rescale + down) and `catch_up_rps` during the next `catch_up_s` seconds.

    With the defaults the backlog of 12 s × 1000 rps = 12000 records is worked off at 1500 − 1000 =
    500 rps in exactly 24 s: down 12 s, normal again from 100 + 12 + 24 = 136 s, i.e. 36 s after.
    """
    times = np.arange(end_s, dtype=float)
    workload = np.full(end_s, workload_rps)
    throughput = workload - np.where(times % 2 == 0, noise_rps, -noise_rps)
    restart_s = rescale_s + down_s
    throughput[(times >= rescale_s) & (times < restart_s)] = 0.0
    throughput[(times >= restart_s) & (times < restart_s + catch_up_s)] = catch_up_rps
    return times, workload, throughput


def batches(times: np.ndarray, *series: np.ndarray, size: int) -> list[tuple[np.ndarray, ...]]:
    """The samples cut into consecutive batches of `size`, as successive loops would hand them over."""
    return [tuple(s[i : i + size] for s in (times, *series)) for i in range(0, len(times), size)]
