"""`foresail plan-capacity` on the twin: the files it writes and the knowledge store a daemon starts from."""

import json
import shutil
from types import SimpleNamespace

import pytest
import yaml

from capacity.cores import CoreModel
from capacity.model import CapacityModel
from config.schema import Config
from daemon.cli import main
from mape.knowledge import KnowledgeSettings
from mape.knowledge_store import KnowledgeStore


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    argv = ["plan-capacity", "--topology", "ysb", "--target-rate", "60000", "--budget-max", "4"]
    assert main([*argv, "--max-measurements", "5", "--out", str(out)]) == 0
    return out


def test_the_plan_lists_the_configuration_and_every_measurement(planned):
    plan = json.loads((planned / "plan.json").read_text())
    assert plan["topology"] == "ysb" and plan["target_rate_rps"] == 60000
    assert plan["slots"] == plan["task_managers"] > 4
    assert (
        plan["predicted_mst_rps"]
        >= 1.1 * 60000
        > plan["predicted_mst_rps"] - 2 * plan["predicted_mst_sd_rps"] - 1e4
    )
    assert len(plan["measurements"]) == 5
    assert all(1 <= m["slots"] <= 4 and m["tests"] for m in plan["measurements"])
    assert set(plan["vertex_parallelism"]) == {"filter", "projection", "join", "window", "sink"}
    assert (planned / "surrogate.png").stat().st_size > 10_000
    census = plan["key_group_census"]["key_group_shares"]  # on by default on the twin
    assert set(census) == {"join", "window"}
    assert all(len(shares) == 128 and sum(shares) == pytest.approx(1.0) for shares in census.values())
    speeds = plan["host_speeds"]  # the filter and the projection are fed evenly: they tell hosts apart
    assert len(speeds["relative_per_slot"]) == 4 and speeds["log_sd"] > 0


def test_numbers_that_are_none_are_written_as_null(tmp_path):
    """An RMSE of infinity was written as `Infinity`, which strict JSON parsers refuse."""
    from daemon.plan_output import write_plan

    class Plan:
        def to_dict(self):
            return {"model_selection_rmse": {"lin": float("inf"), "log": 12.5}, "sd": [float("nan")]}

    def refuse(constant):
        raise ValueError(constant)

    written = json.loads(write_plan(Plan(), tmp_path, {}).read_text(), parse_constant=refuse)
    assert written == {"model_selection_rmse": {"lin": None, "log": 12.5}, "sd": [None]}


