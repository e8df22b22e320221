"""What `foresail plan-capacity` writes: the plan (JSON), a deployment fragment, a plot of the surrogate
against the measurements, and the daemon's knowledge store seeded with the planned capacities."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt
import numpy as np

from backends.flink_memory import dynamic_properties
from daemon.finite_json import finite
from daemon.lifecycle import open_store
from mape.knowledge import KnowledgeSettings
from mape.vertex_knowledge import vertex_knowledge
from memory.knowledge import MEMORY, memory_of
from memory.levels import MemoryLevels
from planning.plan import CapacityPlan
from planning.seeds import core_points, vertex_seeds


def write_plan(plan: CapacityPlan, out_dir: Path, extra: dict[str, object]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "plan.json"
    content = finite({**extra, **plan.to_dict()})
    path.write_text(json.dumps(content, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


def write_deployment(plan: CapacityPlan, process_base_mb: float, out_dir: Path) -> Path:
    """A kustomize patch for deploy/flink-reactive.yaml's TaskManagers: replicas, container memory and
    Flink's memory options as the daemon sets a memory level (backends/flink_memory.py: Flink refused a
    larger managed memory inside the config map's process size); the per-vertex requirements for a
    vertex-granularity deployment."""
    managed_mb = plan.memory_mb * plan.slots_per_task_manager  # Flink's managed size is per TaskManager
    memory_mb = round(process_base_mb + managed_mb)
    vertex = plan.vertex_parallelism
    lines = [
        "# foresail plan-capacity: TaskManagers for "
        f"{plan.target_rate_rps:,.0f} records/s (planned at 110%: {plan.slots} slots)",
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata: {name: flink-taskmanager, namespace: flink}",
        "spec:",
        f"  replicas: {plan.task_managers}",
        "  template:",
        "    spec:",
        "      containers:",
        "        - name: taskmanager",
        f"          args: {json.dumps(['taskmanager', *dynamic_properties(managed_mb, memory_mb)])}",
        "          resources:",
        f"            requests: {{memory: {memory_mb}Mi}}",
        f"            limits: {{memory: {memory_mb}Mi}}",
        "---",
        "# Flink configuration (flink-configmap.yaml, config.yaml)",
        f"# taskmanager.numberOfTaskSlots: {plan.slots_per_task_manager}",
        "# vertex granularity (the adaptive scheduler): least parallelism per vertex for 110% of the target "
        f"(sources not sized); one slot-sharing group (Flink's default) needs {max(vertex.values(), default=0)} "
        f"slots, a group per vertex {sum(vertex.values())} besides the sources",
        *(f"#   {name}: {parallelism}" for name, parallelism in vertex.items()),
    ]
    path = out_dir / "deployment.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_plot(plan: CapacityPlan, out_dir: Path) -> Path:
    surrogate = plan.surrogate
    fig, ax = plt.subplots(figsize=(8, 4.5))
    slots = np.arange(1, max(plan.slots, *(e.slots for e in plan.exploration.estimates)) + 2)
    for memory in sorted({e.memory_mb for e in plan.exploration.estimates}):
        measured = [e for e in plan.exploration.estimates if e.memory_mb == memory]
        points = ax.scatter([e.slots for e in measured], [e.mst_rps for e in measured], s=18, zorder=3)
        prediction = [plan.predict_rps(s, memory) for s in slots]
        label = f"{surrogate.model} at {memory:g} MB" + (" over the skew" if plan.skew is not None else "")
        label += " and the state cost" if plan.state_cost is not None else ""
        ax.plot(slots, prediction, color=points.get_facecolor()[0], label=label)
    ax.axhline(plan.target_rate_rps, color="black", linewidth=0.8, label="target")
    ax.axhline(1.1 * plan.target_rate_rps, color="black", linestyle="--", linewidth=0.8, label="110% target")
    ax.errorbar(
        [plan.slots],
        [plan.predicted_mst_rps],
        yerr=[plan.predicted_mst_sd_rps],
        fmt="s",
        color="red",
        capsize=4,
        label=f"plan: {plan.slots} slots",
    )
    ax.set(xlabel="slots", ylabel="MST (records/s)", title="Surrogate against the testbed measurements")
    ax.legend(fontsize=8)
    path = out_dir / "surrogate.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Seeded:
    """What `seed_knowledge` put into the store (counts of new entries)."""

    scaleouts: int
    levels: tuple[int, ...]
    vertices: int
    core_points: int
    """Testbed points on the CPU-per-busy-second line (0: none read, or the store had its own)."""


def seed_knowledge(
    plan: CapacityPlan,
    store_path: Path,
    settings: KnowledgeSettings,
    max_scaleout: int,
    levels: MemoryLevels | None = None,
) -> Seeded:
    """Put the plan's capacities into the store as observed (reliable: the daemon's own reliable estimates
    smooth them in later); a scale-out the store already observed keeps its own. (A plan's own store in
    --out starts empty: the command moves an earlier run's to OUT/previous/ as it starts.)

    - The job-level model: at the planned memory, the testbed's MST where it measured that slot count, the
      plan's prediction (skew included) at every other scale-out 1..max.
    - With memory levels (`levels`, and the store built with the memory extension), a stateful job learns
      capacity per level (memory/capacities.py) and would start cold there: the planned memory's level
      gets the same capacities, every other level the testbed explored (a memory profile at a level's size)
      its measured MSTs only. The surrogate is fitted across memories and can be far off at one of them (a
      cache-bound job's capacity is not linear in memory); the daemon's cache curve fills the rest from
      the measurements.
    - The testbed's per-vertex readings seed the per-vertex model, and its CPU and busy readings the
      TaskManagers' CPU-per-busy-second line (planning/seeds.py; what the store already learned stays).
    - The store remembers the job's vertex names: a daemon that finds another job drops the seeds
      (`Knowledge.check_seeded_job`).
    """
    planned = {
        **{n: c for n in range(1, max_scaleout + 1) if (c := plan.predict_rps(n, plan.memory_mb)) > 0},
        **_measured(plan, plan.memory_mb, max_scaleout),
    }
    store = open_store(store_path)
    try:
        knowledge = store.load(settings)
        scaleouts = knowledge.capacity.seed(planned)
        seeded_levels = []
        if levels is not None and MEMORY in knowledge.extensions:
            capacities = memory_of(knowledge).capacities
            for memory_mb in sorted({e.memory_mb for e in plan.exploration.estimates}):
                level = levels.level_of(memory_mb)
                if level is None or not math.isclose(levels.managed_mb(level), memory_mb, rel_tol=0.01):
                    continue
                seeds = planned if memory_mb == plan.memory_mb else _measured(plan, memory_mb, max_scaleout)
                if capacities.model(level).seed(seeds):
                    seeded_levels.append(level)
        vertices = vertex_seeds(plan.exploration.estimates, plan.memory_mb, plan.census)
        knowledge.dag.seed(vertices)
        if vertices:
            knowledge.seeded_for = tuple(sorted(v.name for v in vertices))
        points = core_points(plan.exploration.estimates, plan.memory_mb)
        cores_taken = knowledge.cores.seed(points)
        per_vertex = vertex_knowledge(knowledge)
        if per_vertex is not None:
            per_vertex.seed_cpu_share(points, settings.capacity.idle_cpu, settings.capacity.saturation_cpu)
        store.save(knowledge, None)
        knowledge.close()
    finally:
        store.close()
    return Seeded(scaleouts, tuple(seeded_levels), len(vertices), cores_taken)


def _measured(plan: CapacityPlan, memory_mb: float, max_scaleout: int) -> dict[int, float]:
    """The testbed's MST per slot count up to `max_scaleout` at this memory (the mean of repeated
    measurements)."""
    by_slots: dict[int, list[float]] = {}
    for estimate in plan.exploration.estimates:
        if estimate.memory_mb == memory_mb and estimate.mst_rps > 0 and estimate.slots <= max_scaleout:
            by_slots.setdefault(estimate.slots, []).append(estimate.mst_rps)
    return {n: float(np.mean(rates)) for n, rates in sorted(by_slots.items())}
