"""Job graphs for the twin, declared as data: one YAML file per topology (schema below, `topologies/`).

A topology is a DAG of vertices in topological order with exactly one source. Per vertex:

- `inputs`: upstream vertex names; `ship`: the ship strategy of those edges (HASH = keyBy);
- `cost`: busy seconds per record relative to the other vertices (the twin scales every cost by one
  factor so that the reference deployment carries the trace's peak plus headroom);
- `selectivity`: records out per record in;
- `cpu_share`: share of the vertex's busy time spent on CPU (a sink waiting on a store is busy, not on CPU);
- `num_keys` and `zipf_exponent`: the keys of a keyed input (0 = equal weights), hashed into
  `max_parallelism` key groups as Flink does;
- `cost_per_1k_keys_held`: extra cost per record, as a share of `cost`, per 1,000 keys the subtask holds
  (a session window whose per-record work grows with its state);
- `overhead_busy_ms`, `overhead_cpu`, `overhead_mb`: fixed per-subtask busy time, CPU (cores) and memory;
- `legacy_source`: Flink reports no busy time for it (NaN);
- `stateful`: the vertex whose state the job profile (memory levels) describes.

Reactive mode: every vertex runs at the job's scale-out and TaskManager i (one slot) holds subtask i of
every vertex, sharing its one core.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import isfinite
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from config.schema import FLINK_MAX_PARALLELISM
from config.yaml_file import YamlFileError, read_yaml

TOPOLOGY_DIR = Path(__file__).with_name("topologies")
MAX_VERTICES = 1_000
"""Far beyond any job graph; the twin's per-vertex bookkeeping grows with its square (12,000: 6.6 GB)."""
MAX_KEYS = 10_000_000
"""Keys hashed into key groups, per vertex and in all: each costs the twin memory and time at start-up
(100,000,000 took 2.6 GB and 7 s)."""


