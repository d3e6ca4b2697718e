"""Which Chromium the rendering workers launch, and the flags every launch needs.

The order (`find_chromium`):

1. the explicit argument, else `PRICEWATCH_CHROMIUM`: a path (or a name on PATH) that must be
   an executable file; a wrong one is an error naming it, never a silent fallback;
2. Playwright's own (`python -m playwright install chromium`, or `--only-shell`): its
   headless shell first, then its full Chromium, located the way Playwright locates them,
   without starting its driver: the driver is a Node.js
   process and asking it (`sync_playwright().chromium.executable_path`) costs about a second,
   while reading its `browsers.json` costs well under a millisecond;
3. a system Chromium: Debian's `/usr/bin/chromium-headless-shell`, then `/usr/bin/chromium`,
   else one of those or `chromium-browser` on PATH;
4. none: `ChromiumMissing`, one line saying what to install.

The headless shell (Chromium's old headless mode, what Playwright itself launches for headless
pages) renders a page for half the CPU of the full browser in its new headless mode and holds
less memory (measured here, one script-written page, two at a time: 220 against 460 ms of CPU
per render, 205 against 260-340 MiB), and it reads the same pages: pricewatch never shows a
window. `python -m workers.chromium --ensure` (run by `make test` and `make dev`) also
installs Debian's `chromium-headless-shell` package when nothing is found and it can (root,
apt-get), then prints one line saying which Chromium rendering will use; exit 1, with one
line on stderr, if none.
"""

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ENV = "PRICEWATCH_CHROMIUM"

# The flags every launch needs. Background networking, component updates and sync would
# reach Google's servers on their own (refused on a closed network, and not ours to allow);
# /dev/shm is small in containers, so shared memory goes to /tmp. Crash reporting off: a
# crash dump holds the pages' URLs and contents, and Debian's Chromium writes them under the
# user's config directory (`~/.config/chromium/Crash Reports`), where nothing removes them.
CHROMIUM_ARGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-crash-reporter",
    "--disable-breakpad",
)

# Debian's package (`apt-get install chromium`). Looked at even when PATH lacks /usr/bin (a
# service unit's PATH, say). A module constant so tests can take it away.
SYSTEM_CHROMIUMS: tuple[Path, ...] = (
    Path("/usr/bin/chromium-headless-shell"),
    Path("/usr/bin/chromium"),
)
PATH_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")
APT_PACKAGE = "chromium-headless-shell"

# Where Playwright puts its Chromium inside a browser directory, by platform (Playwright's
# registry, EXECUTABLE_PATHS): the full browser first, then the headless shell.
PLAYWRIGHT_LAYOUTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "linux-x64": (
        ("chromium", ("chrome-linux64", "chrome")),
        ("chromium-headless-shell", ("chrome-headless-shell-linux64", "chrome-headless-shell")),
    ),
    "linux-arm64": (
        ("chromium", ("chrome-linux-arm64", "chrome")),
        (
            "chromium-headless-shell",
            ("chrome-headless-shell-linux-arm64", "chrome-headless-shell"),
        ),
    ),
    "mac-x64": (
        (
            "chromium",
            (
                "chrome-mac-x64",
                "Google Chrome for Testing.app",
                "Contents",
                "MacOS",
                "Google Chrome for Testing",
            ),
        ),
        ("chromium-headless-shell", ("chrome-headless-shell-mac-x64", "chrome-headless-shell")),
    ),
    "mac-arm64": (
        (
            "chromium",
            (
                "chrome-mac-arm64",
                "Google Chrome for Testing.app",
                "Contents",
                "MacOS",
                "Google Chrome for Testing",
            ),
        ),
        (
            "chromium-headless-shell",
            ("chrome-headless-shell-mac-arm64", "chrome-headless-shell"),
        ),
    ),
    "win-x64": (
        ("chromium", ("chrome-win64", "chrome.exe")),
        (
            "chromium-headless-shell",
            ("chrome-headless-shell-win64", "chrome-headless-shell.exe"),
        ),
    ),
}


