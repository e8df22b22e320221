"""Every knob of the digital twin, declared once with its default and where the default comes from.

The defaults are constants so that an installed package works without the recorded data;
`simulator.calibration` recomputes them from `data/daedalus/metrics` and a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from simulator.memory_model import PROFILES


@dataclass(frozen=True)
class TwinParams:
    """Knobs of the twin. Rates in records/s, times in seconds, CPU as a 0..1 load."""

    # --- sizing -------------------------------------------------------------------------------------
    worker_capacity_rps: float | None = None
    """Records/s one worker of speed 1.0 processes at saturation. None: size it from the trace so that a
    fresh `reference_scaleout`-worker deployment carries (1 + headroom) x the trace's peak (Daedalus §5)."""
    headroom: float = 0.10
    """Spare capacity of the reference deployment over the trace peak when sizing automatically."""
    reference_scaleout: int = 12
    """Deployment size used for the automatic sizing (the paper's largest scale-out)."""

    # --- workers and key skew ------------------------------------------------------------------------
    speed_cov: float = 0.05
    """Coefficient of variation of the lognormal per-worker speed factor (heterogeneous nodes)."""
    max_parallelism: int = 128
    """Flink's max parallelism: the number of key groups (Flink default for small jobs)."""
    num_keys: int = 680
    """Equal-weight keys hashed into key groups. Calibrated so the expected coefficient of variation of
    per-worker throughput shares at n=12 matches the recorded skew run (0.134; calibration.num_keys_for_cov)."""

    # --- CPU model -----------------------------------------------------------------------------------
    idle_cpu: float = 0.112
    """CPU load at zero throughput: intercept/slope of the single-worker CPU-throughput line
    (assumptions_*_1.csv, points below 80 % CPU: throughput = 61342 cpu - 6882)."""
    saturation_cpu: float = 0.95
    """CPU load of a saturated worker: between the single worker's 0.93 and the hottest of twelve at 0.98."""
    cpu_noise_sd: float = 0.027
    """Stationary standard deviation of the per-second CPU noise (AR(1) per worker). Chosen so that its
    60 s average scatters like the recorded residual around the CPU-throughput line (0.023)."""
    cpu_noise_tau_s: float = 60.0
    """Correlation time of the CPU noise. Recorded CPU residuals are strongly autocorrelated (lag-15 s
    autocorrelation 0.7-0.9); white noise would need a per-second sd ~0.18 that clipping at 1.0 distorts.
    0 gives white noise."""

    # --- restarts ------------------------------------------------------------------------------------
    scale_out_downtime_mean_s: float = 30.0
    """Mean stop of the job on a scale-out (Daedalus' initial estimate: pods must be scheduled)."""
    scale_out_downtime_sd_s: float = 5.0
    scale_in_downtime_mean_s: float = 15.0
    """Mean stop of the job on a scale-in (no new pods to wait for)."""
    scale_in_downtime_sd_s: float = 3.0
    failure_rate_per_hour: float = 0.0
    """Random job failures per hour of running time; each restarts the job at the same scale-out."""
    failure_downtime_mean_s: float = 15.0
    failure_downtime_sd_s: float = 3.0
    min_downtime_s: float = 5.0
    """Lower clip of every drawn downtime of a reactive-mode restart."""
    vertex_downtime_mean_s: float = 3.1
    """Mean stop of a per-vertex rescale through the adaptive scheduler's REST endpoint: PUT → every subtask
    RUNNING took 3.0-3.2 s on Flink 2.3 outside the cooldown (docs: per-vertex.md); new TaskManagers are
    started before the PUT while the job runs on."""
    vertex_downtime_sd_s: float = 0.1
    min_vertex_downtime_s: float = 1.0
    """Lower clip of a drawn per-vertex rescale downtime."""
    checkpoint_interval_s: int = 10
    """A checkpoint completes every this many seconds of running; a restart rolls back to the last one
    (but see `scale_out_at_checkpoint`)."""
    scale_out_at_checkpoint: bool = False
    """Flink >= 2.0 (FLIP-461): the rescale onto an added TaskManager restarts from a checkpoint that has
    just completed, so a scale-out replays nothing. Flink waits for the next checkpoint (normally within an
    interval, at most its max-delay) while the job runs on; the twin restarts at once. False: Flink 1.x
    (Daedalus's 1.16 cluster, which the twin is calibrated on) rolls back to the last periodic checkpoint.
    Scale-ins and memory changes (every TaskManager replaced) are failovers either way."""

    # --- latency -------------------------------------------------------------------------------------
    base_latency_s: float = 0.5
    """Latency of a record that does not queue (processing and network)."""

    # --- state and memory (Justin §3; see simulator/memory_model.py) ---------------------------------
    job_profile: str = "stateless"
    """How the job's keyed operator uses RocksDB: 'stateless', 'read-heavy', 'write-heavy' or
    'update-heavy' (simulator.memory_model.PROFILES)."""
    managed_mb: float = 158.0
    """Managed memory per slot the job starts with (Justin's default per slot, the memory level 0)."""
    process_base_mb: float = 1890.0
    """Memory of a TaskManager process besides managed memory (the deployment's 2 GiB TaskManager less its
    158 MB managed memory); with `cores_per_worker`, what a worker costs."""
    cores_per_worker: float = 1.0
    """CPU cores of a worker (one slot, one core: the capacity model's unit)."""

    # --- the TaskManager container's CPU as Kubernetes sees it -----------------------------------------
    cpu_request_cores: float = 1.0
    """CPU request of a TaskManager container, what the HPA divides the usage by. Flink's native Kubernetes
    default (kubernetes.taskmanager.cpu.amount 1.0) and deploy/flink-reactive.yaml both request 1 core."""
    cpu_limit_cores: float = 2.0
    """CPU limit of a TaskManager container. The twin's CPU load (0..1) is a share of it, as Flink's
    Status.JVM.CPU.Load (what the recorded runs and foresail read) is a share of the CPUs the container-aware
    JVM sees: usage = load x limit cores, so a saturated worker (load 0.95) uses 190 % of a 1-core request.
    Flink's default limit-factor 1.0 and deploy/ set limit = request, under which usage never exceeds the
    request and an HPA on CPU cannot see a skewed job's overload (the paper's HPAs plainly did: they used
    more workers than Daedalus). 2 cores is a burstable TaskManager (limit-factor 2), what an HPA on CPU
    needs; the recorded data (loads only) do not say what the paper's pods had."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, str):
                continue
            if value is not None and not value >= 0:
                raise ValueError(f"TwinParams.{item.name} must be >= 0, got {value!r}")
        positive = ("reference_scaleout", "max_parallelism", "num_keys", "checkpoint_interval_s")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"TwinParams.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.worker_capacity_rps is not None and self.worker_capacity_rps <= 0:
            raise ValueError(f"TwinParams.worker_capacity_rps must be > 0, got {self.worker_capacity_rps!r}")
        if not self.idle_cpu < self.saturation_cpu <= 1.0:
            raise ValueError(
                f"TwinParams: need idle_cpu < saturation_cpu <= 1, got {self.idle_cpu}, {self.saturation_cpu}"
            )
        if not 0 < self.cpu_request_cores <= self.cpu_limit_cores:
            raise ValueError(
                "TwinParams: need 0 < cpu_request_cores <= cpu_limit_cores (Kubernetes), got "
                f"{self.cpu_request_cores}, {self.cpu_limit_cores}"
            )
        if self.reference_scaleout > self.max_parallelism:
            raise ValueError("TwinParams.reference_scaleout must not exceed max_parallelism")
        if self.job_profile not in PROFILES:
            raise ValueError(
                f"TwinParams.job_profile must be one of {sorted(PROFILES)}, got {self.job_profile!r}"
            )

    @property
    def request_utilization_per_load(self) -> float:
        """CPU utilization of the request (1.0 = 100 %) that a CPU load of 1.0 shows: limit / request."""
        return self.cpu_limit_cores / self.cpu_request_cores
