"""End to end on the real stack: Flink 2.3 in reactive mode running the trace load job, scraped by a real
Prometheus, driven by `foresail run --config` with the local-Flink target (TaskManager processes).

A rising load makes the daemon scale out, a falling one scale in; checked on Flink's REST API and in the
audit log. The daemon is killed with SIGKILL right after it decided the scale-out (Flink still
rescaling) and started again: it must pick the rescale up, not scale twice, and keep what it learned.
A load step between two iterations of the `foresail` policy is met by the surge watch (the short-window
rate read every few seconds), not by the next scheduled iteration, and a daemon started again on that
store runs its first iteration at its first look, not a loop after its start. The shipped PromQL
(check-config's probe) finds every metric the loop needs on this stack.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from backends.prometheus import REQUIRED_QUERIES, PrometheusClient, probe_queries
from config.backends import PrometheusConfig
from mape.knowledge_store import KnowledgeStore
from tests.e2e.daemon_process import DaemonProcess, executed
from tests.e2e.scenario import daemon_config, record_figures, rise_until_scale_out

pytestmark = pytest.mark.e2e


def _capacity_1(event: dict) -> float | None:
    capacities = event.get("capacity_rps") or {}
    return capacities.get("1")


def test_rising_load_scales_out_falling_load_scales_in_and_a_killed_daemon_resumes(stack, tmp_path):
    flink, prometheus = stack.flink, stack.prometheus
    config = daemon_config(flink, prometheus.url, tmp_path, {"kind": "prometheus+local-flink"})
    stack.settle()
    low = stack.light_load_rps()
    daemon = first = DaemonProcess(config, tmp_path, "first")
    try:
        # warm-up: the daemon learns the single worker's line at a light load and holds
        learned = daemon.wait_event(
            lambda e: (
                e.get("event") == "iteration"
                and _capacity_1(e)
                and not (e.get("inputs") or {}).get("problems")
            ),
            120,
            "an iteration with clean data and a capacity for one worker",
        )
        assert learned["decision"]["action"] == "hold"
        estimated_before_saturation = _capacity_1(daemon.iterations()[-1])

        # rising load → scale out
        rise_s, decided = rise_until_scale_out(flink, daemon, stack.capacity_rps)
        target = decided["decision"]["target_scaleout"]
        assert target >= 2
        estimated_at_decision = _capacity_1(decided)
        daemon.kill()  # mid-rescale: Flink has not reached the new parallelism yet
        assert len(flink.cluster.taskmanagers()) == target
        killed_at_iteration = decided["iteration"]

        second = DaemonProcess(config, tmp_path, "second")
        daemon = second
        started = second.wait_event(lambda e: e.get("event") == "daemon-started", 30, "the restarted daemon")
        assert started["resumed_iteration"] >= killed_at_iteration
        flink.wait_parallelism(target, timeout_s=120)
        landed_s = time.time()
        out_s = landed_s - rise_s
        # until Flink ran at the new parallelism, the restarted daemon only held: no second scale-out
        before = [e for e in second.iterations() if e["time_s"] < landed_s]
        assert before, "the restarted daemon ran no iteration while Flink rescaled"
        assert all(e["decision"]["action"] == "hold" for e in before), before
        # one worker ran alone from the load step to the decision: its throughput, and whether it kept up
        overloaded_rps = stack.median_throughput_rps(rise_s + 5, decided["time_s"])
        backlog_grew = stack.backlog_at(decided["time_s"]) > 2 * stack.backlog_at(rise_s + 5) + 1000
        assert len(flink.cluster.taskmanagers()) == target

        # falling load → scale in
        fall_s = flink.trace.hold(low)
        second.wait_event(executed("scale_in"), 150, "a scale-in decision")
        flink.wait_parallelism(1, timeout_s=60)
        in_s = time.time() - fall_s
        assert len(flink.cluster.taskmanagers()) == 1
        assert second.terminate() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()

    store = KnowledgeStore(config["knowledge"]["path"])
    knowledge = store.load()
    decisions = store.decisions()
    store.close()
    assert knowledge.iteration == len(decisions) >= killed_at_iteration + 3  # nothing lost across the kill
    applied = [d.target_scaleout for d in decisions if d.action != "hold"]
    assert applied[0] == target and applied[-1] == 1
    assert 1 in knowledge.capacity.observed  # the saturated single worker's capacity was kept
    # real Flink's metrics through a rise, a kill, a rescale's replay, a drain and a fall are all plausible
    assert first.implausible() == [] and second.implausible() == [], (first.audit_path, second.audit_path)

    # the truth to compare the daemon's estimate with: one worker overloaded, now that the JIT and the
    # machine have settled (the calibration at start-up reads low). The overload is three times the larger of
    # the two figures known, so that it overloads the worker even when the daemon's estimate reads low.
    saturated_rps = stack.measure_saturated_capacity(3 * max(estimated_at_decision, stack.capacity_rps))
    record_figures(
        "local-flink",
        {
            "load_rise_to_parallelism_s": round(out_s, 1),
            "load_fall_to_parallelism_1_s": round(in_s, 1),
            "scaleout_target": target,
            "capacity_1_estimated_at_light_load_rps": estimated_before_saturation,
            "capacity_1_estimated_at_decision_rps": estimated_at_decision,
            "throughput_1_saturated_rps": round(saturated_rps, 1),
            "throughput_1_saturated_at_calibration_rps": round(stack.capacity_rps, 1),
            "throughput_1_between_step_and_decision_rps": overloaded_rps,
            "backlog_grew_between_step_and_decision": backlog_grew,
            "estimate_error_at_light_load_pct": _error_pct(estimated_before_saturation, saturated_rps),
            "estimate_error_at_decision_pct": _error_pct(estimated_at_decision, saturated_rps),
            "low_rps": low,
            "triggering_load_rps": decided["inputs"]["workload_avg_rps"],
        },
    )


def _error_pct(estimate: float | None, actual: float) -> float | None:
    return None if estimate is None else round(100 * (estimate - actual) / actual, 1)


def test_every_default_query_the_loop_needs_finds_real_flinks_metrics(stack):
    """check-config's probe with the shipped PromQL against Flink 2.3 and its Prometheus reporter: every
    query the loop holds without answers, and so does the short-window rate the surge watch reads."""
    config = PrometheusConfig(url=stack.prometheus.url)
    probes = {name: (required, why) for name, required, why in
              probe_queries(PrometheusClient(config), config, 60.0, time.time())}  # fmt: skip
    assert {name for name, (required, _) in probes.items() if required} == set(REQUIRED_QUERIES)
    assert {name: why for name, (required, why) in probes.items() if required and why} == {}
    assert probes["query_input_rate_recent"] == (False, None)


def test_check_config_says_what_the_restart_setting_costs_on_the_clusters_flink(stack, tmp_path):
    """Flink 2.3 restarts a scale-out from a checkpoint that just completed (FLIP-461): check-config says
    nothing with recovery.scale_out_at_checkpoint off (measured better: the replay it assumes is a margin),
    notes what setting it on costs, and says nothing at vertex granularity (the per-vertex path restarts from
    a checkpoint whatever the setting)."""
    from backends.factory import restart_note
    from config.schema import Config

    config = daemon_config(stack.flink, stack.prometheus.url, tmp_path, {"kind": "prometheus+local-flink"})
    assert restart_note(Config.model_validate(config)) is None
    config["recovery"] = {"scale_out_at_checkpoint": True}
    note = restart_note(Config.model_validate(config))
    assert note is not None and note.startswith("Flink 2.3") and "false (the default)" in note
    vertex = {**config, "scaling": {**config["scaling"], "granularity": "vertex"}}
    assert restart_note(Config.model_validate(vertex)) is None


SURGE_LOOP_S = 60
"""The product's loop interval: without the surge watch a step waits up to this long for a decision."""


