"""Test doubles for the forecaster's model: spies that record what they are fed, and controllable fits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future

import numpy as np


class PersistenceModel:
    """Predicts its last value; records every bucket it receives (fit data first, then updates)."""

    def __init__(self, y: np.ndarray) -> None:
        self.received = [float(v) for v in y]
        self.update_sizes: list[int] = []

    def update(self, y: np.ndarray, X: np.ndarray | None = None) -> None:
        self.received.extend(float(v) for v in y)
        self.update_sizes.append(len(y))

    def predict(self, n_periods: int, X: np.ndarray | None = None) -> np.ndarray:
        return np.full(n_periods, self.received[-1])


class ConstantModel(PersistenceModel):
    """Predicts a fixed level whatever it sees (a model that is always wrong when the level differs)."""

    def __init__(self, y: np.ndarray, level: float) -> None:
        super().__init__(y)
        self.level = level

    def predict(self, n_periods: int, X: np.ndarray | None = None) -> np.ndarray:
        return np.full(n_periods, self.level)


class RecordingFit:
    """A fit function that counts its calls and builds models with `make(y, call_number)`."""

    def __init__(self, make=None) -> None:
        self.calls: list[int] = []  # length of the data each call saw
        self.models: list[object] = []
        self._make = make or (lambda y, call: PersistenceModel(y))

    def __call__(self, y: np.ndarray, X: np.ndarray | None = None) -> object:
        self.calls.append(len(y))
        model = self._make(y, len(self.calls))
        self.models.append(model)
        return model


class BlockingFit(RecordingFit):
    """Fits from call `block_from` on wait until the test calls release().

    `started` is set when such a fit begins waiting, `finished` when it has returned its model.
    """

    def __init__(self, make=None, block_from: int = 2) -> None:
        super().__init__(make)
        self.block_from = block_from
        self.started = threading.Event()
        self.finished = threading.Event()
        self._gate = threading.Event()

    def release(self) -> None:
        self._gate.set()

    def __call__(self, y: np.ndarray, X: np.ndarray | None = None) -> object:
        blocks = len(self.calls) + 1 >= self.block_from
        if blocks:
            self.started.set()
            if not self._gate.wait(timeout=30):
                raise TimeoutError("the test never released the fit")
        model = super().__call__(y, X)
        if blocks:
            self.finished.set()
        return model


class ManualExecutor(Executor):
    """Queues submitted calls until the test runs them: background fits, deterministically."""

    def __init__(self) -> None:
        self.submitted = 0
        self._queue: list[tuple[Future, Callable[[], object]]] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        self._queue.append((future, lambda: fn(*args, **kwargs)))
        self.submitted += 1
        return future

    def run_all(self) -> None:
        for future, call in self._queue:
            try:
                future.set_result(call())
            except Exception as exc:
                future.set_exception(exc)
        self._queue.clear()


class Driver:
    """Plays the loop: every `step`, observe the last seconds of `level(t)` and forecast."""

    def __init__(self, forecaster, level: Callable[[np.ndarray], np.ndarray]) -> None:
        self.forecaster = forecaster
        self.level = level
        self.now_s = 0

    def step(self, seconds: int = 60):
        stamps = np.arange(self.now_s + 1, self.now_s + seconds + 1, dtype=float)
        self.now_s += seconds
        self.forecaster.observe(stamps, self.level(stamps))
        return self.forecaster.forecast(float(self.now_s))

    def step_until(self, accept: Callable[[object], bool], max_steps: int = 60):
        """Step until a forecast satisfies `accept`; fails the test instead of looping forever."""
        for _ in range(max_steps):
            forecast = self.step()
            if accept(forecast):
                return forecast
        raise AssertionError(f"no accepted forecast in {max_steps} steps; last: {forecast}")
