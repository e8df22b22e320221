"""Digital twin of a Flink reactive-mode job: the daemon's embedded default target and the test bench.

Import the modules themselves (simulator.twin, simulator.workload, …): the package imports nothing, so
reading a trace does not load the controller that simulator.score and simulator.metrics need."""
