"""Flink's TaskManager memory options for a memory level: the managed memory grows, the heap stays.

Setting only the process size and the managed size is not enough: Flink derives the JVM overhead (10% of
the process, 192 MB–1 GB) and the network memory (10% of Flink's memory, 64 MB–1 GB) from the process
size, so a larger level would take them out of the heap — on Flink 2.3 with a 1,890 MB base the heap
falls 20% at level 3 and Flink refuses level 6 ('Sum of configured Framework Heap … exceeds'). Both are
pinned here at what Flink derives for the process without managed memory (`process_base_mb`), so every
level, and the release to none, runs the same heap. Defaults from Flink's `TaskManagerOptions` /
`TaskManagerMemoryUtils` (2.x; unchanged since 1.10).
"""

from __future__ import annotations

MANAGED_KEY = "taskmanager.memory.managed.size"
PROCESS_KEY = "taskmanager.memory.process.size"
NETWORK_KEYS = ("taskmanager.memory.network.min", "taskmanager.memory.network.max")
OVERHEAD_KEYS = ("taskmanager.memory.jvm-overhead.min", "taskmanager.memory.jvm-overhead.max")
METASPACE_MB = 256.0
OVERHEAD_FRACTION, OVERHEAD_MIN_MB, OVERHEAD_MAX_MB = 0.1, 192.0, 1024.0
NETWORK_FRACTION, NETWORK_MIN_MB, NETWORK_MAX_MB = 0.1, 64.0, 1024.0


def mebibytes(size_mb: float) -> str:
    """A memory size as Flink reads it ('632m': mebibytes)."""
    return f"{round(size_mb)}m"


def taskmanager_memory(managed_mb: float, process_mb: float) -> dict[str, str]:
    """Flink's options for `managed_mb` managed memory in a `process_mb` process (see the module docstring)."""
    base_mb = process_mb - managed_mb
    overhead_mb = min(max(OVERHEAD_FRACTION * base_mb, OVERHEAD_MIN_MB), OVERHEAD_MAX_MB)
    network_mb = min(
        max(NETWORK_FRACTION * (base_mb - METASPACE_MB - overhead_mb), NETWORK_MIN_MB), NETWORK_MAX_MB
    )
    options = {MANAGED_KEY: mebibytes(managed_mb), PROCESS_KEY: mebibytes(process_mb)}
    options |= {key: mebibytes(network_mb) for key in NETWORK_KEYS}
    options |= {key: mebibytes(overhead_mb) for key in OVERHEAD_KEYS}
    return options


UNITS_MB = {"": 2**-20, "b": 2**-20, "k": 2**-10, "kb": 2**-10, "m": 1.0, "mb": 1.0, "g": 1024.0, "gb": 1024.0,
            "t": 2**20, "tb": 2**20}  # fmt: skip


def parse_mebibytes(text: object) -> float | None:
    """A Flink memory size ('316m', '1g', '2048 mb', '1048576') in MiB; None when it is none."""
    if not isinstance(text, str):
        return None
    number = text.strip().lower().rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = text.strip().lower()[len(number) :].strip()
    try:
        value = float(number)
    except ValueError:
        return None
    return value * UNITS_MB[unit] if unit in UNITS_MB and value >= 0 else None


def dynamic_properties(managed_mb: float, process_mb: float) -> list[str]:
    """The same options as `-Dkey=value` arguments of `taskmanager.sh`."""
    return [f"-D{key}={value}" for key, value in taskmanager_memory(managed_mb, process_mb).items()]