class ChromiumMissing(RuntimeError):
    """No Chromium to launch (or the configured one is not there); the message is one line."""


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def chromium_args() -> list[str]:
    """`CHROMIUM_ARGS`, and `--no-sandbox` when running as root (Chromium refuses to start as
    root with its sandbox on)."""
    return (["--no-sandbox"] if is_root() else []) + list(CHROMIUM_ARGS)


def _executable(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:  # a directory we may not read (another user's cache, say)
        return False


def _python() -> str:
    """This interpreter as a user would type it (`.venv/bin/python` from the checkout)."""
    relative = os.path.relpath(sys.executable)
    return "python" if relative.startswith("..") else relative


def missing_message() -> str:
    return (
        f"no Chromium found: install Debian's with `apt-get install {APT_PACKAGE}`, or "
        f"Playwright's with `{_python()} -m playwright install chromium`, or set {ENV} to a "
        "Chromium"
    )


def _configured(value: str, name: str) -> Path:
    found = shutil.which(value) if os.sep not in value and "/" not in value else None
    path = Path(found or value).expanduser()
    try:
        exists = path.exists()
    except OSError as error:
        raise ChromiumMissing(f"{name}={value}: {error.strerror}") from None
    if not exists:
        raise ChromiumMissing(f"{name}={value}: no such file")
    if not _executable(path):
        raise ChromiumMissing(f"{name}={value}: not an executable file")
    return path


def _platform() -> str | None:
    system, machine = platform.system(), platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    prefix = {"Linux": "linux", "Darwin": "mac", "Windows": "win"}.get(system)
    return f"{prefix}-{arch}" if prefix and arch else None


def _playwright_registry(package: Path) -> Path:
    """Playwright's browser directory: PLAYWRIGHT_BROWSERS_PATH ("0": inside the package),
    else the user's cache (its registry's defaultRegistryDirectory)."""
    configured = os.environ.get("PLAYWRIGHT_BROWSERS_PATH")
    if configured == "0":
        return package / ".local-browsers"
    if configured:
        return Path(configured).absolute()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "ms-playwright"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "ms-playwright"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ms-playwright"


def playwright_candidates() -> tuple[list[Path], bool]:
    """Where Playwright's headless shell (then its Chromium) would be, read off the installed
    package's browsers.json without starting the driver; and whether that reading is
    incomplete (a revision override for this platform, whose directory only the driver
    names). No Playwright package: nothing."""
    spec = importlib.util.find_spec("playwright")
    if spec is None or spec.origin is None:
        return [], False
    package = Path(spec.origin).parent / "driver" / "package"
    try:
        browsers = json.loads((package / "browsers.json").read_text())["browsers"]
    except (OSError, ValueError, KeyError):
        return [], True
    layouts = PLAYWRIGHT_LAYOUTS.get(_platform() or "", ())
    registry = _playwright_registry(package)
    candidates, incomplete = [], not layouts
    for name, tokens in sorted(layouts, key=lambda layout: layout[0] != "chromium-headless-shell"):
        entry = next((b for b in browsers if b.get("name") == name), None)
        if entry is None:
            continue
        incomplete |= bool(entry.get("revisionOverrides"))
        directory = registry / f"{name.replace('-', '_')}-{entry['revision']}"
        candidates.append(directory.joinpath(*tokens))
    return candidates, incomplete


def playwright_executable_path() -> Path:
    """Playwright's own answer, from its driver (about a second: it starts Node.js)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        return Path(playwright.chromium.executable_path)


def _playwright_chromium() -> Path | None:
    candidates, incomplete = playwright_candidates()
    for candidate in candidates:
        # Playwright writes the marker once a download is fully unpacked.
        if _executable(candidate) and (candidate.parents[1] / "INSTALLATION_COMPLETE").exists():
            return candidate
    if incomplete and candidates:
        try:
            asked = playwright_executable_path()
        except Exception:
            return None
        return asked if _executable(asked) else None
    return None


def locate(explicit: str | None = None) -> tuple[Path, str]:
    """The Chromium to launch and where it was found (the setting, `playwright`, `system`)."""
    configured = os.environ.get(ENV)
    if explicit:  # the setting (Settings.chromium) is PRICEWATCH_CHROMIUM: named so in errors
        named = ENV if explicit == configured else "chromium"
        return _configured(explicit, named), named
    if configured:
        return _configured(configured, ENV), ENV
    found = _playwright_chromium()
    if found is not None:
        return found, "Playwright's"
    for system in SYSTEM_CHROMIUMS:
        if _executable(system):
            return system, "system"
    for name in PATH_NAMES:
        on_path = shutil.which(name)
        if on_path:
            return Path(on_path), "system"
    raise ChromiumMissing(missing_message())


def find_chromium(explicit: str | None = None) -> Path:
    """The Chromium rendering launches (the order is the module's docstring)."""
    return locate(explicit)[0]


def chromium_version(path: Path, timeout: float = 10) -> str:
    """What `path --version` prints (one line), run with the launch flags; ChromiumMissing
    naming the path if it does not run (e.g. Playwright's Chromium without its libraries)."""
    try:
        done = subprocess.run(
            [str(path), *chromium_args(), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ChromiumMissing(f"{path} does not run: {error}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        problem = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        hint = ""
        if "error while loading shared libraries" in problem:
            hint = f" (its system libraries: `{_python()} -m playwright install-deps chromium`)"
        raise ChromiumMissing(f"{path} does not run: {problem}{hint}")
    return lines[0].strip()


def apt_install() -> str | None:
    """`apt-get install -y chromium-headless-shell`, quietly; `apt-get update` first only
    when the package lists lack it. None when installed, else the last line apt-get said."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> subprocess.CompletedProcess[str]:
        command = ["apt-get", "-qq", "-o", "Dpkg::Use-Pty=0", *args]
        return subprocess.run(
            command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )

    install = ("install", "-y", APT_PACKAGE)
    done = apt(*install)
    said = done.stdout + done.stderr
    if done.returncode != 0 and (
        "Unable to locate package" in said or "no installation candidate" in said
    ):
        updated = apt("update")
        if updated.returncode != 0:
            return _last_line(updated, "apt-get update failed")
        done = apt(*install)
    return (
        None if done.returncode == 0 else _last_line(done, f"apt-get install {APT_PACKAGE} failed")
    )


def _last_line(done: subprocess.CompletedProcess[str], fallback: str) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"{fallback} (exit code {done.returncode})"


def ensure(installer: Callable[[], str | None] = apt_install) -> tuple[int, str]:
    """Find a Chromium, installing Debian's when none is found and it can (root, apt-get);
    the exit code and the one line to print (stdout when 0, stderr when 1)."""
    installed = ""
    try:
        path, source = locate()
    except ChromiumMissing as missing:
        if os.environ.get(ENV):
            return 1, f"pricewatch: {missing}"
        if not (is_root() and shutil.which("apt-get")):
            why = "not root" if shutil.which("apt-get") else "no apt-get"
            return 1, f"pricewatch: {missing} ({why}, so not installed here)"
        failed = installer()
        if failed is not None:
            return 1, f"pricewatch: {missing} (apt-get install {APT_PACKAGE} failed: {failed})"
        try:
            path, source = locate()
        except ChromiumMissing as still:
            return 1, f"pricewatch: {still} (installed Debian's {APT_PACKAGE}, still none)"
        installed = f"installed Debian's {APT_PACKAGE}; "
    try:
        version = chromium_version(path)
    except ChromiumMissing as broken:
        return 1, f"pricewatch: {broken}"
    return 0, f"pricewatch: {installed}rendering uses {path} ({source}, {version})"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--ensure"]):
        print("usage: python -m workers.chromium [--ensure]", file=sys.stderr)
        return 2
    if argv:
        code, line = ensure()
    else:
        try:
            path, source = locate()
            code, line = 0, f"pricewatch: rendering uses {path} ({source})"
        except ChromiumMissing as missing:
            code, line = 1, f"pricewatch: {missing}"
    print(line, file=sys.stdout if code == 0 else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
