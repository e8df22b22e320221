"""Config sections of the real backends: Prometheus, Kubernetes, a local Flink cluster, the daemon's server.

Declared apart from `config/schema.py` (which assembles them) so each backend's options sit together.
Default queries target Flink 2.x's Prometheus reporter (names checked on Flink 2.3; see
`../shared/docs/metrics.md`); every one can be replaced to match another setup.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_SUBTASK = "job_id, task_id, operator_id, subtask_index, task_attempt_id"
"""Labels that name one attempt of an operator subtask in Flink's reporter, whatever scraped it: series
sharing them are copies. Attempts stay apart: rate() divides each attempt's increase by the whole window,
so their sum is the subtask's rate over the window."""
_SOURCE_RATE_1M = 'rate(flink_taskmanager_job_task_operator_numRecordsOut{operator_name=~"Source.*"}[1m])'
_PENDING = "flink_taskmanager_job_task_operator_pendingRecords"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    """No NaN or infinity anywhere (a timeout of .inf overflowed the clock: every query failed)."""


class PrometheusConfig(_Section):
    url: str = Field("http://127.0.0.1:9090", description="Base URL of the Prometheus HTTP API.")
    step_s: float = Field(
        5.0,
        ge=1,
        description="Resolution of the range queries over the loop window (seconds between samples).",
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        description="Timeout of each read of an HTTP answer from Prometheus (and the Flink REST API); the "
        "whole answer must arrive within 3 times it.",
    )
    retries: int = Field(
        1, ge=0, description="Retries of a request that failed to connect or got a 5xx/429 answer."
    )
    stale_after_s: float = Field(
        30.0,
        gt=0,
        description="Metrics whose newest sample is older than this are stale: the loop holds.",
    )
    worker_label: str = Field(
        "tm_id", description="Label that tells workers (TaskManagers) apart in the per-worker queries."
    )
    query_worker_cpu: str = Field(
        "avg by (tm_id) (avg_over_time(flink_taskmanager_Status_JVM_CPU_Load[1m]))",
        description="Per-worker CPU load (0..1 of the worker's CPU budget), averaged over 60 s like the twin's.",
    )
    query_worker_throughput: str = Field(
        f"sum by (tm_id) (max by (tm_id, {_SUBTASK}) ({_SOURCE_RATE_1M}))",
        description="Per-worker records/s the sources consume, over 60 s (the twin's 60 s meter). Every "
        "series of a subtask's attempt is taken once ('max by' its job, vertex, operator, subtask and attempt) "
        "before the sum: a TaskManager scraped twice (two scrape jobs, two Prometheus replicas behind one "
        "query API) would otherwise count twice.",
    )
    query_input_rate: str = Field(
        f"clamp_min(sum(max by ({_SUBTASK}) ({_SOURCE_RATE_1M}))"
        f"+sum(max by ({_SUBTASK}) (deriv({_PENDING}[1m]))), 0)",
        description="Records/s arriving at the job (source rate + growth of the backlog, never below 0: "
        "the two are measured over slightly different samples, so a shrinking backlog could push the sum "
        "negative; with Kafka, the broker's messages-in rate). Each subtask's series once, as above.",
    )
    query_input_rate_recent: str = Field(
        f"clamp_min(sum(max by ({_SUBTASK}) ({_SOURCE_RATE_1M.replace('[1m]', '[20s]')}))"
        f"+sum(max by ({_SUBTASK}) (deriv({_PENDING}[20s]))), 0)",
        description="The same rate over a short window: the surge signal the surge watch and the surge rules "
        "read (over 1 min a step takes a minute to show in full, the watch's 10 s reads would wait for it). "
        "Needs a scrape interval of 10 s or less; where it gives no samples (a slower scrape, '' = not "
        "queried) surges are judged on query_input_rate, said once in the log.",
    )
    query_backlog: str = Field(
        f"sum(max by ({_SUBTASK}) ({_PENDING}))",
        description="Records waiting to be read (FLIP-33 pendingRecords summed, each subtask's once; Kafka lag).",
    )
    query_latency_ms: str = Field(
        "max(flink_taskmanager_job_task_operator_currentEmitEventTimeLag)",
        description="The job's latency in ms, what the latency objective learns its model's correction from "
        "(FLIP-33: the sources' event-time lag, emit time - event time; with metrics.latency.interval set, "
        "Flink's latency markers (a summary per source, operator and subtask), e.g. on Flink 2.3 max(flink_"
        'taskmanager_job_task_latency_source_id_operator_id_operator_subtask_index_latency{quantile="0.99"}) '
        "for a p99 target, quantile 0.5 for a mean one). Optional: '' or no series and the model stays uncorrected.",
    )
    query_parallelism: str = Field(
        "max(count by (task_name) (max by (job_id, task_name, subtask_index) "
        "(flink_taskmanager_job_task_numRecordsIn)))",
        description="Parallelism the job runs at now (subtasks of its widest task, each counted once).",
    )
    query_uptime: str = Field(
        "max(flink_jobmanager_job_uptime) / 1000", description="Seconds since the job last (re)started."
    )
    query_restarts: str = Field(
        "max(flink_jobmanager_job_numRestarts)", description="Restarts of the job ('' = not queried)."
    )
    query_freshness: str = Field(
        "time() - max(timestamp(flink_jobmanager_job_uptime))",
        description="Age in seconds of the newest scraped sample; above stale_after_s the data are stale "
        "('' = not checked).",
    )
    query_worker_freshness: str = Field(
        "time() - max by (tm_id) (timestamp(flink_taskmanager_Status_JVM_CPU_Load))",
        description="Per worker, age in seconds of its newest scraped sample. Where no staleness marker ends a "
        "series (backfilled, federated or remote-read data), Prometheus carries its last value forward for 5 "
        "minutes: a worker's points more than stale_after_s past its newest sample are such copies and become "
        "gaps, so a worker that stopped reporting shows as stale ('' = not checked).",
    )
    operator_label: str = Field(
        "operator_name", description="Label that tells operators apart in the per-operator state queries."
    )
    query_operators: str = Field(
        "count by (operator_name) (flink_taskmanager_job_task_operator_numRecordsIn)",
        description="Every operator of the job (one series per operator; '' = operators and memory "
        "levels unknown, no memory decisions).",
    )
    query_state_operators: str = Field(
        'count by (operator_name) ({__name__=~"flink_taskmanager_job_task_operator_rocksdb_block_cache_(hit|miss)'
        '|flink_taskmanager_job_task_operator_state_name_.*Latency"})',
        description="Operators with keyed state: those reporting RocksDB tickers or state-latency histograms "
        "(the rest are stateless). Needs state.backend.rocksdb.metrics.block-cache-hit/-miss or "
        "state.latency-track.keyed-state-enabled in Flink.",
    )
    query_state_cache_hits: str = Field(
        "sum by (operator_name) (rate(flink_taskmanager_job_task_operator_rocksdb_block_cache_hit[$window]))",
        description="Block-cache hits per second per operator over the loop window ($window), from the "
        "cumulative RocksDB ticker (rate() absorbs its reset on every restart).",
    )
    query_state_cache_misses: str = Field(
        "sum by (operator_name) (rate(flink_taskmanager_job_task_operator_rocksdb_block_cache_miss[$window]))",
        description="Block-cache misses per second per operator over the loop window ($window).",
    )
    query_state_latency_ns: str = Field(
        'avg by (operator_name) ({__name__=~"flink_taskmanager_job_task_operator_state_name_.*Latency",'
        'quantile="0.5"})',
        description="State-access latency per operator in nanoseconds (median of Flink's latency-tracking "
        "histograms, averaged over the operator's states and access kinds).",
    )
    query_state_memory_used_mb: str = Field(
        "sum by (operator_name) (flink_taskmanager_job_task_operator_rocksdb_block_cache_usage) / 1048576",
        description="Managed memory each operator's RocksDB instances hold (block-cache usage), MB "
        "(state.backend.rocksdb.metrics.block-cache-usage).",
    )
    query_managed_memory_mb: str = Field(
        "max(flink_taskmanager_Status_Flink_Memory_Managed_Total) / 1048576",
        description="Managed memory per task slot now, MB (a TaskManager's total with one slot each; "
        "'' = unknown, the level is then the last one set).",
    )
    flink_rest_url: str | None = Field(
        None,
        description="Flink JobManager REST API the job graph is read from (vertices, parallelism, ship "
        "strategies) for the per-vertex metrics. null = local_flink.rest_url with the local-Flink target, "
        "else http://127.0.0.1:8081 (foresail as a sidecar in the JobManager pod); '' = not read: the "
        "analysis uses the job-level model only.",
    )
    vertex_label: str = Field(
        "task_id",
        description="Label holding the job vertex id (as the REST API names it) in the per-subtask queries.",
    )
    subtask_label: str = Field(
        "subtask_index", description="Label holding the subtask index in the per-subtask queries."
    )
    query_subtask_busy_ms: str = Field(
        "max by (task_id, task_name, subtask_index, tm_id) (flink_taskmanager_job_task_busyTimeMsPerSecond)",
        description="Per subtask (vertex, index, worker_label), ms per second it was busy (NaN for a legacy "
        "source). Flink 2.x averages busy, backpressured and idle time over the last 60 s itself (a TimerGauge "
        "updated every 5 s). 'max by' over the task attempts, which the reporter labels apart. '' = no "
        "per-vertex metrics.",
    )
    query_subtask_backpressured_ms: str = Field(
        "max by (task_id, task_name, subtask_index, tm_id) (flink_taskmanager_job_task_backPressuredTimeMsPerSecond)",
        description="Per subtask, ms per second it waited for output buffers (backpressured), over 60 s.",
    )
    query_subtask_idle_ms: str = Field(
        "max by (task_id, task_name, subtask_index, tm_id) (flink_taskmanager_job_task_idleTimeMsPerSecond)",
        description="Per subtask, ms per second it waited for input (idle), over 60 s.",
    )
    query_subtask_records_in_rps: str = Field(
        "max by (task_id, task_name, subtask_index, tm_id) (rate(flink_taskmanager_job_task_numRecordsIn[1m]))",
        description="Per subtask, records/s it read over the same 60 s as the busy time (true rate = records "
        "in / busy share); Flink's own 60 s meter flink_taskmanager_job_task_numRecordsInPerSecond reads the "
        "same. 'max by' over the attempts: a restarted subtask's previous attempt lingers in the 1 m window.",
    )
    query_subtask_records_out_rps: str = Field(
        "max by (task_id, task_name, subtask_index, tm_id) (rate(flink_taskmanager_job_task_numRecordsOut[1m]))",
        description="Per subtask, records/s it emitted, over 60 s (a source's output; 0 for a sink).",
    )
    bearer_token_file: str | None = Field(
        None, description="File holding a bearer token sent as 'Authorization: Bearer …' (re-read each time)."
    )
    basic_auth_username: str | None = Field(None, description="User name for HTTP basic auth.")
    basic_auth_password_file: str | None = Field(None, description="File holding the basic-auth password.")
    tls_ca_file: str | None = Field(None, description="CA bundle to verify the server's certificate.")
    tls_insecure_skip_verify: bool = Field(
        False, description="Skip TLS certificate verification (testing only)."
    )
    tls_client_cert_file: str | None = Field(None, description="Client certificate for mutual TLS.")
    tls_client_key_file: str | None = Field(None, description="Key of the client certificate for mutual TLS.")

    @model_validator(mode="after")
    def _auth_consistent(self) -> PrometheusConfig:
        if (self.basic_auth_username is None) != (self.basic_auth_password_file is None):
            raise ValueError("basic_auth_username and basic_auth_password_file go together")
        if self.bearer_token_file is not None and self.basic_auth_username is not None:
            raise ValueError("choose bearer_token_file or basic auth, not both")
        if self.tls_client_key_file is not None and self.tls_client_cert_file is None:
            raise ValueError("tls_client_key_file needs tls_client_cert_file")
        return self


