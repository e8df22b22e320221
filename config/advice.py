"""Advice on a valid configuration that is unlikely to do what its user asks of it: `check-config` prints
each as a note (the configuration still runs). Figures from docs/evaluation/latency.md."""

from __future__ import annotations

from config.schema import Config


def notes(config: Config) -> list[str]:
    """One sentence per setting that measured results say will not hold."""
    scaling = config.scaling
    if scaling.objective != "latency" or not scaling.policy.startswith("foresail"):
        return []
    target_s = scaling.latency_target_ms / 1000.0
    found = []
    if scaling.granularity == "job":
        found.append(
            f"scaling.objective: latency at granularity job: each reactive-mode restart (~30 s) keeps the "
            f"latency above {scaling.latency_target_ms:.0f} ms for about a minute (the twin held a 2 s "
            "target in 92-95.5% of the seconds); granularity vertex rescales in ~3 s"
        )
    interval_s = config.loop.interval_s
    if interval_s > 10 * target_s:
        found.append(
            f"loop.interval_s {interval_s:.0f} against a {scaling.latency_target_ms:.0f} ms latency target: a "
            f"sudden surge is seen up to {interval_s:.0f} s late, while records already wait (on held-out "
            "surge shapes a 2 s target held in 93.6% of the seconds at 60 s, 98.0% at 15 s)"
        )
    return found
