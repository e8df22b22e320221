"""The config file: defaults, validation errors that name every wrong field, the CLI's exit code."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config.load import ConfigError, load_config, parse_config, render_example
from config.schema import Config, example_path
from daemon.cli import main


def test_defaults_match_the_design():
    config = Config()
    assert config.target.kind == "twin"
    assert config.loop.interval_s == 60
    assert config.loop.effective_window_s == 60
    assert config.recovery.target_s == 600
    assert config.scaling.stabilization_s == 180
    assert config.forecast.horizon_s == 900
    assert (config.scaling.min_scaleout, config.scaling.max_scaleout) == (1, 18)


def test_committed_example_is_rendered_from_the_schema_and_loads_to_the_defaults():
    assert example_path().read_text(encoding="utf-8") == render_example()
    assert load_config(example_path()) == Config()


def test_every_wrong_field_is_named_with_its_allowed_values(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "target": {"kind": "k8s"},
                "loop": {"interval_s": -5},
                "scaling": {"policy": "magic", "max_scaleout": 0, "stabilisation_s": 10},
            }
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    problems = caught.value.problems
    assert len(problems) == 5
    text = "\n".join(problems)
    assert "target.kind" in text and "'twin' | 'prometheus+kubernetes'" in text
    assert "loop.interval_s" in text and "≥ 0.1 and ≤ 86400.0" in text
    assert "scaling.max_scaleout" in text and "≥ 1" in text
    assert "scaling.policy" in text and "'reactive'" in text
    assert "scaling.stabilisation_s: unknown field" in text and "stabilization_s" in text
    # max_scaleout=0 fails its own bound; a valid but inverted pair is reported by the cross-field rule
    with pytest.raises(ConfigError, match=r"max_scaleout .* must be ≥ min_scaleout"):
        parse_config({"scaling": {"min_scaleout": 5, "max_scaleout": 3}})


@pytest.mark.parametrize(
    ("section", "values", "expected"),
    [
        ("twin", {"speedup": 1e-300}, "must be 0 .flat out. or at least 0.001"),
        ("knowledge", {"decision_history": 2**70}, "knowledge.decision_history"),
    ],
)
def test_values_the_daemon_cannot_run_with_are_config_errors(section, values, expected):
    """A speedup of 1e-300 overflowed the scheduler's interval; 2^70 decisions overflowed SQLite's integer."""
    with pytest.raises(ConfigError, match=expected):
        parse_config({section: values})


def test_twin_start_must_lie_within_the_scaling_bounds():
    with pytest.raises(ConfigError, match="initial_scaleout"):
        parse_config({"twin": {"initial_scaleout": 20}})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("scaling: [1, 2", "not valid YAML"),
        ("- a\n- b\n", "top level must be a mapping"),
        (
            "scaling: {policy: static}\nloop: {}\nscaling: {max_scaleout: 9}\n",
            "line 3: 'scaling' given twice",
        ),
    ],
)
def test_unparseable_files_are_config_errors(tmp_path: Path, content: str, expected: str):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_check_config_exit_codes(tmp_path: Path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("scaling:\n  max_scaleout: 10\n")
    assert main(["check-config", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("recovery:\n  target_s: zero\n")
    assert main(["check-config", str(bad)]) == 2
    assert "recovery.target_s" in capsys.readouterr().err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2


def test_check_config_notes_a_latency_target_the_setup_cannot_hold(tmp_path: Path, capsys):
    """Valid (exit 0), but measured not to hold: a note per reason, none where it does."""
    job = tmp_path / "job.yaml"
    job.write_text("scaling:\n  objective: latency\n  latency_target_ms: 2000\n")
    assert main(["check-config", str(job)]) == 0
    printed = capsys.readouterr().out
    assert "note: scaling.objective: latency at granularity job" in printed
    assert "note: loop.interval_s 60 against a 2000 ms latency target" in printed
    vertex = tmp_path / "vertex.yaml"
    vertex.write_text(
        "scaling:\n  objective: latency\n  granularity: vertex\n  latency_target_ms: 2000\n"
        "loop:\n  interval_s: 15\n"
    )
    assert main(["check-config", str(vertex)]) == 0
    assert "note:" not in capsys.readouterr().out
    ignored = tmp_path / "ignored.yaml"
    ignored.write_text("scaling:\n  policy: ds2\n  objective: latency\n  latency_target_ms: 2000\n")
    assert main(["check-config", str(ignored)]) == 0
    assert "note: scaling.objective: latency is foresail's: policy ds2 ignores it" in capsys.readouterr().out
    job_model = tmp_path / "job_model.yaml"  # it logged 'no true rate known yet' at every iteration, for good
    job_model.write_text("scaling:\n  objective: latency\ncapacity:\n  model: job\n")
    assert main(["check-config", str(job_model)]) == 2
    assert "scaling.objective: latency queues records at each vertex's true rate" in capsys.readouterr().err


def test_check_config_notes_a_rescale_price_that_job_granularity_does_not_read(tmp_path: Path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text("scaling:\n  rescale_price_ws: 1200\n")
    assert main(["check-config", str(job)]) == 0
    assert "note: scaling.rescale_price_ws 1200 at granularity job is not read" in capsys.readouterr().out
    vertex = tmp_path / "vertex.yaml"
    vertex.write_text("scaling:\n  rescale_price_ws: 1200\n  granularity: vertex\n")
    assert main(["check-config", str(vertex)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_check_config_notes_a_forecast_horizon_shorter_than_the_recovery_target(tmp_path: Path, capsys):
    """Recovery is predicted over the forecast only: a catch-up longer than the horizon reads as none."""
    short = tmp_path / "short.yaml"
    short.write_text("forecast:\n  horizon_s: 300\nrecovery:\n  target_s: 600\n")
    assert main(["check-config", str(short)]) == 0
    assert "note: forecast.horizon_s 300 below recovery.target_s 600" in capsys.readouterr().out
    baseline = tmp_path / "baseline.yaml"  # a policy without a forecast plans no recovery
    baseline.write_text("forecast:\n  horizon_s: 300\nscaling:\n  policy: reactive\n")
    assert main(["check-config", str(baseline)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_console_script_reports_exit_code_2(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  interval_s: 0\n")
    completed = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "check-config", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert "loop.interval_s" in completed.stderr


def test_config_errors_survive_pickling_to_a_parent_process():
    error = ConfigError("twin.workload", ["no such trace: x.csv"])
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ConfigError)
    assert (copy.source, copy.problems, str(copy)) == (error.source, error.problems, str(error))


def test_the_twin_topology_setting_names_every_shipped_topology():
    """`hot-key` shipped without a word in the setting's description or the command line's help."""
    from config.schema import TwinConfig
    from daemon.cli import _parser
    from simulator.topology import shipped_topologies

    description = TwinConfig.model_fields["topology"].description
    (subcommands,) = _parser()._subparsers._group_actions
    (option,) = [a for a in subcommands.choices["run"]._actions if "--topology" in a.option_strings]
    for name in shipped_topologies():
        assert name in description and name in option.help


def test_a_rule_across_sections_names_its_field_and_a_mapping_says_it_is_one(tmp_path: Path, capsys):
    """'(top level): scaling.max_scaleout …' and 'allowed: str or str' for a mapping of str to str."""
    over = tmp_path / "over.yaml"
    over.write_text("scaling: {max_scaleout: 200}\n")
    assert main(["check-config", "--no-connect", str(over)]) == 2
    assert "  - scaling.max_scaleout (200) exceeds what the twin can run" in capsys.readouterr().err
    groups = tmp_path / "groups.yaml"
    groups.write_text("scaling: {slot_sharing_groups: abc}\n")
    assert main(["check-config", "--no-connect", str(groups)]) == 2
    assert "(allowed: a mapping of str → str)" in capsys.readouterr().err


def test_every_broken_rule_across_sections_is_named_at_once(tmp_path: Path, capsys):
    config = tmp_path / "three.yaml"
    config.write_text(
        "scaling: {max_scaleout: 200, granularity: vertex, slots_per_taskmanager: 2}\ncapacity: {model: job}\n"
    )
    assert main(["check-config", "--no-connect", str(config)]) == 2
    problems = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 3, problems
    assert "max_scaleout (200)" in problems[0]
    assert "set capacity.model: dag" in problems[1]
    assert "one slot (one core) per TaskManager" in problems[2]
