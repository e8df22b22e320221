"""One BLAS thread per process.

ARIMA fits and updates are thousands of tiny matrix operations (a Kalman filter over a state of a few
elements). OpenBLAS's worker threads cannot speed those up, and when the cores are busy they spin and
wait for each other: on a 2-core machine under load, one stepwise auto-ARIMA on 1,500 points took 29.8 s
with OpenBLAS's default threads and 4.2 s with one. Every entry point that fits models calls this once
(the CLI, the comparison's worker processes, the Spark tasks, the tests, the benchmarks).
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def limit_blas_threads() -> None:
    """Cap the BLAS libraries loaded in this process at one thread, from now on."""
    threadpool_limits(limits=1, user_api="blas")
