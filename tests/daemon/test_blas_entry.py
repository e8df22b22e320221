"""One BLAS thread from the first line of every entry point, including libraries loaded after the start.

OpenBLAS reads its thread count when it loads, and numpy and scipy each load their own copy, so capping
the copies already loaded (threadpoolctl) is not enough: the ARIMA fits run in scipy's copy, loaded
later. These tests start fresh interpreters without any BLAS variable set, as a user's shell would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from threadpoolctl import threadpool_info

from forecasting.blas import BLAS_THREAD_VARIABLES
from tests.conftest import REPO

PROBE = """
import json, os, sys
{start}
import numpy, scipy.linalg, statsmodels.tsa.statespace.sarimax  # what the ARIMA fits load, after the start
from threadpoolctl import threadpool_info
pools = [(p["internal_api"], p["filepath"], p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({{"env": os.environ.get("OPENBLAS_NUM_THREADS"), "pools": pools}}))
"""


def _probe(start: str, extra_env: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    env.update(extra_env or {})
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(start=start)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_cli_entry_caps_blas_libraries_loaded_after_it():
    # the console script's path: import daemon.cli, run a command, then the fits load numpy and scipy
    result = _probe("from daemon.cli import main\nmain(['config-example'])")
    assert result["env"] == "1"
    assert len(result["pools"]) >= 2, f"numpy's and scipy's BLAS expected, got {result['pools']}"
    assert all(threads == 1 for _, _, threads in result["pools"]), result["pools"]


def test_an_explicit_operator_choice_is_kept():
    result = _probe("from daemon.cli import main\nmain(['config-example'])", {"OPENBLAS_NUM_THREADS": "2"})
    assert result["env"] == "2"


def test_the_test_session_itself_runs_one_blas_thread():
    import scipy.linalg  # noqa: F401  (loaded after conftest, as the fits load it)

    pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
    assert pools
    assert all(pool["num_threads"] == 1 for pool in pools), pools
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
