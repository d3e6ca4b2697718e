"""Mutation testing for the SQL that carries the promises, which mutmut cannot change.

    python mutation/sql.py [--jobs N] [--cap N] [--timeout S] [--list] [FILE ...]

Run it through `make mutants-sql` (mutation/pg.py gives it one Postgres for every test
process). For each file in TARGETS (or the ones named), in the statements or functions
named there only, it makes one small mistake at a time: a comparison moved across its
boundary (`<` and `<=`, `>` and `>=`) or turned (`=` and `<>`), AND and OR swapped,
greatest/least and min/max swapped, `+` and `-` swapped, one conjunct of a WHERE made
`true`, an `ON CONFLICT DO NOTHING` dropped. Each mutant is written into a copy of the tree
(the checkout is never changed) and the tests that reach that SQL run against it, stopping
at the first failure. A mutant Postgres refuses to create or prepare is *invalid*, not
killed: it tells nothing about the tests. The score is killed / (killed + survived); each
survivor is printed with its line before and after, for a test to kill or docs/testing.md
to explain.

Bounded: at most `--cap` mutants per file (spread evenly over the file's mutants, the same
ones every run), each mutant's tests cut at `--timeout` seconds (a mutant that hangs them
counts as killed, as in mutmut), `--jobs` mutants at a time.
"""

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

import asyncpg

from activities.queries import parse

ROOT = Path(__file__).resolve().parent.parent
SQL = "activities/sql"
# The kill tests first: a mutant they kill costs a few seconds, not the whole list.
STORE_TESTS = (
    "tests/test_kill_sql.py",
    "tests/test_kill_store.py",
    "tests/test_store.py",
    "tests/test_fencing.py",
    "tests/test_outages.py::test_a_claim_refused_by_a_live_lease_comes_back_when_it_expires",
    "tests/test_outages.py::test_a_dead_letter_refused_by_a_live_lease_comes_back_when_it_expires",
    "tests/test_outages.py::test_a_claim_reads_no_lease_left_when_it_takes_the_lease",
)
# The in-process ones: the others run a worker on the time-skipping server (slow here).
NOTIFY_TESTS = (
    "tests/test_kill_notify.py",
    "tests/test_notify.py::test_a_webhook_is_signed_sent_once_and_never_again",
    "tests/test_notify.py::test_a_failing_webhook_is_retried_on_its_row_then_sent",
    "tests/test_notify.py::test_a_crash_between_send_and_record_resends_once_with_the_same_id",
    "tests/test_notify.py::test_a_cancelled_attempt_records_its_send_and_is_never_resent",
)
GRID_TESTS = (
    "tests/test_kill_sql.py",
    "tests/test_grid_sql.py",
    "tests/test_calendar.py::test_sql_calendar_functions_are_the_python_ones",
    "tests/test_calendar.py::test_a_targets_grid_is_its_calendar_or_its_interval",
    "tests/test_calendar.py::test_the_table_takes_a_calendar_whole_or_not_at_all",
    "tests/test_calendar.py::test_postgres_reads_missing_and_repeated_times_unlike_our_rules",
    "tests/test_store.py",
)


@dataclass(frozen=True)
class Target:
    regions: tuple[str, ...]
    """Names of `-- name:` blocks (queries.sql) or of functions (a migration)."""
    tests: tuple[str, ...]


