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
    ],
)
def test_bad_fit_input_is_one_line(extra, message, capsys):
    q1 = next(DATA.glob("q1-*.csv"))
    extra = [str(q1) if e == "{q1}" else e for e in extra]
    assert main(["plan-capacity", "fit", "--model", "lin", "--memory", "8192", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
