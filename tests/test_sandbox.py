"""Workflow modules stay deterministic: no I/O, clocks or randomness imported directly.

Anything that touches the outside world belongs in `activities/`; the sandbox would catch
some of this at run time, this catches it at review time.
"""

import ast
from pathlib import Path

import pytest

FORBIDDEN = {
    "asyncpg", "httpx", "aiohttp", "os", "time", "random", "socket", "subprocess",
    "threading", "uuid", "requests", "pathlib", "secrets",
}  # fmt: skip
WORKFLOW_FILES = sorted((Path(__file__).parent.parent / "workflows").glob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflow_module_imports_nothing_with_side_effects(path: Path) -> None:
    assert not imported_roots(path) & FORBIDDEN


def test_workflow_module_does_not_read_the_wall_clock() -> None:
    source = "\n".join(p.read_text() for p in WORKFLOW_FILES)
    assert "datetime.now(" not in source and "utcnow(" not in source
