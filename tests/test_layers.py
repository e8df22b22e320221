"""A lower layer never imports a higher one (README, "How it is built"), not even inside a function."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER = {
    **dict.fromkeys(("config", "capacity", "forecasting", "recovery", "messages"), 0),
    "mape": 1,
    "memory": 2,
    **dict.fromkeys(("simulator", "backends", "planning"), 3),
    "daemon": 4,
}


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def upward_imports() -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for package, rank in LAYER.items()
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, imported in _imported(path)
        if LAYER.get(imported, -1) > rank
    ]


def test_no_layer_imports_a_higher_one():
    assert upward_imports() == []


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    package = tmp_path / "mape"
    package.mkdir()
    (package / "x.py").write_text("def f():\n    from memory.levels import MemoryLevels\n")
    (package / "y.py").write_text("import daemon.cli\nfrom messages.types import Decision\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports() == ["mape/x.py:2 imports memory", "mape/y.py:1 imports daemon"]
