"""How far above its forecast the load has really gone: an empirical upper bound per lead time.

ARIMA's own intervals assume the model is right; on a load it was not fitted for (a surge, a compressed day)
they are too narrow exactly when it matters. This keeps, for each lead-time band of the horizon, the ratio of
the highest load the band really saw to the highest the forecast said, over the last `window` forecasts (a
split-conformal bound: no distribution assumed, only recent exchangeability), and raises a new forecast by
the `quantile` of those ratios. The error judged is the one that hurts the plan — the peak under-forecast —
so a forecast that was too high never lowers the bound below the forecast itself.

The median ratio of the band's *mean* load to the forecast's mean corrects the forecast's own bias per lead
band (`central`): an ARIMA with drift fitted on a rising stretch keeps forecasting the rise long after the
load turned, and a plan that sizes for the whole horizon on it pays for workers the load never needs.
(Peaks would not do for this: the noise of the realized load lifts its peak above any smooth forecast.)
That correction stays within ×1/2..×2 (`MAX_BIAS`): a forecast that was off by more is not biased, the load
changed level under it (a ramp from an idle start, judged at tens of thousands of rps against forecasts made
at a few hundred), and multiplying today's forecast by it extrapolates that change once more.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from messages.types import finite_number

BAND_S = 60
"""Lead-time bands are one loop long: the first band decides whether the next loop is carried."""
MAX_BIAS = 2.0
"""The central correction's bound either way (the module's docstring says why)."""


class PeakErrors:
    """Ratios realized peak / forecast peak per lead band, learned as the realized load arrives."""

    def __init__(
        self,
        horizon_s: int,
        window: int = 60,
        quantile: float = 0.9,
        min_samples: int = 10,
        record_interval_s: float = BAND_S,
    ) -> None:
        if not 0 < quantile < 1 or window < 1 or min_samples < 1 or not record_interval_s > 0:
            raise ValueError(
                "quantile must lie in (0, 1); window and min_samples must be >= 1, record_interval_s > 0"
            )
        self.bands = max(1, math.ceil(horizon_s / BAND_S))
        self._kept = self.bands * max(1, math.ceil(BAND_S / record_interval_s)) + 1
        """Forecasts pending judgement: a horizon's worth at the loop's pace (a loop faster than a band
        records more per band; a count, not an age, so the surge watch's extra forecasts do not add)."""
        self.window, self.quantile, self.min_samples = window, quantile, min_samples
        self._ratios = [deque(maxlen=window) for _ in range(self.bands)]
        self._mean_ratios = [deque(maxlen=window) for _ in range(self.bands)]
        self._pending: deque[tuple[float, np.ndarray, int]] = deque()  # (start_s, rates, bands scored)

    def record(self, start_s: float, rates_rps: np.ndarray) -> None:
        """Keep a forecast (for seconds start_s+1 ..) to judge against the load as it arrives."""
        self._pending.append((float(start_s), np.asarray(rates_rps, dtype=float), 0))
        while len(self._pending) > self._kept:
            self._pending.popleft()

    def learn(self, times_s: np.ndarray, rates_rps: np.ndarray) -> None:
        """Score every band of the kept forecasts that the observed load (`times_s`, `rates_rps`: bucket
        centres and means, NaN where not observed) now covers completely."""
        if not len(times_s):
            return
        last_s = float(times_s[-1])
        kept: deque[tuple[float, np.ndarray, int]] = deque()
        for start_s, forecast, scored in self._pending:
            while scored < self.bands and start_s + (scored + 1) * BAND_S <= last_s:
                lo, hi = start_s + scored * BAND_S, start_s + (scored + 1) * BAND_S
                realized = rates_rps[(times_s > lo) & (times_s <= hi)]
                predicted = forecast[scored * BAND_S : (scored + 1) * BAND_S]
                realized = realized[np.isfinite(realized)]
                if len(realized) and len(predicted) and predicted.max() > 0:
                    self._ratios[scored].append(float(realized.max() / predicted.max()))
                    self._mean_ratios[scored].append(float(realized.mean() / predicted.mean()))
                scored += 1
            if scored < self.bands:
                kept.append((start_s, forecast, scored))
        self._pending = kept

    def factors(self, quantile: float, of_means: bool = False) -> np.ndarray:
        """Per band, the `quantile` of the peak (or mean) ratios (1 where fewer than `min_samples` ratios
        exist yet: no correction is better than a made-up one), within [1/4, 4]."""
        out = np.ones(self.bands)
        for band, ratios in enumerate(self._mean_ratios if of_means else self._ratios):
            if len(ratios) >= self.min_samples:
                out[band] = float(np.quantile(np.fromiter(ratios, float), quantile))
        return np.clip(out, 0.25, 4.0)

    def central(self, rates_rps: np.ndarray) -> np.ndarray:
        """The forecast with its median bias per lead band taken out."""
        return self._scaled(rates_rps, np.clip(self.factors(0.5, of_means=True), 1 / MAX_BIAS, MAX_BIAS))

    def upper(self, rates_rps: np.ndarray) -> np.ndarray:
        """The forecast raised per lead band to its empirical upper bound (never below it)."""
        return self._scaled(rates_rps, np.maximum(1.0, self.factors(self.quantile)))

    def _scaled(self, rates_rps: np.ndarray, band_factors: np.ndarray) -> np.ndarray:
        factors = np.repeat(band_factors, BAND_S)[: len(rates_rps)]
        if len(factors) < len(rates_rps):
            factors = np.pad(factors, (0, len(rates_rps) - len(factors)), mode="edge")
        return np.asarray(rates_rps, dtype=float) * factors

    def state_dict(self) -> dict[str, Any]:
        return {
            "ratios": [list(r) for r in self._ratios],
            "mean_ratios": [list(r) for r in self._mean_ratios],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """What `state_dict` saved; an entry that is no ratio (a finite number ≥ 0) is skipped, a part that
        is no list of lists is dropped."""
        for key, kept in (("ratios", self._ratios), ("mean_ratios", self._mean_ratios)):
            bands = state.get(key) if isinstance(state, dict) else None
            for band, ratios in enumerate(bands[: self.bands] if isinstance(bands, list) else []):
                if isinstance(ratios, list):
                    kept[band].extend(float(r) for r in ratios if finite_number(r) and r >= 0)
