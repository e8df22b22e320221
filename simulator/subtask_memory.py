"""Memory that grows with the subtasks a job runs: per-subtask overhead and network buffers.

Network buffers follow Flink's defaults (taskmanager.network.memory.buffers-per-channel 2,
floating-buffers-per-gate 8, memory.segment-size 32 KiB; a pipelined result partition holds at least one
buffer per subpartition plus one): an all-to-all edge (REBALANCE, HASH, BROADCAST, or FORWARD between
vertices of different parallelism) between p_u and p_d subtasks has p_u × p_d channels, a pointwise one
(FORWARD at equal parallelism) one channel per subtask. So reactive mode, which runs every vertex at the
job's scale-out, pays the product at its full scale-out on every all-to-all edge.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.topology import Topology

SEGMENT_MB = 32 / 1024
BUFFERS_PER_CHANNEL = 2
FLOATING_BUFFERS_PER_GATE = 8


def network_buffer_mb(topology: Topology, parallelism: Sequence[int]) -> float:
    """Network memory the job's exchanges need at `parallelism` (one entry per vertex), in MB."""
    buffers = 0
    for d, vertex in enumerate(topology.vertices):
        p_d = parallelism[d]
        for name in vertex.inputs:
            p_u = parallelism[topology.index(name)]
            pointwise = vertex.ship == "FORWARD" and p_u == p_d
            channels = p_d if pointwise else p_u * p_d
            inputs = BUFFERS_PER_CHANNEL * channels + FLOATING_BUFFERS_PER_GATE * p_d
            outputs = channels + p_u
            buffers += inputs + outputs
    return buffers * SEGMENT_MB


def subtask_memory_mb(topology: Topology, parallelism: Sequence[int]) -> float:
    """Per-subtask overhead memory (`overhead_mb` of every subtask) plus the network buffers, in MB."""
    overhead = sum(v.overhead_mb * p for v, p in zip(topology.vertices, parallelism, strict=True))
    return overhead + network_buffer_mb(topology, parallelism)
