"""Flink's REST API answering the execute side badly: answers cut short, bounds that are no bounds, odd
error bodies and redirects on the PUT, and timestamps that measure nothing. Each must end in one line or a
safe decision: no PUT on bad data, no exception of another kind, no downtime learned that was not measured.
A fake JobManager (tests/backends/fake_http.py): a real Flink cannot be made to answer so."""

from __future__ import annotations

import json
import math
import re
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import pytest

from backends.flinkrest import FlinkRest, GraphUnavailable
from backends.vertex_rescale import RequestedRescale, RescaleRejected, RescaleRequestFailed, VertexRescaler
from mape.knowledge import Knowledge
from mape.vertex_knowledge import VertexKnowledge
from messages.types import CompletedRescale
from tests.backends.fake_http import FakeServer, raw_server, send_headers

JOB, A, B = "f" * 32, "a" * 32, "b" * 32
OVERVIEW = {"jobs": [{"jid": JOB, "state": "RUNNING", "start-time": 1}]}


def _raised(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except Exception as error:
        return error
    return None


def _requirements(a: object, b: object = 1) -> dict:
    return {v: {"parallelism": {"lowerBound": 1, "upperBound": up}} for v, up in ((A, a), (B, b))}


class Answers:
    """path → (status, JSON body) for GETs; the PUT's answer apart; PUTs recorded."""

    def __init__(self, answers: dict[str, object], put: tuple[int, bytes] = (200, b"{}")) -> None:
        self.answers = {"/jobs/overview": OVERVIEW, **answers}
        self.put = put
        self.server = FakeServer(self.reply)
        self.rest = FlinkRest(self.server.url, timeout_s=1.0)

    def reply(self, handler: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        if handler.command == "PUT":
            return self.put
        if handler.path not in self.answers:
            return 404, b"{}"
        return 200, json.dumps(self.answers[handler.path]).encode()

    def puts(self) -> int:
        return sum(1 for r in self.server.requests if r.get("method") == "PUT")


@pytest.fixture
def cut_short_url():
    """Every answer promises 1,000 bytes, sends 20 and closes the connection."""

    def cut(handler: BaseHTTPRequestHandler) -> None:
        send_headers(handler, 1000)
        handler.wfile.write(b'{"jobs": [{"jid": "x')
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)

    with raw_server(cut) as url:
        yield url


def test_answers_cut_short_are_the_errors_each_caller_already_turns_into_a_line(cut_short_url, fault):
    """They escaped as urllib3's ProtocolError, which no caller expected: the whole observation was lost
    where only the optional job graph was."""
    graph, request = _every_call_is_a_line(FlinkRest(cut_short_url, timeout_s=1.0), fault)
    assert "ConnectionError" in str(graph) and "unreadable" in str(request)


def _every_call_is_a_line(rest: FlinkRest, fault) -> tuple[BaseException | None, BaseException | None]:
    """Status and TaskManagers unknown, the graph and a rescale request each one named error."""
    status, count = rest.job_status(), rest.taskmanager_count()
    graph, request = _raised(rest.job_graph), _raised(lambda: VertexRescaler(rest).request({A: 2}))
    named = isinstance(graph, GraphUnavailable) and isinstance(request, RescaleRequestFailed)
    fault("flink rest", "clear-error" if named and status is None and count is None else "traceback")
    assert status is None and count is None and named
    return graph, request


@pytest.mark.parametrize(
    "requirements",
    [
        _requirements(a=1, b=2.7),  # read as 2, PUT back: a vertex the plan left alone rescaled
        _requirements(a=1, b=-3),
        _requirements(a=1, b=True),
        _requirements(a=1, b="4"),
        _requirements(a=1, b=10**6),
        [1, 2],
        None,
    ],
    ids=["fraction", "negative", "bool", "string", "above-32768", "list", "null"],
)
def test_requirements_that_are_not_whole_bounds_fail_the_request_before_any_put(requirements, fault):
    flink = Answers({f"/jobs/{JOB}/resource-requirements": requirements})
    error = _raised(lambda: VertexRescaler(flink.rest).request({A: 2}))
    named = isinstance(error, RescaleRequestFailed)
    fault("flink rest", "scaled-on-bad-data" if flink.puts() else "clear-error" if named else "traceback")
    assert named and "resource requirements unreadable" in str(error)
    assert flink.puts() == 0
    flink.server.close()


def test_flinks_unset_bound_is_put_back_as_declared():
    """-1 is Flink's own: 1 as a lower bound, the max parallelism as an upper one (per-vertex.md)."""
    declared = {A: {"parallelism": {"lowerBound": 1, "upperBound": 1}}}
    declared[B] = {"parallelism": {"lowerBound": -1, "upperBound": -1}}
    flink = Answers({f"/jobs/{JOB}/resource-requirements": declared})
    requested = VertexRescaler(flink.rest).request({A: 2})
    assert requested is not None and requested.vertex_parallelism == {A: 2}  # B is not waited for
    put = json.loads(next(r["body"] for r in flink.server.requests if r.get("method") == "PUT"))
    assert put[B] == {"parallelism": {"lowerBound": -1, "upperBound": -1}}
    assert put[A] == {"parallelism": {"lowerBound": 1, "upperBound": 2}}
    flink.server.close()


@pytest.mark.parametrize(
    ("put", "error", "says"),
    [
        (
            (302, b"{}"),
            RescaleRequestFailed,
            "HTTP 302",
        ),  # followed, it became a GET whose 200 looked accepted
        ((400, b"[1, 2]"), RescaleRejected, r"\[1, 2\]"),
        ((400, b"null"), RescaleRejected, "null"),
        ((400, b'{"errors": 5}'), RescaleRejected, "errors"),
        ((400, b'{"errors": "vertex above max"}'), RescaleRejected, "vertex above max"),
        ((500, b"[1]"), RescaleRequestFailed, "HTTP 500"),
    ],
    ids=["redirect", "400-list", "400-null", "400-errors-number", "400-errors-text", "500-list"],
)
def test_a_put_answered_oddly_is_one_line_of_the_right_kind(put, error, says, fault):
    flink = Answers({f"/jobs/{JOB}/resource-requirements": _requirements(a=1)}, put=put)
    raised = _raised(lambda: VertexRescaler(flink.rest).request({A: 2}))
    fault("flink rest", "clear-error" if isinstance(raised, error) else "traceback")
    assert isinstance(raised, error) and re.search(says, str(raised))
    assert "\n" not in str(raised) and "v e r t e x" not in str(raised)
    flink.server.close()


def _finished(running_ms: object, created_ms: object = None, requested_s: float = 0.0) -> CompletedRescale:
    """What `finished` reports when the job runs at its targets and Flink gives these timestamps."""
    timestamps = {} if created_ms is None else {"CREATED": created_ms}
    subtasks = [{"timestamps": {} if running_ms is None else {"RUNNING": running_ms}}]
    flink = Answers(
        {
            f"/jobs/{JOB}": {
                "state": "RUNNING",
                "timestamps": timestamps,
                "vertices": [{"id": A, "parallelism": 2, "status": "RUNNING"}],
            },
            f"/jobs/{JOB}/vertices/{A}/subtasktimes": {"subtasks": subtasks},
        }
    )
    requested_s = requested_s or time.time() - 10
    completed = VertexRescaler(flink.rest).finished(RequestedRescale(JOB, {A: 2}, requested_s, (A,)))
    flink.server.close()
    assert completed is not None, "the job runs at its targets: the rescale has finished"
    return completed


def test_the_downtime_is_flinks_last_switch_to_running_after_the_put():
    requested_s = time.time() - 10
    completed = _finished((requested_s + 3.2) * 1000, (requested_s + 1) * 1000, requested_s)
    assert completed.downtime_s == pytest.approx(3.2, abs=0.01)
    # without the execution's creation time only the log's restart_s is missing (it was a timeout)
    unnamed = _finished((requested_s + 3.2) * 1000, None, requested_s)
    assert unnamed.downtime_s == pytest.approx(3.2, abs=0.01)


@pytest.mark.parametrize(
    "running_ms",
    [None, 1_000.0, (time.time() - 3600) * 1000, (time.time() + 86_400) * 1000],
    ids=["no-running-timestamp", "epoch", "before-the-put", "a-day-ahead"],
)
def test_timestamps_that_measure_no_restart_give_no_downtime_and_teach_nothing(running_ms, fault):
    """They were learned as 0 s (clamped to the PUT) or 86,400 s."""
    completed = _finished(running_ms)
    vertex = VertexKnowledge.fresh(prior_s=3.0)
    vertex.learn_rescale(completed.downtime_s, grew=True)
    knowledge = Knowledge()
    knowledge.remember_rescales((completed,))
    learned = vertex.downtime.observations_s("out") or list(knowledge.rescales)
    fault("flink rest", "lost" if learned else "held")  # a made-up downtime in the knowledge
    assert math.isnan(completed.downtime_s) and not learned and vertex.rescales_learned == 0


@pytest.mark.parametrize(
    "taskmanagers",
    ["xxxxxxxxxx", {"a": 1, "b": 2}, [None, None, None], None],
    ids=["string", "map", "nulls", "null"],
)
def test_taskmanagers_that_are_not_entries_count_as_none_registered(taskmanagers, fault):
    """Ten characters counted as ten TaskManagers: the scale-up's PUT went out before they existed."""
    flink = Answers({"/taskmanagers": {"taskmanagers": taskmanagers}})
    count = flink.rest.taskmanager_count()
    fault("flink rest", "held" if not count else "scaled-on-bad-data")
    assert not count
    flink.server.close()


def test_an_answer_nested_deeper_than_the_parser_goes_is_a_bad_answer(fault):
    """`[` × 200,000 raised RecursionError from every call: the observation was lost (each iteration a
    phase error) where only the optional job graph was, and the rescale's error had no line."""
    server = FakeServer(lambda handler: (200, b"[" * 200_000))
    graph, _ = _every_call_is_a_line(FlinkRest(server.url, timeout_s=1.0), fault)
    assert "InvalidJSONError" in str(graph)
    server.close()


def test_a_plan_that_leaves_out_a_vertex_gives_no_graph(fault):
    """A vertex the plan does not list has no inputs: it passed for a source, so a count behind an 8×
    flatMap had its capacity in source records overstated 8 times."""
    vertices = [
        {"id": v, "name": name, "parallelism": 2, "maxParallelism": 128}
        for v, name in ((A, "Source"), (B, "FlatMap"), ("c" * 32, "Count"))
    ]
    plan = {"nodes": [{"id": A}, {"id": B, "inputs": [{"id": A, "ship_strategy": "REBALANCE"}]}]}
    flink = Answers({f"/jobs/{JOB}": {"vertices": vertices, "plan": plan}})
    graph = _raised(flink.rest.job_graph)
    fault("flink rest", "clear-error" if isinstance(graph, GraphUnavailable) else "scaled-on-bad-data")
    assert isinstance(graph, GraphUnavailable) and "c" * 32 in str(graph)
    plan["nodes"].append({"id": "c" * 32, "inputs": [{"id": B, "ship_strategy": "HASH"}]})
    assert [v.name for v in flink.rest.job_graph().sources] == ["Source"]  # the same answer, complete
    flink.server.close()
