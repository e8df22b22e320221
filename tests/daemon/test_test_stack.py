"""The tests' own contract with the machine: a program the real stack needs is provisioned, or the tests
that need it are skipped with the reason (and fail where scripts/test.sh said it provisioned them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, require_tool


def test_a_missing_program_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("FORESAIL_REQUIRE_STACK", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"prometheus is not installed; scripts/test\.sh"):
        require_tool("prometheus")


def test_a_missing_program_fails_after_provisioning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("FORESAIL_REQUIRE_STACK", "1")
    with pytest.raises(pytest.fail.Exception, match="promtool is not installed"):
        require_tool("promtool")


def test_a_present_program_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    program = tmp_path / "java"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert require_tool("java") == str(program)


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "scripts/test.sh" in readme.split("\n## ")[0]  # the opening's test command
    ci = [
        line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert any(line.strip().startswith("exec scripts/test.sh") for line in ci), ci


def test_the_recorded_data_ships_in_the_repository():
    data = REPO / "data" / "daedalus"
    assert (data / "README.md").is_file()
    assert len(list((data / "workloads").glob("*.csv"))) == 3
    assert len(list((data / "metrics").glob("*.csv"))) >= 15
