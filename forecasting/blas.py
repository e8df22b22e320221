"""One BLAS thread per process, set before numpy loads.

ARIMA fits and updates are thousands of tiny matrix operations (a Kalman filter over a state of a few
elements). OpenBLAS's worker threads cannot speed those up, and when the cores are busy they spin and
wait for each other: on a 2-core machine under load, one stepwise auto-ARIMA on 1,500 points took 29.8 s
with OpenBLAS's default threads and 4.2 s with one; `foresail run` took 5 min 33 s instead of 22 s.

OpenBLAS reads its thread count once, when the library loads, and numpy and scipy each load their own
copy; threadpoolctl can only limit the copies already loaded. So importing this module sets the
environment variables (for every BLAS loaded later in this process and for every child process: the
comparison's workers, Spark's Python workers) and `limit_blas_threads` caps whatever is loaded already.
Every entry point imports it first (the CLI, the tests' conftest, the benchmarks, the Spark job). An
operator who sets one of the variables explicitly keeps that value.
"""

from __future__ import annotations

import os

BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def one_blas_thread_env(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, str]:
    """Set every BLAS thread variable that is unset to 1 in `environ`; returns `environ`."""
    for name in BLAS_THREAD_VARIABLES:
        environ.setdefault(name, "1")
    return environ


one_blas_thread_env()  # at import: before the importer loads numpy


def limit_blas_threads() -> None:
    """Cap the BLAS libraries already loaded in this process at one thread, from now on."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
