"""What a configuration costs: CPU cores and TaskManager memory of n workers at a memory level, priced.

A worker (one TaskManager with one slot) holds `cores_per_worker` cores and a process of
`process_base_mb` (heap, network buffers, framework, JVM overhead) plus its managed memory. Prices are
relative; the defaults follow public per-vCPU-hour and per-GB-hour container prices (AWS Fargate,
Linux/x86: $0.04048 per vCPU-hour, $0.004445 per GB-hour, so 1 GB ≈ 0.11 core).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prices:
    cpu_per_core: float = 1.0
    memory_per_gb: float = 0.11
    cores_per_worker: float = 1.0
    process_base_mb: float = 1890.0

    def worker_memory_mb(self, managed_mb: float) -> float:
        """Memory of one TaskManager process (and its container) with `managed_mb` managed memory."""
        return self.process_base_mb + managed_mb

    def cost(self, scaleout: int, managed_mb: float) -> float:
        """Price per unit of time of `scaleout` workers with `managed_mb` managed memory each."""
        per_worker = (
            self.cpu_per_core * self.cores_per_worker
            + self.memory_per_gb * self.worker_memory_mb(managed_mb) / 1024.0
        )
        return scaleout * per_worker
