"""Which Chromium rendering launches (workers/chromium.py): the setting, Playwright's own
browser, a system one, or one line saying what to install; and the real browser on this
machine, which `make test` made sure of (`python -m workers.chromium --ensure`)."""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web

from fetchers.browser import BrowserFetcher
from fetchers.http import FetchError, Request
from pricewatch.models import RenderSettings
from tests.chaos import procs
from tests.chaos.stack import serve
from tests.conftest import LOOPBACK
from workers import chromium
from workers.chromium import ChromiumMissing, find_chromium

ROOT = Path(__file__).parent.parent


def fake_chromium(path: Path, version: str = "Chromium 1.2.3", code: int = 0) -> Path:
    """An executable that answers `--version` as a Chromium would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version}'\nexit {code}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no Chromium anywhere: no setting, an empty Playwright registry, no
    system path, an empty PATH (the returned directory, for tests to put things in)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.delenv(chromium.ENV, raising=False)
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "ms-playwright"))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(chromium, "SYSTEM_CHROMIUMS", ())
    return empty


def test_the_explicit_argument_and_the_setting_come_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = fake_chromium(tmp_path / "my-chromium")
    assert find_chromium(str(mine)) == mine
    monkeypatch.setenv(chromium.ENV, str(mine))
    assert chromium.locate() == (mine, chromium.ENV)  # before the system's /usr/bin/chromium
    other = fake_chromium(tmp_path / "other")
    assert find_chromium(str(other)) == other  # the argument over the setting


@pytest.mark.parametrize("kind", ["missing", "not executable", "a directory"])
def test_a_wrong_setting_is_one_line_naming_it(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "chrome"
    if kind == "not executable":
        path.write_text("#!/bin/sh\n")
    elif kind == "a directory":
        path.mkdir()
    monkeypatch.setenv(chromium.ENV, str(path))
    with pytest.raises(ChromiumMissing) as raised:
        find_chromium()
    message = str(raised.value)
    assert message.startswith(f"PRICEWATCH_CHROMIUM={path}: ")
    assert "\n" not in message
    with pytest.raises(ChromiumMissing, match=f"^PRICEWATCH_CHROMIUM={path}: "):
        find_chromium(str(path))  # the setting read from it, passed on
    monkeypatch.delenv(chromium.ENV)
    with pytest.raises(ChromiumMissing, match=f"^chromium={path}: "):
        find_chromium(str(path))


def test_nothing_found_is_one_line_naming_the_three_ways(nowhere: Path) -> None:
    with pytest.raises(ChromiumMissing) as raised:
        find_chromium()
    message = str(raised.value)
    assert "\n" not in message
    assert "apt-get install chromium" in message
    assert "-m playwright install chromium" in message
    assert "PRICEWATCH_CHROMIUM" in message
    assert isinstance(raised.value, RuntimeError)


def test_a_chromium_on_path_is_found(nowhere: Path) -> None:
    on_path = fake_chromium(nowhere / "chromium-browser")
    assert chromium.locate() == (on_path, "system")


def test_playwrights_chromium_comes_before_the_systems(nowhere: Path, tmp_path: Path) -> None:
    """Its headless shell first: what Playwright launches for headless pages itself."""
    fake_chromium(nowhere / "chromium")
    candidates, incomplete = chromium.playwright_candidates()
    assert not incomplete and len(candidates) == 2
    assert all(c.is_relative_to(tmp_path / "ms-playwright") for c in candidates)
    browser = fake_chromium(candidates[1])
    assert chromium.locate()[1] == "system", "a download without its marker is not installed"
    (browser.parents[1] / "INSTALLATION_COMPLETE").touch()
    assert chromium.locate() == (browser, "Playwright's")
    shell = fake_chromium(candidates[0])
    (shell.parents[1] / "INSTALLATION_COMPLETE").touch()
    assert chromium.locate() == (shell, "Playwright's")  # the headless shell: half the CPU


@pytest.mark.parametrize("browsers_path", [None, "registry", "0"])
def test_the_cheap_reading_agrees_with_playwrights_driver(
    browsers_path: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What find_chromium computes from browsers.json is where Playwright's driver says its
    Chromium is (the driver takes about a second to ask; the reading under a millisecond)."""
    if browsers_path is None:  # the user's cache
        monkeypatch.delenv("PLAYWRIGHT_BROWSERS_PATH", raising=False)
    elif browsers_path == "0":  # inside the package
        monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", "0")
    else:
        monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / browsers_path))
    candidates, incomplete = chromium.playwright_candidates()
    assert not incomplete
    assert candidates[1] == chromium.playwright_executable_path()  # [0]: its headless shell
    assert candidates[0].name == "chrome-headless-shell"
    started = time.perf_counter()
    for _ in range(10):
        chromium.playwright_candidates()
    assert (time.perf_counter() - started) / 10 < 0.05


