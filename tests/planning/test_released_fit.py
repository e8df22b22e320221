"""Table IV of StreamBed from its released measurements (data/streambed/README.md gives the values)."""

import csv
import io
from pathlib import Path

import pytest

from planning.released_fit import fit_released
from planning.streambed_results import ResultsError, parse_results

DATA = Path(__file__).resolve().parents[2] / "data" / "streambed"
MEMORIES = (8192, 16384, 32768, 65536)
TABLE_IV = {  # query: model, requested rate, best number of runs, slots per memory, (a, b, c) to 4 digits
    "q1": ("lin", 160e6, 10, (179, 179, 179, 178), (10.13, 9.901e5, -7.995e5)),
    "q2": ("lin", 190e6, 20, (69, 69, 69, 69), (7.50, 3.073e6, -2.711e6)),
    "q5": ("log", 2.5e6, 14, (1049, 1059, 1069, 1079), (-7.696e3, 5.780e5, -1.201e6)),
    "q8": ("sqrt", 15e6, 13, (183, 181, 179, 176), (2.606e3, 1.493e6, -3.913e6)),
    "q11": ("lin", 20e6, 20, (565, 564, 562, 559), (4.152, 3.930e4, -2.133e5)),
}


def released(query):
    path = next(DATA.glob(f"{query}-*.csv"))
    return parse_results(path.read_text(), str(path))


@pytest.mark.parametrize("query", sorted(TABLE_IV))
def test_table_iv_reproduces(query):
    model, rate, runs, slots, coefficients = TABLE_IV[query]
    result = fit_released(released(query), model, rate, MEMORIES)
    assert result.runs == runs
    assert tuple(result.slots[m] for m in MEMORIES) == slots
    fitted = (result.surrogate.a, result.surrogate.b, result.surrogate.c)
    assert [float(f"{v:.4g}") for v in fitted] == pytest.approx(coefficients, rel=1e-9, abs=5e-3)


def test_single_task_runs_count_one_slot_per_operator():
    observations = released("q5")
    single = [o for o in observations if o.slots == 9]
    assert single and all(o.mst_rps > 0 for o in observations)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no measurements"),
        ("a;b;c\n", "3 columns"),
        ("x;" * 15 + "y\n", "not a StreamBed measurement"),
        ("x" * 200_000 + ";y\n", "not StreamBed's results"),  # over the csv module's field limit
    ],
)
def test_a_file_that_is_not_streambeds_is_one_line(text, message):
    with pytest.raises(ResultsError, match=message):
        parse_results(text, "f.csv")


def _row(parallelism: str = "a;2|b;2", memory: str = "8192", mst: str = "1000.0") -> str:
    """One measurement in StreamBed's columns (params; operator;parallelism|…; id; slots; memory; …; MST)."""
    out = io.StringIO()
    csv.writer(out, delimiter=";").writerow(
        ["params", parallelism, "id", "4", memory, *["0"] * 9, mst, "0.0"]
    )
    return out.getvalue()


@pytest.mark.parametrize(
    "row, message",
    [
        ({"mst": "nan"}, "row 1: MST must be a rate"),
        ({"mst": "inf"}, "row 1: MST must be a rate"),
        ({"mst": "1e308"}, "row 1: MST must be a rate"),
        ({"mst": "-5"}, "row 1: MST must be a rate"),
        ({"memory": "0"}, "row 1: memory must be a size in"),
        ({"memory": "nan"}, "row 1: memory must be a size in"),
        ({"memory": "1e300"}, "row 1: memory must be a size in"),  # its fit hung in an SVD
        ({"parallelism": "a;0|b;2"}, "row 1: a parallelism below 1"),
        ({"parallelism": "a;" + "9" * 400 + "|b;2"}, "row 1: an operator's parallelism above"),
    ],
)
def test_a_damaged_measurement_is_named_by_its_row_not_fitted_into_nan(row, message):
    """A NaN or absurd MST would fit a, b, c = NaN and plan '–' slots with exit 0."""
    with pytest.raises(ResultsError, match=message):
        parse_results(_row(**row), "f.csv")


def test_a_leading_run_too_few_to_fit_is_skipped_not_the_whole_fit():
    """Where the first five runs hold one run of a slot count, leaving it out leaves one slot count: that
    prefix's leave-one-out failed the whole fit ('every measurement is at 2 slots')."""
    observations = released("q1")
    reordered = [*observations[:3], *observations[4:], observations[3]]  # q1's second 16-slot run last
    assert [o.slots for o in reordered[:5]] == [2, 16, 2, 2, 2]
    result = fit_released(reordered, "lin", 160e6, MEMORIES)
    assert 5 < result.runs <= 20 and all(s > 0 for s in result.slots.values())
