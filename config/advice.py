"""Advice on a valid configuration that is unlikely to do what its user asks of it: `check-config` prints
each as a note (the configuration still runs). Latency figures from docs/evaluation/latency.md."""

from __future__ import annotations

from config.schema import Config


def notes(config: Config) -> list[str]:
    """One sentence per setting that measured results say will not hold."""
    if not config.scaling.policy.startswith("foresail"):
        if config.scaling.objective == "latency":
            return [
                f"scaling.objective: latency is foresail's: policy {config.scaling.policy} ignores it and the "
                "latency target"
            ]
        return []
    return _horizon_notes(config) + _latency_notes(config) + _price_notes(config)


def _price_notes(config: Config) -> list[str]:
    scaling = config.scaling
    if scaling.rescale_price_ws == 0 or scaling.granularity == "vertex":
        return []
    return [
        f"scaling.rescale_price_ws {scaling.rescale_price_ws:g} at granularity job is not read: a reactive-mode "
        "restart is priced by its own downtime and replay (rule rescale-not-worth-it); "
        "max_rescales_per_h bounds the rescales there"
    ]


def _horizon_notes(config: Config) -> list[str]:
    horizon_s, target_s = config.forecast.horizon_s, config.recovery.target_s
    if horizon_s >= target_s:
        return []
    return [
        f"forecast.horizon_s {horizon_s:.0f} below recovery.target_s {target_s:.0f}: a recovery is predicted "
        f"over the forecast only, so a configuration that needs more than {horizon_s:.0f} s to catch up "
        "counts as never recovering and scale-outs come out larger (twin, ysb on the sine trace at job "
        "granularity: 11.4 workers at a 120 s horizon, 10.9 at the default 900 s)"
    ]


def _latency_notes(config: Config) -> list[str]:
    scaling = config.scaling
    if scaling.objective != "latency":
        return []
    target_s = scaling.latency_target_ms / 1000.0
    found = []
    if scaling.granularity == "job":
        found.append(
            f"scaling.objective: latency at granularity job: each reactive-mode restart (~30 s) keeps the "
            f"latency above {scaling.latency_target_ms:.0f} ms for about a minute (the twin held a 2 s "
            "target in 92-95.5% of the seconds); granularity vertex rescales in ~3 s"
        )
    if not config.prometheus.query_latency_ms.strip() and config.target.kind != "twin":
        found.append(
            "scaling.objective: latency without prometheus.query_latency_ms: the queueing model is never "
            "corrected (on the twin it is ~100% off before it is) and a rescale's pause is priced as if the "
            "job had no latency of its own"
        )
    interval_s = config.loop.interval_s
    if interval_s > 10 * target_s:
        found.append(
            f"loop.interval_s {interval_s:.0f} against a {scaling.latency_target_ms:.0f} ms latency target: a "
            f"sudden surge is seen up to {interval_s:.0f} s late, while records already wait (on held-out "
            "surge shapes a 2 s target held in 93.6% of the seconds at 60 s, 98.0% at 15 s)"
        )
    return found
