"""Workflow modules stay deterministic: no I/O, clocks or randomness imported, directly or
through the project's own modules they import (those passed through the sandbox included).

Anything that touches the outside world belongs in `fetchers/` or `activities/`; the sandbox
would catch some of this at run time, this catches it at review time.
"""

import ast
from pathlib import Path

import pytest

FORBIDDEN = {
    "asyncpg", "httpx", "aiohttp", "os", "time", "random", "socket", "subprocess",
    "threading", "uuid", "requests", "pathlib", "secrets",
}  # fmt: skip
# Project packages whose modules do I/O: a workflow reaches them by activity name only.
WITH_IO = {"fetchers", "activities", "client", "surfaces", "workers", "bench", "tests"}
REPO = Path(__file__).parent.parent
WORKFLOW_FILES = sorted((REPO / "workflows").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def project_file(module: str) -> Path | None:
    base = REPO / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def reached_modules(path: Path) -> set[str]:
    """Every module imported by `path` or by a project module it reaches."""
    reached: set[str] = set()
    todo = [path]
    while todo:
        for module in imported_modules(todo.pop()) - reached:
            reached.add(module)
            if (found := project_file(module)) is not None:
                todo.append(found)
    return reached


@pytest.mark.parametrize("path", WORKFLOW_FILES, ids=lambda p: p.name)
def test_workflow_module_imports_nothing_with_side_effects(path: Path) -> None:
    reached = reached_modules(path)
    roots = {module.split(".")[0] for module in reached}
    assert not roots & FORBIDDEN
    assert not roots & WITH_IO
    if path.name == "monitor.py":  # the walk follows the project's modules
        assert {"pricewatch.slots", "hashlib"} <= reached


def test_workflow_module_does_not_read_the_wall_clock() -> None:
    source = "\n".join(p.read_text() for p in WORKFLOW_FILES)
    assert "datetime.now(" not in source and "utcnow(" not in source