# The latest definition of each function only: an earlier one a later migration replaces is
# dead code, and its mutants would survive for that reason alone. Not tests/test_schema.py:
# it compares the migrations with schema.sql, so it "kills" every mutant of a migration
# without saying anything about behaviour.
TARGETS = {
    f"{SQL}/queries.sql": Target(
        (
            "claim",
            "commit",
            "release",
            "extend_lease",
            "lease_left",
            "record_failed",
            "advance_past_final",
            "insert_skipped",
            "claim_delivery",
            "record_delivery",
        ),
        (*STORE_TESTS, *NOTIFY_TESTS),
    ),
    f"{SQL}/0017_one_grid.sql": Target(
        (
            "interval_between",
            "grid_passed",
            "grid_after",
            "grid_between",
            "next_due",
            "skip_passed",
            "grid_of",
            "grid_anchor",
        ),
        GRID_TESTS,
    ),
    f"{SQL}/0013_lease_takeover.sql": Target(("supersedes",), STORE_TESTS),
    f"{SQL}/0012_calendar_offset.sql": Target(
        (
            "calendar_hash",
            "calendar_shift",
            "calendar_after",
            "calendar_between",
            "grid_next",
        ),
        GRID_TESTS,
    ),
    f"{SQL}/0008_calendar.sql": Target(
        ("calendar_sorted", "calendar_resolve", "calendar_nominal_after"), GRID_TESTS
    ),
    f"{SQL}/0001_schema.sql": Target(("grid_after", "slot_work_id"), GRID_TESTS),  # interval_after
}

SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "=": "<>", "<>": "=", "!=": "="}
# Not `:=`, `=>`, `->`, `->>`, `~`, `||`: assignment, named arguments, JSON and regex operators.
COMPARISON = re.compile(r"(?<![<>=!:|\-~])(<=|>=|<>|!=|<|>|=)(?![<>=~])")
WORDS = {"and": "or", "or": "and", "greatest": "least", "least": "greatest", "min": "max",
         "max": "min"}  # fmt: skip
WORD = re.compile(r"\b(and|or)\b|\b(greatest|least|min|max)(?=\s*\()", re.IGNORECASE)
ARITHMETIC = re.compile(r"(?<=\s)[+\-](?=\s)")
DO_NOTHING = re.compile(r"\s+ON\s+CONFLICT(\s*\([^)]*\))?\s+DO\s+NOTHING", re.IGNORECASE)
WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)
# Where a WHERE clause ends, at its own depth of parentheses.
CLAUSE_END = re.compile(
    r";|\$\$|\b(ORDER|GROUP|RETURNING|FOR|LIMIT|ON|DO|UNION|SELECT|FROM|WITH)\b", re.IGNORECASE
)
MIXED = re.compile(r"\b(OR|BETWEEN)\b", re.IGNORECASE)
CONJUNCTION = re.compile(r"\bAND\b", re.IGNORECASE)


@dataclass(frozen=True)
class Mutant:
    path: str
    start: int
    end: int
    replacement: str
    what: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]

    def shown(self, text: str) -> str:
        """The mutant's line(s) before and after."""
        first = text.rfind("\n", 0, self.start) + 1
        last = text.find("\n", self.end)
        last = len(text) if last < 0 else last
        line = text[:first].count("\n") + 1
        before = text[first:last]
        after = self.apply(text)[first : last + len(self.replacement) - (self.end - self.start)]
        return f"{self.path}:{line} {self.what}\n      - {before.strip()}\n      + {after.strip()}"


def masked(text: str) -> str:
    """The text with comments and string literals blanked (same length): no mutant there."""

    def blank(match: re.Match[str]) -> str:
        quote = match[0][0] == "'"
        inner = re.sub(r"[^\n]", " ", match[0][1:-1] if quote else match[0])
        return f"'{inner}'" if quote else inner

    return re.sub(r"--[^\n]*|'(?:[^']|'')*'", blank, text)


