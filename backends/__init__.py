"""Real backends: Prometheus (monitor side), Kubernetes and local Flink (execute side), leader election.

Everything here talks to the outside world; the loop sees it only through `MetricsSource` and
`ScalingTarget`.
"""
