"""Hand-made equal-service results for the tests of the table and the report section."""

from __future__ import annotations

SINE = "data/daedalus/workloads/sine_60000_6h.csv"


def found(family: str, knob: float, policy: str, worker_seconds: float, rescales: float) -> dict:
    """A family's search that reached equal service (0 s over the SLO) at its only setting tried."""
    hit = {
        "knob": knob,
        "policy": policy,
        "worker_seconds": worker_seconds,
        "seconds_over_slo": 0.0,
        "rescales": rescales,
        "held_share": 1.0 if rescales == 0 else 0.5,
    }
    labels = {"static": "workers", "ds2": "target-rate ratio"}
    return {
        "family": family,
        "knob_label": labels.get(family, "knob"),
        "tried": [hit],
        "at_equal_service": hit,
        "never_scales": rescales <= 1.0,
    }


def result(worker_seconds: float, *families: dict) -> dict:
    """foresail's figures on the sine (305 s over the SLO, 30 rescales) and the families' searches."""
    return {
        "workload": SINE,
        "seeds": [0, 1, 2],
        "reference_policy": "foresail",
        "reference": {"worker_seconds": worker_seconds, "seconds_over_slo": 305.0, "rescales": 30.0},
        "families": list(families),
    }