def test_a_load_step_between_iterations_is_met_by_the_surge_watch_before_the_next_one(stack, tmp_path):
    """`foresail` with its shipped loop (60 s) and surge queries: the step comes right after an iteration, the
    watch reads the 20 s rate every 5 s and runs an iteration on its own, whose surge rule scales out; the next
    scheduled iteration would have come a minute after the step. A daemon started again on that store starts
    informed: its first look runs the first iteration once two watch reads see the rate settled, not a loop
    after its start."""
    flink = stack.flink
    config = daemon_config(flink, stack.prometheus.url, tmp_path, {"kind": "prometheus+local-flink"})
    config["loop"] = {"interval_s": SURGE_LOOP_S, "window_s": 20, "surge_watch_s": 5}
    config["scaling"] |= {"policy": "foresail", "stabilization_s": SURGE_LOOP_S}
    stack.settle()
    daemon, resumed = DaemonProcess(config, tmp_path, "surge"), None
    try:
        # a forecast (with its upper bound) and a capacity for one worker, from an iteration on clean data
        calm = daemon.wait_event(
            lambda e: e.get("event") == "iteration" and _capacity_1(e) and e.get("forecast")
            and not (e.get("inputs") or {}).get("problems"),
            4 * SURGE_LOOP_S,  # the first iterations may still see the last test's replay
            "an iteration with clean data, a forecast and a capacity for one worker",
        )  # fmt: skip
        assert calm["decision"]["action"] == "hold"
        step_s = flink.trace.hold(int(2.5 * stack.capacity_rps))
        decided = daemon.wait_event(executed("scale_out"), SURGE_LOOP_S + 30, "a scale-out after the step")
        target = decided["decision"]["target_scaleout"]
        flink.wait_parallelism(target, timeout_s=120)
        assert daemon.terminate() == 0
        resumed = DaemonProcess(config, tmp_path, "surge-resumed")
        first = resumed.wait_event(
            lambda e: e.get("event") == "iteration", SURGE_LOOP_S + 30, "a first iteration"
        )
        assert resumed.terminate() == 0
    finally:
        for run in (daemon, resumed):
            if run is not None and run.process.poll() is None:
                run.kill()
        _one_worker_at_a_light_load(stack)

    watched = [e for e in daemon.snapshot() if e.get("event") == "surge-watch"]
    assert watched, daemon.audit_path
    assert decided["decision"]["rule"] == "surge", decided["decision"]
    # the watch's own iteration decided: off the schedule, within one watch period of the watch's alarm
    assert 0 <= decided["time_s"] - watched[0]["time_s"] < 5, (watched[0], decided["time_s"])
    react_s = decided["time_s"] - step_s
    assert react_s < SURGE_LOOP_S - 5, react_s
    assert decided["time_s"] - calm["time_s"] < SURGE_LOOP_S
    assert target >= 2
    # the resumed daemon's first iteration came at its first look, well before its first loop
    events = resumed.snapshot()
    looked = [e for e in events if e.get("event") == "first-look"]
    assert looked, resumed.audit_path
    assert 0 <= first["time_s"] - looked[0]["time_s"] < 5, (looked[0], first["time_s"])
    # from the daemon's start, not the process's: its imports took 17 s of a CI run beside other work
    (started,) = [e for e in events if e.get("event") == "daemon-started"]
    first_look_s = first["time_s"] - datetime.fromisoformat(started["timestamp"]).timestamp()
    assert first_look_s < SURGE_LOOP_S / 2, first_look_s
    record_figures("local-flink-surge", {"step_to_decision_s": round(react_s, 1), "scaleout_target": target,
                                         "recent_rps_at_watch": watched[0]["recent_rps"],
                                         "expected_upper_rps": watched[0]["expected_upper_rps"],
                                         "resumed_first_iteration_s": round(first_look_s, 1)})  # fmt: skip


def _one_worker_at_a_light_load(stack) -> None:
    """The stack lives for the whole session: leave it as the next tests expect it, not three TaskManagers
    burning the machine's cores under the overload until the session ends."""
    stack.flink.trace.hold(stack.light_load_rps(), lead_s=0.5)
    stack.flink.cluster.scale_to(1)
    stack.flink.wait_parallelism(1, timeout_s=120)