class VertexSpec(BaseModel):
    """One vertex; the upper bounds are far beyond any real job's and keep the twin's arithmetic finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1)
    inputs: tuple[str, ...] = ()
    ship: str = Field("REBALANCE", pattern="^(HASH|REBALANCE|FORWARD|RESCALE|BROADCAST)$")
    cost: float = Field(1.0, gt=0, le=1e4)
    selectivity: float = Field(1.0, ge=0, le=1e4)
    cpu_share: float = Field(1.0, ge=0, le=1)
    num_keys: int | None = Field(None, ge=1, le=MAX_KEYS)
    zipf_exponent: float = Field(0.0, ge=0, le=10)
    cost_per_1k_keys_held: float = Field(0.0, ge=0, le=1e4)
    overhead_busy_ms: float = Field(0.0, ge=0, lt=1000)
    overhead_cpu: float = Field(0.0, ge=0, lt=1)
    overhead_mb: float = Field(0.0, ge=0, le=1e6)
    max_parallelism: int = Field(128, ge=1, le=FLINK_MAX_PARALLELISM)
    legacy_source: bool = False
    stateful: bool = False

    @property
    def keyed(self) -> bool:
        return self.ship == "HASH"

    @model_validator(mode="after")
    def _keys(self) -> VertexSpec:
        if len(set(self.inputs)) < len(self.inputs):
            raise ValueError(f"vertex {self.name!r}: an input named twice in {list(self.inputs)}")
        if self.keyed and self.num_keys is None:
            raise ValueError(f"vertex {self.name!r}: a keyed (HASH) vertex needs num_keys")
        keys_set = [f for f in ("num_keys", "zipf_exponent", "cost_per_1k_keys_held") if getattr(self, f)]
        if keys_set and not self.keyed:  # the twin hashes keys of keyed vertices only (a KeyError before)
            raise ValueError(
                f"vertex {self.name!r}: {', '.join(keys_set)} apply to a keyed (HASH) vertex only"
            )
        return self


class Topology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    sources: str = Field("", description="Where the parameters come from (papers, recorded data).")
    vertices: tuple[VertexSpec, ...] = Field(min_length=1, max_length=MAX_VERTICES)

    @model_validator(mode="after")
    def _dag(self) -> Topology:
        seen: set[str] = set()
        for vertex in self.vertices:
            if vertex.name in seen:
                raise ValueError(f"vertex {vertex.name!r} declared twice")
            unknown = [u for u in vertex.inputs if u not in seen]
            if unknown:
                raise ValueError(
                    f"vertex {vertex.name!r}: inputs {unknown} are not declared before it (topological order)"
                )
            seen.add(vertex.name)
        sources = [v.name for v in self.vertices if not v.inputs]
        if len(sources) != 1:
            raise ValueError(f"a topology needs exactly one source, found {sources}")
        keys = sum(v.num_keys or 0 for v in self.vertices)
        if keys > MAX_KEYS:
            raise ValueError(
                f"the keyed vertices hold {keys} keys together, above {MAX_KEYS} (hashed in memory)"
            )
        self._broadcast_feeds_forward_only()
        if sum(v.stateful for v in self.vertices) > 1:
            raise ValueError("at most one vertex may be `stateful` (the one the job profile describes)")
        # a slot runs a subtask of every vertex on one core: their fixed overheads must leave it time
        overhead_ms = sum(v.overhead_busy_ms for v in self.vertices)
        if overhead_ms >= 1000:
            raise ValueError(
                f"the vertices' overhead_busy_ms add up to {overhead_ms:g} ms a second: a slot's subtasks "
                "share one core, so nothing would be left for records (the sum must stay below 1000)"
            )
        overhead_cpu = sum(v.overhead_cpu for v in self.vertices)
        if overhead_cpu >= 1:
            raise ValueError(
                f"the vertices' overhead_cpu add up to {overhead_cpu:g} cores: a slot's subtasks share one "
                "core, so nothing would be left for records (the sum must stay below 1)"
            )
        # chained selectivities multiply: within each vertex's bound, a long chain can still overflow
        overflowing = [
            v.name for v, r in zip(self.vertices, self.input_ratios, strict=True) if not isfinite(r)
        ]
        if overflowing:
            raise ValueError(
                f"vertex {overflowing[0]!r} would receive infinitely many records per source record "
                "(the product of the upstream selectivities overflows): lower the selectivities"
            )
        return self

    def _broadcast_feeds_forward_only(self) -> None:
        """Each subtask of a BROADCAST vertex emits the whole input: p copies, which the input ratios (one
        per source record) do not count. FORWARD edges after it keep each copy with its subtask; any other
        edge would receive p times what the twin gives it (110,000 of 120,000 records/s lost at p = 12)."""
        for i, vertex in enumerate(self.vertices):
            if vertex.ship != "BROADCAST":
                continue
            after = [self.vertices[j].name for j in self.downstream[i] if self.vertices[j].ship != "FORWARD"]
            if after:
                raise ValueError(
                    f"vertex {after[0]!r} reads the copies BROADCAST vertex {vertex.name!r} emits over a "
                    "non-FORWARD edge: the twin does not model them (ship: FORWARD, or end the graph there)"
                )

    @cached_property
    def input_ratios(self) -> tuple[float, ...]:
        """Records each vertex receives per record the source reads (products of upstream selectivities)."""
        ratios: dict[str, float] = {}
        for vertex in self.vertices:
            ratios[vertex.name] = (
                1.0
                if not vertex.inputs
                else sum(ratios[u] * self.vertex(u).selectivity for u in vertex.inputs)
            )
        return tuple(ratios[v.name] for v in self.vertices)

    @cached_property
    def positions(self) -> dict[str, int]:
        return {v.name: i for i, v in enumerate(self.vertices)}

    @cached_property
    def downstream(self) -> tuple[frozenset[int], ...]:
        """Per vertex, the indices of the vertices that read from it directly or not, built backwards
        from the sinks once (the twin asks for every vertex at every second)."""
        reached: list[set[int]] = [set() for _ in self.vertices]
        for i in reversed(range(len(self.vertices))):
            for name in self.vertices[i].inputs:
                reached[self.positions[name]] |= {i, *reached[i]}
        return tuple(frozenset(r) for r in reached)

    def vertex(self, name: str) -> VertexSpec:
        return self.vertices[self.positions[name]]

    def index(self, name: str) -> int:
        return self.positions[name]

    @property
    def stateful_index(self) -> int:
        """The vertex the memory profile applies to: the declared one, else the first keyed one, else 0."""
        for flag in ("stateful", "keyed"):
            for i, vertex in enumerate(self.vertices):
                if getattr(vertex, flag):
                    return i
        return 0

    def downstream_of(self, index: int) -> frozenset[int]:
        """Indices of the vertices that read, directly or not, from vertex `index` (itself excluded)."""
        return self.downstream[index]


@dataclass(frozen=True)
class TopologyError(ValueError):
    """A topology that cannot be loaded: the file and one line per problem."""

    where: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        return f"topology {self.where}: " + "; ".join(self.problems)


def shipped_topologies() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml")))


def load_topology(spec: str) -> Topology:
    """A shipped topology by name (`single`, `wordcount`, ...) or a YAML file of the same schema."""
    path = TOPOLOGY_DIR / f"{spec}.yaml"
    if not path.is_file():
        path = Path(spec)
    if not path.is_file():
        raise TopologyError(
            spec, (f"no such topology: use one of {', '.join(shipped_topologies())} or a file",)
        )
    try:
        data = read_yaml(path)
    except YamlFileError as error:
        raise TopologyError(str(path), (str(error),)) from error
    try:
        return Topology.model_validate(data)
    except ValidationError as error:
        lines = tuple(
            f"{'.'.join(str(p) for p in e['loc']) or 'topology'}: {e['msg']}" for e in error.errors()
        )
        raise TopologyError(str(path), lines) from error
