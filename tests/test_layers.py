"""The house's floors: each package imports only the floors below it (lazily too), so a new
surface (an HTTP API, a dashboard) finds its home above the typed client, and the core stays
the ground floor every layer stands on.

    surfaces/     the CLI and its text views: parse, call the client, print
    workers/      the processes: a worker, the dev stack
    client/       the typed client, its Temporal connection, targets files
    activities/   the rest of a check's I/O        workflows/   deterministic workflow code
    fetchers/     getting a page: HTTP, a browser, the guard every connection goes through
    readers/      what a check makes of a body (prices, normalised text, snapshots): no I/O
    pricewatch/   the core: models, names, policy, pure decisions, settings, views
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
# Bottom to top; packages on one floor do not import each other.
FLOORS = [
    {"pricewatch"},
    {"readers"},
    {"fetchers"},
    {"activities", "workflows"},
    {"client"},
    {"workers"},
    {"surfaces"},
]
FLOOR = {package: level for level, packages in enumerate(FLOORS) for package in packages}


def project_imports(path: Path) -> set[str]:
    """The project packages a module imports, at its top or inside a function."""
    packages = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        packages |= {name.split(".")[0] for name in names} & FLOOR.keys()
    return packages


MODULES = sorted(path for package in FLOOR for path in (REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_down(path: Path) -> None:
    own = path.relative_to(REPO).parts[0]
    upward = {package for package in project_imports(path) - {own} if FLOOR[package] >= FLOOR[own]}
    assert not upward, f"{path.relative_to(REPO)} ({own}) imports {sorted(upward)}: not below it"


def test_every_package_has_a_floor() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages <= FLOOR.keys(), f"no floor for {sorted(packages - FLOOR.keys())}"
    assert FLOOR.keys() <= packages, f"a floor for no package: {sorted(FLOOR.keys() - packages)}"


# What the readers may not import: they take bytes and return what a check records, so the
# same reading serves a fetched page, a rendered one, `try` and the benchmarks, and runs on the
# event loop or in a thread alike. `threading` is not here: price_words keeps a CSS engine per
# thread in a `threading.local`, which is state, not I/O. (normalise runs a user's ignore
# regex in a killable child through `pricewatch.isolated`, which sits on the floor below.)
READERS_MAY_NOT_IMPORT = {
    "asyncio", "httpx", "httpcore", "asyncpg", "temporalio", "socket", "ssl", "subprocess",
    "os", "pathlib", "shutil", "tempfile", "urllib.request", "http.client", "playwright",
    "aiosmtplib", "apprise", "fetchers", "activities",
}  # fmt: skip
READERS = sorted((REPO / "readers").rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module a module imports, at its top or inside a function, with its parents
    (`urllib.request` is also `urllib`)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            modules |= {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
    return modules


@pytest.mark.parametrize("path", READERS, ids=lambda p: str(p.relative_to(REPO)))
def test_readers_do_no_io(path: Path) -> None:
    io = imported_modules(path) & READERS_MAY_NOT_IMPORT
    assert not io, f"{path.relative_to(REPO)} imports {sorted(io)}: readers do no I/O"


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in tests/helpers.py (and the fixtures in conftest.py)."""
    importing = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        taken = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.startswith("tests.test_")
        }
        if taken:
            importing[str(path.relative_to(REPO))] = sorted(taken)
    assert not importing, importing


MAX_LINES = 600


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_product_module_is_over_600_lines(path: Path) -> None:
    """A module a reader can hold: over MAX_LINES, it is two rooms' worth."""
    name = str(path.relative_to(REPO))
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it"
