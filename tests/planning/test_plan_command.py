"""`foresail plan-capacity`: the fit mode prints Table IV; bad input is one line, exit 2."""

import json

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
