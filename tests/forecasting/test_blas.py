"""The BLAS cap every model-fitting entry point applies (see forecasting/blas.py for why)."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from forecasting.blas import limit_blas_threads


def test_blas_libraries_run_one_thread_after_the_cap():
    assert np.__version__  # numpy's BLAS is loaded
    with threadpool_limits(limits=2, user_api="blas"):  # whatever the session had, start from two
        limit_blas_threads()
        blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
        assert blas, "no BLAS library found in the process"
        assert all(pool["num_threads"] == 1 for pool in blas)