def test_the_deployment_fragment_sizes_the_taskmanagers(planned):
    plan = json.loads((planned / "plan.json").read_text())
    patch = next(yaml.safe_load_all((planned / "deployment.yaml").read_text()))
    assert patch["kind"] == "Deployment" and patch["spec"]["replicas"] == plan["task_managers"]
    container = patch["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == "2048Mi"  # memory.process_base_mb 1890 + 158 MB
    # Flink's own options agree with the container (the config map's alone refused a larger managed memory)
    assert {"-Dtaskmanager.memory.process.size=2048m", "-Dtaskmanager.memory.managed.size=158m"} <= set(
        container["args"]
    ) and container["args"][0] == "taskmanager"
    per_vertex = plan["vertex_parallelism"].values()
    text = (planned / "deployment.yaml").read_text()
    assert f"needs {max(per_vertex)} slots, a group per vertex {sum(per_vertex)} besides the sources" in text


def test_a_daemon_on_the_seeded_store_knows_every_scale_out(planned):
    plan = json.loads((planned / "plan.json").read_text())
    store = KnowledgeStore(planned / "knowledge.db")
    knowledge = store.load(KnowledgeSettings())
    store.close()
    estimate = knowledge.capacity.estimate(
        [], current_scaleout=plan["slots"], max_scaleout=plan["slots"], now_s=0
    )
    assert estimate.sources[plan["slots"]] == "observed"
    assert estimate.per_scaleout_rps[plan["slots"]] == pytest.approx(plan["predicted_mst_rps"], rel=1e-6)
    assert estimate.sources[1] == "observed" and estimate.per_scaleout_rps[1] > 0
    seeds = knowledge.dag.seeds  # the testbed's true rates, adopted by name when the daemon sees the job
    assert {"filter", "projection", "join", "window", "sink"} <= set(seeds)
    measured = {m["slots"] for m in plan["measurements"]}
    assert set(seeds["join"].rate_rps) == measured and min(seeds["join"].rate_rps.values()) > 0
    assert seeds["filter"].input_ratio == 1.0 > seeds["join"].input_ratio > 0
    assert seeds["join"].key_groups == 128 and 128 in seeds["join"].shares  # the key-group census


def test_a_waiting_sinks_low_cpu_per_busy_second_is_seeded_for_the_cores_and_the_vertex_plan(
    tmp_path, capsys
):
    """io-sink's sink is busy while it waits on its store: the testbed's CPU readings replace the cores'
    prior (a busy second costs a core's second), which would size a seeded daemon's first loop for a
    CPU-bound job; at vertex granularity the per-vertex plan's CPU share starts from them too."""
    from daemon.build import knowledge_settings
    from mape.vertex_knowledge import vertex_knowledge

    config_file, store_path = tmp_path / "c.yaml", tmp_path / "k.db"
    config_file.write_text("scaling:\n  granularity: vertex\n")
    argv = ["plan-capacity", "--topology", "io-sink", "--target-rate", "30000", "--budget-max", "3"]
    argv += ["--max-measurements", "4", "--config", str(config_file), "--knowledge", str(store_path)]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    assert "CPU per busy second from" in capsys.readouterr().out

    config = Config.model_validate({"twin": {"topology": "io-sink"}, "scaling": {"granularity": "vertex"}})
    store = KnowledgeStore(store_path)
    knowledge = store.load(knowledge_settings(config))
    store.close()
    prior = CoreModel(knowledge.cores.settings).line()[1]
    assert knowledge.cores.stats.n >= 3
    assert knowledge.cores.line()[1] < 0.5 * prior
    assert vertex_knowledge(knowledge).cpu_per_busy < 0.5


def test_seeding_keeps_what_the_store_already_learned(tmp_path):
    path = tmp_path / "k.db"
    store = KnowledgeStore(path)
    knowledge = store.load(KnowledgeSettings())
    learned = {"capacity_rps": 1234.0, "updated_s": 99.0, "estimates": 7, "reliable": True}
    knowledge.capacity = CapacityModel.from_dict({"observed": {"2": learned}})
    store.save(knowledge, None)
    knowledge.close()
    store.close()
    argv = ["plan-capacity", "--topology", "ysb", "--target-rate", "30000", "--budget-max", "3"]
    assert (
        main([*argv, "--max-measurements", "4", "--out", str(tmp_path / "o"), "--knowledge", str(path)]) == 0
    )
    store = KnowledgeStore(path)
    observed = store.load(KnowledgeSettings()).capacity.to_dict()["observed"]
    store.close()
    assert observed["2"] == learned and "3" in observed
    # the plan's own store in --out is the plan's alone: planned again (for another job), it is replaced
    shutil.copyfile(path, tmp_path / "o" / "knowledge.db")
    assert main([*argv, "--max-measurements", "4", "--out", str(tmp_path / "o")]) == 0
    store = KnowledgeStore(tmp_path / "o" / "knowledge.db")
    replanned = store.load(KnowledgeSettings()).capacity.to_dict()["observed"]
    store.close()
    assert replanned["2"]["capacity_rps"] != learned["capacity_rps"] and replanned["3"] == observed["3"]


def test_a_stateful_job_is_seeded_per_memory_level(tmp_path):
    """A stateful job learns capacity per memory level: the planned memory's level gets the plan's
    capacities, another explored level exactly what the testbed measured there (the surrogate, fitted
    across memories, is no prediction at one of them); a profile at no level's size seeds no level."""
    from config.load import load_config
    from daemon.build import knowledge_settings
    from memory.knowledge import memory_of

    config_file = tmp_path / "c.yaml"
    config_file.write_text("twin:\n  job_profile: read-heavy\n")
    argv = ["plan-capacity", "--config", str(config_file), "--target-rate", "20000", "--budget-max", "3"]
    argv += ["--max-measurements", "5", "--memory-profiles", "158", "316"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    settings = knowledge_settings(load_config(config_file))
    store = KnowledgeStore(tmp_path / "o" / "knowledge.db")
    knowledge = store.load(settings)
    store.close()
    levels = memory_of(knowledge).capacities
    measured: dict[float, dict[int, list[float]]] = {}
    for m in plan["measurements"]:
        measured.setdefault(m["memory_mb"], {}).setdefault(m["slots"], []).append(m["mst_rps"])
    planned_level, other_level = (0, 1) if plan["memory_mb_per_slot"] == 158 else (1, 0)
    other = measured[158.0 * 2**other_level]
    assert levels.observed(other_level) == pytest.approx({n: sum(r) / len(r) for n, r in other.items()})
    at_plan = levels.observed(planned_level)
    assert set(at_plan) == set(range(1, 19)) and at_plan[plan["slots"]] > 0
    job_level = knowledge.capacity.to_dict()["observed"]
    assert {int(n): c["capacity_rps"] for n, c in job_level.items()} == pytest.approx(at_plan)
    for n, rates in measured[plan["memory_mb_per_slot"]].items():  # measured wins over the surrogate
        assert at_plan[n] == pytest.approx(sum(rates) / len(rates))
    other_job = SimpleNamespace(
        vertices=[SimpleNamespace(name="Source: clicks"), SimpleNamespace(name="Sink")]
    )
    knowledge.check_seeded_job(other_job)  # the graph of another job: every level's seeds go too
    assert levels.known_levels() == [] and not knowledge.capacity.observed

    argv[-2:] = ["158", "250"]  # 250 MB is level 1's 316 by the nearest doubling, not its size
    assert main([*argv, "--out", str(tmp_path / "p")]) == 0
    store = KnowledgeStore(tmp_path / "p" / "knowledge.db")
    levels = memory_of(store.load(settings)).capacities
    store.close()
    assert levels.known_levels() == [0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target-rate", "0", "--out", "x"], "--target-rate must be a rate > 0"),
        (["--out", "x"], "--target-rate and --out are required"),
        (["--target-rate", "5", "--out", "x", "--budget-max", "1"], "min slots < max slots"),
        (
            ["--testbed", "local-flink", "--key-census", "--target-rate", "5", "--out", "x"],
            "--key-census needs",
        ),
    ],
)
def test_bad_plan_arguments_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `--out x` names a directory here, not in the checkout
    assert main(["plan-capacity", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_local_flink_testbed_without_flink_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLINK_HOME", str(tmp_path / "no-flink"))
    argv = ["--testbed", "local-flink", "--target-rate", "500", "--out", str(tmp_path / "o")]
    assert main(["plan-capacity", *argv]) == 1
    err = capsys.readouterr().err
    assert "no Flink distribution" in err and len(err.strip().splitlines()) == 1


def test_a_simulated_daemon_starts_from_the_seeded_store(tmp_path, recorded_workloads):
    from daemon.simulate import simulate
    from tests.conftest import trace_head

    trace = trace_head(recorded_workloads, "sine_60000_6h.csv", 1200, tmp_path)
    argv = ["plan-capacity", "--target-rate", "60000", "--budget-max", "3", "--max-measurements", "4"]
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"twin:\n  workload: {trace}\n")
    store = tmp_path / "k.db"
    assert (
        main([*argv, "--config", str(config_file), "--out", str(tmp_path / "o"), "--knowledge", str(store)])
        == 0
    )
    config = Config.model_validate({"twin": {"workload": str(trace)}})
    summary = simulate(config, store_path=str(store))
    knowledge_store = KnowledgeStore(store)
    knowledge = knowledge_store.load(KnowledgeSettings())
    knowledge_store.close()
    assert knowledge.iteration == summary["iterations"] > 0  # the run saved into the seeded store
    seeded = knowledge.capacity.to_dict()["observed"]
    assert set(map(int, seeded)) >= set(range(1, config.scaling.max_scaleout + 1))


def test_a_seeded_daemon_sizes_every_vertex_at_its_first_loop(tmp_path, recorded_workloads):
    """At vertex granularity the plan's per-vertex true rates let the first loop rescale a job started far
    too small, and an informed daemon looks as soon as the input rate settles (two watch reads) instead
    of a loop interval after its start; a cold daemon has no rate to size a vertex with until its first
    windows are learned."""
    import json

    from daemon.simulate import simulate
    from tests.conftest import trace_head

    trace = trace_head(recorded_workloads, "tm_6h_100K_max.csv", 240, tmp_path)  # ~1,800 records/s
    store, config_file = tmp_path / "k.db", tmp_path / "c.yaml"
    config_file.write_text(f"twin:\n  workload: {trace}\n")  # the twin's hardware is scaled to the trace
    argv = ["plan-capacity", "--topology", "wordcount", "--target-rate", "2000", "--budget-max", "3"]
    argv += ["--max-measurements", "4", "--config", str(config_file)]
    assert main([*argv, "--out", str(tmp_path / "o"), "--knowledge", str(store)]) == 0
    config = Config.model_validate(
        {
            "twin": {"workload": str(trace), "initial_scaleout": 1, "topology": "wordcount"},
            "scaling": {"granularity": "vertex"},
        }
    )

    def first_loop(audit) -> dict:
        return next(
            json.loads(line)["decision"] for line in audit.read_text().splitlines() if '"decision"' in line
        )

    simulate(config, audit_path=tmp_path / "cold.jsonl")
    simulate(config, audit_path=tmp_path / "seeded.jsonl", store_path=str(store))
    cold, seeded = first_loop(tmp_path / "cold.jsonl"), first_loop(tmp_path / "seeded.jsonl")
    assert cold["time_s"] == 60.0 and seeded["time_s"] == 20.0
    assert cold["action"] == "hold"
    assert seeded["action"] == "scale_out"
    assert min(seeded["target_vertex_parallelism"].values()) > 1
    knowledge_store = KnowledgeStore(store)
    dag = knowledge_store.load(KnowledgeSettings()).dag
    knowledge_store.close()
    assert not dag.seeds and None in dag.placement.values()  # adopted: rates learned on no TaskManager


def test_a_seeded_stateful_daemon_weighs_other_memory_levels_at_its_first_loop(tmp_path, recorded_workloads):
    """The plan's per-level capacities reach the memory-aware plan: from its first loop it can price the
    levels the testbed ran (a cold daemon knows only the level it runs at, until Justin's steps explore)."""
    import json

    from config.load import load_config
    from daemon.simulate import simulate
    from tests.conftest import trace_head

    trace = trace_head(recorded_workloads, "advertising_6h_550K_max.csv", 180, tmp_path)
    config_file, store = tmp_path / "c.yaml", tmp_path / "k.db"
    config_file.write_text(f"twin:\n  workload: {trace}\n  job_profile: read-heavy\n")
    peak = max(float(line.split("|")[1]) for line in trace.read_text().splitlines()[1:])
    argv = ["plan-capacity", "--config", str(config_file), "--target-rate", str(peak), "--budget-max", "3"]
    argv += ["--max-measurements", "5", "--memory-profiles", "158", "632", "--knowledge", str(store)]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 0
    config = load_config(config_file)

    def first_loop_levels(audit) -> dict:
        event = next(json.loads(line) for line in audit.read_text().splitlines() if '"decision"' in line)
        return event["memory"]["capacity_rps_by_level"]

    simulate(config, audit_path=tmp_path / "cold.jsonl")
    simulate(config, audit_path=tmp_path / "seeded.jsonl", store_path=str(store))
    assert first_loop_levels(tmp_path / "cold.jsonl") == {}
    seeded = first_loop_levels(tmp_path / "seeded.jsonl")  # the job runs at level 0 (158 MB)
    assert set(seeded) == {"2"} and all(c > 0 for c in seeded["2"].values())


@pytest.mark.parametrize("topology", ["ysb", "wordcount"])
def test_a_daemon_drops_the_seeds_of_a_plan_for_another_job(planned, topology, tmp_path, recorded_workloads):
    """The plan is ysb's: a daemon on ysb keeps its seeds; one on wordcount (another graph) drops every
    seeded capacity it has not learned over and starts cold instead of misled, said once."""
    from structlog.testing import capture_logs

    from capacity.model import SEEDED_AT_S
    from daemon.simulate import simulate
    from tests.conftest import trace_head

    store = tmp_path / "k.db"
    shutil.copyfile(planned / "knowledge.db", store)
    trace = trace_head(recorded_workloads, "advertising_6h_550K_max.csv", 200, tmp_path)
    config = Config.model_validate({"twin": {"workload": str(trace), "topology": topology}})
    with capture_logs() as logs:
        simulate(config, store_path=str(store))
    knowledge_store = KnowledgeStore(store)
    knowledge = knowledge_store.load(KnowledgeSettings())
    knowledge_store.close()
    seeded = [n for n, known in knowledge.capacity.observed.items() if known.updated_s == SEEDED_AT_S]
    dropped = [e for e in logs if e["event"] == "knowledge-seeded-for-another-job"]
    assert knowledge.seeded_for is None  # checked once
    if topology == "ysb":
        assert not dropped and len(seeded) > 1 and not knowledge.dag.seeds  # adopted
        return
    assert len(dropped) == 1 and dropped[0]["job_vertices"] == ["count", "sink", "source", "tokenizer"]
    assert not seeded and not knowledge.dag.seeds


@pytest.mark.parametrize("topology", ["ysb", "wordcount"])
def test_run_on_a_plan_for_another_job_says_so_on_the_console(planned, topology, tmp_path, capsys):
    """The README's plan-then-run example ran the default topology on a ysb plan: every seed was dropped
    with only an error event in the audit log, and the run looked informed."""
    store = tmp_path / "k.db"
    shutil.copyfile(planned / "knowledge.db", store)
    argv = ["run", "--knowledge", str(store), "--topology", topology, "--iterations", "1"]
    assert main([*argv, "--audit-log", str(tmp_path / "audit.jsonl")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "capacity plan of another job" in line]
    if topology == "ysb":
        assert said == []
        return
    assert len(said) == 1 and "(vertices filter, join, projection" in said[0] and "--topology" in said[0]