class KubernetesConfig(_Section):
    resource: Literal["deployment", "flinkdeployment"] = Field(
        "deployment",
        description="What to scale: the TaskManager Deployment of a reactive-mode cluster (scale "
        "subresource), or a FlinkDeployment of the Flink Kubernetes Operator.",
    )
    name: str = Field("flink-taskmanager", description="Name of the Deployment or FlinkDeployment.")
    namespace: str = Field("default", description="Namespace of the resource and of the leader Lease.")
    parallelism_path: str = Field(
        "spec.job.parallelism",
        description="FlinkDeployment only: dotted path of the field set to the scale-out "
        "(e.g. spec.taskManager.replicas for a standalone reactive deployment).",
    )
    container: str = Field(
        "taskmanager",
        description="Deployment only: the TaskManager container whose memory (resources and Flink's memory "
        "options) a memory-level change sets.",
    )
    kubeconfig: str | None = Field(
        None,
        description="Kubeconfig file; null = the in-cluster service account when running in a pod, "
        "else the default kubeconfig.",
    )
    context: str | None = Field(None, description="Kubeconfig context (null = current).")
    request_timeout_s: float = Field(10.0, gt=0, description="Timeout of one request to the API server.")
    retries: int = Field(4, ge=0, description="Retries of a request answered with 409 Conflict or a 5xx.")
    retry_backoff_s: float = Field(
        0.5, ge=0, description="First retry delay; doubled after each retry (with jitter)."
    )
    readiness_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A rescale not ready (replicas ready, Flink at the new parallelism) after this long "
        "is logged and counted as timed out; the loop then stops waiting for it.",
    )
    leader_election: bool = Field(
        True, description="Act only while holding a coordination.k8s.io Lease (safe with 2+ replicas)."
    )
    lease_name: str = Field("foresail-leader", description="Name of the leader-election Lease.")
    lease_duration_s: float = Field(
        15.0, gt=0, description="A leader that has not renewed for this long loses the Lease."
    )
    renew_period_s: float = Field(
        5.0, gt=0, description="How often the leader renews (or a standby retries)."
    )
    identity: str | None = Field(None, description="Holder identity in the Lease; null = hostname + pid.")

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> KubernetesConfig:
        if self.renew_period_s >= self.lease_duration_s:
            raise ValueError(
                f"renew_period_s ({self.renew_period_s}) must be < lease_duration_s ({self.lease_duration_s})"
            )
        return self


class LocalFlinkConfig(_Section):
    flink_home: str | None = Field(
        None, description="Flink distribution (bin/, lib/); null = the FLINK_HOME environment variable."
    )
    conf_dir: str | None = Field(
        None,
        description="Flink configuration directory of the cluster; null = FLINK_CONF_DIR or <home>/conf.",
    )
    state_dir: str | None = Field(
        None,
        description="Where the pids and logs of the TaskManagers foresail starts are kept (a restarted daemon "
        "finds them there); null = <conf_dir>/foresail-taskmanagers.",
    )
    rest_url: str = Field("http://127.0.0.1:8081", description="JobManager REST API (readiness checks).")
    readiness_timeout_s: float = Field(
        120.0,
        gt=0,
        description="A rescale not at the new parallelism after this long is logged as timed out.",
    )


class ServerConfig(_Section):
    host: str = Field("0.0.0.0", description="Address the daemon's /healthz and /metrics listen on.")
    port: int = Field(9464, ge=0, le=65535, description="Port of /healthz and /metrics; 0 = not served.")
    unhealthy_after_loops: float = Field(
        3.0, gt=0, description="/healthz fails when no iteration finished for this many loop intervals."
    )
