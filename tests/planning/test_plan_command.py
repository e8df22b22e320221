"""`foresail plan-capacity`: the fit mode prints Table IV; bad input is one line, exit 2."""

import json
import os
import signal

import pytest

from daemon.cli import main
from tests.planning.test_released_fit import DATA, MEMORIES, TABLE_IV


@pytest.mark.parametrize("query", ["q8", "q11"])
def test_fit_prints_table_iv(query, capsys):
    model, rate, runs, slots, _ = TABLE_IV[query]
    results = next(DATA.glob(f"{query}-*.csv"))
    argv = ["plan-capacity", "fit", "--results", str(results), "--model", model]
    argv += ["--target-rate", f"{rate:g}", "--memory", *map(str, MEMORIES)]
    assert main(argv) == 0
    table = capsys.readouterr().out.splitlines()
    assert f"first {runs} of" in table[0]
    assert [line.split() for line in table[-4:]] == [
        [str(m), str(t)] for m, t in zip(MEMORIES, slots, strict=True)
    ]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["slots"] == {
        str(m): t for m, t in zip(MEMORIES, slots, strict=True)
    }


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--results", "missing.csv", "--target-rate", "1e6"], "cannot read missing.csv"),
        (["--results", "{q1}", "--target-rate", "-5"], "--target-rate must be a rate > 0"),
        # one slot count: the slope was lstsq's arbitrary choice, 223,056 records/s a slot
        (["--results", "{one}", "--target-rate", "1e6"], "how the rate grows with slots is unknown"),
    ],
)
def test_bad_fit_input_is_one_line(extra, message, capsys, tmp_path):
    q1 = next(DATA.glob("q1-*.csv"))
    header, row = q1.read_text(encoding="utf-8").splitlines()[:2]
    (tmp_path / "one-slot-count.csv").write_text("\n".join([header, *[row] * 10]) + "\n")
    named = {"{q1}": str(q1), "{one}": str(tmp_path / "one-slot-count.csv")}
    extra = [named.get(e, e) for e in extra]
    assert main(["plan-capacity", "fit", "--model", "lin", "--memory", "8192", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--memory-profiles", "1e308"], "memory profiles must be sizes in [1, 1048576] MB"),
        (["--memory-profiles", "1e-300"], "memory profiles must be sizes in [1, 1048576] MB"),
        (["--out", "a-file"], "--out a-file: cannot create the directory"),
        (["--knowledge", "a-folder"], "--knowledge a-folder: a directory"),
        (["--budget-max", "129"], "--budget-max 129 is above the testbed's largest deployment (128 slots)"),
        (["--out", "taken"], "--out taken: plan.json is a directory there"),
        (["--knowledge", "plan/plan.json"], "--knowledge plan/plan.json: one of the plan's own output files"),
        # each run replaces OUT/previous: the store the user named was wiped
        (["--knowledge", "plan/previous/k.db"], "--knowledge plan/previous/k.db: inside plan/previous"),
        (["--knowledge", "x" * 300 + ".db"], "File name too long"),
        (["--max-measurements", str(10**21)], "max_measurements must lie in [4, 1000]"),
    ],
)
def test_a_plan_that_could_not_be_written_or_run_is_one_line_before_any_measurement(
    extra, message, capsys, tmp_path, monkeypatch
):
    """Each of these measured for minutes, then crashed with a traceback (or wrote a 300-digit request)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "taken" / "plan.json").mkdir(parents=True)
    argv = ["plan-capacity", "--target-rate", "50000", "--out", "plan", "--max-measurements", "5", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "plan" / "plan.json").exists()


def test_a_usage_error_leaves_the_earlier_plan_and_its_previous_where_they_are(capsys, tmp_path):
    """--budget-max above the testbed moved the good plan into OUT/previous and deleted the older one."""
    out = tmp_path / "plan"
    (out / "previous").mkdir(parents=True)
    (out / "previous" / "plan.json").write_text("older")
    (out / "plan.json").write_text("earlier")
    argv = ["plan-capacity", "--target-rate", "50000", "--out", str(out), "--budget-max", "500"]
    assert main(argv) == 2
    assert "above the testbed's largest deployment" in capsys.readouterr().err
    assert (out / "plan.json").read_text() == "earlier"
    assert (out / "previous" / "plan.json").read_text() == "older"


def test_a_seed_beyond_numpys_explores_like_any_other():
    """twin.seed 2**32 passed check-config, then skopt refused it with a traceback."""
    from dataclasses import replace

    from planning.estimator import Estimate
    from planning.explorer import ExplorerSettings, explore
    from planning.testbed import PhaseReading

    def measure(slots: int, memory_mb: float) -> Estimate:
        mst = 1000.0 * slots**0.8
        return Estimate(slots, memory_mb, mst, (), PhaseReading(mst, mst, 0.0, 0.0), 60.0)

    def slots_measured(seed: int) -> list[int]:
        settings = replace(ExplorerSettings(max_slots=8, max_measurements=6), seed=seed)
        return [e.slots for e in explore(measure, settings).estimates]

    assert slots_measured(2**32) == slots_measured(0)


def test_a_store_another_daemon_holds_is_one_line_before_any_measurement(capsys, tmp_path, monkeypatch):
    """It was a StoreBusy traceback after all the runs, with the plan written and the store not seeded."""
    from mape.knowledge_store import KnowledgeStore

    monkeypatch.chdir(tmp_path)
    held = KnowledgeStore(tmp_path / "plan" / "knowledge.db")
    try:
        argv = ["plan-capacity", "--target-rate", "50000", "--out", "plan", "--max-measurements", "5"]
        assert main(argv) == 1
    finally:
        held.close()
    err = capsys.readouterr().err
    assert "in use by another foresail daemon" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "plan" / "plan.json").exists()


def test_a_plan_above_the_daemons_max_scaleout_says_the_daemon_would_cap_it(capsys, tmp_path):
    argv = ["plan-capacity", "--target-rate", "200000", "--out", str(tmp_path / "plan")]
    assert main([*argv, "--max-measurements", "5", "--timings", "short"]) == 0
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "scaling.max_scaleout is 18: raise it" in warning[0]


def test_a_stop_while_the_store_is_seeded_names_what_was_written(capsys, tmp_path, monkeypatch):
    """It said 'no plan was written' beside the plan's three files."""
    import daemon.plan_output

    real = daemon.plan_output.seed_knowledge

    def stopped_while_seeding(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C; the handler raises at the next bytecode
        return real(*args, **kwargs)

    monkeypatch.setattr(daemon.plan_output, "seed_knowledge", stopped_while_seeding)
    argv = ["plan-capacity", "--target-rate", "50000", "--out", str(tmp_path / "plan")]
    assert main([*argv, "--max-measurements", "5", "--timings", "short"]) == 130
    assert (
        "interrupted while seeding the knowledge store: plan.json, deployment.yaml, surrogate.png written"
        in (capsys.readouterr().err)
    )
