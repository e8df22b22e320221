"""The retraining on a real Spark standalone cluster on this machine: a master and two workers started
from the pyspark distribution (`bin/spark-class`), the job submitted through `--master spark://…` by
`foresail retrain` as a process (a cluster driver of its own, apart from the tests' local session)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
import requests

from forecasting.history import write_history
from forecasting.registry import ModelRegistry
from forecasting.synthetic import DAY_S, generate_jobs
from tests.conftest import REPO, require_tool
from tests.e2e.stack import free_port, wait_for

SPARK_HOME = Path(pyspark.__file__).parent
SMALL = ["--min-history-s", "86400", "--backtest-s", "43200", "--select-window-s", "10800"]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # the executors' interpreter: on a cluster, name it
        "PYTHONPATH": str(REPO),
    }


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory) -> Iterator[str]:
    """spark://127.0.0.1:PORT with two one-core workers; stopped at the end of the session."""
    require_tool("java")
    workdir = tmp_path_factory.mktemp("spark-standalone")
    port, ui = free_port(), free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    processes = []

    def start(name: str, *args: str) -> None:
        log = (workdir / f"{name}.log").open("w")
        processes.append(subprocess.Popen([spark_class, *args], env=_env(), stdout=log, stderr=log))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))  # fmt: skip
        url = f"spark://127.0.0.1:{port}"
        for index in (1, 2):
            start(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                  "--work-dir", str(workdir / f"work-{index}"))  # fmt: skip

        def alive_workers() -> bool:
            try:
                state = requests.get(f"http://127.0.0.1:{ui}/json/", timeout=2).json()
            except (requests.RequestException, ValueError):
                return False
            return state.get("aliveworkers", 0) >= 2

        wait_for(alive_workers, 120, "a standalone master with two alive workers")
        yield url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.mark.e2e
def test_retrain_runs_on_a_standalone_cluster(standalone_cluster, tmp_path):
    history = tmp_path / "history"
    write_history(generate_jobs(3, seed=13, duration_s=3 * DAY_S, step_s=60.0), history)
    command = [
        sys.executable, "-m", "daemon.cli", "retrain", "--history", str(history),
        "--registry", str(tmp_path / "models"), "--master", standalone_cluster, "--json", *SMALL,
    ]  # fmt: skip
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    registry = ModelRegistry(tmp_path / "models")
    assert registry.jobs() == ["job-0000", "job-0001", "job-0002"]
    hosts = {registry.newest(job).metadata()["trained_by"]["pid"] for job in registry.jobs()}
    assert len(hosts) >= 2  # the two workers' executors both trained
