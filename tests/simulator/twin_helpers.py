"""Deterministic twin settings shared by the simulator tests."""

from __future__ import annotations

import numpy as np

from simulator.params import TwinParams


def quiet(**overrides) -> TwinParams:
    """Deterministic knobs: 1000 records/s per worker, equal speeds, no CPU noise, fixed downtimes."""
    knobs = {
        "worker_capacity_rps": 1000.0,
        "speed_cov": 0.0,
        "cpu_noise_sd": 0.0,
        "scale_out_downtime_sd_s": 0.0,
        "scale_in_downtime_sd_s": 0.0,
        "failure_downtime_sd_s": 0.0,
    }
    knobs.update(overrides)
    return TwinParams(**knobs)


def constant(rate_rps: float, duration_s: int) -> np.ndarray:
    return np.full(duration_s, float(rate_rps))