def test_the_launch_flags() -> None:
    args = chromium.chromium_args()
    assert ("--no-sandbox" in args) == (os.geteuid() == 0)
    for flag in ("--disable-background-networking", "--disable-component-update"):
        assert flag in args
    assert {"--disable-sync", "--no-first-run", "--disable-dev-shm-usage"} <= set(args)
    assert {"--disable-crash-reporter", "--disable-breakpad"} <= set(args)


async def test_a_crashed_render_leaves_nothing_in_the_users_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian's Chromium writes crash dumps (the pages' URLs and contents) under the user's
    config directory, despite `--disable-breakpad` alone. A render whose renderer crashes
    (SIGSEGV, as a real crash), then one that works: nothing appears in a fresh home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.Response(text="<p>EUR 4.99</p>", content_type="text/html")

    fetcher = BrowserFetcher(LOOPBACK, find_chromium(), chromium.chromium_args(), concurrency=1)
    try:
        async with serve([web.get("/slow", slow)]) as url:
            request = Request(url=f"{url}/slow", render=RenderSettings(steps=[]))
            rendering = asyncio.create_task(fetcher(request))
            for _ in range(100):  # until its page has a renderer
                crashed = [p.pid for p in procs.descendants({os.getpid()})
                           if p.chromium and b"--type=renderer" in p.cmdline]  # fmt: skip
                if crashed:
                    break
                await asyncio.sleep(0.05)
            assert crashed
            for pid in crashed:
                os.kill(pid, signal.SIGSEGV)
            with contextlib.suppress(FetchError):
                await rendering
            page = await fetcher(request)
            assert page.text is not None and "EUR 4.99" in page.text
    finally:
        await fetcher.close()
    assert sorted(home.rglob("*")) == []


def test_the_real_chromium_here_reports_its_version() -> None:
    """Not skipped: `make test` installed one (or stopped) before the tests ran."""
    path = find_chromium()
    assert os.access(path, os.X_OK)
    started = time.perf_counter()
    version = chromium.chromium_version(path)
    assert time.perf_counter() - started < 5
    assert "Chrom" in version and any(part.isdigit() for part in version.split("."))


def test_a_chromium_that_does_not_run_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "chrome"
    broken.write_text(
        "#!/bin/sh\necho 'chrome: error while loading shared libraries: libnss3.so' >&2\nexit 127\n"
    )
    broken.chmod(0o755)
    with pytest.raises(ChromiumMissing) as raised:
        chromium.chromium_version(broken)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{broken} does not run: ")
    assert "playwright install-deps chromium" in message


def test_ensure_installs_when_root_with_apt(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_chromium(nowhere / "apt-get")
    monkeypatch.setattr(chromium, "is_root", lambda: True)
    installs: list[int] = []

    def install() -> None:
        installs.append(1)
        fake_chromium(nowhere / "chromium", "Chromium 9.9.9 built on Debian")

    code, line = chromium.ensure(install)
    assert installs == [1]
    assert (code, line) == (
        0,
        "pricewatch: installed Debian's chromium-headless-shell; rendering uses "
        f"{nowhere / 'chromium'} (system, Chromium 9.9.9 built on Debian)",
    )
    assert chromium.ensure(install)[0] == 0 and installs == [1]  # found: nothing installed


def test_ensure_without_root_or_apt_says_what_to_install(
    nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def install() -> None:
        raise AssertionError("not installed without root and apt-get")

    monkeypatch.setattr(chromium, "is_root", lambda: True)
    code, line = chromium.ensure(install)
    assert code == 1 and "\n" not in line and line.endswith("(no apt-get, so not installed here)")
    assert "apt-get install chromium" in line
    fake_chromium(nowhere / "apt-get")
    monkeypatch.setattr(chromium, "is_root", lambda: False)
    code, line = chromium.ensure(install)
    assert code == 1 and line.endswith("(not root, so not installed here)")

    def failing() -> str:
        return "E: Unable to locate package chromium"

    monkeypatch.setattr(chromium, "is_root", lambda: True)
    code, line = chromium.ensure(failing)
    assert code == 1 and "\n" not in line
    assert line.endswith(
        "(apt-get install chromium-headless-shell failed: E: Unable to locate package chromium)"
    )


def run_ensure(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.chromium", "--ensure"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ensure_here_prints_one_line_and_exits_0() -> None:
    done = run_ensure()
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pricewatch: ")
    assert str(find_chromium()) in lines[0]


def test_ensure_with_a_wrong_setting_installs_nothing_and_exits_1(tmp_path: Path) -> None:
    done = run_ensure(PRICEWATCH_CHROMIUM=str(tmp_path / "nope"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"pricewatch: PRICEWATCH_CHROMIUM={tmp_path / 'nope'}: no such file\n"


def test_browsers_json_is_where_the_reading_expects_it() -> None:
    """The cheap reading depends on the wheel's layout; a Playwright that moved it would make
    find_chromium miss its browser (the driver comparison above would fail too)."""
    import playwright

    browsers = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    names = {entry["name"] for entry in json.loads(browsers.read_text())["browsers"]}
    assert {"chromium", "chromium-headless-shell"} <= names
