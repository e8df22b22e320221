"""Digital twin of a Flink reactive-mode job: the daemon's embedded default target and the test bench."""

from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.score import score
from simulator.twin import Twin
from simulator.workload import builtin_sine, load_trace

__all__ = [
    "Twin",
    "TwinMetricsSource",
    "TwinParams",
    "TwinScalingTarget",
    "builtin_sine",
    "load_trace",
    "score",
]