def regions(path: str, text: str, names: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """Where each named block or function is: from its header to the next one."""
    header = (
        re.compile(r"^-- name: (\w+)\n", re.MULTILINE)
        if path.endswith("queries.sql")
        else re.compile(r"^(?:CREATE|DROP|ALTER)\b(?:.*?FUNCTION (\w+))?", re.MULTILINE)
    )
    starts = list(header.finditer(text))
    found = set()
    for here, following in zip(starts, [*starts[1:], None], strict=True):
        if here[1] in names:
            found.add(here[1])
            yield here.start(), following.start() if following else len(text)
    if missing := set(names) - found:
        raise SystemExit(f"{path}: no {sorted(missing)} (TARGETS in mutation/sql.py is stale)")


def conjuncts(code: str, start: int) -> Iterator[tuple[int, int]]:
    """The spans of a WHERE clause's conjuncts (the clause's text starting at `start`), if
    it is a plain AND of them (no OR or BETWEEN at its own depth)."""
    depth, spans, begin, i = 0, [], start, start
    while i < len(code):
        char = code[i]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                break
            depth -= 1
        elif depth or _inside_word(code, i):
            pass
        elif CLAUSE_END.match(code, i):
            break
        elif MIXED.match(code, i):
            return
        elif conj := CONJUNCTION.match(code, i):
            spans.append((begin, i))
            begin = i = conj.end()
            continue
        i += 1
    spans.append((begin, i))
    for first, last in spans:
        segment = code[first:last]
        if segment.strip():
            yield first + len(segment) - len(segment.lstrip()), first + len(segment.rstrip())


def _inside_word(code: str, i: int) -> bool:
    return code[i - 1].isalnum() or code[i - 1] == "_"


def mutants(path: str, text: str, names: tuple[str, ...]) -> list[Mutant]:
    code = masked(text)
    found: list[Mutant] = []
    for start, end in regions(path, text, names):
        part = code[start:end]
        for m in COMPARISON.finditer(part):
            found.append(Mutant(path, start + m.start(), start + m.end(), SWAPS[m[0]],
                                f"{m[0]} -> {SWAPS[m[0]]}"))  # fmt: skip
        for m in WORD.finditer(part):
            word = m[0]
            swapped = WORDS[word.lower()]
            swapped = swapped.upper() if word.isupper() else swapped
            found.append(Mutant(path, start + m.start(), start + m.end(), swapped,
                                f"{word} -> {swapped}"))  # fmt: skip
        for m in ARITHMETIC.finditer(part):
            other = "-" if m[0] == "+" else "+"
            found.append(Mutant(path, start + m.start(), start + m.end(), other,
                                f"{m[0]} -> {other}"))  # fmt: skip
        for m in DO_NOTHING.finditer(part):
            found.append(Mutant(path, start + m.start(), start + m.end(), "",
                                "ON CONFLICT DO NOTHING dropped"))  # fmt: skip
        for m in WHERE.finditer(part):
            for first, last in conjuncts(part, m.end()):
                found.append(Mutant(path, start + first, start + last, "true",
                                    "a WHERE conjunct dropped (made true)"))  # fmt: skip
    return sorted(found, key=lambda m: (m.start, m.what))


def spread(items: list[Mutant], cap: int) -> list[Mutant]:
    """At most `cap` of them, evenly over the file: the same ones every run."""
    if len(items) <= cap:
        return items
    return [items[i * len(items) // cap] for i in range(cap)]


async def compiles(url: str, tree: Path, mutant: Mutant, mutated: str) -> str | None:
    """Why Postgres refuses the mutant (None if it takes it): the migrations, the mutated
    one included, applied to a fresh database, and a query's statement prepared there."""
    name = f"sqlmut_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(url)
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        parts = url.split("?", 1)
        db_url = (
            parts[0].rsplit("/", 1)[0] + f"/{name}" + (f"?{parts[1]}" if len(parts) > 1 else "")
        )
        conn = await asyncpg.connect(db_url)
        try:
            for migration in sorted((tree / SQL).glob("[0-9][0-9][0-9][0-9]_*.sql")):
                await conn.execute(migration.read_text())
            if mutant.path.endswith("queries.sql"):
                for query in parse(mutated).values():
                    await conn.prepare(query.sql)
        except asyncpg.PostgresError as err:
            return f"{type(err).__name__}: {err}"
        finally:
            await conn.close()
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()
    return None


def run_tests(tree: Path, tests: tuple[str, ...], slot: int, timeout: float) -> str:
    """'passed', 'failed' or 'timeout': the tests in the copy, against the shared server,
    with a template database of this slot's own (conftest names it after the variable)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTEST_XDIST_WORKER": f"sqlmut{slot}"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:randomly",
               "-p", "no:cacheprovider", "-m", "not e2e", "--timeout", "60", *tests]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        return "passed" if process.wait(timeout=timeout) == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        return "timeout"


def copy_tree(into: Path) -> Path:
    skip = shutil.ignore_patterns(".venv", ".git", "mutants", "__pycache__", ".*_cache",
                                  ".hypothesis", "node_modules")  # fmt: skip
    shutil.copytree(ROOT, into, ignore=skip)
    found = subprocess.run(
        [sys.executable, "-c", "import activities; print(activities.__file__)"],
        cwd=into, env={**os.environ, "PYTHONPATH": str(into)}, capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    if not found.startswith(str(into)):
        raise SystemExit(f"the copy's tests would import {found}, not the copy")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help=f"default: {', '.join(TARGETS)}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cap", type=int, default=20, help="mutants per file at most")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per mutant")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    args = parser.parse_args()
    if unknown := set(args.files) - set(TARGETS):
        parser.error(f"not a file this run mutates: {', '.join(sorted(unknown))}")
    url = os.environ.get("PRICEWATCH_TEST_DATABASE_URL", "")
    if not url and not args.list:
        parser.error("PRICEWATCH_TEST_DATABASE_URL is not set: run it as `make mutants-sql`")
    texts = {path: (ROOT / path).read_text() for path in args.files or TARGETS}
    chosen = {path: mutants(path, text, TARGETS[path].regions) for path, text in texts.items()}
    if args.list:
        for path, found in chosen.items():
            print(f"{path}: {len(found)} mutants, {min(len(found), args.cap)} run")
            for mutant in spread(found, args.cap):
                print("  " + mutant.shown(texts[path]))
        return 0

    with tempfile.TemporaryDirectory(prefix="pricewatch-sqlmut-") as tmp:
        trees: Queue[tuple[int, Path]] = Queue()
        for slot in range(args.jobs):
            trees.put((slot, copy_tree(Path(tmp) / f"tree{slot}")))

        def run(mutant: Mutant) -> str:
            slot, tree = trees.get()
            try:
                mutated = mutant.apply(texts[mutant.path])
                (tree / mutant.path).write_text(mutated)
                if asyncio.run(compiles(url, tree, mutant, mutated)):
                    return "invalid"
                return {"passed": "survived", "failed": "killed", "timeout": "timeout"}[
                    run_tests(tree, TARGETS[mutant.path].tests, slot, args.timeout)
                ]
            finally:
                (tree / mutant.path).write_text(texts[mutant.path])
                trees.put((slot, tree))

        slot, tree = trees.get()
        for path in chosen:
            started = time.monotonic()
            if run_tests(tree, TARGETS[path].tests, slot, args.timeout) != "passed":
                raise SystemExit(f"{path}: its tests fail without a mutant; fix that first")
            print(f"{path}: the tests pass unmutated ({time.monotonic() - started:.0f} s)")
        trees.put((slot, tree))

        failures = 0
        for path, found in chosen.items():
            picked = spread(found, args.cap)
            started = time.monotonic()
            with ThreadPoolExecutor(args.jobs) as pool:
                outcomes = list(pool.map(run, picked))
            count = Counter(outcomes)
            killed = count["killed"] + count["timeout"]
            valid = killed + count["survived"]
            score = f"{100 * killed / valid:.1f}%" if valid else "-"
            print(f"\n{path}: {len(picked)} of {len(found)} mutants: {killed} killed "
                  f"({count['timeout']} by a timeout), {count['survived']} survived, "
                  f"{count['invalid']} invalid; score {score}; "
                  f"{time.monotonic() - started:.0f} s")  # fmt: skip
            for mutant, outcome in zip(picked, outcomes, strict=True):
                if outcome == "survived":
                    failures += 1
                    print("  survived: " + mutant.shown(texts[path]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
