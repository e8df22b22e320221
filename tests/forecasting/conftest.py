"""One BLAS thread for the ARIMA fits here: on a 2-core machine shared with other work, BLAS threads
fighting over the cores made small fits 10-50× slower than single-threaded ones."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="module")
def single_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield
