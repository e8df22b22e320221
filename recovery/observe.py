"""Observed recovery after a rescale by statistical anomaly detection (Daedalus §3.5): the public API.

`NormalBehaviour` (normal.py) learns workload − throughput between rescales; `RecoveryTracker`
(tracker.py) watches one rescale and reports an `ObservedRecovery`; `RecoveryMonitor` (monitor.py) runs
both off the loop with a timeout and keeps their state for the knowledge store.
"""

from __future__ import annotations

from forecasting.executor import InlineExecutor
from recovery.monitor import RecoveryMonitor
from recovery.normal import NormalBehaviour
from recovery.tracker import Band, ObservedRecovery, RecoveryTracker, band_of

__all__ = [
    "Band",
    "InlineExecutor",
    "NormalBehaviour",
    "ObservedRecovery",
    "RecoveryMonitor",
    "RecoveryTracker",
    "band_of",
]
